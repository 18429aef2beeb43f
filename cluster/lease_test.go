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
