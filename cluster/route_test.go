package cluster

import (
	"errors"
	"testing"

	"github.com/VictoriaMetrics/metrics"

	"github.com/wasmkeep/wasmkeep/host/store"
)

func TestRouteFollowsTheRecord(t *testing.T) {
	b := store.Metered(store.NewMem(), metrics.NewSet())
	requests := func() uint64 { return b.AllRequests(store.OpGet) + b.AllRequests(store.OpPut) }
	a, aclk := joined(t, b, "a", 1)
	c, cclk := joined(t, b, "c", 2)
	c.WatchPeers(ctx)
	room := Room{"counter", "r"}

	// A room nobody ever held: here, read once, and Take writes over
	// that very read (one GET, one conditional PUT).
	before := requests()
	w, err := a.Route(ctx, room)
	if err != nil || w.Kind != Here || w.Seen.Exists {
		t.Fatalf("a fresh room routes to %+v, %v", w, err)
	}
	h, err := a.Take(ctx, w.Seen)
	if err != nil {
		t.Fatal(err)
	}
	if got := requests() - before; got != 2 {
		t.Errorf("a wake on a free room cost %d requests, want 2 (GET + PUT)", got)
	}
	before = requests()
	if w, _ := a.Route(ctx, room); w.Kind != Here {
		t.Errorf("a room held here routes to %+v", w)
	}
	if got := requests() - before; got != 0 {
		t.Errorf("routing a room held here cost %d requests", got)
	}

	// Another node sends it to the holder.
	w, err = c.Route(ctx, room)
	if err != nil || w.Kind != Elsewhere || w.Node != "a" || w.Address != "a:8080" {
		t.Fatalf("c routes a's room to %+v, %v", w, err)
	}
	// A holder that cannot be reached: wait, until its lease changes.
	c.Unreachable(ctx, "a")
	if w, _ := c.Route(ctx, room); w.Kind != Wait {
		t.Errorf("a room of an unreachable holder routes to %+v", w)
	}
	a.RenewLease(ctx) // not due yet: nothing written
	c.WatchPeers(ctx)
	if w, _ := c.Route(ctx, room); w.Kind != Wait {
		t.Errorf("unchanged lease: %+v", w)
	}
	aclk.Advance(ttl / 3) // a renews: reachable again, as far as c knows
	a.RenewLease(ctx)
	c.WatchPeers(ctx)
	if w, _ := c.Route(ctx, room); w.Kind != Elsewhere {
		t.Errorf("a renewed lease: %+v", w)
	}
	// Routed elsewhere again within RouteCache: no read.
	before = requests()
	if w, _ := c.Route(ctx, room); w.Kind != Elsewhere || w.Node != "a" {
		t.Errorf("a cached route: %+v", w)
	}
	if got := requests() - before; got != 0 {
		t.Errorf("a second route within RouteCache cost %d requests", got)
	}

	// Released: anyone takes it, once the cached route has run out.
	a.Release(ctx, h)
	if w, _ := c.Route(ctx, room); w.Kind != Elsewhere {
		t.Errorf("within RouteCache, c routes a released room to %+v", w)
	}
	cclk.Advance(ttl / 10)
	if w, _ := c.Route(ctx, room); w.Kind != Here || !w.Seen.Record.Free {
		t.Errorf("a released room routes c to %+v", w)
	}

	// A draining node sends a free room to a peer that is not draining.
	a.SetDraining(true)
	a.WatchPeers(ctx)
	if w, _ := a.Route(ctx, room); w.Kind != Elsewhere || w.Node != "c" {
		t.Errorf("a draining node routes a free room to %+v", w)
	}
}

func TestRouteWaitsForAnUnknownHolder(t *testing.T) {
	b := store.NewMem()
	a, _ := joined(t, b, "a", 1)
	room := Room{"counter", "r"}
	if _, err := a.Acquire(ctx, room); err != nil {
		t.Fatal(err)
	}
	// c knows a's lease only from the read the record sends it to.
	c, _ := joined(t, b, "c", 2)
	if w, err := c.Route(ctx, room); err != nil || w.Kind != Elsewhere || w.Node != "a" {
		t.Errorf("c routes to %+v, %v", w, err)
	}
	// A holder whose lease cannot be read is neither: wait.
	if err := b.Delete(ctx, LeaseKey("a"), ""); err != nil {
		t.Fatal(err)
	}
	d, _ := joined(t, b, "d", 3)
	if w, err := d.Route(ctx, room); err != nil || w.Kind != Wait {
		t.Errorf("a holder with no lease: %+v, %v", w, err)
	}
}

