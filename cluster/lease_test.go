package cluster

import (
	"testing"
	"time"

	"github.com/wasmkeep/wasmkeep/host/store"
)

func TestLeaseIsCreatedAndRenewedEveryThirdOfTTL(t *testing.T) {
	b := store.NewMem()
	n, clk := testNode(t, b, "n1", 1)
	if n.LeaseValid() {
		t.Fatal("valid before joining")
	}
	if d := n.RenewLease(ctx); d != ttl/3 {
		t.Errorf("first wait %v, want %v", d, ttl/3)
	}
	l, etag := readLease(t, b, "n1")
	if l.Instance != n.Instance() || l.Renewal != 1 || l.TTL != ttl || l.Address != "n1:8080" || l.State != LeaseLive {
		t.Fatalf("lease %+v", l)
	}
	clk.Advance(ttl/3 - time.Millisecond)
	if d := n.RenewLease(ctx); d != time.Millisecond {
		t.Errorf("renewal early: wait %v", d)
	}
	if _, again := readLease(t, b, "n1"); again != etag {
		t.Error("renewed before ttl/3")
	}
	clk.Advance(time.Millisecond)
	n.RenewLease(ctx)
	l2, etag2 := readLease(t, b, "n1")
	if l2.Renewal != 2 || etag2 == etag || l2.Nonce == l.Nonce {
		t.Errorf("after ttl/3: %+v at %s (was %s)", l2, etag2, etag)
	}
	// Valid until the renewal's send + ttl − safety, and not after.
	clk.Advance(ttl - ttl/10 - time.Nanosecond)
	if !n.LeaseValid() {
		t.Error("invalid before send + ttl − safety")
	}
	clk.Advance(time.Nanosecond)
	if n.LeaseValid() {
		t.Error("valid at send + ttl − safety")
	}
}

func TestValidityCountsFromTheSendTime(t *testing.T) {
	for _, broken := range []bool{false, true} {
		mem := store.NewMem()
		slow := &slowBucket{Bucket: mem}
		n, clk := testNode(t, slow, "n1", 1, func(c *Config) { c.Broken.ValidityFromAnswer = broken })
		slow.clk, slow.delay = clk, 4*time.Second
		n.RenewLease(ctx) // sent at 0, answered at 4 s
		clk.Advance(ttl - ttl/10 - 4*time.Second)
		if got := n.LeaseValid(); got != broken {
			t.Errorf("broken=%v: valid at send + ttl − safety: %v", broken, got)
		}
	}
}

func TestLostRenewalAnswerIsRecognizedByItsNonce(t *testing.T) {
	b := store.WithFaults(store.NewMem(), nil)
	n, clk := joined(t, b, "n1", 1)
	clk.Advance(ttl / 3)
	b.SetFaults(faultOn(store.OpPut, LeaseKey("n1"), store.LoseAnswer()))
	if d := n.RenewLease(ctx); d != ttl/20 {
		t.Errorf("wait after a lost answer %v", d)
	}
	clk.Advance(ttl / 20)
	n.RenewLease(ctx) // reads, finds its own write, renews
	if n.Lost() || !n.LeaseValid() {
		t.Fatalf("lost its lease to its own write: %+v", n.Counts())
	}
	if l, _ := readLease(t, b, "n1"); l.Renewal != 3 {
		t.Errorf("renewal %d after a lost answer and a renewal, want 3", l.Renewal)
	}
	if c := n.Counts(); c.Renewals != 3 || c.RenewalsFailed != 1 {
		t.Errorf("counts %+v: want 3 renewals (the join, the lost one acknowledged by the read, the next) and 1 failure", c)
	}
	clk.Advance(ttl - ttl/10 - time.Nanosecond)
	if !n.LeaseValid() {
		t.Error("the renewal after the lost answer did not extend the lease")
	}
}

