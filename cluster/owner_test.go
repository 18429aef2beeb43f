package cluster

import (
	"errors"
	"testing"
	"time"

	"github.com/wasmkeep/wasmkeep/host/store"
)

func TestGenerationsGrowAcrossHoldsAndReleases(t *testing.T) {
	b := store.NewMem()
	n, _ := joined(t, b, "n1", 1, func(c *Config) { c.FirstGeneration = 100 })
	room := Room{"chat", "lobby"}
	h, err := n.Acquire(ctx, room)
	if err != nil || h.Generation != 101 || !n.Valid(h) || !n.Acting(room) {
		t.Fatalf("first acquire: %+v, %v", h, err)
	}
	if rec, etag := readRecord(t, b, room); rec.Free || rec.Instance != n.Instance() || rec.Generation != 101 || etag != h.Version {
		t.Fatalf("record %+v at %s", rec, etag)
	}
	if _, err := n.Acquire(ctx, room); !errors.Is(err, ErrHeldHere) {
		t.Errorf("second acquire here: %v", err)
	}
	n.Release(ctx, h)
	if n.Valid(h) || n.Acting(room) {
		t.Error("valid after its release")
	}
	if rec, _ := readRecord(t, b, room); !rec.Free || rec.Generation != 101 {
		t.Fatalf("released record %+v: want free at the hold's generation", rec)
	}
	h2, err := n.Acquire(ctx, room)
	if err != nil || h2.Generation != 102 {
		t.Fatalf("acquire after the release: %+v, %v", h2, err)
	}
	if !n.Valid(h2) || n.Valid(h) {
		t.Error("the old hold is valid again, or the new one is not")
	}
}

func TestRoomsOfAFencedPeerAreTaken(t *testing.T) {
	b := store.NewMem()
	a, aclk := joined(t, b, "a", 1)
	n, nclk := joined(t, b, "b", 2)
	room := Room{"chat", "lobby"}
	h, err := a.Acquire(ctx, room)
	if err != nil {
		t.Fatal(err)
	}
	n.WatchPeers(ctx)
	var held *HeldError
	if _, err := n.Acquire(ctx, room); !errors.As(err, &held) || !held.Live || held.Address != "a:8080" || n.Counts().AcquireRefused != 1 {
		t.Fatalf("acquire of a live peer's room: %v", err)
	}
	for range 4 { // a is silent; b renews and watches
		nclk.Advance(ttl / 3)
		n.RenewLease(ctx)
		n.WatchPeers(ctx)
	}
	if l, _ := readLease(t, b, "a"); l.State != LeaseFenced {
		t.Fatalf("a not fenced: %+v", l)
	}
	h2, err := n.Acquire(ctx, room)
	if err != nil || h2.Generation != h.Generation+1 || !n.Acting(room) {
		t.Fatalf("acquire after the fence: %+v, %v", h2, err)
	}
	aclk.Advance(ttl / 3)
	a.RenewLease(ctx)
	if a.Valid(h) || a.Acting(room) || len(a.Status().Pending) != 0 {
		t.Errorf("the fenced node still holds (or would release) the room: %+v", a.Status())
	}
}

func TestRestartTakesBackItsPredecessorsRooms(t *testing.T) {
	b := store.NewMem()
	old, _ := joined(t, b, "a", 1)
	room := Room{"c", "r"}
	h, err := old.Acquire(ctx, room)
	if err != nil {
		t.Fatal(err)
	}
	n, clk := testNode(t, b, "a", 2)
	n.RenewLease(ctx)
	clk.Advance(ttl + ttl/5)
	n.RenewLease(ctx)
	if h2, err := n.Acquire(ctx, room); err != nil || h2.Generation != h.Generation+1 {
		t.Fatalf("acquire of the predecessor's room: %+v, %v", h2, err)
	}
}

func TestAcquireRefusals(t *testing.T) {
	b := store.NewMem()
	room := Room{"c", "r"}
	n, _ := testNode(t, b, "n1", 1)
	if _, err := n.Acquire(ctx, room); !errors.Is(err, ErrNotActive) {
		t.Errorf("acquire before joining: %v", err)
	}
	n.RenewLease(ctx)

	// A record naming an instance this node has not seen: it reads the
	// lease, finds the holder alive, and forwards.
	peer, _ := joined(t, b, "p", 2)
	if _, err := peer.Acquire(ctx, room); err != nil {
		t.Fatal(err)
	}
	var held *HeldError
	if _, err := n.Acquire(ctx, room); !errors.As(err, &held) || !held.Live || held.Node != "p" || held.Address != "p:8080" {
		t.Fatalf("acquire of a peer's room: %v", err)
	}
	// A lease that has since named another process shows the record's
	// instance dead.
	next, _ := testNode(t, b, "p", 3)
	l, etag := readLease(t, b, "p")
	l.State = LeaseReleased
	if _, err := b.Put(ctx, LeaseKey("p"), EncodeLease(l), store.IfMatch(etag)); err != nil {
		t.Fatal(err)
	}
	next.RenewLease(ctx)
	fresh, _ := joined(t, b, "n2", 4)
	if h, err := fresh.Acquire(ctx, room); err != nil || h.Generation != 2 {
		t.Errorf("acquire of a record naming a process replaced since: %+v, %v", h, err)
	}
	// Undecodable records prove nothing.
	bad := Room{"c", "bad"}
	if _, err := b.Put(ctx, RecordKey(bad), []byte("?"), store.Cond{}); err != nil {
		t.Fatal(err)
	}
	if _, err := n.Acquire(ctx, bad); !errors.Is(err, ErrBadObject) {
		t.Errorf("acquire of an undecodable record: %v", err)
	}
}

