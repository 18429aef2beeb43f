package wasmrw

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"

	"github.com/tetratelabs/wazero"
	"github.com/tetratelabs/wazero/api"
	"github.com/tetratelabs/wazero/imports/wasi_snapshot_preview1"

	"github.com/wasmkeep/wasmkeep/internal/testwasm"
)

// guestSource is a Go wasip1 reactor whose export depends on heap state
// (a map, a growing slice, garbage for the GC) and on the Go runtime's
// globals (stack pointer and friends).
const guestSource = `package main

import (
	"fmt"
	"runtime"
	"strconv"
)

var (
	counter int64
	seen    = map[string]int{}
	history []string
)

//go:wasmexport bump
func bump(n int32) int64 {
	counter += int64(n)
	k := strconv.FormatInt(counter%97, 10)
	seen[k]++
	history = append(history, k)
	garbage := make([]byte, 32<<10)
	garbage[n%100] = byte(n)
	if counter%7 == 0 {
		runtime.GC()
	}
	sum := 0
	for k, v := range seen {
		sum += len(k) * v
	}
	return counter<<32 | int64(len(seen))<<20 | int64(len(history)&0xFFF)<<8 | int64(sum&0xFF) + int64(garbage[n%100]&0)
}

//go:wasmexport dump
func dump() int32 {
	return int32(len(fmt.Sprint(seen)))
}

func main() {}
`

var goGuest struct {
	once sync.Once
	wasm []byte
	skip string
	err  error
}

// goGuestWasm builds guestSource with GOOS=wasip1 GOARCH=wasm
// -buildmode=c-shared, once per test binary.
// cachedCompiler is wazero's compiler through the compilation cache every
// test process shares: the Go guest's compile takes half a minute under
// -race, from the cache a fraction of a second.
func cachedCompiler(tb testing.TB) wazero.RuntimeConfig {
	tb.Helper()
	cache, err := wazero.NewCompilationCacheWithDir(testwasm.CompileCacheDir(tb))
	if err != nil {
		tb.Fatal(err)
	}
	return wazero.NewRuntimeConfigCompiler().WithCompilationCache(cache)
}

func goGuestWasm(tb testing.TB) []byte {
	tb.Helper()
	goGuest.once.Do(func() {
		goBin, err := exec.LookPath("go")
		if err != nil {
			goGuest.skip = "go is not on PATH"
			return
		}
		dir, err := os.MkdirTemp("", "wasmrw-guest-")
		if err != nil {
			goGuest.err = err
			return
		}
		defer os.RemoveAll(dir)
		for name, content := range map[string]string{
			"go.mod":  "module guest\n\ngo 1.26\n",
			"main.go": guestSource,
		} {
			if err := os.WriteFile(filepath.Join(dir, name), []byte(content), 0o644); err != nil {
				goGuest.err = err
				return
			}
		}
		out := filepath.Join(dir, "guest.wasm")
		// -trimpath: the temporary directory's name is not built in, so
		// that every run builds the same bytes and the compilation cache
		// the tests share finds them (a Go guest's compile takes half a
		// minute under -race).
		cmd := exec.Command(goBin, "build", "-buildmode=c-shared", "-trimpath", "-o", out, ".")
		cmd.Dir = dir
		cmd.Env = append(os.Environ(), "GOOS=wasip1", "GOARCH=wasm", "CGO_ENABLED=0",
			"GOWORK=off", "GOTOOLCHAIN=local", "GOFLAGS=-buildvcs=false")
		if msg, err := cmd.CombinedOutput(); err != nil {
			goGuest.err = errors.New("building the Go guest: " + err.Error() + "\n" + string(msg))
			return
		}
		goGuest.wasm, goGuest.err = os.ReadFile(out)
	})
	if goGuest.skip != "" {
		tb.Skip(goGuest.skip)
	}
	if goGuest.err != nil {
		tb.Fatal(goGuest.err)
	}
	return goGuest.wasm
}

func call(t *testing.T, m api.Module, name string, args ...uint64) []uint64 {
	t.Helper()
	f := m.ExportedFunction(name)
	if f == nil {
		t.Fatalf("no export %q", name)
	}
	res, err := f.Call(context.Background(), args...)
	if err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	return res
}

