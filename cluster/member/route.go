package member

import (
	"context"
	"errors"
	"time"

	"github.com/wasmkeep/wasmkeep/cluster"
)

// Routing an event (docs/cluster.md, "Routing"). An event lands on any
// node, which routes it (Dispatch):
//
//   - Here: the node holds the room, or may take it: the host serves it
//     (its wake acquires the room over the routing read: Acquire).
//   - Elsewhere: the room's sockets here, if any, are not its own any
//     more and close (unless this node is moving the room away: the move
//     closes them once another node holds it), and the event is
//     forwarded to that node. A forward that cannot connect tells the
//     core (Unreachable) and routes once more; a second Elsewhere to the
//     same node, or after a second dial, is refused. An event forwarded
//     here is never forwarded again (the hop rule): it is refused as
//     moved, and its client retries.
//   - Wait: nobody may run the room yet (its node is silent and not yet
//     fenced, or this node's lease is not valid): the event polls the
//     route (50 ms doubling to 500 ms) for up to the failover wait, then
//     is refused. A forwarded event does not wait: its first node did.

// The failover wait polls the route from failoverPollFirst, doubling up
// to failoverPollMax: soon at first, for a room whose owner is being
// fenced right now, then gently, so that many waiting events cost a few
// reads a second each.
const (
	failoverPollFirst = 50 * time.Millisecond
	failoverPollMax   = 500 * time.Millisecond
)

// The bounds a Forward keeps: a forward that cannot connect within
// ForwardDialTimeout is unreachable, and one whose node answers nothing
// within ForwardHeaderTimeout fails. A server's forwarder has the same
// (host/server's DefaultForwardDialTimeout and
// DefaultForwardHeaderTimeout; clusternode's tests hold them equal), and
// the simulation's network keeps them.
const (
	// ForwardDialTimeout: nodes share a private network, where a
	// connection takes milliseconds; one that takes longer is to a node
	// that is gone.
	ForwardDialTimeout = 2 * time.Second
	// ForwardHeaderTimeout is above what a room takes under its own
	// bounds (a wake's wait for a place, 5 s, then an event's CPU time,
	// 10 s).
	ForwardHeaderTimeout = 30 * time.Second
)

// seenFresh bounds how long a routing read may stand in for the read of
// the acquisition that follows it: within it, a wake costs one GET and
// one conditional PUT; past it, the acquisition reads again.
const seenFresh = 2 * time.Second

// Outcome is what became of an event Dispatch routed.
type Outcome uint8

// The outcomes of Dispatch.
const (
	// Serve: the room is here, or may be: the caller serves the event.
	Serve Outcome = iota
	// Forwarded: the event went to another node, whose answer the
	// forward function passed on.
	Forwarded
	// Refused: nobody serves the event now; the client retries
	// (Decision.Refusal says why).
	Refused
)

// Refusal is why an event was refused.
type Refusal uint8

// The refusals of Dispatch.
const (
	// RefusedWait: nobody could run the room within the failover wait.
	RefusedWait Refusal = iota + 1
	// RefusedInactive: this node's lease is not valid.
	RefusedInactive
	// RefusedMoved: forwarded here, but the room is not here (the hop
	// rule).
	RefusedMoved
	// RefusedUnreachable: the room's node could not be reached, twice.
	RefusedUnreachable
	// RefusedBucket: the room's record could not be read (Err).
	RefusedBucket
)

// Decision is what Dispatch did with an event.
type Decision struct {
	Outcome Outcome
	Refusal Refusal
	// Node is the node the event was last routed to (Forwarded, and the
	// unreachable node of RefusedUnreachable).
	Node string
	Err  error
}

// Forward sends an event to node, at address, and passes its answer on.
// It reports unreachable if it could not connect at all (nothing was
// sent, nothing answered): the member routes once more.
type Forward func(ctx context.Context, node, address string) (unreachable bool)

// Dispatch routes an event for room that landed here: forwarded says it
// was forwarded here by another node. Forwards go through forward.
func (m *Member) Dispatch(ctx context.Context, room cluster.Room, forwarded bool, forward Forward) Decision {
	return m.dispatch(ctx, room, forwarded, 0, forward)
}

// dispatch is Dispatch with a deadline (on the member's clock; 0: none)
// past which the event waits no more for a room's node.
func (m *Member) dispatch(ctx context.Context, room cluster.Room, forwarded bool, until int64, forward Forward) Decision {
	where, err := m.Route(ctx, room)
	waited, redialed, reread := false, false, false
	for {
		if err != nil {
			return Decision{Outcome: Refused, Refusal: RefusedBucket, Err: err}
		}
		switch where.Kind {
		case cluster.Here:
			return Decision{Outcome: Serve}
		case cluster.Wait:
			if forwarded || waited {
				if !m.core.LeaseValid() {
					return Decision{Outcome: Refused, Refusal: RefusedInactive}
				}
				return Decision{Outcome: Refused, Refusal: RefusedWait}
			}
			waited = true
			where, err = m.awaitRoute(ctx, room, until)
		case cluster.Elsewhere:
			if forwarded && !m.cfg.Broken.Bounce && !reread {
				// The forwarding node routed the room here on a read
				// newer than a decision this node may have cached:
				// read the record once before acting on it (a room
				// handed over by a drain or a move is then free, or
				// on its new node).
				reread = true
				m.core.ForgetRoute(room)
				where, err = m.Route(ctx, room)
				continue
			}
			m.observe(Event{Kind: Routed, Room: room, Node: where.Node})
			// The room runs elsewhere (or, from a draining node, is taken
			// elsewhere): its sockets here are not its own any more.
			m.closeForeignSockets(room, "elsewhere", "the room runs on "+where.Node)
			if forwarded && !m.cfg.Broken.Bounce {
				return Decision{Outcome: Refused, Refusal: RefusedMoved, Node: where.Node}
			}
			if !forward(ctx, where.Node, where.Address) {
				return Decision{Outcome: Forwarded, Node: where.Node}
			}
			m.core.Unreachable(ctx, where.Node)
			gone := where.Node
			where, err = m.Route(ctx, room)
			if err == nil && where.Kind == cluster.Elsewhere && (redialed || where.Node == gone) {
				return Decision{Outcome: Refused, Refusal: RefusedUnreachable, Node: gone}
			}
			redialed = true
		}
	}
}

