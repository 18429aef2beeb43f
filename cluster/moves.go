package cluster

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"
)

// A move hands one room from this node to a named peer (an operator's
// `cluster move`). The owner records it first (BeginMove): from then on
// the room takes no hold and parks nothing here, and Route sends its
// events to the target, so nothing wakes it back here while it goes. The
// owner then releases the record (the host hands a resident room over; a
// parked one's record is released as it stands) and asks the target to
// take the room.
//
// Only a release that landed lets the target take it: one left pending,
// or one that found the record naming this process at a later generation
// (a wake of this node's whose write landed unanswered, which the
// resolver releases), leaves the record naming a live node, which the
// target refuses. So the move stays recorded and the owner looks again on
// each move pass (LookMove), for up to MoveLookFor: it asks the target
// again once the record is free, and ends the move, closing the sockets
// it keeps here, once another live node holds the room (the target, or a
// node one of the room's events reached first). The look reads the
// record, so it does not depend on the target's answer arriving. Past
// its look (LookFor) the move ends; the owner sweep closes sockets left
// behind.

// MoveLookFor is how long the owner of a move looks after it, at least:
// a cluster of long leases looks for moveLookLeases lease times, since a
// record naming a dead node is free only after the failover bound.
const MoveLookFor = 2 * time.Minute

// moveLookLeases is the look of a move in lease times, where that is
// longer than MoveLookFor.
const moveLookLeases = 12

// LookFor is how long this node looks after a move before it gives up.
func (n *Node) LookFor() time.Duration { return max(MoveLookFor, moveLookLeases*n.cfg.TTL) }

// Move is a move of a room away from this node, as recorded.
type Move struct {
	Room        Room
	To, Address string
	// Since is when the move began, by the node's clock.
	Since int64
}

// ErrMoving: the room is moving to another node; it takes no hold here.
var ErrMoving = errors.New("cluster: the room is moving to another node")

// ErrNotHeld: a move was asked of a node that neither holds the room nor
// keeps it parked.
var ErrNotHeld = errors.New("cluster: the room is not held on this node")

// ErrMoveBusy: the room is being moved already.
var ErrMoveBusy = errors.New("cluster: the room is being moved already")

// ErrNotTarget: a move was asked to a node that is not a live, reachable,
// undrained peer of this one.
var ErrNotTarget = errors.New("cluster: the move's target is not a live, reachable, undrained peer")

// BeginMove records a move of room to node to, a live, reachable, not
// draining peer, if the room is held or parked here and not moving
// already.
//
// Whether to takes rooms is its lease's say, which the view may have
// behind: between reads, once a TTL, a listing only notes that a lease
// changed (watchPeer). So a target the view refuses has its lease read
// (one GET) before the move is refused: a move asked right after the
// target's `cluster drain --off` (which writes its lease at once,
// WriteDraining), or its join, begins.
func (n *Node) BeginMove(ctx context.Context, room Room, to string) (Move, error) {
	m, err := n.beginMove(room, to)
	if errors.Is(err, ErrNotTarget) && to != n.cfg.Node {
		n.readPeer(ctx, to)
		m, err = n.beginMove(room, to)
	}
	return m, err
}

func (n *Node) beginMove(room Room, to string) (Move, error) {
	n.mu.Lock()
	defer n.mu.Unlock()
	now := n.clock.Now()
	n.lapseLocked(now)
	if m, ok := n.moves[room]; ok {
		return Move{}, fmt.Errorf("%w (to %s, for %v)", ErrMoveBusy, m.To, time.Duration(now-m.Since).Round(time.Millisecond))
	}
	if n.phase != active || !n.validLocked(now) {
		return Move{}, ErrNotActive
	}
	_, held := n.holds[room]
	_, parked := n.parked[room]
	if !held && !parked {
		return Move{}, fmt.Errorf("%w: %s", ErrNotHeld, room)
	}
	p := n.peers[to]
	if to == n.cfg.Node || p == nil || !p.known || p.lease.State != LeaseLive || p.lease.Draining || p.lease.Address == "" || n.unreachableLocked(to) {
		return Move{}, fmt.Errorf("%w: node %s", ErrNotTarget, to)
	}
	m := Move{Room: room, To: to, Address: p.lease.Address, Since: now}
	n.moves[room] = m
	delete(n.routes, room)
	n.counts.Moves++
	return m, nil
}