func TestGoGuestSnapshotRestore(t *testing.T) {
	orig := goGuestWasm(t)
	out, info, err := Rewrite(orig)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("Go guest: %d bytes, %d imports, %d globals, memory %d pages, start %v",
		len(orig), len(info.Imports), len(info.Globals), info.Memory.Min, info.HadStart)
	if len(info.Globals) < 4 || info.ImportedGlobals != 0 {
		t.Fatalf("unexpected globals: %d defined, %d imported", len(info.Globals), info.ImportedGlobals)
	}

	ctx := context.Background()
	r := wazero.NewRuntimeWithConfig(ctx, cachedCompiler(t))
	defer r.Close(ctx)
	wasi_snapshot_preview1.MustInstantiate(ctx, r)
	cm, err := r.CompileModule(ctx, out)
	if err != nil {
		t.Fatalf("compiling the rewritten module: %v", err)
	}
	if _, ok := cm.ExportedMemories()["memory"]; !ok {
		t.Fatal(`the original "memory" export is gone`)
	}
	if _, ok := cm.ExportedMemories()[MemoryExport]; !ok {
		t.Fatal("no __wk_mem export")
	}
	config := wazero.NewModuleConfig().WithName("").WithStartFunctions()

	// Instance A: cold start, then some events.
	a, err := instantiateLifted(ctx, r, cm, info, config)
	if err != nil {
		t.Fatal(err)
	}
	call(t, a, "_initialize")
	for i := 1; i <= 40; i++ {
		call(t, a, "bump", uint64(i))
	}

	// Snapshot A.
	memA := a.ExportedMemory(MemoryExport)
	size := memA.Size()
	snap, ok := memA.Read(0, size)
	if !ok {
		t.Fatal("reading A's memory")
	}
	snap = append([]byte(nil), snap...)
	values := make([]uint64, len(info.Globals))
	for i, g := range info.Globals {
		if g.ExportName != GlobalExportName(i) {
			t.Fatalf("global %d exported as %q", i, g.ExportName)
		}
		ga := a.ExportedGlobal(g.ExportName)
		if ga == nil {
			t.Fatalf("%s is not exported", g.ExportName)
		}
		if _, mut := ga.(api.MutableGlobal); mut != g.Mutable {
			t.Fatalf("%s: mutable %v, Info says %v", g.ExportName, mut, g.Mutable)
		}
		values[i] = ga.Get()
	}

	// Instance B: nothing runs; load the snapshot.
	b, err := instantiateLifted(ctx, r, cm, info, config)
	if err != nil {
		t.Fatal(err)
	}
	memB := b.ExportedMemory(MemoryExport)
	if memB.Size() > size {
		t.Fatalf("fresh memory %d bytes is larger than the snapshot's %d", memB.Size(), size)
	}
	if _, ok := memB.Grow((size - memB.Size()) / 65536); !ok || memB.Size() != size {
		t.Fatalf("growing B's memory to %d bytes failed", size)
	}
	if !memB.Write(0, snap) {
		t.Fatal("writing B's memory")
	}
	for i, g := range info.Globals {
		if g.Mutable {
			b.ExportedGlobal(g.ExportName).(api.MutableGlobal).Set(values[i])
		} else if got := b.ExportedGlobal(g.ExportName).Get(); got != values[i] {
			t.Fatalf("immutable %s differs: %d vs %d", g.ExportName, got, values[i])
		}
	}

	// B continues from A's state; A and B stay in step.
	for i := 41; i <= 200; i++ {
		ra := call(t, a, "bump", uint64(i))[0]
		rb := call(t, b, "bump", uint64(i))[0]
		if i%50 == 0 {
			ra, rb = ra^call(t, a, "dump")[0], rb^call(t, b, "dump")[0]
		}
		if ra != rb {
			t.Fatalf("bump(%d): A %#x, B %#x", i, ra, rb)
		}
		if i == 41 {
			if counter := rb >> 32; counter != 41*42/2 {
				t.Fatalf("B's counter after restore is %d, want %d", counter, 41*42/2)
			}
		}
	}
}

// startModule has an i32 global (7) that its start function sets to 42, and
// exports "get" returning it.
func startModule() []byte {
	return module(
		typeSec(),
		funcSec(0, 1),
		memSec(mem(1)),
		globalSec(glob(TypeI32, true, i32c(7)...)),
		exportSec(exp("get", KindFunc, 1)),
		startSec(0),
		codeSec(fn(0x41, 42, 0x24, 0), fn(0x23, 0)),
	)
}

