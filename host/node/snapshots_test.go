package node

import (
	"context"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"testing"

	"github.com/wasmkeep/wasmkeep/host/rooms"
	"github.com/wasmkeep/wasmkeep/host/snapshot"
	"github.com/wasmkeep/wasmkeep/host/store"
	"github.com/wasmkeep/wasmkeep/internal/limits"
	"github.com/wasmkeep/wasmkeep/internal/wstest"
)

// roomObjects lists a room's manifest and segment ids in the bucket.
func roomObjects(t *testing.T, n *Node, class, name string) (man *snapshot.Manifest, segs []string) {
	t.Helper()
	prefix := "rooms/" + store.EscapeSegment(class) + "/" + store.EscapeSegment(name) + "/"
	keys, err := n.Bucket.List(context.Background(), prefix)
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range keys {
		if id, ok := strings.CutPrefix(k, prefix+"seg/"); ok {
			segs = append(segs, id)
		}
	}
	body, _, err := n.Bucket.Get(context.Background(), prefix+"manifest")
	if err != nil {
		t.Fatal(err)
	}
	if man, err = snapshot.DecodeManifest(body); err != nil {
		t.Fatal(err)
	}
	return man, segs
}

// TestDeltaSnapshotsAndCollection: each hibernation writes only what
// changed, the chain of segments stays bounded by folds and compactions, unreferenced
// segments are deleted, and the room's state survives all of it and a
// restart.
func TestDeltaSnapshotsAndCollection(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	n := startNode(t, Config{DataDir: dir, Rooms: rooms.Config{MaxChain: 4}})
	putHibernateClass(t, n, "chat", "./examples/chat") // one write per hibernation
	url := n.URL() + "/actor/chat/lobby"
	c := wstest.Dial(t, url)

	var sent []string
	say := func(msg string) {
		c.Send(msg)
		if got := c.ReadText(); got != msg {
			t.Fatalf("echo of %q: %q", msg, got)
		}
		sent = append(sent, msg)
	}
	say("first")
	hibernate(t, n, "chat", "lobby")
	full := metric(t, n, "wasmkeep_snapshot_bytes_written_total")
	man, segs := roomObjects(t, n, "chat", "lobby")
	if len(segs) != 1 || man.Seq != 1 {
		t.Fatalf("after the first hibernation: %d segments, seq %d", len(segs), man.Seq)
	}

	shortened := func() float64 { // compactions and folds
		return metric(t, n, "wasmkeep_snapshot_compactions_total") + metric(t, n, "wasmkeep_snapshot_folds_total")
	}
	shortenedBefore := shortened()
	for round := range 12 {
		say(fmt.Sprintf("message %d", round))
		before := metric(t, n, "wasmkeep_snapshot_bytes_written_total")
		hibernate(t, n, "chat", "lobby")
		delta := metric(t, n, "wasmkeep_snapshot_bytes_written_total") - before
		if round == 0 && delta >= full {
			t.Fatalf("a one-message delta wrote %v bytes, the first snapshot %v", delta, full)
		}
		man, _ = roomObjects(t, n, "chat", "lobby")
		if len(man.Segments) > 4 {
			t.Fatalf("round %d: manifest references %d segments, bound 4", round, len(man.Segments))
		}
	}
	if shortened() == shortenedBefore {
		t.Fatal("12 hibernations with a chain bound of 4 never compacted or folded")
	}
	n.Rooms.DrainGarbage(context.Background())
	man, segs = roomObjects(t, n, "chat", "lobby")
	slices.Sort(segs)
	want := man.SegmentIDs()
	slices.Sort(want)
	if !slices.Equal(segs, want) {
		t.Fatalf("segments in the bucket %v, manifest references %v", segs, want)
	}

	// The history survived every delta, compaction and collection, and a
	// restart.
	stop(t, n)
	n = startNode(t, Config{DataDir: dir})
	c2 := wstest.Dial(t, n.URL()+"/actor/chat/lobby")
	for _, msg := range sent {
		if got := c2.ReadText(); got != msg {
			t.Fatalf("history after restart: %q, want %q", got, msg)
		}
	}
}