// Moving returns room's move, if it is moving away from this node.
func (n *Node) Moving(room Room) (Move, bool) {
	n.mu.Lock()
	defer n.mu.Unlock()
	m, ok := n.moves[room]
	return m, ok
}

// Moves lists the moves under way, sorted by room.
func (n *Node) Moves() []Move {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.movesLocked()
}

func (n *Node) movesLocked() []Move {
	out := make([]Move, 0, len(n.moves))
	for _, m := range n.moves {
		out = append(out, m)
	}
	slices.SortFunc(out, func(a, b Move) int { return CompareRooms(a.Room, b.Room) })
	return out
}

// EndMove forgets move m: the target took the room, or the move failed.
// A later move of the same room is not m, and stays.
func (n *Node) EndMove(m Move) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if cur, ok := n.moves[m.Room]; ok && cur.To == m.To && cur.Since == m.Since {
		delete(n.moves, m.Room)
	}
}

// MoveStepKind is what the owner of a move does next.
type MoveStepKind uint8

// What the owner of a move does next.
const (
	// MoveWait: the record still names this process (the hold is being
	// handed over, its release is pending, an acquisition of it is
	// unresolved) or a dead one: look again on the next pass.
	MoveWait MoveStepKind = iota
	// MoveAsk: the record is free: ask the target to take the room.
	MoveAsk
	// MoveTaken: another live node holds the room (MoveStep.Node): the
	// move is over; the room's sockets here close with 1012.
	MoveTaken
	// MoveGiveUp: the move is over unfinished (MoveStep.Why): the look
	// ran out, the target is no longer a live, undrained peer, or this
	// node may not act any more.
	MoveGiveUp
)

var moveStepNames = [...]string{"wait", "ask", "taken", "give up"}

// String is the step as logs show it.
func (k MoveStepKind) String() string { return moveStepNames[k] }

// MoveStep is a move pass's decision for one move.
type MoveStep struct {
	Kind MoveStepKind
	Move Move
	Node string // MoveTaken: the holder
	Why  string // MoveWait and MoveGiveUp: what the move waits on, or why it ended
}

// LookMove decides the next step of room's move, reading its record
// (one GET, and a read of the holder's lease if this node does not know
// it) unless this node's own state says the record still names it. A
// move that is over (MoveTaken, MoveGiveUp) is forgotten; ok is false if
// room is not moving.
func (n *Node) LookMove(ctx context.Context, room Room) (step MoveStep, ok bool) {
	n.mu.Lock()
	m, ok := n.moves[room]
	if !ok {
		n.mu.Unlock()
		return MoveStep{}, false
	}
	step, read := n.moveStepLocked(m)
	n.mu.Unlock()
	if !read {
		return step, true
	}
	seen, err := n.Look(ctx, room)
	if err != nil {
		return MoveStep{Kind: MoveWait, Move: m, Why: "the room's record could not be read: " + err.Error()}, true
	}
	n.mu.Lock()
	step, unknown := n.moveStepSeenLocked(seen)
	n.mu.Unlock()
	if unknown {
		n.learnOwner(ctx, seen.Record.Node, seen.Record.Instance)
		n.mu.Lock()
		step, _ = n.moveStepSeenLocked(seen)
		n.mu.Unlock()
	}
	return step, true
}

// moveStepSeenLocked decides the step of seen's room's move from its
// record as read; unknown says that the record names a node whose lease
// this node does not know, which is worth reading before deciding again.
func (n *Node) moveStepSeenLocked(seen Seen) (step MoveStep, unknown bool) {
	m, still := n.moves[seen.Room]
	if !still {
		return MoveStep{Kind: MoveGiveUp, Move: m, Why: "the move ended meanwhile"}, false
	}
	// The state here may have changed while the record was read.
	if step, read := n.moveStepLocked(m); !read {
		return step, false
	}
	m = n.moves[seen.Room]
	rec := seen.Record
	switch {
	case !seen.Exists || rec.Free || n.deadLocked(rec.Node, rec.Instance):
		// Free, or held by a node that has ended: the target may take it.
		return MoveStep{Kind: MoveAsk, Move: m}, false
	case rec.Node == n.cfg.Node && rec.Instance == n.cfg.Instance:
		// The record names this process, and nothing here holds,
		// parks, releases or resolves it (moveStepLocked found
		// none): a write of this node's that landed after it was
		// given up. Nothing else can release it, so it is released
		// here, on the version read.
		n.addPendingLocked(Hold{Room: seen.Room, Generation: rec.Generation, Version: seen.Version}, n.clock.Now())
		n.counts.MoveStrayReleases++
		return MoveStep{Kind: MoveWait, Move: m, Why: "the room's record names this node though nothing here holds it: it is being released"}, false
	}
	if _, live := n.liveLocked(rec.Node, rec.Instance); live {
		delete(n.moves, seen.Room)
		return MoveStep{Kind: MoveTaken, Move: m, Node: rec.Node}, false
	}
	if p := n.peers[rec.Node]; p == nil || !p.known || p.lease.Instance != rec.Instance {
		return MoveStep{Kind: MoveWait, Move: m, Why: "the room's record names node " + rec.Node + ", whose lease this node has not read"}, true
	}
	return MoveStep{Kind: MoveWait, Move: m, Why: "the room's record names node " + rec.Node + ", which is not live: it is free after the failover bound"}, false
}

