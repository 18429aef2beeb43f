package cluster

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/VictoriaMetrics/metrics"

	"github.com/wasmkeep/wasmkeep/host/store"
	"github.com/wasmkeep/wasmkeep/internal/clock"
)

// movePair is node a holding room parked, and node c, its live peer.
func movePair(t *testing.T, b store.Bucket) (a, c *Node, clk *clock.Manual) {
	t.Helper()
	a, clk = joined(t, b, "a", 1)
	c, _ = joined(t, b, "c", 2, func(cfg *Config) { cfg.Clock = clk }) // one time for both
	a.WatchPeers(ctx)
	h, err := a.Acquire(ctx, moveRoom)
	if err != nil {
		t.Fatal(err)
	}
	if !a.Park(h) {
		t.Fatal("not parked")
	}
	return a, c, clk
}

var moveRoom = Room{"chat", "lobby"}

// movingReleased is movePair with a's move of the room to c begun and
// its parked record released (landed).
func movingReleased(t *testing.T, b store.Bucket) (a, c *Node, clk *clock.Manual) {
	t.Helper()
	a, c, clk = movePair(t, b)
	if _, err := a.BeginMove(ctx, moveRoom, "c"); err != nil {
		t.Fatal(err)
	}
	if _, landed := a.ReleaseParked(ctx, moveRoom); !landed {
		t.Fatal("the release did not land")
	}
	return a, c, clk
}

// TestBeginMoveRefusals: a room neither held nor parked here, a target
// that is not a live peer, a room moving already.
func TestBeginMoveRefusals(t *testing.T) {
	b := store.NewMem()
	a, _, _ := movePair(t, b)
	if _, err := a.BeginMove(ctx, Room{"chat", "other"}, "c"); !errors.Is(err, ErrNotHeld) {
		t.Errorf("a room not held here: %v", err)
	}
	for _, to := range []string{"a", "nobody"} {
		if _, err := a.BeginMove(ctx, moveRoom, to); err == nil {
			t.Errorf("a move to %s began", to)
		}
	}
	if _, err := a.BeginMove(ctx, moveRoom, "c"); err != nil {
		t.Fatal(err)
	}
	if _, err := a.BeginMove(ctx, moveRoom, "c"); !errors.Is(err, ErrMoveBusy) {
		t.Errorf("a second move: %v", err)
	}
}

// TestAMovedParkedRoomGoesToItsTarget: while it moves the room takes no
// hold here and its events go to the target once the record is free;
// the look asks the target, then sees it holding the room and ends.
func TestAMovedParkedRoomGoesToItsTarget(t *testing.T) {
	b := store.NewMem()
	a, c, _ := movingReleased(t, b)
	if _, err := a.Acquire(ctx, moveRoom); !errors.Is(err, ErrMoving) {
		t.Errorf("a moving room was taken here: %v", err)
	}
	if w, err := a.Route(ctx, moveRoom); err != nil || w.Kind != Elsewhere || w.Node != "c" {
		t.Errorf("a moving room's events go to %+v, %v; want c", w, err)
	}
	if s, ok := a.LookMove(ctx, moveRoom); !ok || s.Kind != MoveAsk {
		t.Fatalf("look with the record free: %+v %v", s, ok)
	}
	taken, err := c.Acquire(ctx, moveRoom)
	if err != nil {
		t.Fatal(err)
	}
	s, ok := a.LookMove(ctx, moveRoom)
	if !ok || s.Kind != MoveTaken || s.Node != "c" {
		t.Fatalf("look with the target holding the room: %+v %v", s, ok)
	}
	if _, ok := a.Moving(moveRoom); ok {
		t.Error("the move outlived the target's take")
	}
	if w, err := a.Route(ctx, moveRoom); err != nil || w.Kind != Elsewhere || w.Node != "c" {
		t.Errorf("after the move the room routes to %+v, %v", w, err)
	}
	if rec, _ := readRecord(t, b, moveRoom); rec.Node != "c" || rec.Generation != taken.Generation {
		t.Errorf("record after the move: %+v", rec)
	}
}