func TestSilentPeerIsFenced(t *testing.T) {
	b := store.NewMem()
	a, aclk := joined(t, b, "a", 1)
	n, nclk := joined(t, b, "b", 2)
	n.WatchPeers(ctx)

	// A renewal resets the watch.
	nclk.Advance(ttl)
	aclk.Advance(ttl / 3)
	a.RenewLease(ctx)
	n.RenewLease(ctx)
	n.WatchPeers(ctx)
	nclk.Advance(ttl + ttl/5 - time.Millisecond)
	n.RenewLease(ctx) // a node fences only while its own lease is valid
	n.WatchPeers(ctx)
	if l, _ := readLease(t, b, "a"); l.State != LeaseLive {
		t.Fatalf("fenced %v after the renewal, under ttl + grace", ttl+ttl/5-time.Millisecond)
	}
	nclk.Advance(time.Millisecond)
	n.WatchPeers(ctx)
	l, _ := readLease(t, b, "a")
	if l.State != LeaseFenced || l.FencedBy != "b" || l.Instance != a.Instance() || l.Renewal != 3 {
		t.Fatalf("not fenced after ttl + grace of silence: %+v", l)
	}
	if s := n.Status(); len(s.Peers) != 1 || s.Peers[0].State != LeaseFenced || n.Counts().Fences != 1 {
		t.Errorf("the fencer's view: %+v", s.Peers)
	}

	// The fenced node finds out at its next renewal and acts no more.
	aclk.Advance(ttl / 3)
	a.RenewLease(ctx)
	if !a.Lost() || !a.Ended() || a.LeaseValid() {
		t.Errorf("the fenced node goes on: %+v", a.Status())
	}

	// A node whose own lease is not valid fences nobody.
	c, cclk := joined(t, b, "c", 3)
	c.WatchPeers(ctx)
	cclk.Advance(2 * ttl)
	c.WatchPeers(ctx)
	if l, _ := readLease(t, b, "b"); l.State != LeaseLive {
		t.Errorf("fenced by a node whose lease ran out: %+v", l)
	}
}

func TestAnOlderReadOfAPeersLeaseIsIgnored(t *testing.T) {
	n, _ := joined(t, store.NewMem(), "n", 1)
	n.mu.Lock()
	defer n.mu.Unlock()
	// The read of the newer lease answers first, the older one after.
	n.notePeerLocked("p", "e2", Lease{Node: "p", Instance: "new", Renewal: 5, TTL: ttl}, 0)
	n.notePeerLocked("p", "e1", Lease{Node: "p", Instance: "old", Renewal: 4, TTL: ttl}, 1)
	if n.deadLocked("p", "new") {
		t.Error("an older read made the current process dead")
	}
	if _, live := n.liveLocked("p", "new"); !live {
		t.Error("the view lost the current process")
	}
	if !n.deadLocked("p", "old") {
		t.Error("the replaced process is not dead")
	}
}

func TestRestartTakesOverTheLeaseOfItsPredecessor(t *testing.T) {
	b := store.NewMem()
	joined(t, b, "a", 1) // then crashes: nothing renews its lease any more
	n, clk := testNode(t, b, "a", 2)
	n.RenewLease(ctx)
	clk.Advance(ttl + ttl/5 - time.Millisecond)
	n.RenewLease(ctx)
	if n.LeaseValid() {
		t.Fatal("took the lease over before ttl + grace of silence")
	}
	clk.Advance(time.Millisecond)
	n.RenewLease(ctx)
	if !n.LeaseValid() {
		t.Fatalf("did not take the lease over: %+v", n.Status())
	}
	if l, _ := readLease(t, b, "a"); l.Instance != n.Instance() || l.Renewal != 2 {
		t.Fatalf("lease %+v: want this instance at the predecessor's renewal + 1", l)
	}

	// A fenced or released predecessor is taken over at once.
	for _, state := range []LeaseState{LeaseFenced, LeaseReleased} {
		name := "p" + state.String()
		joined(t, b, name, 3)
		l, etag := readLease(t, b, name)
		l.State, l.Nonce = state, "by-hand"
		if _, err := b.Put(ctx, LeaseKey(name), EncodeLease(l), store.IfMatch(etag)); err != nil {
			t.Fatal(err)
		}
		next, _ := testNode(t, b, name, 4)
		next.RenewLease(ctx)
		if !next.LeaseValid() {
			t.Errorf("did not take over a %s predecessor's lease at once: %+v", state, next.Status())
		}
	}
}

func TestRestartWaitsBehindALiveTwin(t *testing.T) {
	b := store.NewMem()
	twin, tclk := joined(t, b, "a", 1)
	n, clk := testNode(t, b, "a", 2)
	for range 10 {
		n.RenewLease(ctx)
		clk.Advance(ttl / 3)
		tclk.Advance(ttl / 3)
		twin.RenewLease(ctx)
	}
	if n.LeaseValid() || !twin.LeaseValid() {
		t.Errorf("a second process of a node took the lease of a live one")
	}
}
