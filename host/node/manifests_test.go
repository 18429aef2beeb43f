package node

import (
	"context"
	"errors"
	"strconv"
	"testing"

	"github.com/wasmkeep/wasmkeep/host/store"
)

// TestNumberedManifestsSurviveARestart: a node on a bucket started with
// numbered manifests writes a new manifest object a commit and none
// overwritten; a node started again on it, told nothing, takes the
// bucket's layout and finds every room's state. CI runs it on the data
// directory and on versitygw.
func TestNumberedManifestsSurviveARestart(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	n := startNode(t, Config{DataDir: dir, Manifests: store.ManifestsNumbered})
	putClass(t, n, "counter", "./examples/counter")
	for i := 1; i <= 5; i++ {
		if got := expect(t, 200, "POST", n.URL()+"/actor/counter/a", nil); got != strconv.Itoa(i) {
			t.Fatalf("increment %d: %q", i, got)
		}
	}
	numbered, err := n.Bucket.List(ctx, "rooms/counter/a/manifests/")
	if err != nil || len(numbered) == 0 {
		t.Fatalf("numbered manifests: %q, %v", numbered, err)
	}
	if _, _, err := n.Bucket.Get(ctx, "rooms/counter/a/manifest"); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("the overwritten manifest's key: %v, want none", err)
	}
	stop(t, n)
	n = startNode(t, Config{DataDir: dir})
	if got := expect(t, 200, "GET", n.URL()+"/actor/counter/a", nil); got != "5" {
		t.Fatalf("after a restart: %q, want 5", got)
	}
	if got := expect(t, 200, "POST", n.URL()+"/actor/counter/a", nil); got != "6" {
		t.Fatalf("an increment after the restart: %q, want 6", got)
	}
}
