package wasmrw

import (
	"bytes"
	"context"
	"fmt"
	"reflect"
	"testing"

	"github.com/tetratelabs/wazero"
	"github.com/tetratelabs/wazero/api"
	"github.com/tetratelabs/wazero/imports/wasi_snapshot_preview1"
)

func dataSec(segs ...[]byte) []byte { return section(secData, vec(segs...)) }

// active encodes an active segment of memory 0 (flag 0) at offset.
func active(offset int32, init string) []byte {
	return cat(bs(0), i32c(offset), bs(0x0B), str(init))
}

type liftCase struct {
	name    string
	in      []byte
	outData []byte        // the data section expected in the output; nil: none
	lifted  []DataSegment // expected Info.Data
}

func liftCases() []liftCase {
	m2 := memSec(mem(2))
	return []liftCase{
		{
			name:   "no data count: section left out",
			in:     module(m2, dataSec(active(16, "hello"), cat(bs(2, 0), i32c(65536), bs(0x0B), str("page 1")), active(18, "LL"))),
			lifted: []DataSegment{{16, []byte("hello")}, {65536, []byte("page 1")}, {18, []byte("LL")}},
		},
		{
			name:    "data count: segments kept, active ones emptied",
			in:      module(m2, section(secDataCount, bs(3)), dataSec(active(1, "a"), cat(bs(1), str("passive")), cat(bs(2, 0), i32c(300), bs(0x0B), str("b")))),
			outData: dataSec(active(1, ""), cat(bs(1), str("passive")), cat(bs(2, 0), i32c(300), bs(0x0B), str(""))),
			lifted:  []DataSegment{{1, []byte("a")}, {300, []byte("b")}},
		},
		{
			name:    "passive only",
			in:      module(m2, section(secDataCount, bs(1)), dataSec(cat(bs(1), str("passive")))),
			outData: dataSec(cat(bs(1), str("passive"))),
		},
		{
			name:    "non-minimal offset encoding",
			in:      module(m2, dataSec(cat(bs(0), bs(0x41, 0x90, 0x80, 0x80, 0x80, 0x00), bs(0x0B), str("x")))),
			lifted:  []DataSegment{{16, []byte("x")}},
			outData: nil,
		},
		{
			name:    "ends exactly at the initial size",
			in:      module(m2, dataSec(active(2*65536-3, "end"))),
			lifted:  []DataSegment{{2*65536 - 3, []byte("end")}},
			outData: nil,
		},
		{
			name:    "past the initial size: not lifted",
			in:      module(m2, dataSec(active(1, "a"), active(2*65536-2, "end"))),
			outData: dataSec(active(1, "a"), active(2*65536-2, "end")),
		},
		{
			name:    "negative offset: not lifted",
			in:      module(m2, dataSec(active(-1, "a"))),
			outData: dataSec(active(-1, "a")),
		},
		{
			name:    "extended-const offset: not lifted",
			in:      module(m2, dataSec(active(1, "a"), cat(bs(0), i32c(1), i32c(2), bs(0x6A, 0x0B), str("b")))),
			outData: dataSec(active(1, "a"), cat(bs(0), i32c(1), i32c(2), bs(0x6A, 0x0B), str("b"))),
		},
		{
			name: "global offset: not lifted",
			in: module(
				importSec(imp("env", "g", 0x03, TypeI32, 0)),
				m2,
				dataSec(cat(bs(0), bs(0x23, 0), bs(0x0B), str("a"))),
			),
			outData: dataSec(cat(bs(0), bs(0x23, 0), bs(0x0B), str("a"))),
		},
	}
}