// awaitRoute polls where room runs, with back-off, until it is here or
// elsewhere, or the failover wait (or until, if sooner and not 0) has
// passed (Wait then).
func (m *Member) awaitRoute(ctx context.Context, room cluster.Room, until int64) (cluster.Where, error) {
	deadline := m.cfg.Clock.Now() + int64(m.cfg.FailoverWait)
	if until != 0 {
		deadline = min(deadline, until)
	}
	for delay := failoverPollFirst; ; delay = min(2*delay, failoverPollMax) {
		left := time.Duration(deadline - m.cfg.Clock.Now())
		if left <= 0 {
			m.observe(Event{Kind: Waited, Room: room, Why: "timeout"})
			return cluster.Where{Kind: cluster.Wait}, nil
		}
		if err := m.cfg.Sleeper.Sleep(ctx, min(delay, left)); err != nil {
			return cluster.Where{}, err
		}
		where, err := m.Route(ctx, room)
		switch {
		case err != nil:
			return where, err
		case where.Kind == cluster.Here:
			m.observe(Event{Kind: Waited, Room: room, Why: "here"})
			return where, nil
		case where.Kind == cluster.Elsewhere:
			m.observe(Event{Kind: Waited, Room: room, Why: "elsewhere"})
			return where, nil
		}
	}
}

// Route says where room's events go, once, without waiting. An event
// for a room parked on a draining node first releases its record, before
// the event goes to a peer, which would find it naming this live node
// (seed 000 §3). A Here decided on a read keeps that read for the
// acquisition that follows (Acquire).
func (m *Member) Route(ctx context.Context, room cluster.Room) (cluster.Where, error) {
	if m.draining() {
		if parked, _ := m.core.ReleaseParked(ctx, room); parked {
			m.observe(Event{Kind: ParkedReleased, Room: room, Why: "drain"})
		}
	}
	w, err := m.core.Route(ctx, room)
	if err == nil && w.Kind == cluster.Here && w.Seen.Room == room {
		m.keepSeen(w.Seen)
	}
	return w, err
}

// maxSeen bounds the routing reads kept for the acquisitions that follow
// them. Routing comes before a request's class is known, so requests for
// rooms that never wake (a class that does not exist, names drawn at
// random) would otherwise grow the map without end; past the bound a
// read is not kept, and the acquisition reads again.
const maxSeen = 10000

// keepSeen keeps a routing read for the acquisition that follows it,
// within maxSeen: when the map is full, the reads older than seenFresh go
// first (at most one sweep of them every seenFresh/4).
func (m *Member) keepSeen(seen cluster.Seen) {
	now := m.cfg.Clock.Now()
	m.mu.Lock()
	defer m.mu.Unlock()
	if len(m.seen) >= maxSeen && now-m.seenPruned >= int64(seenFresh/4) {
		m.seenPruned = now
		for r, s := range m.seen {
			if now-s.at >= int64(seenFresh) {
				delete(m.seen, r)
			}
		}
	}
	if _, kept := m.seen[seen.Room]; kept || len(m.seen) < maxSeen {
		m.seen[seen.Room] = seenAt{seen, now}
	}
}

// Acquire takes room for this node: over the routing read when it is
// fresh, else with a read of its own. A take that finds another node
// holding the room closes the room's sockets here: they belong there.
func (m *Member) Acquire(ctx context.Context, room cluster.Room) (cluster.Hold, error) {
	m.mu.Lock()
	s, ok := m.seen[room]
	delete(m.seen, room)
	m.mu.Unlock()
	var h cluster.Hold
	var err error
	if ok && m.cfg.Clock.Now()-s.at < int64(seenFresh) {
		h, err = m.core.Take(ctx, s.seen)
		if errors.Is(err, cluster.ErrContended) {
			h, err = m.core.Acquire(ctx, room) // the read went stale: once more
		}
	} else {
		h, err = m.core.Acquire(ctx, room)
	}
	m.observe(Event{Kind: Acquired, Room: room, Err: err})
	var held *cluster.HeldError
	if errors.As(err, &held) {
		m.closeForeignSockets(room, "elsewhere", "the room is held by "+held.Node)
	}
	return h, err
}

// closeForeignSockets closes room's sockets here, if it has any and this
// node neither parks, holds nor moves it: they belong to the node that
// runs it.
func (m *Member) closeForeignSockets(room cluster.Room, why, reason string) {
	if m.rooms.Sockets(room) == 0 || m.keepsSockets(room) {
		return
	}
	m.closeOwnerSockets([]cluster.Room{room}, why, reason)
}

// keepsSockets reports whether this node keeps room's sockets whatever
// its record says: it parks the room, acts on it, or is moving it away (a
// move closes them once another node holds the room, and a move taken a
// step now may have ended with its sockets not closed yet).
func (m *Member) keepsSockets(room cluster.Room) bool {
	if _, parked := m.core.Parked(room); parked || m.core.Acting(room) {
		return true
	}
	if _, moving := m.core.Moving(room); moving {
		return true
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.advancing[room]
}
