package wasmrw

import (
	"bytes"
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/tetratelabs/wazero"
	"github.com/tetratelabs/wazero/api"
	"github.com/tetratelabs/wazero/imports/wasi_snapshot_preview1"
)

// checkSeq is the sequence AddInterrupt inserts for a module with g globals.
func checkSeq(g byte) []byte { return checkSequence(uint64(g), uint64(g)+1) }

// added are the globals AddInterrupt adds.
func added() [][]byte {
	return [][]byte{glob(TypeI32, true, i32c(InterruptFuel)...), glob(TypeI32, true, i32c(0)...)}
}

// loopModule has one mutable global and memory, and exports
//
//	spin: () -> ()         loop br 0 end (never returns)
//	count: (i32) -> i32    counts its argument down to 0 in a loop, returns the iterations
//	flat: () -> i32        no loop: returns 7
func loopModule() []byte {
	return module(
		typeSec(),
		funcSec(0, 2, 1),
		memSec(mem(1)),
		globalSec(glob(TypeI32, true, i32c(5)...)),
		exportSec(exp("spin", KindFunc, 0), exp("count", KindFunc, 1), exp("flat", KindFunc, 2)),
		codeSec(
			fn(0x03, 0x40, 0x0C, 0x00, 0x0B), // loop br 0 end
			cat(withSize(cat(bs(1, 1, 0x7F), // one i32 local: the iterations
				bs(0x02, 0x40, 0x03, 0x40, // block loop
					0x20, 0x00, 0x45, 0x0D, 0x01, // local.get 0; i32.eqz; br_if 1 (out)
					0x20, 0x00, 0x41, 0x01, 0x6B, 0x21, 0x00, // local.get 0; i32.const 1; i32.sub; local.set 0
					0x20, 0x01, 0x41, 0x01, 0x6A, 0x21, 0x01, // local.get 1; i32.const 1; i32.add; local.set 1
					0x0C, 0x00, // br 0
					0x0B, 0x0B),
				bs(0x20, 0x01, 0x0B)))), // local.get 1 end
			fn(0x41, 0x07),
		),
	)
}

func TestAddInterruptInsertsAtEveryLoop(t *testing.T) {
	in := loopModule()
	out, err := AddInterrupt(in)
	if err != nil {
		t.Fatal(err)
	}
	want := module(
		typeSec(),
		funcSec(0, 2, 1),
		memSec(mem(1)),
		globalSec(append([][]byte{glob(TypeI32, true, i32c(5)...)}, added()...)...),
		exportSec(exp("spin", KindFunc, 0), exp("count", KindFunc, 1), exp("flat", KindFunc, 2), exp(InterruptExport, KindGlobal, 2)),
		codeSec(
			fn(cat(bs(0x03, 0x40), checkSeq(1), bs(0x0C, 0x00, 0x0B))...),
			cat(withSize(cat(bs(1, 1, 0x7F),
				bs(0x02, 0x40, 0x03, 0x40), checkSeq(1),
				bs(0x20, 0x00, 0x45, 0x0D, 0x01,
					0x20, 0x00, 0x41, 0x01, 0x6B, 0x21, 0x00,
					0x20, 0x01, 0x41, 0x01, 0x6A, 0x21, 0x01,
					0x0C, 0x00,
					0x0B, 0x0B),
				bs(0x20, 0x01, 0x0B)))),
			fn(0x41, 0x07),
		),
	)
	if !bytes.Equal(out, want) {
		t.Fatalf("AddInterrupt:\n got % x\nwant % x", out, want)
	}
	info, err := Parse(out)
	if err != nil {
		t.Fatal(err)
	}
	if g := info.Globals[2]; g.ExportName != InterruptExport || !g.Mutable || g.Type != TypeI32 {
		t.Fatalf("added global: %+v", g)
	}
	if _, err := AddInterrupt(out); !errors.Is(err, ErrReservedExport) {
		t.Fatalf("AddInterrupt twice: %v, want ErrReservedExport", err)
	}
}

