package wasmrw

import (
	"bytes"
	"context"
	"errors"
	"sync"
	"testing"

	"github.com/tetratelabs/wazero"
	"github.com/tetratelabs/wazero/api"
	"github.com/tetratelabs/wazero/experimental"
)

// fuzzRuntime compiles fuzzer-made modules with wazero's interpreter, with
// the experimental features that this package parses enabled too.
var fuzzRuntime = sync.OnceValue(func() wazero.Runtime {
	features := api.CoreFeaturesV2 | experimental.CoreFeaturesExtendedConst | experimental.CoreFeaturesExceptionHandling
	return wazero.NewRuntimeWithConfig(context.Background(), wazero.NewRuntimeConfigInterpreter().WithCoreFeatures(features))
})

// compiles reports whether wazero accepts wasm.
func compiles(wasm []byte) (bool, error) {
	ctx := context.Background()
	cm, err := fuzzRuntime().CompileModule(ctx, wasm)
	if err != nil {
		return false, err
	}
	return true, cm.Close(ctx)
}

func structural(err error) bool {
	return errors.Is(err, ErrNotWasm) || errors.Is(err, ErrMalformed) || errors.Is(err, ErrInvalid) || errors.Is(err, ErrMemory64) || errors.Is(err, ErrLimit)
}

// FuzzRewrite checks that Rewrite never panics, is deterministic, and that a
// successful rewrite parses back with the same globals, no start section and
// the host's exports (so that a second Rewrite refuses it). When wazero
// compiles the input, it must compile the output too.
func FuzzRewrite(f *testing.F) {
	for _, tc := range rewriteCases() {
		f.Add(tc.in)
	}
	for _, tc := range refusalCases() {
		f.Add(tc.in)
	}
	for _, tc := range liftCases() {
		f.Add(tc.in)
	}
	f.Add(startModule())
	f.Fuzz(func(t *testing.T, in []byte) {
		orig := bytes.Clone(in)
		out, info, err := Rewrite(in)
		if !bytes.Equal(in, orig) {
			t.Fatal("Rewrite modified its input")
		}
		_, perr := Parse(in)
		if err != nil {
			if out != nil || info != nil {
				t.Fatal("output returned with an error")
			}
			if structural(err) && (perr == nil || perr.Error() != err.Error()) {
				t.Fatalf("Rewrite refused %v, Parse %v", err, perr)
			}
			if !structural(err) && perr != nil {
				t.Fatalf("Rewrite refused by policy (%v) but Parse fails: %v", err, perr)
			}
			return
		}
		if perr != nil {
			t.Fatalf("Rewrite succeeded but Parse fails: %v", perr)
		}
		if len(out) > len(in)+16+len(info.Exports)*32 {
			t.Fatalf("output %d bytes for %d input bytes", len(out), len(in))
		}
		out2, _, err := Rewrite(in)
		if err != nil || !bytes.Equal(out, out2) {
			t.Fatal("Rewrite is not deterministic")
		}
		checkRewritten(t, in, out, info)
		for _, s := range info.Data {
			if uint64(s.Offset)+uint64(len(s.Init)) > uint64(info.Memory.Min)<<16 {
				t.Fatalf("lifted segment at %d (%d bytes) is outside the initial memory", s.Offset, len(s.Init))
			}
		}
		if ok, _ := compiles(in); ok {
			if _, err := compiles(out); err != nil {
				t.Fatalf("wazero compiles the input but not the output: %v", err)
			}
			if info.Data != nil {
				sameMemoryIfInstantiable(t, in, out, info)
			}
		}
	})
}

// smallRuntime instantiates fuzzer-made modules whose memory is small.
var smallRuntime = sync.OnceValue(func() wazero.Runtime {
	features := api.CoreFeaturesV2 | experimental.CoreFeaturesExtendedConst | experimental.CoreFeaturesExceptionHandling
	return wazero.NewRuntimeWithConfig(context.Background(), wazero.NewRuntimeConfigInterpreter().
		WithCoreFeatures(features).WithMemoryLimitPages(16))
})

// sameMemoryIfInstantiable checks, for a module that instantiates alone
// (no imports, no start function, a small memory), that the rewritten
// module with its lifted data written starts with the original's memory.
func sameMemoryIfInstantiable(t *testing.T, in, out []byte, info *Info) {
	if len(info.Imports) != 0 || info.HadStart || info.Memory.Min > 16 {
		return
	}
	ctx := context.Background()
	r := smallRuntime()
	config := wazero.NewModuleConfig().WithName("").WithStartFunctions()
	a, err := r.InstantiateWithConfig(ctx, in, config)
	if err != nil {
		return
	}
	defer a.Close(ctx)
	cm, err := r.CompileModule(ctx, out)
	if err != nil {
		t.Fatalf("compiling the output: %v", err)
	}
	defer cm.Close(ctx)
	b, err := instantiateLifted(ctx, r, cm, info, config)
	if err != nil {
		t.Fatalf("the input instantiates, the output does not: %v", err)
	}
	defer b.Close(ctx)
	ma, _ := a.Memory().Read(0, a.Memory().Size())
	mb, _ := b.Memory().Read(0, b.Memory().Size())
	if !bytes.Equal(ma, mb) {
		t.Fatal("the output with its lifted data starts with another memory than the input")
	}
}
