package clusternode

import (
	"context"
	"errors"
	"time"

	"github.com/wasmkeep/wasmkeep/cluster"
	"github.com/wasmkeep/wasmkeep/host/rooms"
)

// The owner sweep (seed 000 §5) runs once a minute over the rooms with
// sockets open on this node:
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
	// DefaultSweepInterval is how often the owner sweep runs.
	DefaultSweepInterval = time.Minute
	// sweepRereadEvery: one pass in this many re-reads parked records.
	sweepRereadEvery = 10
	// sweepRereadMax bounds the parked records one pass re-reads.
	sweepRereadMax = 5000
)

// sweepLoop runs the owner sweep every interval until the member stops.
func (m *Member) sweepLoop(s cluster.Sleeper, interval time.Duration) {
	for s.Sleep(m.ctx, interval) == nil && !m.core.Ended() {
		if m.core.LeaseValid() {
			m.Sweep(m.ctx)
		}
	}
}

// Sweep runs one pass of the owner sweep (tests call it directly).
func (m *Member) Sweep(ctx context.Context) {
	mgr := m.mgr.Load()
	if mgr == nil {
		return
	}
	m.sweepMu.Lock() // one pass at a time: the loop's, or a test's
	defer m.sweepMu.Unlock()
	m.sweeps++
	// What needs no read first: a bucket that does not answer cuts the
	// routing below short, not these releases.
	m.releaseWithoutSockets(ctx)
	if m.sweeps%sweepRereadEvery == 0 {
		m.rereadDue = true
	}
	for _, key := range mgr.RoomsWithSockets() {
		room := roomOf(key)
		// A move being taken a step may have ended, its sockets not
		// closed yet: it closes them itself, as a move's.
		if _, parked := m.core.Parked(room); parked || m.core.Acting(room) || m.isMoving(key) || m.isAdvancing(key) {
			continue
		}
		if !m.closeIfElsewhere(ctx, key) {
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
	parked := m.core.ParkedRooms()
	open := map[cluster.Room]bool{}
	for _, key := range m.mgr.Load().RoomsWithSockets() {
		open[roomOf(key)] = true
	}
	for _, h := range parked {
		if !open[h.Room] {
			if released, _ := m.core.ReleaseParked(ctx, h.Room); released {
				m.met.parkedRelease("last_socket")
			}
		}
	}
}

// closeIfElsewhere routes a room with sockets here that this node neither
// holds nor parks, and closes its sockets with 1012 if another live node
// holds it. It reports false if the bucket did not answer.
func (m *Member) closeIfElsewhere(ctx context.Context, key rooms.Key) bool {
	w, err := m.core.Route(ctx, roomOf(key))
	switch {
	case errors.Is(err, cluster.ErrBadObject):
		m.unreadable(key, err)
		return true
	case err != nil:
		return false
	case w.Kind == cluster.Elsewhere:
		// Sockets whose close is slow to finish are still listed at the
		// next pass: closed again, counted once.
		m.closeOwnerSockets(ctx, []rooms.Key{key}, "sweep", "the room runs on another node")
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
		key := rooms.Key{Class: h.Room.Class, Name: h.Room.Name}
		switch {
		case errors.Is(err, cluster.ErrBadObject):
			m.unreadable(key, err)
			m.rereadFrom = parked[(start+i+1)%len(parked)].Room
			continue
		case err != nil:
			m.rereadFrom = h.Room // start there next time
			return false
		}
		rec := seen.Record
		if !seen.Exists || rec.Free || rec.Node != m.cfg.Node || rec.Instance != m.core.Instance() || rec.Generation != h.Generation {
			m.log.Warn("cluster: a parked record no longer names this node; dropping it", "room", key.String(), "generation", h.Generation)
			m.core.ForgetParked(h.Room, h)
			m.closeIfElsewhere(ctx, key)
		}
		if i+1 < len(parked) {
			m.rereadFrom = parked[(start+i+1)%len(parked)].Room
		}
	}
	return true
}

// unreadable counts a record that cannot be decoded, and logs it once.
func (m *Member) unreadable(key rooms.Key, err error) {
	m.met.sweepUnreadable.Inc()
	m.mu.Lock()
	first := !m.reportedUnreadable[key]
	m.reportedUnreadable[key] = true
	m.mu.Unlock()
	if first {
		m.log.Error("cluster: a room's ownership record cannot be decoded; passing it over", "room", key.String(), "err", err)
	}
}
