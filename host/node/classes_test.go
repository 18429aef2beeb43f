package node

import (
	"fmt"
	"net/http"
	"os"
	"runtime"
	"testing"

	"github.com/wasmkeep/wasmkeep/internal/memtest"
	"github.com/wasmkeep/wasmkeep/internal/testwasm"
)

// withCustomSection appends a custom section to a module: the same code
// under another content hash, i.e. another upload of a class.
func withCustomSection(wasm []byte, i int) []byte {
	payload := fmt.Sprintf("\x07versionupload-%d", i) // name "version", then data
	out := append([]byte(nil), wasm...)
	out = append(out, 0, byte(len(payload)))
	return append(out, payload...)
}

// TestClassUploadsFreeOldVersions uploads a class 100 times, with a room
// used on each version. Every version used to stay compiled for the life of
// the node, each with its pool of blank instances and the goroutine that
// fills it. Now the versions nobody runs are closed, past the two most
// recently used: compiled classes, goroutines and memory stay flat, and a
// room on an old version still wakes on it.
//
// Under -race, 30 uploads, where 100 took 4 to 7 s: the 27 after the
// warm-up still take a goroutine leaked by each upload past the bound of
// 10. CI runs the 100 again without it.
//
// With WASMKEEP_UPLOADS_GO=1 the class is the Go counter, uploaded 23
// times (compiling a Go module takes about a second), for
// docs/PERFORMANCE.md.
func TestClassUploadsFreeOldVersions(t *testing.T) {
	n := startNode(t, Config{})
	wasm, uploads := func() []byte { return testwasm.AssemblyScript(t, "examples/chat/index.ts") }, 100
	if raceEnabled {
		uploads = 30
	}
	if os.Getenv("WASMKEEP_UPLOADS_GO") == "1" {
		wasm, uploads = func() []byte { return buildGuest(t, "./examples/counter") }, 23
	}
	module := wasm()
	upload := func(i int) {
		expect(t, http.StatusCreated, http.MethodPut, n.URL()+"/admin/classes/c", withCustomSection(module, i))
		expect(t, 200, "GET", fmt.Sprintf("%s/actor/c/v%d", n.URL(), i), nil)
		hibernate(t, n, "c", fmt.Sprint("v", i))
	}
	const warm = 3 // pools, caches, the HTTP client
	for i := range warm {
		upload(i)
	}
	before, goroutines := memtest.Take(t), runtime.NumGoroutine()
	for i := warm; i < uploads; i++ {
		upload(i)
	}
	after := memtest.Take(t)
	t.Logf("%d more uploads: %d compiled versions, goroutines %d → %d, RSS %+.1f MiB, heap %+.1f MiB",
		uploads-warm, n.Engine.Stats().Classes, goroutines, runtime.NumGoroutine(),
		(float64(after.RSS)-float64(before.RSS))/(1<<20), (float64(after.Heap)-float64(before.Heap))/(1<<20))
	if c := n.Engine.Stats().Classes; c > 3 {
		t.Fatalf("%d module versions compiled after %d uploads, want at most the current one and 2 idle", c, uploads)
	}
	if g := runtime.NumGoroutine(); g > goroutines+10 {
		t.Fatalf("goroutines grew from %d to %d over %d uploads", goroutines, g, uploads-warm)
	}
	// The room of the first version wakes on it, compiled again.
	if got := metric(t, n, "wasmkeep_classes_compiled"); got > 3 {
		t.Fatalf("wasmkeep_classes_compiled = %v", got)
	}
	expect(t, 200, "GET", n.URL()+"/actor/c/v0", nil)
}