func TestFenceByHandFreesThePeersRoomsAtOnce(t *testing.T) {
	b := store.NewMem()
	a, _ := joined(t, b, "a", 1)
	c, _ := joined(t, b, "c", 2)
	room := Room{"counter", "r"}
	if _, err := a.Acquire(ctx, room); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Acquire(ctx, room); !errors.Is(err, ErrHeld) {
		t.Fatalf("c took a live peer's room: %v", err)
	}
	if _, err := c.FenceByHand(ctx, "c"); !errors.Is(err, ErrNotPeer) {
		t.Errorf("fencing itself: %v", err)
	}
	if _, err := c.FenceByHand(ctx, "nobody"); !errors.Is(err, ErrNotPeer) {
		t.Errorf("fencing a node with no lease: %v", err)
	}
	l, err := c.FenceByHand(ctx, "a")
	if err != nil || l.State != LeaseFenced || l.FencedBy != "c" {
		t.Fatalf("fence: %+v, %v", l, err)
	}
	if got, _ := readLease(t, b, "a"); got.State != LeaseFenced {
		t.Errorf("a's lease after the fence: %+v", got)
	}
	if w, _ := c.Route(ctx, room); w.Kind != Here {
		t.Errorf("a fenced peer's room routes to %+v", w)
	}
	if _, err := c.Acquire(ctx, room); err != nil {
		t.Errorf("c could not take the fenced peer's room: %v", err)
	}
	// The fenced node finds out at its next renewal and ends.
	a.lease.nextRenew = 0
	a.RenewLease(ctx)
	if !a.Lost() || a.LeaseValid() {
		t.Errorf("a after its fence: lost %v, valid %v", a.Lost(), a.LeaseValid())
	}
	// Fencing it again changes nothing.
	if l, err := c.FenceByHand(ctx, "a"); err != nil || l.State != LeaseFenced {
		t.Errorf("a second fence: %+v, %v", l, err)
	}
}

// TestAnIdlePeersLeaseIsReadOncePerTTL: between reads, a peer's renewals
// are only noted from the listing; its lease is read once per TTL, and a
// silent one still gets fenced.
func TestAnIdlePeersLeaseIsReadOncePerTTL(t *testing.T) {
	b := store.Metered(store.NewMem(), metrics.NewSet())
	a, aclk := joined(t, b, "a", 1)
	c, cclk := joined(t, b, "c", 2)
	c.WatchPeers(ctx) // reads a's lease: known from here on
	gets := b.AllRequests(store.OpGet)
	const periods = 12 // four TTLs of renewals
	for range periods {
		aclk.Advance(ttl / 3)
		cclk.Advance(ttl / 3)
		a.RenewLease(ctx)
		c.RenewLease(ctx)
		c.WatchPeers(ctx)
	}
	if got := b.AllRequests(store.OpGet) - gets; got < 3 || got > 5 {
		t.Errorf("c read a's lease %d times over 4 TTLs of renewals, want about 4", got)
	}
	if c.Status().Peers[0].Silent > ttl/3 {
		t.Errorf("a's renewals were not noted: silent for %v", c.Status().Peers[0].Silent)
	}
	// a goes silent: c fences it, with its latest renewal count.
	for range 5 {
		cclk.Advance(ttl / 3)
		c.RenewLease(ctx)
		c.WatchPeers(ctx)
	}
	l, _ := readLease(t, b, "a")
	if l.State != LeaseFenced || l.Renewal != periods+2 {
		t.Errorf("a's lease after its silence: %+v, want fenced at renewal %d", l, periods+2)
	}
}

// TestFenceByHandTellsABucketFailureFromNoSuchPeer: a lease that could
// not be read is not a lease that is not there. (The simulation's seed 9
// had a fence by hand refused as "no such peer" while the fencer's link
// to the bucket was cut.)
func TestFenceByHandTellsABucketFailureFromNoSuchPeer(t *testing.T) {
	b := store.WithFaults(store.NewMem(), nil)
	joined(t, b, "a", 1)
	c, _ := joined(t, b, "c", 2)
	b.SetFaults(faultOn(store.OpGet, LeaseKey("a"), store.FailBefore(store.ErrUnknownOutcome)))
	if _, err := c.FenceByHand(ctx, "a"); !errors.Is(err, store.ErrUnknownOutcome) || errors.Is(err, ErrNotPeer) {
		t.Errorf("a fence whose read was lost: %v; want the bucket's error, not ErrNotPeer", err)
	}
	if l, _ := readLease(t, b, "a"); l.State != LeaseLive {
		t.Errorf("a's lease after a fence whose read failed: %+v", l)
	}
	if _, err := c.FenceByHand(ctx, "nobody"); !errors.Is(err, ErrNotPeer) || !errors.Is(err, store.ErrNotFound) {
		t.Errorf("a fence of a node with no lease: %v", err)
	}
	if l, err := c.FenceByHand(ctx, "a"); err != nil || l.State != LeaseFenced {
		t.Errorf("the fence tried again: %+v, %v", l, err)
	}
}