func TestBrokenAcquireLiveTakesALivePeersRoom(t *testing.T) {
	b := store.NewMem()
	room := Room{"c", "r"}
	peer, _ := joined(t, b, "p", 1)
	if _, err := peer.Acquire(ctx, room); err != nil {
		t.Fatal(err)
	}
	n, _ := joined(t, b, "n", 2, func(c *Config) { c.Broken.AcquireLive = true })
	if _, err := n.Acquire(ctx, room); err != nil || !peer.Acting(room) || !n.Acting(room) {
		t.Fatalf("the broken variant did not take the room: %v", err)
	}
}

func TestReleaseThatFailsIsRetried(t *testing.T) {
	room := Room{"c", "r"}
	for _, tc := range []struct {
		name  string
		fault store.Fault
		// moot: the retry finds the record moved on (the lost answer's
		// write had landed).
		moot bool
	}{
		{"lost request", store.FailBefore(store.ErrUnknownOutcome), false},
		{"conflict", store.FailBefore(store.ErrConflict), false},
		{"lost answer", store.LoseAnswer(), true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := store.WithFaults(store.NewMem(), nil)
			n, clk := joined(t, b, "n1", 1)
			h, err := n.Acquire(ctx, room)
			if err != nil {
				t.Fatal(err)
			}
			b.SetFaults(faultOn(store.OpPut, RecordKey(room), tc.fault))
			n.Release(ctx, h)
			if n.Valid(h) || n.Acting(room) {
				t.Error("acting after the release")
			}
			if p := n.Status().Pending; len(p) != 1 || p[0] != h {
				t.Fatalf("pending %+v", p)
			}
			if !n.Accounts(room, h.Version, "") || n.Drained() {
				t.Error("the pending release does not account for its record")
			}
			d := n.Settle(ctx)
			if len(n.Status().Pending) != 1 || d <= 0 {
				t.Fatalf("retried at once: wait %v, %+v", d, n.Status())
			}
			clk.Advance(d)
			n.Settle(ctx)
			if p := n.Status().Pending; len(p) != 0 || !n.Drained() {
				t.Fatalf("still pending after the retry: %+v", p)
			}
			if rec, _ := readRecord(t, b, room); !rec.Free || rec.Generation != h.Generation {
				t.Errorf("record %+v", rec)
			}
			if c := n.Counts(); (c.ReleaseMoot == 1) != tc.moot || c.ReleaseRetries != 1 {
				t.Errorf("counts %+v", c)
			}
		})
	}
}

func TestBrokenReleaseWithoutIfMatchFreesAnotherHold(t *testing.T) {
	for _, broken := range []bool{false, true} {
		b := store.WithFaults(store.NewMem(), nil)
		room := Room{"c", "r"}
		n, clk := joined(t, b, "n1", 1, func(c *Config) { c.Broken.ReleaseUnconditional = broken })
		h, err := n.Acquire(ctx, room)
		if err != nil {
			t.Fatal(err)
		}
		b.SetFaults(faultOn(store.OpPut, RecordKey(room), store.FailBefore(store.ErrUnknownOutcome)))
		n.Release(ctx, h)
		// Another hold takes the record meanwhile (as after a fence).
		rec, etag := readRecord(t, b, room)
		other := EncodeRecord(Record{Node: "p", Instance: "x", Generation: rec.Generation + 1, Nonce: "n"})
		if _, err := b.Put(ctx, RecordKey(room), other, store.IfMatch(etag)); err != nil {
			t.Fatal(err)
		}
		clk.Advance(n.Settle(ctx))
		n.Settle(ctx)
		if rec, _ := readRecord(t, b, room); rec.Free != broken {
			t.Errorf("broken=%v: after the retried release the record is %+v", broken, rec)
		}
	}
}