// TestAMoveWaitsForAPendingRelease: a release that did not land leaves
// the record naming this live node; the move waits (events wait too)
// until the pending release lands, then asks the target.
func TestAMoveWaitsForAPendingRelease(t *testing.T) {
	b := store.WithFaults(store.NewMem(), nil)
	a, _, clk := movePair(t, b)
	if _, err := a.BeginMove(ctx, moveRoom, "c"); err != nil {
		t.Fatal(err)
	}
	b.SetFaults(faultOn(store.OpPut, RecordKey(moveRoom), store.FailBefore(store.ErrUnknownOutcome)))
	if _, landed := a.ReleaseParked(ctx, moveRoom); landed {
		t.Fatal("a failed release landed")
	}
	if s, _ := a.LookMove(ctx, moveRoom); s.Kind != MoveWait {
		t.Errorf("look with the release pending: %+v", s)
	}
	if w, err := a.Route(ctx, moveRoom); err != nil || w.Kind != Wait {
		t.Errorf("events of a room whose release is pending go to %+v, %v; want Wait", w, err)
	}
	for range 10 {
		if len(a.Status().Pending) == 0 {
			break
		}
		clk.Advance(a.Settle(ctx))
	}
	if s, _ := a.LookMove(ctx, moveRoom); s.Kind != MoveAsk {
		t.Errorf("look once the release landed: %+v (status %+v)", s, a.Status())
	}
}

// TestAWakeLandingDuringAMoveIsGivenBack: a wake of the parked room whose
// write lands after the move began takes no hold: it is released.
func TestAWakeLandingDuringAMoveIsGivenBack(t *testing.T) {
	b := &hookBucket{Bucket: store.NewMem()}
	a, _, _ := movePair(t, b)
	seen, err := a.Look(ctx, moveRoom)
	if err != nil {
		t.Fatal(err)
	}
	b.beforePut = func() {
		if _, err := a.BeginMove(ctx, moveRoom, "c"); err != nil {
			t.Error(err)
		}
	}
	if _, err := a.Take(ctx, seen); !errors.Is(err, ErrMoving) {
		t.Fatalf("a wake that landed during a move: %v", err)
	}
	b.beforePut = nil
	if a.Acting(moveRoom) {
		t.Error("the wake's hold acts during the move")
	}
	if _, ok := a.Parked(moveRoom); ok {
		t.Error("the parked entry outlived a wake that moved the record")
	}
	a.Settle(ctx)
	if rec, _ := readRecord(t, b, moveRoom); !rec.Free {
		t.Errorf("the given-back wake left %+v", rec)
	}
	if s, _ := a.LookMove(ctx, moveRoom); s.Kind != MoveAsk {
		t.Errorf("look after the wake was given back: %+v", s)
	}
}

// TestAMoveGivesUp after MoveLookFor, and when its target drains.
func TestAMoveGivesUp(t *testing.T) {
	b := store.WithFaults(store.NewMem(), nil)
	a, c, clk := movePair(t, b)
	if _, err := a.BeginMove(ctx, moveRoom, "c"); err != nil {
		t.Fatal(err)
	}
	// The record stays pending (every write of it fails): the look
	// waits, until its time is up.
	b.SetFaults(func(op store.Op) store.Fault {
		if op.Key == RecordKey(moveRoom) && op.Kind == store.OpPut {
			return store.FailBefore(store.ErrUnknownOutcome)
		}
		return store.Fault{}
	})
	a.ReleaseParked(ctx, moveRoom)
	for waited := time.Duration(0); waited < MoveLookFor; waited += ttl / 4 {
		if s, _ := a.LookMove(ctx, moveRoom); s.Kind != MoveWait {
			t.Fatalf("look at %v: %+v", waited, s)
		}
		clk.Advance(ttl / 4)
		a.RenewLease(ctx)
		c.RenewLease(ctx)
		a.WatchPeers(ctx)
	}
	if s, ok := a.LookMove(ctx, moveRoom); !ok || s.Kind != MoveGiveUp {
		t.Errorf("a move past its look: %+v %v", s, ok)
	}
	b.SetFaults(nil)
	a.Settle(ctx)
	a.Park(mustAcquire(t, a))
	if _, err := a.BeginMove(ctx, moveRoom, "c"); err != nil {
		t.Fatal(err)
	}
	c.SetDraining(true)
	c.RenewLease(ctx)
	a.readPeer(ctx, "c")
	if s, ok := a.LookMove(ctx, moveRoom); !ok || s.Kind != MoveGiveUp {
		t.Errorf("a move to a draining node: %+v %v", s, ok)
	}
	if _, ok := a.Moving(moveRoom); ok {
		t.Error("a move given up is still recorded")
	}
}

