package clusternode

import (
	"context"
	"testing"
	"time"

	"github.com/wasmkeep/wasmkeep/host/rooms"
)

// TestAMoveRightAfterAnUndrain: a node's undrain is in its lease when
// Drain returns, and a move to it that the mover's view still refuses
// reads that lease: the move begins at once. (Issue 28 §4: `cluster move
// --to n2` right after `cluster drain --off n2` was refused with "node n2
// is draining" for 6 to 9 s: the undrain waited for n2's next renewal, up
// to TTL/3, and the mover's view read n2's lease once a TTL.)
func TestAMoveRightAfterAnUndrain(t *testing.T) {
	t.Parallel()
	const ttl = 3 * time.Second // renewals a second apart: room for the test's steps in between
	bucket, ms := startCluster(t, ttl, "a", "b")
	a, b := ms[0], ms[1]
	putClass(t, a, "counter", "./examples/counter", true)
	count(t, a, "m", "1")
	key := rooms.Key{Class: "counter", Name: "m"}

	if err := b.mem().Drain(true); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 2*ttl, "b's lease says it drains", func() bool { return readLease(t, bucket, "b").Draining })
	if _, ok := a.mem().Peer(context.Background(), "b"); !ok { // a reads it now
		t.Fatal("a cannot read b's lease")
	}
	waitFor(t, 10*time.Second, "b drained", func() bool { return b.mem().Status().Drained })

	if err := b.mem().Drain(false); err != nil {
		t.Fatal(err)
	}
	if l := readLease(t, bucket, "b"); l.Draining {
		t.Fatalf("b's lease when its undrain returned: %+v", l)
	}
	if by, err := a.mem().Move(context.Background(), key, "b"); err != nil || by != "b" {
		t.Fatalf("a move to b right after its undrain: by %q, %v", by, err)
	}
	count(t, b, "m", "2")
}