// moveStepLocked decides m's step from this node's own state when it can
// (read false); else the record must be read.
func (n *Node) moveStepLocked(m Move) (step MoveStep, read bool) {
	now := n.clock.Now()
	n.lapseLocked(now)
	p := n.peers[m.To]
	giveUp := ""
	switch {
	case n.phase != active:
		giveUp = "this node is " + n.phase.String()
	case now-m.Since >= int64(n.LookFor()):
		giveUp = fmt.Sprintf("the room was not taken within %v", n.LookFor())
	case p == nil || p.lease.State != LeaseLive || p.lease.Draining || p.lease.Address == "":
		giveUp = "node " + m.To + " is no longer a live, undrained peer"
	}
	if giveUp != "" {
		delete(n.moves, m.Room)
		return MoveStep{Kind: MoveGiveUp, Move: m, Why: giveUp}, false
	}
	// The target is asked where its lease says it is now (a restart
	// may have moved it).
	m.Address = p.lease.Address
	n.moves[m.Room] = m
	if _, held := n.holds[m.Room]; held {
		return MoveStep{Kind: MoveWait, Move: m, Why: "the room is being handed over"}, false
	}
	if _, parked := n.parked[m.Room]; parked {
		return MoveStep{Kind: MoveWait, Move: m, Why: "the room's parked record is being released"}, false
	}
	if _, busy := n.acquiring[m.Room]; busy {
		return MoveStep{Kind: MoveWait, Move: m, Why: "an acquisition of the room is in flight"}, false
	}
	for k := range n.pending {
		if k.room == m.Room {
			return MoveStep{Kind: MoveWait, Move: m, Why: "the release of the room's record has not landed yet (pending)"}, false
		}
	}
	for _, u := range n.unresolved {
		if u.room == m.Room {
			return MoveStep{Kind: MoveWait, Move: m, Why: "an acquisition of the room whose answer was lost is not resolved yet"}, false
		}
	}
	return MoveStep{}, true
}

// whereMovingLocked decides where the events of seen's room go if this
// node is moving it away (ok false if it is not, or if the usual rules
// decide): to the target while the record is free or names an ended
// node (it takes the room with the first of them), nowhere yet (Wait) while the record still
// names this process or names one that is not live (the failover frees
// it), and to another live holder by the usual rules.
func (n *Node) whereMovingLocked(seen Seen) (w Where, ok bool) {
	m, moving := n.moves[seen.Room]
	if !moving {
		return Where{}, false
	}
	seen = n.parkedSeenLocked(seen)
	rec := seen.Record
	switch {
	case !seen.Exists || rec.Free || n.deadLocked(rec.Node, rec.Instance):
		p := n.peers[m.To]
		if n.unreachableLocked(m.To) || p == nil || p.lease.Address == "" {
			return Where{Kind: Wait, Node: m.To, Seen: seen}, true
		}
		return Where{Kind: Elsewhere, Node: m.To, Address: p.lease.Address, Seen: seen}, true
	case rec.Node == n.cfg.Node && rec.Instance == n.cfg.Instance:
		return Where{Kind: Wait, Node: m.To, Seen: seen}, true
	}
	if _, live := n.liveLocked(rec.Node, rec.Instance); !live {
		return Where{Kind: Wait, Node: rec.Node, Seen: seen}, true
	}
	return Where{}, false
}
