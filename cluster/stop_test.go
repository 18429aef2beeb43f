package cluster

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/wasmkeep/wasmkeep/host/store"
	"github.com/wasmkeep/wasmkeep/internal/clock"
)

func TestStopReleasesEverythingThenTheLease(t *testing.T) {
	b := store.WithFaults(store.NewMem(), nil)
	n, clk := joined(t, b, "n1", 1)
	rooms := []Room{{"c", "a"}, {"c", "b"}}
	for _, r := range rooms {
		if _, err := n.Acquire(ctx, r); err != nil {
			t.Fatal(err)
		}
	}
	// Room b's release never lands: the released lease frees it.
	b.SetFaults(func(op store.Op) store.Fault {
		if op.Kind == store.OpPut && op.Key == RecordKey(rooms[1]) {
			return store.FailBefore(store.ErrUnknownOutcome)
		}
		return store.Fault{}
	})
	n.Stop(ctx, manualSleeper{clk})
	if !n.Ended() || n.Lost() || n.LeaseValid() {
		t.Fatalf("after Stop: %+v", n.Status())
	}
	if rec, _ := readRecord(t, b, rooms[0]); !rec.Free {
		t.Errorf("room a not released: %+v", rec)
	}
	if l, _ := readLease(t, b, "n1"); l.State != LeaseReleased {
		t.Errorf("lease %+v", l)
	}
	b.SetFaults(nil)
	peer, _ := joined(t, b, "p", 2)
	peer.WatchPeers(ctx)
	if _, err := peer.Acquire(ctx, rooms[1]); err != nil {
		t.Errorf("a peer cannot take the record a stopped node left: %v", err)
	}
}

func TestDrainingIsAnnouncedAndTakesNoRoom(t *testing.T) {
	b := store.NewMem()
	n, _ := joined(t, b, "n1", 1)
	room := Room{"c", "r"}
	h, err := n.Acquire(ctx, room)
	if err != nil {
		t.Fatal(err)
	}
	n.SetDraining(true)
	if _, err := n.Acquire(ctx, Room{"c", "other"}); !errors.Is(err, ErrDraining) {
		t.Errorf("acquire while draining: %v", err)
	}
	n.RenewLease(ctx) // at once, not at the next third of the ttl
	if l, _ := readLease(t, b, "n1"); !l.Draining {
		t.Error("the next renewal did not say the node drains")
	}
	if n.Drained() {
		t.Error("drained with a hold")
	}
	n.Release(ctx, h)
	if !n.Drained() {
		t.Errorf("not drained after its last release: %+v", n.Status())
	}
	n.SetDraining(false)
	if _, err := n.Acquire(ctx, room); err != nil {
		t.Errorf("acquire after the drain was called off: %v", err)
	}
}

// TestWriteDrainingWritesTheLeaseAtOnce: a drain, and its end, reach the
// bucket when WriteDraining returns, not at the lease duty's next renewal
// (up to TTL/3 later, the duty asleep until then): a peer asked to move a
// room to the node right after `cluster drain --off` reads the lease.
func TestWriteDrainingWritesTheLeaseAtOnce(t *testing.T) {
	mem := store.NewMem()
	b := store.WithFaults(mem, nil)
	n, clk := joined(t, b, "n1", 1)
	clk.Advance(ttl / 6) // half way to the next renewal
	before, _ := readLease(t, mem, "n1")
	valid := n.Status().ValidFor

	n.SetDraining(true)
	if err := n.WriteDraining(ctx, instantSleeper{}); err != nil {
		t.Fatal(err)
	}
	l, _ := readLease(t, mem, "n1")
	if !l.Draining || l.Renewal != before.Renewal+1 || l.Instance != n.Instance() {
		t.Fatalf("the lease after WriteDraining: %+v", l)
	}
	if got := n.Status().ValidFor; got <= valid {
		t.Errorf("the write out of turn did not renew the validity: %v, was %v", got, valid)
	}
	// Nothing changed since: nothing written.
	if err := n.WriteDraining(ctx, instantSleeper{}); err != nil {
		t.Fatal(err)
	}
	if l2, _ := readLease(t, mem, "n1"); l2.Renewal != l.Renewal {
		t.Errorf("a second WriteDraining wrote the lease again: %+v", l2)
	}
	// Undrained, and the write's answer lost: it reads the lease, finds
	// its write, and returns.
	n.SetDraining(false)
	b.SetFaults(faultOn(store.OpPut, LeaseKey("n1"), store.LoseAnswer()))
	if err := n.WriteDraining(ctx, instantSleeper{}); err != nil {
		t.Fatal(err)
	}
	if l, _ := readLease(t, mem, "n1"); l.Draining || l.Renewal != before.Renewal+2 {
		t.Errorf("the lease after an undrain whose answer was lost: %+v", l)
	}
	if n.Lost() || !n.LeaseValid() {
		t.Fatalf("the node after its undrain: lost %v, valid %v", n.Lost(), n.LeaseValid())
	}
	// A write that does not land is reported (the duty's next renewal
	// carries the flag).
	n.SetDraining(true)
	b.SetFaults(func(op store.Op) store.Fault {
		if op.Kind == store.OpPut {
			return store.FailBefore(errors.New("injected"))
		}
		return store.Fault{}
	})
	if err := n.WriteDraining(ctx, instantSleeper{}); err == nil {
		t.Error("WriteDraining reported a write that never landed")
	}
	b.SetFaults(nil)
	n.RenewLease(ctx)
	if l, _ := readLease(t, mem, "n1"); !l.Draining {
		t.Errorf("the duty's renewal after a failed WriteDraining: %+v", l)
	}
	n.Stop(ctx, manualSleeper{clk})
	if err := n.WriteDraining(ctx, instantSleeper{}); !errors.Is(err, ErrNotActive) {
		t.Errorf("WriteDraining on a stopped node: %v", err)
	}
}

// fencingSleeper fences its node's lease by hand at its nth sleep.
type fencingSleeper struct {
	t     *testing.T
	b     store.Bucket
	clk   interface{ Advance(time.Duration) }
	node  string
	n     int
	slept int
}

func (s *fencingSleeper) Sleep(_ context.Context, d time.Duration) error {
	s.slept++
	if s.slept == s.n {
		l, etag := readLease(s.t, s.b, s.node)
		l.State, l.Renewal, l.Nonce = LeaseFenced, l.Renewal+1, "by-hand"
		if _, err := s.b.Put(ctx, LeaseKey(s.node), EncodeLease(l), store.IfMatch(etag)); err != nil {
			s.t.Fatal(err)
		}
	}
	s.clk.Advance(d)
	return nil
}

func TestRunDrivesADutyUntilTheNodeEnds(t *testing.T) {
	b := store.NewMem()
	n, clk := testNode(t, b, "n1", 1)
	s := &fencingSleeper{t: t, b: b, clk: clk, node: "n1", n: 5}
	if err := n.Run(ctx, s, n.RenewLease); err != nil || !n.Lost() {
		t.Fatalf("Run returned %v, lost %v", err, n.Lost())
	}
	if l, _ := readLease(t, b, "n1"); l.Renewal != 6 {
		t.Errorf("renewal %d: want 5 writes of this node, then the fence", l.Renewal)
	}
	cancelled, cancel := context.WithCancel(ctx)
	cancel()
	m, _ := testNode(t, b, "n2", 2)
	if err := m.Run(cancelled, ClockSleeper(clock.NewManual(time.Unix(0, 0))), m.RenewLease); !errors.Is(err, context.Canceled) {
		t.Errorf("Run with a cancelled context: %v", err)
	}
}