// TestAddInterruptSections: a module without globals or exports gets both
// sections, in order; DWARF sections go, other custom sections stay. A
// module without memory is refused (the check needs memory.grow).
func TestAddInterruptSections(t *testing.T) {
	in := module(
		typeSec(),
		funcSec(0),
		memSec(mem(1)),
		customSec("name", 0x00, 0x02, 0x01, 'm'),
		codeSec(fn(0x03, 0x40, 0x0B)),
		customSec(".debug_info", 1, 2, 3),
		customSec("producers", 0),
	)
	out, err := AddInterrupt(in)
	if err != nil {
		t.Fatal(err)
	}
	want := module(
		typeSec(),
		funcSec(0),
		memSec(mem(1)),
		customSec("name", 0x00, 0x02, 0x01, 'm'),
		globalSec(added()...),
		exportSec(exp(InterruptExport, KindGlobal, 1)),
		codeSec(fn(cat(bs(0x03, 0x40), checkSeq(0), bs(0x0B))...)),
		customSec("producers", 0),
	)
	if !bytes.Equal(out, want) {
		t.Fatalf("AddInterrupt:\n got % x\nwant % x", out, want)
	}
	if ok, err := compiles(out); !ok {
		t.Fatal(err)
	}
	if _, err := AddInterrupt(module(typeSec(), funcSec(0), codeSec(fn(0x03, 0x40, 0x0B)))); !errors.Is(err, ErrUnsupported) {
		t.Fatalf("no memory: %v, want ErrUnsupported", err)
	}
}

// TestAddInterruptDecodesInstructions runs a body with an instruction of
// each immediate shape through AddInterrupt: the loops after them get their
// check (so they were decoded in step), and wazero accepts the result.
func TestAddInterruptDecodesInstructions(t *testing.T) {
	loop := bs(0x03, 0x40, 0x0B)
	body := cat(
		bs(0x02, 0x40), loop, bs(0x0B), // block
		bs(0x41, 0x01, 0x04, 0x7F, 0x41, 0x02, 0x05, 0x41, 0x03, 0x0B, 0x1A), // if (result i32) else end drop
		bs(0x02, 0x40, 0x41, 0x00, 0x0E, 0x02, 0x00, 0x00, 0x00, 0x0B),       // br_table
		bs(0x41, 0x00, 0x28, 0x02, 0x80, 0x01, 0x1A),                         // i32.load offset=128
		bs(0x41, 0x00, 0x42, 0xFF, 0x7F, 0x37, 0x03, 0x00),                   // i64.store
		bs(0x43, 0, 0, 0x80, 0x3F, 0x1A),                                     // f32.const 1
		bs(0x44, 0, 0, 0, 0, 0, 0, 0xF0, 0x3F, 0x1A),                         // f64.const 1
		bs(0x3F, 0x00, 0x40, 0x00, 0x1A),                                     // memory.size memory.grow drop
		bs(0x41, 0x00, 0x41, 0x00, 0x41, 0x00, 0xFC, 0x0B, 0x00),             // memory.fill
		bs(0x41, 0x00, 0x41, 0x00, 0x41, 0x00, 0xFC, 0x0A, 0x00, 0x00),       // memory.copy
		bs(0x43, 0, 0, 0, 0, 0xFC, 0x00, 0x1A),                               // i32.trunc_sat_f32_s
		bs(0xFD, 0x0C), make([]byte, 16), bs(0xFD, 0x15, 0x03, 0x1A),         // v128.const, i8x16.extract_lane_s 3
		bs(0x41, 0x00, 0xFD, 0x00, 0x04, 0x00, 0xFD, 0x1F, 0x01, 0x1A), // v128.load, f32x4.extract_lane 1
		bs(0x41, 0x01, 0x41, 0x02, 0x41, 0x01, 0x1C, 0x01, 0x7F, 0x1A), // select (result i32)
		bs(0x23, 0x00, 0x24, 0x00),                                     // global.get/set
		bs(0xD0, 0x70, 0xD1, 0x1A),                                     // ref.null func, ref.is_null
		bs(0x41, 0x05, 0xC0, 0x1A),                                     // i32.extend8_s
		loop,
	)
	in := module(
		typeSec(),
		funcSec(0),
		memSec(mem(1)),
		globalSec(glob(TypeI32, true, i32c(0)...)),
		codeSec(fn(body...)),
	)
	if ok, err := compiles(in); !ok {
		t.Fatalf("the test module itself: %v", err)
	}
	out, err := AddInterrupt(in)
	if err != nil {
		t.Fatal(err)
	}
	if n := bytes.Count(out, checkSeq(1)); n != 2 {
		t.Fatalf("%d checks inserted, want 2", n)
	}
	if ok, err := compiles(out); !ok {
		t.Fatal(err)
	}
}