func mustAcquire(t *testing.T, n *Node) Hold {
	t.Helper()
	for range 20 {
		h, err := n.Acquire(ctx, moveRoom)
		if err == nil {
			return h
		}
		n.Settle(ctx)
	}
	t.Fatalf("%s could not acquire %s: %+v", n.Name(), moveRoom, n.Status())
	return Hold{}
}

// hookBucket runs beforePut before each Put.
type hookBucket struct {
	store.Bucket
	beforePut func()
}

func (b *hookBucket) Put(ctx context.Context, key string, body []byte, cond store.Cond) (string, error) {
	if b.beforePut != nil {
		b.beforePut()
	}
	return b.Bucket.Put(ctx, key, body, cond)
}

// TestMovedRoomsPark: a moving room parks nothing here.
func TestMovedRoomsPark(t *testing.T) {
	b := store.NewMem()
	a, _, _ := movePair(t, b)
	if _, landed := a.ReleaseParked(ctx, moveRoom); !landed {
		t.Fatal("the release did not land")
	}
	h := mustAcquire(t, a)
	if _, err := a.BeginMove(ctx, moveRoom, "c"); err != nil {
		t.Fatal(err)
	}
	if a.Park(h) {
		t.Fatal("a moving room was parked")
	}
}

// TestEndMoveEndsOnlyItsMove: a move ended by an older step's outcome
// leaves a later move of the same room alone.
func TestEndMoveEndsOnlyItsMove(t *testing.T) {
	b := store.NewMem()
	a, _, clk := movePair(t, b)
	first, err := a.BeginMove(ctx, moveRoom, "c")
	if err != nil {
		t.Fatal(err)
	}
	a.EndMove(first)
	clk.Advance(time.Millisecond)
	second, err := a.BeginMove(ctx, moveRoom, "c")
	if err != nil {
		t.Fatal(err)
	}
	a.EndMove(first)
	if m, ok := a.Moving(moveRoom); !ok || m != second {
		t.Fatalf("ending the first move ended the second: %+v %v", m, ok)
	}
	a.EndMove(second)
	if _, ok := a.Moving(moveRoom); ok {
		t.Fatal("the second move outlived its end")
	}
}

// TestAMoveReleasesAStrayRecord: a record naming this process that nothing
// here holds (a write that landed after it was given up) would keep the
// move waiting for good; the look releases it on the version it read,
// then asks the target.
func TestAMoveReleasesAStrayRecord(t *testing.T) {
	b := store.NewMem()
	a, _, _ := movingReleased(t, b)
	rec, etag := readRecord(t, b, moveRoom)
	stray := Record{Node: "a", Instance: a.Instance(), Generation: rec.Generation + 1, Nonce: "late"}
	if _, err := b.Put(ctx, RecordKey(moveRoom), EncodeRecord(stray), store.IfMatch(etag)); err != nil {
		t.Fatal(err)
	}
	if s, _ := a.LookMove(ctx, moveRoom); s.Kind != MoveWait || !strings.Contains(s.Why, "nothing here holds it") {
		t.Fatalf("look at a stray record: %+v", s)
	}
	if got := a.Counts().MoveStrayReleases; got != 1 {
		t.Fatalf("stray releases %d, want 1", got)
	}
	a.Settle(ctx)
	if got, _ := readRecord(t, b, moveRoom); !got.Free || got.Generation != stray.Generation {
		t.Fatalf("the stray record after the release: %+v", got)
	}
	if s, _ := a.LookMove(ctx, moveRoom); s.Kind != MoveAsk {
		t.Fatalf("look once the stray record was released: %+v", s)
	}
}

// TestAMoveTreatsAnEndedHolderAsFree: a record naming an instance that
// has ended (here an earlier process of the target, whose lease this node
// reads to learn it) is free to take: the look asks the target, and the
// room's events go to it.
func TestAMoveTreatsAnEndedHolderAsFree(t *testing.T) {
	b := store.NewMem()
	a, _, _ := movingReleased(t, b)
	rec, etag := readRecord(t, b, moveRoom)
	old := Record{Node: "c", Instance: "an earlier process of c", Generation: rec.Generation + 1, Nonce: "old"}
	if _, err := b.Put(ctx, RecordKey(moveRoom), EncodeRecord(old), store.IfMatch(etag)); err != nil {
		t.Fatal(err)
	}
	if s, _ := a.LookMove(ctx, moveRoom); s.Kind != MoveAsk {
		t.Fatalf("look at a record of an ended instance: %+v", s)
	}
	if w, err := a.Route(ctx, moveRoom); err != nil || w.Kind != Elsewhere || w.Node != "c" || w.Address != "c:8080" {
		t.Fatalf("the room's events go to %+v, %v; want c", w, err)
	}
}