// TestAnOlderReadAfterAListedChangeIsIgnored: a listing's answer can be
// older than a read's, and a change noted from it orders nothing. A read
// of that older version must not bring its process back nor end the
// newer one. (The simulation's seed 2987: a node took a room from a live
// process it had marked ended this way.)
func TestAnOlderReadAfterAListedChangeIsIgnored(t *testing.T) {
	b := store.NewMem()
	c, _ := joined(t, b, "c", 2)
	old := Lease{Node: "a", Instance: "old", Renewal: 5, TTL: ttl, State: LeaseLive}
	cur := Lease{Node: "a", Instance: "cur", Renewal: 8, TTL: ttl, State: LeaseLive}
	c.mu.Lock()
	c.notePeerLocked("a", "e8", cur, c.clock.Now()) // the view has read version 8
	p := c.peers["a"]
	p.etag = "e5" // a late listing noted version 5 as a change
	c.notePeerLocked("a", "e5", old, c.clock.Now())
	ended, lease := p.ended["cur"], p.lease
	c.mu.Unlock()
	if ended || lease.Instance != "cur" {
		t.Errorf("an older read after a listed change: cur ended %v, the view has %q", ended, lease.Instance)
	}
}

// TestADrainingNodeRoutesAHeldRoomToItsHolder: a draining node takes no
// room, but one that another live node holds goes to that node, as from
// any node; only a free room goes to the peer its hash picks. (Issue 28
// §4: after `cluster drain --wait n2`, n2 sent every request for a room it
// had handed over to the peer its hash picked, whatever node had taken the
// room since; that peer, holding nothing, answered the forwarded request
// 503 "the room moved" for as long as n2 drained.)
func TestADrainingNodeRoutesAHeldRoomToItsHolder(t *testing.T) {
	b := store.NewMem()
	a, aclk := joined(t, b, "a", 1)
	c, _ := joined(t, b, "c", 2)
	d, _ := joined(t, b, "d", 3)
	a.WatchPeers(ctx)
	room := Room{"counter", "r"}
	h, err := a.Acquire(ctx, room)
	if err != nil {
		t.Fatal(err)
	}
	a.SetDraining(true)
	a.Release(ctx, h) // handed over
	w, err := a.Route(ctx, room)
	if err != nil || w.Kind != Elsewhere || w.Node != "c" && w.Node != "d" {
		t.Fatalf("a draining node routes a free room to %+v, %v", w, err)
	}
	// The room's next event reached the peer the hash did not pick,
	// which took it.
	holder := map[string]*Node{"c": d, "d": c}[w.Node]
	if _, err := holder.Acquire(ctx, room); err != nil {
		t.Fatal(err)
	}
	aclk.Advance(ttl / 10) // the cached decision runs out
	if w, err := a.Route(ctx, room); err != nil || w.Kind != Elsewhere || w.Node != holder.Name() || w.Address != holder.Name()+":8080" {
		t.Errorf("a draining node routes a room %s holds to %+v, %v", holder.Name(), w, err)
	}

	// A holder whose lease the draining node has not read yet: it reads
	// it, and sends the room there.
	e, _ := joined(t, b, "e", 4)
	other := Room{"counter", "other"}
	if _, err := e.Acquire(ctx, other); err != nil {
		t.Fatal(err)
	}
	if w, err := a.Route(ctx, other); err != nil || w.Kind != Elsewhere || w.Node != "e" {
		t.Errorf("a draining node routes a room held by a node it has not listed to %+v, %v", w, err)
	}
	// Still, it takes nothing.
	if _, err := a.Acquire(ctx, Room{"counter", "free"}); !errors.Is(err, ErrDraining) {
		t.Errorf("a draining node's acquisition of a free room: %v", err)
	}
	if _, err := a.Acquire(ctx, room); !errors.Is(err, ErrHeld) {
		t.Errorf("a draining node's acquisition of a held room: %v", err)
	}
}