func TestAddInterruptRefusals(t *testing.T) {
	for _, tc := range []struct {
		name string
		body []byte
		want error
	}{
		{"unknown opcode", fn(0xFF), ErrUnsupported},
		{"unknown 0xfc opcode", fn(0xFC, 0x7F), ErrUnsupported},
		{"unknown 0xfe opcode", fn(0xFE, 0x7F), ErrUnsupported},
		{"typed reference block type", fn(0x02, 0x63, 0x70, 0x0B), ErrUnsupported},
		{"truncated immediate", withSize(bs(0, 0x41, 0x80)), ErrMalformed},
		{"truncated v128.const", fn(0xFD, 0x0C, 1, 2), ErrMalformed},
		{"long LEB", fn(0x20, 0x80, 0x80, 0x80, 0x80, 0x80, 0x01), ErrMalformed},
	} {
		t.Run(tc.name, func(t *testing.T) {
			in := module(typeSec(), funcSec(0), memSec(mem(1)), codeSec(tc.body))
			out, err := AddInterrupt(in)
			if !errors.Is(err, tc.want) || out != nil {
				t.Fatalf("AddInterrupt: %v (output %d bytes), want %v", err, len(out), tc.want)
			}
		})
	}
	if _, err := AddInterrupt([]byte("not wasm")); !errors.Is(err, ErrNotWasm) {
		t.Fatalf("not wasm: %v", err)
	}
}

