package rooms

import (
	"context"
	"errors"
	"slices"
	"sync"
	"testing"

	"github.com/wasmkeep/wasmkeep/host/snapshot"
	"github.com/wasmkeep/wasmkeep/host/store"
)

// TestGenerationsGrowAcrossRestarts: a single node's generations come from
// a counter in the bucket, so a node started again with its wall clock set
// back (the seed the counter was first made from) still hands out higher
// ones; they used to start at the wall clock's microseconds. Two nodes on
// one bucket never share one.
func TestGenerationsGrowAcrossRestarts(t *testing.T) {
	ctx := context.Background()
	bucket := store.NewMem()
	first, err := NewStoredLocal(ctx, bucket, 1_000_000)
	if err != nil {
		t.Fatal(err)
	}
	a, _ := first.Acquire(ctx, Key{"c", "r"})
	again, err := NewStoredLocal(ctx, bucket, 5) // the wall clock stepped back
	if err != nil {
		t.Fatal(err)
	}
	b, _ := again.Acquire(ctx, Key{"c", "r"})
	if b.Generation <= a.Generation {
		t.Fatalf("generation %d after a restart, %d before it", b.Generation, a.Generation)
	}

	var mu sync.Mutex
	seen := map[uint64]bool{}
	var wg sync.WaitGroup
	for range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			l, err := NewStoredLocal(ctx, bucket, 5)
			if err != nil {
				t.Error(err)
				return
			}
			for range 100 {
				h, err := l.Acquire(ctx, Key{"c", "r"})
				if err != nil {
					t.Error(err)
					return
				}
				mu.Lock()
				if seen[h.Generation] {
					t.Errorf("generation %d handed out twice", h.Generation)
				}
				seen[h.Generation] = true
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
}

// TestWakeRefusesANewerSnapshot is the owner fence: a room whose manifest
// was written by a hold at least as new as the one this node was granted
// is not run here (another holder wrote it since).
func TestWakeRefusesANewerSnapshot(t *testing.T) {
	h := newHarness(t, Config{})
	h.place.Local = NewLocal(1 << 40) // the writer's holds are far newer
	h.expect("a", "POST", "/", "1")
	if err := h.m.Hibernate(context.Background(), Key{"c", "a"}); err != nil {
		t.Fatal(err)
	}
	h.place.Local = NewLocal(1) // this node's next hold is older
	_, err := h.request("a", "GET", "/")
	if !errors.Is(err, ErrFenced) || !errors.Is(err, ErrUnavailable) {
		t.Fatalf("a wake under an older hold than the snapshot's: %v, want ErrFenced", err)
	}
}

// TestOrphanSweepKeepsWhatALiveHoldWrites: the sweep decides from the
// room's fence and manifest, not from whether the room is resident here:
// a hold that has written a segment and not yet its manifest (a room's
// first hibernation, an import) keeps it; older holds' leftovers go.
func TestOrphanSweepKeepsWhatALiveHoldWrites(t *testing.T) {
	ctx := context.Background()
	h := newHarness(t, Config{})
	key := Key{"c", "importing"}
	hold, err := h.place.Acquire(ctx, key) // as an import does, the room not resident
	if err != nil {
		t.Fatal(err)
	}
	mine := snapshot.SegmentID(hold.Generation, 1)
	stale := snapshot.SegmentID(hold.Generation-1, 1) // a crashed older hold's
	for _, id := range []string{mine, stale} {
		if _, err := h.bucket.Put(ctx, key.segmentKey(id), []byte("segment"), store.Cond{IfNoneMatch: true}); err != nil {
			t.Fatal(err)
		}
	}
	if n, err := h.m.SweepOrphans(ctx, 100); err != nil || n != 1 {
		t.Fatalf("sweep with a live hold: deleted %d, %v; want the stale segment only", n, err)
	}
	keys, _ := h.bucket.List(ctx, key.prefix())
	if !slices.Equal(keys, []string{key.segmentKey(mine)}) {
		t.Fatalf("left %q, want the live hold's segment", keys)
	}
	h.place.End(ctx, hold, 0, 0) // the hold ended without a manifest: garbage
	if n, err := h.m.SweepOrphans(ctx, 100); err != nil || n != 1 {
		t.Fatalf("sweep after the hold ended: deleted %d, %v", n, err)
	}
}
