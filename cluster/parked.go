package cluster

import (
	"context"
	"slices"
)

// A room that hibernates with sockets open on this node keeps its record
// (seed 000, socket home): its hold is parked, not released, so the record
// goes on naming this process and every other node routes the room's
// events here, where its sockets are. A parked hold is no authority to
// act: it is a release put off. The room's next event acquires the record
// as any other (the record names this process's ended hold: generation + 1,
// If-Match on the version read), so every wake has a generation of its
// own; the parked entry goes once the record is known to have moved.
//
// A parked record is released when its last socket here goes, on every
// drain pass, by a move, and at a clean stop; a lapse makes it a pending
// release, as it does every hold; a lost lease drops it with the rest.

// Park moves h from the live holds to the parked ones, in one step, if
// this node may still act on it and is not draining, stopping or moving
// the room; it
// reports whether it did. Otherwise the caller releases h. Nothing is
// written.
func (n *Node) Park(h Hold) bool {
	n.mu.Lock()
	defer n.mu.Unlock()
	now := n.clock.Now()
	n.lapseLocked(now)
	_, moving := n.moves[h.Room]
	if cur, ok := n.holds[h.Room]; !ok || cur != h || n.phase != active || !n.validLocked(now) || (n.draining && !n.cfg.Broken.ParkWhileDraining) || moving {
		return false
	}
	delete(n.holds, h.Room)
	n.parked[h.Room] = h
	n.counts.Parks++
	return true
}

// Parked reports whether room's record is parked here, and at which hold.
func (n *Node) Parked(room Room) (Hold, bool) {
	n.mu.Lock()
	defer n.mu.Unlock()
	h, ok := n.parked[room]
	return h, ok
}

// ParkedRooms lists the rooms whose records are parked here, sorted.
func (n *Node) ParkedRooms() []Hold {
	n.mu.Lock()
	defer n.mu.Unlock()
	out := make([]Hold, 0, len(n.parked))
	for _, h := range n.parked {
		out = append(out, h)
	}
	slices.SortFunc(out, compareHolds)
	return out
}

// ReleaseParked releases room's parked record, if it is parked here (its
// last socket went, a drain, a move): If-Match on the parked hold's
// version, a pending release if that write fails or is unanswered. It
// reports whether the release's write landed now (a move goes on only
// then: one that found the record moved on may have met a wake of this
// node's that landed unanswered); a room not parked here is false.
func (n *Node) ReleaseParked(ctx context.Context, room Room) (parked, landed bool) {
	n.mu.Lock()
	h, ok := n.parked[room]
	if !ok {
		n.mu.Unlock()
		return false, false
	}
	delete(n.parked, room)
	p := n.addPendingLocked(h, n.clock.Now())
	p.inflight = true
	n.counts.ParkedReleases++
	n.mu.Unlock()
	return true, n.attemptRelease(ctx, p)
}

// ForgetParked drops room's parked entry without writing: a re-read found
// the record no longer naming this process at the parked hold's version
// (the owner sweep's safeguard), so there is nothing of it to release.
func (n *Node) ForgetParked(room Room, h Hold) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if cur, ok := n.parked[room]; ok && cur == h {
		delete(n.parked, room)
	}
}

// dropParkedLocked ends room's parked entry once its record is known to
// have moved: a wake took it (a new hold replaces the parked one), or the
// read found another holder.
func (n *Node) dropParkedLocked(room Room) {
	delete(n.parked, room)
}

// parkedSeenLocked is seen, or, if seen is older than the hold of its
// room parked here, that hold's record. A read answered late can have
// been sent before this node took the room and parked it: it shows the
// record as it was then (free, or naming the room's previous holder).
// Routing on it would send the room's events, and close its sockets,
// away from the node that keeps them; taking on it would drop the parked
// entry as if another node held the room. Generations only grow, and no
// other hold shares the parked one's, so a record below it is older.
func (n *Node) parkedSeenLocked(seen Seen) Seen {
	h, ok := n.parked[seen.Room]
	if !ok || seen.Exists && seen.Record.Generation >= h.Generation {
		return seen
	}
	return Seen{Room: seen.Room, Exists: true, Version: h.Version,
		Record: Record{Node: n.cfg.Node, Instance: n.cfg.Instance, Generation: h.Generation}}
}

// parkedAtLocked reports whether a hold of room at generation gen is
// parked here: the resolver counts a parked record as this node's only at
// its own generation.
func (n *Node) parkedAtLocked(room Room, gen uint64) bool {
	h, ok := n.parked[room]
	return ok && (h.Generation == gen || n.cfg.Broken.ResolverParkedAnyGeneration)
}

// dropParkedBehindLocked drops room's parked entry if it is at version,
// which the record has moved on from: a release of it could only find the
// record changed.
func (n *Node) dropParkedBehindLocked(room Room, version string) {
	if h, ok := n.parked[room]; ok && version != "" && h.Version == version {
		delete(n.parked, room)
	}
}