func TestLapseTurnsHoldsIntoPendingReleases(t *testing.T) {
	b := store.NewMem()
	room := Room{"c", "r"}
	n, clk := joined(t, b, "n1", 1)
	h, err := n.Acquire(ctx, room)
	if err != nil {
		t.Fatal(err)
	}
	clk.Advance(ttl - ttl/10) // no renewal: the lease runs out
	if n.Acting(room) || n.Valid(h) {
		t.Fatal("acting after the lease ran out")
	}
	if s := n.Status(); len(s.Holds) != 0 || len(s.Pending) != 1 || n.Counts().Lapses != 1 {
		t.Fatalf("after the lapse: %+v", s)
	}
	n.Settle(ctx)
	if rec, _ := readRecord(t, b, room); !rec.Free {
		t.Errorf("the lapsed hold's record was not released: %+v", rec)
	}
	// The lease comes back; the old hold does not.
	n.RenewLease(ctx)
	if !n.LeaseValid() || n.Valid(h) {
		t.Errorf("after renewing: lease valid %v, old hold valid %v", n.LeaseValid(), n.Valid(h))
	}
}

func TestUnansweredAcquireIsResolved(t *testing.T) {
	room := Room{"c", "r"}
	t.Run("landed", func(t *testing.T) {
		b := store.WithFaults(store.NewMem(), nil)
		n, clk := joined(t, b, "n1", 1)
		b.SetFaults(faultOn(store.OpPut, RecordKey(room), store.LoseAnswer()))
		if _, err := n.Acquire(ctx, room); !errors.Is(err, ErrUnknown) || n.Acting(room) {
			t.Fatalf("acquire with a lost answer: %v", err)
		}
		rec, etag := readRecord(t, b, room)
		if !n.Accounts(room, etag, rec.Nonce) || n.Drained() {
			t.Fatal("the unresolved acquisition does not account for its record")
		}
		clk.Advance(n.Settle(ctx))
		n.Settle(ctx) // reads it: landed, so released
		n.Settle(ctx)
		if rec, _ := readRecord(t, b, room); !rec.Free || rec.Generation != 1 {
			t.Errorf("record %+v: want free at generation 1", rec)
		}
		if c := n.Counts(); c.ResolvedLanded != 1 || c.Released != 1 || !n.Drained() {
			t.Errorf("counts %+v", c)
		}
	})
	for _, broken := range []bool{false, true} {
		name := map[bool]string{false: "lands after an unchanged read", true: "broken: ends at the first unchanged read"}[broken]
		t.Run(name, func(t *testing.T) {
			late := &lateBucket{Bucket: store.NewMem(), key: RecordKey(room)}
			n, clk := joined(t, late, "n1", 1, func(c *Config) { c.Broken.ResolverEndsUnchanged = broken })
			if _, err := n.Acquire(ctx, room); !errors.Is(err, ErrUnknown) {
				t.Fatalf("acquire: %v", err)
			}
			clk.Advance(n.Settle(ctx))
			n.Settle(ctx) // reads: no record yet
			late.land(t)
			rec, etag := readRecord(t, late, room)
			if got := n.Accounts(room, etag, rec.Nonce); got == broken {
				t.Fatalf("accounts for the late write: %v", got)
			}
			if broken {
				return // the record names this node and nothing here will release it: a leak
			}
			for range 5 {
				n.RenewLease(ctx)
				clk.Advance(n.Settle(ctx))
			}
			if rec, _ := readRecord(t, late, room); !rec.Free {
				t.Errorf("record %+v after the late landing was resolved", rec)
			}
		})
	}
	t.Run("never lands", func(t *testing.T) {
		b := store.WithFaults(store.NewMem(), nil)
		n, clk := joined(t, b, "n1", 1)
		b.SetFaults(faultOn(store.OpPut, RecordKey(room), store.FailBefore(store.ErrUnknownOutcome)))
		if _, err := n.Acquire(ctx, room); !errors.Is(err, ErrUnknown) {
			t.Fatalf("acquire: %v", err)
		}
		start := clk.Now()
		for len(n.Status().Unresolved) > 0 {
			n.RenewLease(ctx)
			clk.Advance(n.Settle(ctx))
			if time.Duration(clk.Now()-start) > 3*ttl {
				t.Fatal("still unresolved after 3 ttl")
			}
		}
		if waited := time.Duration(clk.Now() - start); waited < 2*ttl {
			t.Errorf("ended after %v of an unchanged record, under the window of %v", waited, 2*ttl)
		}
		if c := n.Counts(); c.ResolvedExpired != 1 {
			t.Errorf("counts %+v", c)
		}
	})
	t.Run("moved", func(t *testing.T) {
		late := &lateBucket{Bucket: store.NewMem(), key: RecordKey(room)}
		n, clk := joined(t, late, "n1", 1)
		if _, err := n.Acquire(ctx, room); !errors.Is(err, ErrUnknown) {
			t.Fatal(err)
		}
		peer, _ := joined(t, late, "p", 2)
		if _, err := peer.Acquire(ctx, room); err != nil {
			t.Fatal(err)
		}
		clk.Advance(n.Settle(ctx))
		n.Settle(ctx)
		if c := n.Counts(); c.ResolvedMoved != 1 || len(n.Status().Unresolved) != 0 {
			t.Errorf("counts %+v", c)
		}
		if err := late.held(); !errors.Is(err, store.ErrPrecondition) {
			t.Errorf("the late create landed over another's record: %v", err)
		}
	})
}