// TestAMoveLooksLongerOnLongLeases: the look is MoveLookFor, or twelve
// lease times where that is longer; and a move does not outlive its
// node's end.
func TestAMoveLooksLongerOnLongLeases(t *testing.T) {
	b := store.NewMem()
	a, _, _ := movePair(t, b)
	if got := a.LookFor(); got != MoveLookFor {
		t.Errorf("look on %v leases: %v, want %v", ttl, got, MoveLookFor)
	}
	long, _ := testNode(t, b, "long", 3, func(c *Config) { c.TTL = time.Minute })
	if got := long.LookFor(); got != 12*time.Minute {
		t.Errorf("look on one-minute leases: %v, want 12m", got)
	}
	if _, err := a.BeginMove(ctx, moveRoom, "c"); err != nil {
		t.Fatal(err)
	}
	a.Stop(ctx, manualSleeper{clock.NewManual(time.Unix(0, 0))})
	if mv := a.Moves(); len(mv) != 0 {
		t.Fatalf("moves after the node stopped: %+v", mv)
	}
}

// TestAMovingRoomWaitsForAnUnreachableTarget: with the record free but the
// target unreachable at its current lease, the room's events wait rather
// than being sent where they cannot go; a renewal of the target's lease
// (a new version) sends them to it again.
func TestAMovingRoomWaitsForAnUnreachableTarget(t *testing.T) {
	b := store.NewMem()
	a, c, clk := movingReleased(t, b)
	a.Unreachable(ctx, "c")
	if w, err := a.Route(ctx, moveRoom); err != nil || w.Kind != Wait || w.Node != "c" {
		t.Fatalf("events of a room moving to an unreachable node go to %+v, %v; want Wait", w, err)
	}
	clk.Advance(ttl / 2)
	c.RenewLease(ctx)
	a.RenewLease(ctx)
	a.WatchPeers(ctx)
	if w, err := a.Route(ctx, moveRoom); err != nil || w.Kind != Elsewhere || w.Node != "c" {
		t.Fatalf("after c renewed, the events go to %+v, %v; want c", w, err)
	}
}

// TestAMoveToANodeJustUndrainedBegins: the mover's view of a peer's lease
// is read at most once per TTL (a listing between reads only notes that
// it changed), so it can still say draining after the peer's undrain
// landed. A move to it reads the lease before refusing. (Issue 28 §4:
// `cluster move --to n2` right after `cluster drain --off n2` was refused
// with "node n2 is draining" for 6 to 9 s.)
func TestAMoveToANodeJustUndrainedBegins(t *testing.T) {
	b := store.Metered(store.NewMem(), metrics.NewSet())
	a, c, clk := movePair(t, b)
	c.SetDraining(true)
	if err := c.WriteDraining(ctx, instantSleeper{}); err != nil {
		t.Fatal(err)
	}
	a.readPeer(ctx, "c")
	if _, err := a.BeginMove(ctx, moveRoom, "c"); !errors.Is(err, ErrNotTarget) {
		t.Fatalf("a move to a draining node: %v", err)
	}
	// c takes rooms again, its lease says so, and a's listing notes the
	// change without reading it (a read it made just now).
	clk.Advance(ttl / 10)
	c.SetDraining(false)
	if err := c.WriteDraining(ctx, instantSleeper{}); err != nil {
		t.Fatal(err)
	}
	if l, _ := readLease(t, b, "c"); l.Draining {
		t.Fatalf("c's lease after its undrain: %+v", l)
	}
	a.WatchPeers(ctx)
	gets := b.AllRequests(store.OpGet)
	m, err := a.BeginMove(ctx, moveRoom, "c")
	if err != nil {
		t.Fatalf("a move to a node whose lease says it takes rooms again: %v", err)
	}
	if m.To != "c" || m.Address != "c:8080" {
		t.Errorf("the move: %+v", m)
	}
	if got := b.AllRequests(store.OpGet) - gets; got != 1 {
		t.Errorf("the move read %d objects, want 1 (c's lease)", got)
	}
}