// TestUnreadableSnapshot: a corrupt or missing segment makes that room
// refuse events with 503 (counted), never start blank; other rooms serve.
func TestUnreadableSnapshot(t *testing.T) {
	// Without memory images: a wake from one reads no segment, so it
	// would not see the damage (as a resumed kept instance does not); a
	// wake from the store does, which is what this test is about.
	n := startNode(t, Config{Rooms: rooms.Config{ImageBytes: limits.Off}})
	putClass(t, n, "counter", "./examples/counter")
	for _, name := range []string{"corrupt", "missing", "fine"} {
		expect(t, 200, "POST", n.URL()+"/actor/counter/"+name, nil)
		hibernate(t, n, "counter", name)
	}
	_, segs := roomObjects(t, n, "counter", "corrupt")
	key := "rooms/counter/corrupt/seg/" + segs[0]
	body, _, _ := n.Bucket.Get(context.Background(), key)
	body[len(body)/2] ^= 0xFF
	if _, err := n.Bucket.Put(context.Background(), key, body, store.Cond{}); err != nil {
		t.Fatal(err)
	}
	_, segs = roomObjects(t, n, "counter", "missing")
	if err := n.Bucket.Delete(context.Background(), "rooms/counter/missing/seg/"+segs[0], ""); err != nil {
		t.Fatal(err)
	}
	for i, name := range []string{"corrupt", "missing"} {
		for try := range 2 {
			r := do(t, "GET", n.URL()+"/actor/counter/"+name, nil)
			if r.Status != http.StatusServiceUnavailable || !strings.Contains(r.Body, "unreadable") {
				t.Fatalf("%s: %d %s", name, r.Status, r.Body)
			}
			if got := metric(t, n, "wasmkeep_snapshot_unreadable_total"); got != float64(2*i+try+1) {
				t.Fatalf("unreadable count %v", got)
			}
		}
	}
	if got := expect(t, 200, "GET", n.URL()+"/actor/counter/fine", nil); got != "1" {
		t.Fatalf("the healthy room: %q", got)
	}
}

// TestDurabilityEachEvent: by default (and with --durability event) every
// reply's state is durable before the reply leaves, so a crash rolls back
// to the last reply; with --durability hibernate, to the last hibernation.
func TestDurabilityEachEvent(t *testing.T) {
	n := startNode(t, Config{})
	wasm := buildGuest(t, "./testdata/guests/hostile")
	expect(t, 201, "PUT", n.URL()+"/admin/classes/durable?durability=event", wasm)
	expect(t, 201, "PUT", n.URL()+"/admin/classes/default", wasm)
	expect(t, 201, "PUT", n.URL()+"/admin/classes/plain?durability=hibernate", wasm)
	for _, class := range []string{"durable", "default", "plain"} {
		url := n.URL() + "/actor/" + class + "/r"
		for i := 1; i <= 3; i++ {
			expect(t, 200, "POST", url, nil)
		}
		expect(t, 500, "POST", url+"/trap", nil)
		want := map[string]string{"durable": "3", "default": "3", "plain": "0"}[class]
		if got := expect(t, 200, "GET", url, nil); got != want {
			t.Fatalf("%s after a crash: %q, want %q", class, got, want)
		}
	}
	if got := metric(t, n, "wasmkeep_snapshot_writes_total"); got < 3 {
		t.Fatalf("snapshot writes %v: the durable class did not write per event", got)
	}
}

// TestOrphanSweep: segments no manifest references and no hold can still
// reference are deleted; the ones in use stay.
func TestOrphanSweep(t *testing.T) {
	n := startNode(t, Config{})
	putClass(t, n, "counter", "./examples/counter")
	expect(t, 200, "POST", n.URL()+"/actor/counter/a", nil)
	hibernate(t, n, "counter", "a")
	man, segs := roomObjects(t, n, "counter", "a")
	// An orphan from an older hold, one from the manifest's own hold (it may
	// still be about to reference it), and the segments of a room that has
	// no manifest and is not resident.
	older := snapshot.SegmentID(man.Generation-1, 9)
	same := snapshot.SegmentID(man.Generation, 99)
	for _, k := range []string{
		"rooms/counter/a/seg/" + older,
		"rooms/counter/a/seg/" + same,
		"rooms/counter/never/seg/" + snapshot.SegmentID(1, 1),
	} {
		if _, err := n.Bucket.Put(context.Background(), k, []byte("orphan"), store.Cond{IfNoneMatch: true}); err != nil {
			t.Fatal(err)
		}
	}
	deleted, err := n.Rooms.SweepOrphans(context.Background(), 100)
	if err != nil || deleted != 2 {
		t.Fatalf("swept %d, %v; want 2", deleted, err)
	}
	_, after := roomObjects(t, n, "counter", "a")
	slices.Sort(after)
	want := append(slices.Clone(segs), same)
	slices.Sort(want)
	if !slices.Equal(after, want) {
		t.Fatalf("segments after the sweep %v, want %v", after, want)
	}
	if got := expect(t, 200, "GET", n.URL()+"/actor/counter/a", nil); got != "1" {
		t.Fatalf("room after the sweep: %q", got)
	}
}