// TestInterruptStopsALoop: with the global set from another goroutine, a
// guest spinning in "loop br 0" traps on wazero's compiler. This is what
// tells that the compiler's code reads the global at every loop header
// rather than once. (The interpreter reads globals in Go: a write from
// another goroutine would be a data race, so the host does not use the
// global there.)
func TestInterruptStopsALoop(t *testing.T) {
	ctx := context.Background()
	r := wazero.NewRuntimeWithConfig(ctx, wazero.NewRuntimeConfigCompiler())
	defer r.Close(ctx)
	out, err := AddInterrupt(loopModule())
	if err != nil {
		t.Fatal(err)
	}
	m, err := r.InstantiateWithConfig(ctx, out, wazero.NewModuleConfig().WithName(""))
	if err != nil {
		t.Fatal(err)
	}
	g := m.ExportedGlobal(InterruptExport).(api.MutableGlobal)
	done := make(chan error, 1)
	started := make(chan struct{})
	go func() {
		close(started)
		_, err := m.ExportedFunction("spin").Call(ctx)
		done <- err
	}()
	<-started
	g.Set(1)
	select {
	case err := <-done:
		if err == nil || !strings.Contains(err.Error(), "unreachable") {
			t.Fatalf("spin ended with %v, want an unreachable trap", err)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("spin still runs 20 s after the interrupt was set")
	}
}

// TestInterruptSetTraps: on the compiler and the interpreter, code runs as
// before while the global is 0 (across many refills of the fuel); once
// set, a loop traps within InterruptFuel iterations and code without loops
// still runs.
func TestInterruptSetTraps(t *testing.T) {
	for name, rc := range map[string]wazero.RuntimeConfig{
		"compiler":    wazero.NewRuntimeConfigCompiler(),
		"interpreter": wazero.NewRuntimeConfigInterpreter(),
	} {
		t.Run(name, func(t *testing.T) {
			ctx := context.Background()
			r := wazero.NewRuntimeWithConfig(ctx, rc)
			defer r.Close(ctx)
			out, err := AddInterrupt(loopModule())
			if err != nil {
				t.Fatal(err)
			}
			m, err := r.InstantiateWithConfig(ctx, out, wazero.NewModuleConfig().WithName(""))
			if err != nil {
				t.Fatal(err)
			}
			if got := call(t, m, "count", 5*InterruptFuel)[0]; got != 5*InterruptFuel {
				t.Fatalf("count(%d) = %d", 5*InterruptFuel, got)
			}
			g := m.ExportedGlobal(InterruptExport).(api.MutableGlobal)
			g.Set(1)
			if got := call(t, m, "flat")[0]; got != 7 {
				t.Fatalf("flat() = %d", got)
			}
			// The interrupt is seen when the fuel runs out.
			if _, err := m.ExportedFunction("count").Call(ctx, 2*InterruptFuel); err == nil || !strings.Contains(err.Error(), "unreachable") {
				t.Fatalf("count with the interrupt set: %v, want an unreachable trap", err)
			}
			g.Set(0)
			if got := call(t, m, "count", 5)[0]; got != 5 {
				t.Fatalf("count(5) after reset = %d", got)
			}
		})
	}
}

// TestGoGuestRunsInterruptible: a Go guest, rewritten for snapshots and
// then for interruption, runs as before and keeps its globals' indices.
func TestGoGuestRunsInterruptible(t *testing.T) {
	orig := goGuestWasm(t)
	rw, info, err := Rewrite(orig)
	if err != nil {
		t.Fatal(err)
	}
	out, err := AddInterrupt(rw)
	if err != nil {
		t.Fatal(err)
	}
	info2, err := Parse(out)
	if err != nil {
		t.Fatal(err)
	}
	if len(info2.Globals) != len(info.Globals)+2 {
		t.Fatalf("%d globals after AddInterrupt, %d before", len(info2.Globals), len(info.Globals))
	}
	for i, g := range info.Globals {
		if info2.Globals[i].ExportName != g.ExportName {
			t.Fatalf("global %d exported as %q, was %q", i, info2.Globals[i].ExportName, g.ExportName)
		}
	}
	g := uint64(len(info.Globals))
	loops := bytes.Count(out, checkSequence(g, g+1))
	t.Logf("Go guest: %d bytes rewritten, %d with checks, %d loops", len(rw), len(out), loops)

	// Through the cache all test processes share: compiling a Go guest
	// takes a minute under -race on a loaded machine.
	ctx := context.Background()
	r := wazero.NewRuntimeWithConfig(ctx, cachedCompiler(t))
	defer r.Close(ctx)
	wasi_snapshot_preview1.MustInstantiate(ctx, r)
	run := func(wasm []byte) []uint64 {
		cm, err := r.CompileModule(ctx, wasm)
		if err != nil {
			t.Fatal(err)
		}
		m, err := instantiateLifted(ctx, r, cm, info, wazero.NewModuleConfig().WithName("").WithStartFunctions())
		if err != nil {
			t.Fatal(err)
		}
		defer m.Close(ctx)
		call(t, m, "_initialize")
		var res []uint64
		for i := 1; i <= 30; i++ {
			res = append(res, call(t, m, "bump", uint64(i))[0])
		}
		return res
	}
	a, b := run(rw), run(out)
	for i := range a {
		if a[i] != b[i] {
			t.Fatalf("bump(%d): %#x without checks, %#x with", i+1, a[i], b[i])
		}
	}
}

// FuzzAddInterrupt checks that AddInterrupt never panics, leaves its input
// alone, refuses what Parse refuses with the same error, never calls a
// module wazero compiles malformed, and that what it returns parses, has one
// more globals, the last exported as InterruptExport, and compiles when the input
// does. The seeds include the Go guest as Rewrite leaves it.
func FuzzAddInterrupt(f *testing.F) {
	for _, tc := range rewriteCases() {
		f.Add(tc.in)
	}
	for _, tc := range refusalCases() {
		f.Add(tc.in)
	}
	f.Add(loopModule())
	f.Add(startModule())
	if rw, _, err := Rewrite(goGuestWasm(f)); err == nil {
		f.Add(rw)
	}
	f.Fuzz(func(t *testing.T, in []byte) {
		orig := bytes.Clone(in)
		out, err := AddInterrupt(in)
		if !bytes.Equal(in, orig) {
			t.Fatal("AddInterrupt modified its input")
		}
		before, perr := Parse(in)
		if perr != nil {
			if err == nil || err.Error() != perr.Error() {
				t.Fatalf("Parse refused %v, AddInterrupt %v", perr, err)
			}
			return
		}
		ok, _ := compiles(in)
		if err != nil {
			if out != nil {
				t.Fatal("output returned with an error")
			}
			if ok && !errors.Is(err, ErrUnsupported) && !errors.Is(err, ErrReservedExport) {
				t.Fatalf("wazero compiles the module, AddInterrupt refuses it: %v", err)
			}
			return
		}
		after, err := Parse(out)
		if err != nil {
			t.Fatalf("the output does not parse: %v", err)
		}
		if len(after.Globals) != len(before.Globals)+2 || after.Globals[len(before.Globals)+1].ExportName != InterruptExport {
			t.Fatalf("globals: %d before, %d after, last %+v", len(before.Globals), len(after.Globals), after.Globals[len(after.Globals)-1])
		}
		if ok {
			if _, err := compiles(out); err != nil {
				t.Fatalf("wazero compiles the input, not the output: %v", err)
			}
		}
	})
}