func TestStartNotRunAfterRewrite(t *testing.T) {
	ctx := context.Background()
	r := wazero.NewRuntimeWithConfig(ctx, wazero.NewRuntimeConfigCompiler())
	defer r.Close(ctx)
	in := startModule()

	// The original runs its start function on instantiation.
	m, err := r.InstantiateWithConfig(ctx, in, wazero.NewModuleConfig().WithName(""))
	if err != nil {
		t.Fatal(err)
	}
	if got := call(t, m, "get")[0]; got != 42 {
		t.Fatalf("original: get() = %d, want 42", got)
	}

	out, info, err := Rewrite(in)
	if err != nil {
		t.Fatal(err)
	}
	if !info.HadStart || info.StartFunc != 0 {
		t.Fatalf("info: %+v", info)
	}
	m, err = r.InstantiateWithConfig(ctx, out, wazero.NewModuleConfig().WithName(""))
	if err != nil {
		t.Fatal(err)
	}
	g := m.ExportedGlobal(GlobalExportName(0))
	if got := g.Get(); got != 7 {
		t.Fatalf("after instantiation the global is %d, want 7 (start must not run)", got)
	}
	call(t, m, StartExport)
	if got := g.Get(); got != 42 {
		t.Fatalf("after __wk_start the global is %d, want 42", got)
	}
	if got := call(t, m, "get")[0]; got != 42 {
		t.Fatalf("get() = %d, want 42", got)
	}
}

func TestImportedGlobalsWazero(t *testing.T) {
	ctx := context.Background()
	r := wazero.NewRuntimeWithConfig(ctx, wazero.NewRuntimeConfigInterpreter())
	defer r.Close(ctx)

	// "env" exports an immutable i32 global g = 5.
	env := module(globalSec(glob(TypeI32, false, i32c(5)...)), exportSec(exp("g", KindGlobal, 0)))
	if _, err := r.InstantiateWithConfig(ctx, env, wazero.NewModuleConfig().WithName("env")); err != nil {
		t.Fatal(err)
	}
	// The guest imports env.g (global 0) and defines globals 1 (i32 11) and
	// 2 (i64 22, mutable); "inc" adds env.g to global 2.
	in := module(
		typeSec(),
		importSec(imp("env", "g", 0x03, TypeI32, 0)),
		funcSec(0),
		memSec(mem(1)),
		globalSec(glob(TypeI32, false, i32c(11)...), glob(TypeI64, true, i64c(22)...)),
		exportSec(exp("inc", KindFunc, 0)),
		codeSec(fn(0x23, 2, 0x23, 0, 0xAC, 0x7C, 0x24, 2)), // g2 = g2 + i64.extend_i32_s(g0)
	)
	out, info, err := Rewrite(in)
	if err != nil {
		t.Fatal(err)
	}
	if info.ImportedGlobals != 1 || len(info.Globals) != 2 {
		t.Fatalf("info: %+v", info)
	}
	m, err := r.InstantiateWithConfig(ctx, out, wazero.NewModuleConfig().WithName(""))
	if err != nil {
		t.Fatal(err)
	}
	call(t, m, "inc")
	if got := m.ExportedGlobal("__wk_g0").Get(); got != 11 {
		t.Fatalf("__wk_g0 = %d, want 11", got)
	}
	g1 := m.ExportedGlobal("__wk_g1")
	if got := g1.Get(); got != 27 {
		t.Fatalf("__wk_g1 = %d, want 27", got)
	}
	g1.(api.MutableGlobal).Set(100)
	call(t, m, "inc")
	if got := g1.Get(); got != 105 {
		t.Fatalf("__wk_g1 = %d, want 105", got)
	}
}

func BenchmarkRewriteGoModule(b *testing.B) {
	wasm := goGuestWasm(b)
	b.SetBytes(int64(len(wasm)))
	b.ReportAllocs()
	for b.Loop() {
		if _, _, err := Rewrite(wasm); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkParseGoModule(b *testing.B) {
	wasm := goGuestWasm(b)
	b.SetBytes(int64(len(wasm)))
	b.ReportAllocs()
	for b.Loop() {
		if _, err := Parse(wasm); err != nil {
			b.Fatal(err)
		}
	}
}

// TestRewriteCasesCompile checks that wazero compiles every hand-assembled
// module, before and after the rewrite.
func TestRewriteCasesCompile(t *testing.T) {
	for _, tc := range rewriteCases() {
		out, _, err := Rewrite(tc.in)
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		if _, err := compiles(tc.in); err != nil {
			t.Errorf("%s: wazero refuses the input: %v", tc.name, err)
		}
		if _, err := compiles(out); err != nil {
			t.Errorf("%s: wazero refuses the output: %v", tc.name, err)
		}
	}
}
