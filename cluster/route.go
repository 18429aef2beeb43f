package cluster

import (
	"cmp"
	"context"
	"errors"
	"hash/fnv"
	"slices"

	"github.com/wasmkeep/wasmkeep/host/store"
)

// WhereKind is where a room's events go.
type WhereKind uint8

// Where a room's events go.
const (
	// Here: this node holds the room, or may take it (Where.Seen is the
	// read Take writes over).
	Here WhereKind = iota
	// Elsewhere: another live node holds the room (or, from a draining
	// node, may take it): forward to Where.Node at Where.Address.
	Elsewhere
	// Wait: nobody may run the room yet: its holder is silent and not yet
	// fenced, unreachable, or this node's own lease is not valid.
	Wait
)

// Where is a routing decision for one room.
type Where struct {
	Kind          WhereKind
	Node, Address string
	// Seen is the record the decision was made on; for Here it is what
	// Take writes over, so a wake costs one GET and one conditional PUT.
	// Zero when the room is held here (no read was needed).
	Seen Seen
}

// Route decides where room's events go. A room held here costs no
// request; any other costs one GET of its record (and, for a holder the
// view knows nothing of, one of its lease).
//
// A decision for another node is kept for RouteCache and given again
// without a read while that node stays reachable and its lease live in
// this node's view.
func (n *Node) Route(ctx context.Context, room Room) (Where, error) {
	if n.Valid(n.holdOf(room)) {
		return Where{Kind: Here}, nil
	}
	if _, moving := n.Moving(room); !moving {
		if w, ok := n.cachedRoute(room); ok {
			return w, nil
		}
	}
	seen, err := n.Look(ctx, room)
	if err != nil {
		return Where{}, err
	}
	n.mu.Lock()
	if w, ok := n.whereMovingLocked(seen); ok {
		n.mu.Unlock()
		return w, nil
	}
	w, err := n.whereLocked(seen)
	n.mu.Unlock()
	if errors.Is(err, errUnknownOwner) {
		n.learnOwner(ctx, seen.Record.Node, seen.Record.Instance)
		n.mu.Lock()
		w, err = n.whereLocked(seen)
		n.mu.Unlock()
	}
	if errors.Is(err, errUnknownOwner) {
		return Where{Kind: Wait, Node: seen.Record.Node, Seen: seen}, nil
	}
	if err == nil && w.Kind == Elsewhere {
		n.mu.Lock()
		n.routes[room] = cachedRoute{where: Where{Kind: Elsewhere, Node: w.Node, Address: w.Address}, until: n.clock.Now() + int64(n.cfg.RouteCache)}
		n.mu.Unlock()
	}
	return w, err
}

// cachedRoute is a recent decision that sends a room to another node.
type cachedRoute struct {
	where Where
	until int64
}

// cachedRoute returns room's cached decision if it is fresh and its node
// still reachable and live in the view, and the room is not parked here
// (a decision made before this node took the room is older than its
// parked record).
func (n *Node) cachedRoute(room Room) (Where, bool) {
	n.mu.Lock()
	defer n.mu.Unlock()
	c, ok := n.routes[room]
	if !ok {
		return Where{}, false
	}
	p := n.peers[c.where.Node]
	_, parked := n.parked[room]
	if parked || n.clock.Now() >= c.until || n.unreachableLocked(c.where.Node) || p == nil || p.lease.State != LeaseLive {
		delete(n.routes, room)
		return Where{}, false
	}
	return c.where, true
}

// ForgetRoute drops room's cached decision, if any: the next Route
// reads the record. A node forwarded an event for a room its cache sends
// elsewhere may hold a stale decision: the forwarding node routed the
// room here on a read of its own.
func (n *Node) ForgetRoute(room Room) {
	n.mu.Lock()
	defer n.mu.Unlock()
	delete(n.routes, room)
}

func (n *Node) holdOf(room Room) Hold {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.holds[room]
}

// whereLocked decides on seen by the rules Take applies.
func (n *Node) whereLocked(seen Seen) (Where, error) {
	seen = n.parkedSeenLocked(seen)
	_, _, err := n.claimLocked(seen)
	var held *HeldError
	switch {
	case err == nil, errors.Is(err, ErrHeldHere), errors.Is(err, ErrBusy):
		return Where{Kind: Here, Seen: seen}, nil
	case errors.As(err, &held):
		if n.unreachableLocked(held.Node) {
			return Where{Kind: Wait, Node: held.Node, Seen: seen}, nil
		}
		return Where{Kind: Elsewhere, Node: held.Node, Address: held.Address, Seen: seen}, nil
	case errors.Is(err, ErrDraining):
		// Free to take, but not by a draining node: a live peer that
		// is not draining takes it, the same one for every request.
		if p, ok := n.takerLocked(seen.Room); ok {
			return Where{Kind: Elsewhere, Node: p.Node, Address: p.Address, Seen: seen}, nil
		}
		return Where{Kind: Wait, Seen: seen}, nil
	case errors.Is(err, ErrNotActive):
		return Where{Kind: Wait, Seen: seen}, nil
	}
	return Where{}, err
}

