package rooms

import (
	"context"
	"errors"
	"slices"
	"strconv"
	"testing"

	"github.com/wasmkeep/wasmkeep/host/rooms/life"
	"github.com/wasmkeep/wasmkeep/host/store"
)

// numbersOf lists the numbers of room c/name's manifests in h's bucket.
func numbersOf(t *testing.T, h *harness, name string) []uint64 {
	t.Helper()
	ns, err := numberedManifests{}.numbers(context.Background(), h.bucket, Key{"c", name})
	if err != nil {
		t.Fatal(err)
	}
	return ns
}

// TestNumberedManifests: in the numbered layout every commit writes a new
// manifest; a hold deletes the ones it superseded but its first, a wake
// reads the highest, the sweep deletes what fenced holds left, and a
// delete leaves nothing.
func TestNumberedManifests(t *testing.T) {
	ctx := context.Background()
	h := newHarness(t, Config{NumberedManifests: true})
	h.classes.durable["c"] = true
	for i := 1; i <= 5; i++ {
		h.expect("r", "POST", "/", strconv.Itoa(i))
	}
	h.m.DrainGarbage(ctx)
	if ns := numbersOf(t, h, "r"); !slices.Equal(ns, []uint64{1, 5}) {
		t.Fatalf("after five commits of one hold: manifests %v, want its first and its last", ns)
	}
	if _, _, err := h.bucket.Get(ctx, Key{"c", "r"}.manifestKey()); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("the overwritten manifest's key: %v, want none", err)
	}
	if err := h.m.Drop(ctx, Key{"c", "r"}, life.EndAdmin); err != nil {
		t.Fatal(err)
	}
	h.expect("r", "POST", "/", "6") // a new hold, from the highest
	h.m.DrainGarbage(ctx)
	if ns := numbersOf(t, h, "r"); !slices.Equal(ns, []uint64{1, 5, 6}) {
		t.Fatalf("after a new hold's first commit: manifests %v, want 1, 5, 6", ns)
	}
	if n, err := h.m.SweepOrphans(ctx, 100); err != nil || n < 2 {
		t.Fatalf("sweep: %d, %v; want the fenced hold's two manifests deleted", n, err)
	}
	if ns := numbersOf(t, h, "r"); !slices.Equal(ns, []uint64{6}) {
		t.Fatalf("after the sweep: manifests %v, want the live hold's first only", ns)
	}
	if err := h.m.Delete(ctx, Key{"c", "r"}); err != nil {
		t.Fatal(err)
	}
	if keys, _ := h.bucket.List(ctx, Key{"c", "r"}.prefix()); len(keys) != 0 {
		t.Fatalf("after a delete: %q", keys)
	}
	h.expect("r", "POST", "/", "1")
}

// TestNumberedManifestsFenceAStaleHold: two nodes on one bucket, the
// first still believing in its hold after the second was granted a newer
// one. Whichever writes first, the other's next commit is refused, never
// landed where no reader looks: no acknowledged increment is lost.
func TestNumberedManifestsFenceAStaleHold(t *testing.T) {
	for _, staleFirst := range []bool{false, true} {
		t.Run("stale writes first "+strconv.FormatBool(staleFirst), func(t *testing.T) {
			ctx := context.Background()
			a := newHarness(t, Config{NumberedManifests: true})
			a.classes.durable["c"] = true
			a.expect("r", "POST", "/", "1")
			a.expect("r", "POST", "/", "2") // a's manifests: 1 (its first) and 2

			b := newHarnessOn(t, Config{NumberedManifests: true}, a.bucket)
			b.classes.durable["c"] = true
			b.place.Local = NewLocal(1 << 40) // granted after a's hold
			b.expect("r", "GET", "/", "2")    // b woke from manifest 2; a read changes nothing

			if staleFirst {
				// a, stale, commits twice more: 3, then 4, deleting 3
				// (superseded, not its first).
				a.expect("r", "POST", "/", "3")
				a.expect("r", "POST", "/", "4")
				a.m.DrainGarbage(ctx)
				if ns := numbersOf(t, a, "r"); !slices.Equal(ns, []uint64{1, 4}) {
					t.Fatalf("a's manifests %v, want 1 and 4", ns)
				}
				// b's first commit would be 3, free again: it lands, and
				// is found behind 4, so it fails and b rolls back.
				if got, err := b.request("r", "POST", "/"); !errors.Is(err, ErrNotDurable) {
					t.Fatalf("b's first commit behind a stale hold's: %q, %v; want ErrNotDurable", got, err)
				}
				b.expect("r", "GET", "/", "4") // a's acknowledged increments
				b.expect("r", "POST", "/", "5")
				return
			}
			b.expect("r", "POST", "/", "3") // b's first: manifest 3
			// a's next commit would be 3: refused.
			if got, err := a.request("r", "POST", "/"); !errors.Is(err, ErrNotDurable) {
				t.Fatalf("a stale hold's commit: %q, %v; want ErrNotDurable", got, err)
			}
			b.expect("r", "POST", "/", "4")
			b.m.DrainGarbage(ctx)
			// b keeps its first (3): a still believes in its hold.
			if ns := numbersOf(t, b, "r"); !slices.Contains(ns, 3) || ns[len(ns)-1] != 4 {
				t.Fatalf("manifests %v, want b's first (3) kept and 4 the latest", ns)
			}
		})
	}
}
