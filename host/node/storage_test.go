package node

import (
	"errors"
	"fmt"
	"net/http"
	"strings"
	"syscall"
	"testing"

	"github.com/wasmkeep/wasmkeep/host/store"
)

// TestAdminStorageFailures: an upload or an import that the store cannot
// take is the node's failure, not the client's: 507 when the disk is full,
// 503 with Retry-After when the store fails otherwise, never a 4xx that
// would tell the client to change a request that was fine.
func TestAdminStorageFailures(t *testing.T) {
	bucket := store.WithFaults(store.NewMem(), nil)
	n := startNode(t, Config{Bucket: bucket})
	putClass(t, n, "counter", "./examples/counter")
	expect(t, 200, "POST", n.URL()+"/actor/counter/a", nil)
	bundle := []byte(expect(t, 200, "POST", n.URL()+"/admin/rooms/counter/a/export", nil))
	wasm := buildGuest(t, "./examples/counter")

	full := fmt.Errorf("write /data/store/x: %w", syscall.ENOSPC)
	failing := errors.New("connection reset by the store")
	for _, c := range []struct {
		name       string
		err        error
		want       int
		retryAfter bool
	}{
		{"disk full", full, http.StatusInsufficientStorage, false},
		{"store failing", failing, http.StatusServiceUnavailable, true},
		{"outcome unknown", store.ErrUnknownOutcome, http.StatusServiceUnavailable, true},
	} {
		t.Run(c.name, func(t *testing.T) {
			bucket.SetFaults(func(op store.Op) store.Fault {
				if op.Kind == store.OpPut {
					return store.FailBefore(c.err)
				}
				return store.Fault{}
			})
			defer bucket.SetFaults(nil)
			for _, req := range []struct{ method, path string }{
				{"PUT", "/admin/classes/other"},
				{"POST", "/admin/rooms/import?name=copy"},
			} {
				body := wasm
				if strings.Contains(req.path, "import") {
					body = bundle
				}
				r := do(t, req.method, n.URL()+req.path, body)
				if r.Status != c.want || (r.Header.Get("Retry-After") != "") != c.retryAfter {
					t.Errorf("%s %s: %d (Retry-After %q), want %d (Retry-After: %v); body %s",
						req.method, req.path, r.Status, r.Header.Get("Retry-After"), c.want, c.retryAfter, r.Body)
				}
			}
		})
	}
	// Nothing was created meanwhile, and the node takes both once the store
	// is back.
	expect(t, 404, "GET", n.URL()+"/admin/classes/other", nil)
	expect(t, 201, "PUT", n.URL()+"/admin/classes/other", wasm)
	expect(t, 201, "POST", n.URL()+"/admin/rooms/import?name=copy", bundle)
}