// takerLocked picks the live, reachable, not draining peer that takes a
// free room from a draining node, by a hash of the room.
func (n *Node) takerLocked(room Room) (Lease, bool) {
	var live []Lease
	for name, p := range n.peers {
		if p.known && p.lease.State == LeaseLive && !p.lease.Draining && p.lease.Address != "" && !n.unreachableLocked(name) {
			live = append(live, p.lease)
		}
	}
	if len(live) == 0 {
		return Lease{}, false
	}
	slices.SortFunc(live, func(a, b Lease) int { return cmp.Compare(a.Node, b.Node) })
	h := fnv.New32a()
	h.Write([]byte(room.String()))
	return live[int(h.Sum32()%uint32(len(live)))], true
}

// Unreachable notes that a forward to node could not connect, and reads
// its lease again: until the lease changes, rooms it holds route to Wait
// rather than to it (a dead node's rooms are free after the failover
// bound; meanwhile requests wait or are refused, not sent into a void).
func (n *Node) Unreachable(ctx context.Context, node string) {
	n.readPeer(ctx, node)
	n.mu.Lock()
	defer n.mu.Unlock()
	if p := n.peers[node]; p != nil {
		p.unreachable = p.etag
	}
}

func (n *Node) unreachableLocked(node string) bool {
	p := n.peers[node]
	return p != nil && p.unreachable != "" && p.unreachable == p.etag
}

// ErrNotPeer: FenceByHand was asked to fence a node whose lease is not
// in the bucket, or this node itself.
var ErrNotPeer = errors.New("cluster: no such peer")

// FenceByHand fences node at once, without waiting for its lease to go
// silent: an operator's word that its process is dead or stopped for good
// (a process that resumes within its own validity could still act until
// it runs out). It reads the lease and writes it fenced, If-Match on the
// version read, which frees every record naming that instance for any
// node to take. A lease already fenced or released is left as it is.
func (n *Node) FenceByHand(ctx context.Context, node string) (Lease, error) {
	if node == n.cfg.Node {
		return Lease{}, ErrNotPeer
	}
	body, etag, err := n.bucket.Get(ctx, LeaseKey(node))
	if errors.Is(err, store.ErrNotFound) {
		return Lease{}, errors.Join(ErrNotPeer, err)
	}
	if err != nil {
		return Lease{}, err // the bucket's failure, not the node's absence: try again
	}
	l, err := DecodeLease(body)
	if err != nil {
		return Lease{}, err
	}
	n.mu.Lock()
	n.notePeerLocked(node, etag, l, n.clock.Now())
	n.mu.Unlock()
	if l.State != LeaseLive {
		return l, nil
	}
	return n.writeFence(ctx, node, etag, l)
}

// writeFence writes node's lease l (read at etag) back fenced by this
// node, If-Match on etag, and notes it in the view.
func (n *Node) writeFence(ctx context.Context, node, etag string, l Lease) (Lease, error) {
	n.mu.Lock()
	l.State, l.FencedBy, l.Nonce = LeaseFenced, n.cfg.Node, n.nonceLocked()
	l.Renewal++
	n.mu.Unlock()
	newETag, err := n.bucket.Put(ctx, LeaseKey(node), EncodeLease(l), store.IfMatch(etag))
	n.mu.Lock()
	defer n.mu.Unlock()
	if err != nil {
		if p := n.peers[node]; p != nil {
			p.known = false // renewed meanwhile, fenced by another, or unanswered: read it again
		}
		return Lease{}, err
	}
	n.counts.Fences++
	n.notePeerLocked(node, newETag, l, n.clock.Now())
	return l, nil
}

// ReadPeer reads node's lease from the bucket now (one GET) into the view
// and returns it: for an operator's command about a node the view has not
// seen yet.
func (n *Node) ReadPeer(ctx context.Context, node string) (Lease, bool) {
	if node == n.cfg.Node {
		return Lease{}, false
	}
	return n.readPeer(ctx, node)
}

// PeerGone reports whether this node's view has node's lease fenced or
// released: whatever its process still does, it runs no room. It reads
// nothing (a forward waiting on a paused node asks it as it waits).
func (n *Node) PeerGone(node string) bool {
	n.mu.Lock()
	defer n.mu.Unlock()
	p := n.peers[node]
	return p != nil && p.known && p.lease.State != LeaseLive
}
