package member

import (
	"context"

	"github.com/wasmkeep/wasmkeep/cluster"
)

// End ends hold h of a room that stops being resident here, for why (a
// name for metrics). idleWithSockets says the room went idle (or was
// evicted) with sockets open here and not closing: then its hold parks
// (seed 000 §1), and the record keeps naming this node, so the room's
// next event, wherever it lands, wakes it here where its sockets are.
// Whether it may park is the core's to say (Park: the lease valid, not
// draining, not stopping, not moving the room), in that one place.
//
// Every other end releases the hold, and so does a park the core
// refuses; then the room's sockets here belong to no hold of this node
// and close (1012), unless a move or a clean stop closes them itself: a
// drain pass that ran before the room went idle would not close them,
// and another node may take the room while they stay.
func (m *Member) End(ctx context.Context, h cluster.Hold, why string, idleWithSockets bool) {
	parks := idleWithSockets && !m.cfg.Broken.ReleaseOnHibernation
	if parks && m.core.Park(h) {
		return
	}
	// Read after the park: one refused because a move began meanwhile
	// leaves the sockets to the move.
	_, moving := m.core.Moving(h.Room)
	m.observe(Event{Kind: Released, Room: h.Room, Why: why})
	m.core.Release(ctx, h)
	if parks && !moving && !m.core.Stopping() {
		m.closeOwnerSockets([]cluster.Room{h.Room}, "drain", "the room's node may not keep it")
	}
}

// SocketsGone tells that room's last open socket here went: a parked
// record of it is released. The host calls it where a wake of the room
// also runs (the room's worker), so that the two never interleave.
func (m *Member) SocketsGone(ctx context.Context, room cluster.Room) {
	m.mu.Lock()
	delete(m.ownerClosed, room) // a socket that opens from now on was not closed
	m.mu.Unlock()
	if parked, _ := m.core.ReleaseParked(ctx, room); parked {
		m.observe(Event{Kind: ParkedReleased, Room: room, Why: "last_socket"})
	}
}

// Valid reports whether h still lets this node act.
func (m *Member) Valid(h cluster.Hold) bool { return m.core.Valid(h) }

// Fence is the generation below which no hold of room can still write a
// snapshot that counts (every earlier hold ended before the record moved
// on); 0 for a room without a record, which has had no cluster hold.
//
// A room parked here costs no read (seed 000 §5): its parked hold's
// generation bounds every hold that may still write (the ones before it
// ended before the record named it), and is at most the record's.
func (m *Member) Fence(ctx context.Context, room cluster.Room) (uint64, error) {
	if h, parked := m.core.Parked(room); parked {
		return h.Generation, nil
	}
	seen, err := m.core.Look(ctx, room)
	if err != nil || !seen.Exists {
		return 0, err
	}
	return seen.Record.Generation, nil
}