func TestLiftData(t *testing.T) {
	for _, tc := range liftCases() {
		t.Run(tc.name, func(t *testing.T) {
			in := bytes.Clone(tc.in)
			out, info, err := Rewrite(in)
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(info.Data, tc.lifted) {
				t.Fatalf("Data = %v, want %v", info.Data, tc.lifted)
			}
			if got := sectionsOf(t, out, secData); !bytes.Equal(got, tc.outData) {
				t.Fatalf("data section\n got % x\nwant % x", got, tc.outData)
			}
			checkRewritten(t, tc.in, out, info)
			// The lifted bytes are a copy.
			for i := range in {
				in[i] = 0xEE
			}
			if !reflect.DeepEqual(info.Data, tc.lifted) {
				t.Fatal("Data aliases the input")
			}
			if _, err := compiles(out); err != nil {
				t.Fatalf("wazero refuses the output: %v", err)
			}
		})
	}
}

// sectionsOf returns the sections of wasm with the given id, concatenated.
func sectionsOf(t *testing.T, wasm []byte, id byte) []byte {
	t.Helper()
	p, err := parse(wasm)
	if err != nil {
		t.Fatal(err)
	}
	var b []byte
	for _, s := range p.sections {
		if s.id == id {
			b = append(b, wasm[s.start:s.end]...)
		}
	}
	return b
}

// instantiateLifted instantiates a rewritten module and writes the data
// Rewrite lifted out of it, as the engine does.
func instantiateLifted(ctx context.Context, r wazero.Runtime, cm wazero.CompiledModule, info *Info, config wazero.ModuleConfig) (api.Module, error) {
	m, err := r.InstantiateModule(ctx, cm, config)
	if err != nil {
		return nil, err
	}
	mem := m.ExportedMemory(MemoryExport)
	for _, s := range info.Data {
		if !mem.Write(s.Offset, s.Init) {
			m.Close(ctx)
			return nil, fmt.Errorf("lifted segment at %d (%d bytes) is outside memory", s.Offset, len(s.Init))
		}
	}
	return m, nil
}

// sameInitialMemory checks that the rewritten module, with its lifted data
// written, starts with the memory the original starts with.
func sameInitialMemory(t *testing.T, r wazero.Runtime, orig []byte) {
	t.Helper()
	ctx := context.Background()
	out, info, err := Rewrite(orig)
	if err != nil {
		t.Fatal(err)
	}
	config := wazero.NewModuleConfig().WithName("").WithStartFunctions()
	a, err := r.InstantiateWithConfig(ctx, orig, config)
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close(ctx)
	cm, err := r.CompileModule(ctx, out)
	if err != nil {
		t.Fatal(err)
	}
	defer cm.Close(ctx)
	b, err := instantiateLifted(ctx, r, cm, info, config)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close(ctx)
	ma, _ := a.Memory().Read(0, a.Memory().Size())
	mb, _ := b.Memory().Read(0, b.Memory().Size())
	if !bytes.Equal(ma, mb) {
		t.Fatalf("initial memories differ (%d and %d bytes)", len(ma), len(mb))
	}
}

func TestLiftedDataGivesTheSameMemory(t *testing.T) {
	ctx := context.Background()
	r := wazero.NewRuntimeWithConfig(ctx, wazero.NewRuntimeConfigInterpreter())
	defer r.Close(ctx)
	for _, tc := range liftCases() {
		if tc.lifted == nil {
			continue
		}
		t.Run(tc.name, func(t *testing.T) { sameInitialMemory(t, r, tc.in) })
	}
	t.Run("Go guest", func(t *testing.T) {
		wasm := goGuestWasm(t)
		_, info, err := Rewrite(wasm)
		if err != nil {
			t.Fatal(err)
		}
		n := 0
		for _, s := range info.Data {
			n += len(s.Init)
		}
		t.Logf("Go guest: %d data segments lifted, %d bytes", len(info.Data), n)
		if len(info.Data) == 0 {
			t.Fatal("nothing lifted from a Go module")
		}
		wasi := wazero.NewRuntimeWithConfig(ctx, cachedCompiler(t))
		defer wasi.Close(ctx)
		if _, err := wasi_snapshot_preview1.Instantiate(ctx, wasi); err != nil {
			t.Fatal(err)
		}
		sameInitialMemory(t, wasi, wasm)
	})
}
