package node

import (
	"fmt"
	"net/http"
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
func TestClassUploadsFreeOldVersions(t *testing.T) {
	n := startNode(t, Config{})
	wasm := testwasm.AssemblyScript(t, "examples/chat/index.ts")
	upload := func(i int) {
		expect(t, http.StatusCreated, http.MethodPut, n.URL()+"/admin/classes/chat", withCustomSection(wasm, i))
		url := fmt.Sprintf("%s/actor/chat/v%d", n.URL(), i)
		expect(t, 200, "GET", url, nil)
		hibernate(t, n, "chat", fmt.Sprint("v", i))
	}
	for i := range 5 { // warm up: pools, caches, the HTTP client
		upload(i)
	}
	before, goroutines := memtest.Take(t), runtime.NumGoroutine()
	for i := 5; i < 100; i++ {
		upload(i)
	}
	after := memtest.Take(t)
	t.Logf("95 more uploads: %d compiled versions, goroutines %d → %d, RSS %+.1f MiB, heap %+.1f MiB",
		n.Engine.Stats().Classes, goroutines, runtime.NumGoroutine(),
		(float64(after.RSS)-float64(before.RSS))/(1<<20), (float64(after.Heap)-float64(before.Heap))/(1<<20))
	if c := n.Engine.Stats().Classes; c > 3 {
		t.Fatalf("%d module versions compiled after 100 uploads, want at most the current one and 2 idle", c)
	}
	if g := runtime.NumGoroutine(); g > goroutines+10 {
		t.Fatalf("goroutines grew from %d to %d over 95 uploads", goroutines, g)
	}
	// The room of the first version wakes on it, compiled again.
	if got := metric(t, n, "wasmkeep_classes_compiled"); got > 3 {
		t.Fatalf("wasmkeep_classes_compiled = %v", got)
	}
	expect(t, 200, "GET", n.URL()+"/actor/chat/v0", nil)
}
