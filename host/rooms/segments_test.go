package rooms

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/wasmkeep/wasmkeep/host/snapshot"
	"github.com/wasmkeep/wasmkeep/host/store"
)

// storeSegments writes n segments of room key, each a full snapshot of a
// different memory, and returns the manifest that references them all.
func storeSegments(t *testing.T, h *harness, key Key, n int) *snapshot.Manifest {
	t.Helper()
	enc, err := snapshot.NewEncoder(snapshot.Zstd, snapshot.Options{})
	if err != nil {
		t.Fatal(err)
	}
	man := &snapshot.Manifest{}
	for i := range n {
		inst := &fakeInstance{class: h.classes.byName["c"], mem: make([]byte, fakeMemory)}
		inst.mem[0] = byte(i + 1)
		id := string(rune('a' + i))
		d, err := inst.Snapshot(enc, nil, nil, nil, 1, id, true)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := h.bucket.Put(context.Background(), key.segmentKey(id), d.Segment, store.Cond{}); err != nil {
			t.Fatal(err)
		}
		man.Segments = append(man.Segments, snapshot.SegmentRef{ID: id})
	}
	return man
}

// TestWakeReadsSegmentsAtOnce: a wake's segment reads are in flight
// together (on S3 each is a round trip), and the first that fails ends
// the others.
func TestWakeReadsSegmentsAtOnce(t *testing.T) {
	h := newHarness(t, Config{})
	key := Key{"c", "x"}
	const n = 5
	man := storeSegments(t, h, key, n)
	gate := &gatedSegments{Bucket: h.bucket, n: n, all: make(chan struct{})}
	h.m.bucket = gate
	r := &Room{m: h.m, key: key}
	segs, err := r.readSegments(context.Background(), man)
	if err != nil {
		t.Fatal(err)
	}
	if len(segs) != n {
		t.Fatalf("%d segments read, want %d", len(segs), n)
	}
	for _, ref := range man.Segments {
		if segs[ref.ID] == nil {
			t.Fatalf("segment %s missing", ref.ID)
		}
	}

	// One segment gone: the wake fails with ErrMissingSegment at once,
	// while the others' reads hang until they are cancelled.
	if err := h.bucket.Delete(context.Background(), key.segmentKey("c"), ""); err != nil {
		t.Fatal(err)
	}
	h.m.bucket = &hangingSegments{Bucket: h.bucket, except: "/seg/c"}
	defer func() { h.m.bucket = h.bucket }()
	if _, err := r.readSegments(context.Background(), man); !errors.Is(err, snapshot.ErrMissingSegment) {
		t.Fatalf("with a segment missing: %v, want ErrMissingSegment", err)
	}
}

// gatedSegments is a bucket whose segment reads wait until n of them are
// in flight at once, and fail if that does not happen in 10 s.
type gatedSegments struct {
	store.Bucket
	n        int32
	inflight atomic.Int32
	all      chan struct{}
}

func (b *gatedSegments) Get(ctx context.Context, key string) ([]byte, string, error) {
	if strings.Contains(key, "/seg/") {
		if b.inflight.Add(1) == b.n {
			close(b.all)
		}
		select {
		case <-b.all:
		case <-time.After(10 * time.Second):
			return nil, "", errors.New("the segments were read one after another")
		}
	}
	return b.Bucket.Get(ctx, key)
}

// hangingSegments is a bucket whose segment reads, but for except, wait
// for their context to end.
type hangingSegments struct {
	store.Bucket
	except string
}

func (b *hangingSegments) Get(ctx context.Context, key string) ([]byte, string, error) {
	if strings.Contains(key, "/seg/") && !strings.HasSuffix(key, b.except) {
		<-ctx.Done()
		return nil, "", ctx.Err()
	}
	return b.Bucket.Get(ctx, key)
}

// TestCollectorKeepsUpWithABacklog: past backlogBatches batches of
// garbage the collector deletes without pausing between batches (rooms
// durable per event make a segment of garbage a commit); below it, it
// pauses. On the manual clock a pause would never end: the backlog must
// come down to the mark with no time passing.
func TestCollectorKeepsUpWithABacklog(t *testing.T) {
	ctx := context.Background()
	h := newHarness(t, Config{})
	n := (backlogBatches + 5) * h.m.gc.batch
	for i := range n {
		key := Key{"c", "g"}.segmentKey(snapshot.SegmentID(1, uint64(i+1)))
		if _, err := h.bucket.Put(ctx, key, []byte("garbage"), store.IfNoneMatch()); err != nil {
			t.Fatal(err)
		}
		h.m.gc.add(key)
	}
	// A batch leaves the queue before its deletes are done: wait for
	// both.
	mark := backlogBatches * h.m.gc.batch
	h.waitFor("the backlog to come down to the mark, deleted", func() bool {
		return h.m.gc.size() < mark && h.counter(`wasmkeep_snapshot_segments_deleted_total`) >= float64(n-mark)
	})
}
