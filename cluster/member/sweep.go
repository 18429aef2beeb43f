package member

import (
	"context"
	"errors"
	"time"

	"github.com/wasmkeep/wasmkeep/cluster"
)

// The owner sweep (seed 000 §5) runs every SweepInterval (a minute by
// default) over the rooms with sockets open on this node:
//
//   - a room parked here is passed over: its record is this node's own,
//     and reading it would cost a GET a minute for every room parked for
//     days; a parked room with no open socket left is released;
//   - a room with sockets here that is neither held nor parked here (a
//     wake found another holder, a move, an unknown outcome) is routed: if
//     another live node holds it, its sockets close with 1012, so that
//     their clients reconnect to it;
//   - one pass in ten re-reads the parked records, at most
//     sweepRereadMax a pass, going on where the last stopped: one that no
//     longer names this process at the parked generation is dropped, and
//     its room treated as above.
//
// A record that cannot be decoded proves nothing: it is kept, counted,
// logged once, and passed over. Only a bucket that does not answer cuts a
// pass short.
const (
	// SweepRereadEvery: one pass in this many re-reads parked records.
	SweepRereadEvery = 10
	// sweepRereadMax bounds the parked records one pass re-reads.
	sweepRereadMax = 5000
)

// SweepPass is the duty of the owner sweep: a pass every SweepInterval
// while the lease is valid.
func (m *Member) SweepPass(ctx context.Context) time.Duration {
	if m.core.LeaseValid() {
		m.Sweep(ctx)
	}
	return m.cfg.SweepInterval
}

// Sweeps counts the sweep's passes so far.
func (m *Member) Sweeps() int { return int(m.sweeps.Load()) }

// Sweep runs one pass of the owner sweep (its duty, or a test).
func (m *Member) Sweep(ctx context.Context) {
	m.sweepMu.Lock() // one pass at a time
	defer m.sweepMu.Unlock()
	pass := m.sweeps.Add(1)
	// What needs no read first: a bucket that does not answer cuts the
	// routing below short, not these releases.
	m.releaseWithoutSockets(ctx)
	if pass%SweepRereadEvery == 0 {
		m.rereadDue = true
	}
	for _, room := range m.rooms.WithSockets() {
		if _, parked := m.core.Parked(room); parked && m.cfg.Broken.SweepClosesParked {
			m.closeOwnerSockets([]cluster.Room{room}, "sweep", "the room runs on another node")
			continue
		}
		if m.keepsSockets(room) {
			continue
		}
		if !m.closeIfElsewhere(ctx, room) {
			return // the bucket did not answer; a re-read due stays due
		}
	}
	if m.rereadDue && m.rereadParked(ctx) {
		m.rereadDue = false
	}
}

// releaseWithoutSockets releases the parked records of rooms with no
// socket left here. The parked set is listed before the sockets: a room
// parked by then had open sockets when it parked, so missing from the
// later list it has none any more; listed the other way round, a room
// whose first socket opened, and which parked, in between would be
// released with its socket open.
func (m *Member) releaseWithoutSockets(ctx context.Context) {
	if m.cfg.Broken.SweepReleasesParkedInPass {
		m.releaseWithoutSocketsBroken(ctx)
		return
	}
	parked := m.core.ParkedRooms()
	open := map[cluster.Room]bool{}
	for _, room := range m.rooms.WithSockets() {
		open[room] = true
	}
	for _, h := range parked {
		if !open[h.Room] {
			if released, _ := m.core.ReleaseParked(ctx, h.Room); released {
				m.observe(Event{Kind: ParkedReleased, Room: h.Room, Why: "last_socket"})
			}
		}
	}
}

// releaseWithoutSocketsBroken is SweepReleasesParkedInPass: it takes
// the rooms with sockets from the listing the previous pass made, before
// the parked set of this one, so a room that opened its first socket and
// parked in between is released with its socket open.
func (m *Member) releaseWithoutSocketsBroken(ctx context.Context) {
	open := map[cluster.Room]bool{}
	for _, room := range m.lastOpen {
		open[room] = true
	}
	m.lastOpen = m.rooms.WithSockets()
	for _, h := range m.core.ParkedRooms() {
		if !open[h.Room] {
			if released, _ := m.core.ReleaseParked(ctx, h.Room); released {
				m.observe(Event{Kind: ParkedReleased, Room: h.Room, Why: "last_socket"})
			}
		}
	}
}

// closeIfElsewhere routes a room with sockets here that this node neither
// holds nor parks, and closes its sockets with 1012 if another live node
// holds it. It reports false if the bucket did not answer.
func (m *Member) closeIfElsewhere(ctx context.Context, room cluster.Room) bool {
	w, err := m.core.Route(ctx, room)
	switch {
	case errors.Is(err, cluster.ErrBadObject):
		m.unreadable(room, err)
		return true
	case err != nil:
		return false
	case w.Kind == cluster.Elsewhere && !m.keepsSockets(room):
		// Sockets whose close is slow to finish are still listed at the
		// next pass: closed again, counted once.
		m.closeOwnerSockets([]cluster.Room{room}, "sweep", "the room runs on another node")
	}
	return true
}

// rereadParked reads the records of up to sweepRereadMax parked rooms,
// from where the last re-read stopped, and drops the entries the record
// no longer backs. It reports false if the bucket cut it short.
func (m *Member) rereadParked(ctx context.Context) bool {
	parked := m.core.ParkedRooms()
	start := 0
	for start < len(parked) && cluster.CompareRooms(parked[start].Room, m.rereadFrom) < 0 {
		start++
	}
	if start == len(parked) {
		start = 0 // wrapped
	}
	for i := 0; i < len(parked) && i < sweepRereadMax; i++ {
		h := parked[(start+i)%len(parked)]
		seen, err := m.core.Look(ctx, h.Room)
		switch {
		case errors.Is(err, cluster.ErrBadObject):
			m.unreadable(h.Room, err)
			m.rereadFrom = parked[(start+i+1)%len(parked)].Room
			continue
		case err != nil:
			m.rereadFrom = h.Room // start there next time
			return false
		}
		rec := seen.Record
		if !seen.Exists || rec.Free || rec.Node != m.core.Name() || rec.Instance != m.core.Instance() || rec.Generation != h.Generation {
			m.log.Warn("cluster: a parked record no longer names this node; dropping it", "room", h.Room.String(), "generation", h.Generation)
			m.core.ForgetParked(h.Room, h)
			if m.rooms.Sockets(h.Room) > 0 {
				m.closeIfElsewhere(ctx, h.Room)
			}
		}
		if i+1 < len(parked) {
			m.rereadFrom = parked[(start+i+1)%len(parked)].Room
		}
	}
	return true
}

// unreadable counts a record that cannot be decoded, and logs it once.
func (m *Member) unreadable(room cluster.Room, err error) {
	m.observe(Event{Kind: Unreadable, Room: room, Err: err})
	m.mu.Lock()
	first := !m.reportedUnreadable[room]
	m.reportedUnreadable[room] = true
	m.mu.Unlock()
	if first {
		m.log.Error("cluster: a room's ownership record cannot be decoded; passing it over", "room", room.String(), "err", err)
	}
}
