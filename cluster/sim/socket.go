package sim

import (
	"context"
	"slices"
	"time"

	"github.com/wasmkeep/wasmkeep/cluster"
)

// Sockets (seed 000, socket home). A client's WebSocket is opened on the
// node that runs its room: the upgrade is routed like any event, and the
// node that holds the room keeps the socket. The socket outlives the
// room's residence: when the room goes idle with a socket still open, the
// host parks its hold (cluster.Node.Park) instead of releasing it, so the
// record goes on naming this node, every other node relays the room's
// events here, and the room wakes here, at a new generation (Route says
// Here, Take writes generation + 1).
//
// The host (this file and host.go, ops.go) does what clusternode's member
// does, with the same calls of the core:
//
//   - a room that goes idle with a socket open here parks (Park), or is
//     released if the core will not park it (draining, lapsed, stopping);
//   - when a room's last socket here goes, whatever closed it, and the room
//     is not resident here, its parked record is released (ReleaseParked);
//   - every drain pass closes every socket (1012) and releases every
//     parked record before it hands resident rooms over;
//   - a move of a parked room releases its record first; the target is
//     asked once the record is free, and the sockets close once another
//     node holds the room (or the move gives up);
//   - a room found taken elsewhere (a route to another node, a take that
//     finds another holder) loses its sockets here;
//   - a lapse closes every socket (1012), as does a clean stop, before the
//     core releases the parked records with the holds.
//
// The world opens sockets for random rooms on the process that runs them
// and closes each after a while, as its client would.

// socket is one client's WebSocket to a room, on the process that ran the
// room when it connected.
type socket struct {
	id   int
	room cluster.Room
	p    *process
	open bool
}

const (
	// socketEvery is the mean time between two clients connecting (to a
	// random room; one that runs nowhere then gets none).
	socketEvery = 400 * time.Millisecond
	// socketLife is the mean time a client keeps its socket open.
	socketLife = 8 * time.Second
)

// connect is a client connecting to a random room: its socket opens on
// the process that runs the room, if one does.
func (w *World) connect() {
	if w.s.Now() < int64(w.cfg.Duration) {
		w.s.At(w.after(socketEvery), "socket", w.connect)
	}
	room := w.rooms[w.rng.IntN(len(w.rooms))]
	if p := w.runner(room); p != nil {
		s := w.openSocket(p, room)
		w.s.At(w.after(socketLife), "client closes", func() { w.closeSocket(s, true) })
	}
}

// runner is the process that runs room now (the host and the core hold
// it, and the lease is valid), if one does. It changes nothing.
func (w *World) runner(room cluster.Room) *process {
	for _, m := range w.machines {
		if p := m.proc; p != nil && !p.hung && !p.stopping {
			if _, held := p.holds[room]; held && p.node.Acting(room) {
				return p
			}
		}
	}
	return nil
}

// openSocket opens a socket for room on p.
func (w *World) openSocket(p *process, room cluster.Room) *socket {
	w.sockets++
	s := &socket{id: w.sockets, room: room, p: p, open: true}
	p.sockets = append(p.sockets, s)
	w.stats.SocketsOpened++
	w.s.Note("socket %d for %s opens on %s", s.id, room.Name, p.name)
	return s
}

// openSockets counts p's open sockets of room.
func (w *World) openSockets(p *process, room cluster.Room) int {
	n := 0
	for _, s := range p.sockets {
		if s.room == room {
			n++
		}
	}
	return n
}

// closeSocket closes s, by its client or by its node, if it is still
// open on a running process.
func (w *World) closeSocket(s *socket, byClient bool) {
	p := s.p
	if !s.open || p.machine.proc != p || p.hung {
		return
	}
	s.open = false
	p.sockets = slices.DeleteFunc(p.sockets, func(x *socket) bool { return x == s })
	if byClient {
		w.stats.SocketsClosedByClient++
		w.s.Note("socket %d for %s on %s closed by its client", s.id, s.room.Name, p.name)
	} else {
		w.stats.SocketsClosedByNode++
	}
	if w.openSockets(p, s.room) == 0 {
		w.lastSocketGone(p, s.room)
	}
}

// closeSockets closes p's sockets of the rooms match accepts, with 1012,
// saying why.
func (w *World) closeSockets(p *process, why string, match func(cluster.Room) bool) {
	var closing []*socket
	for _, s := range p.sockets {
		if match(s.room) {
			closing = append(closing, s)
		}
	}
	if len(closing) == 0 {
		return
	}
	w.s.Note("%s closes %d sockets: %s", p.name, len(closing), why)
	for _, s := range closing {
		w.closeSocket(s, false)
	}
}

// closeRoomSockets closes p's sockets of room, with 1012.
func (w *World) closeRoomSockets(p *process, room cluster.Room, why string) {
	w.closeSockets(p, why, func(r cluster.Room) bool { return r == room })
}

// closeAllSockets closes every socket of p, with 1012.
func (w *World) closeAllSockets(p *process, why string) {
	w.closeSockets(p, why, func(cluster.Room) bool { return true })
}

// lastSocketGone is the check made when a socket's slot is freed: a room
// with no socket left here and no hold here releases its parked record.
func (w *World) lastSocketGone(p *process, room cluster.Room) {
	if _, held := p.holds[room]; held {
		return // resident: it releases (or parks) as it goes idle
	}
	if _, parked := p.node.Parked(room); !parked {
		return
	}
	w.s.Spawn(p.group, "last socket "+room.Name, func(ctx context.Context) {
		if _, held := p.holds[room]; held || w.openSockets(p, room) > 0 {
			return // woken meanwhile
		}
		if parked, _ := p.node.ReleaseParked(ctx, room); parked {
			w.stats.LastSocketReleases++
		}
	})
}

// closeOnLapse closes every socket of p, which just ran a step, if its
// lease is not valid, or lapsed since it last looked (the core ended its
// holds and made its parked records pending releases, and may have been
// renewed since, in the same step): no room of a lapsed hold may keep its
// clients here. A lapse happens only in a step of p's own, so looking
// after each of them closes the sockets before anything else runs.
func (w *World) closeOnLapse(p *process) {
	if p == nil || p.machine.proc != p || p.hung {
		return
	}
	n := p.node.Counts().Lapses
	lapsed := n != p.lapses
	p.lapses = n
	if len(p.sockets) > 0 && (lapsed || !p.node.LeaseValid()) {
		w.closeAllSockets(p, "the lease lapsed")
	}
}

// forgetSockets drops p's sockets as its process ends: they are gone with
// it (their clients see the connection fail).
func (w *World) forgetSockets(p *process) {
	for _, s := range p.sockets {
		s.open = false
	}
	p.sockets = nil
}

// hibernate ends a resident room's hold h as the room goes idle: with a
// socket open here its hold is parked (the record keeps naming this node,
// so the room wakes here); otherwise it is released. A room the core
// will not park (the node drains, or its lease lapsed, or it stops) is
// released, and its sockets close (1012): the room is not this node's
// any more, and nothing else would close them (a drain whose passes
// found it resident could report drained with them open).
func (w *World) hibernate(ctx context.Context, p *process, h cluster.Hold) {
	if w.openSockets(p, h.Room) > 0 && !w.cfg.Host.ReleaseOnHibernation {
		if p.node.Park(h) {
			delete(p.exposed, h.Room)
			w.s.Note("%s parks %s at generation %d", p.name, h.Room.Name, h.Generation)
			return
		}
		w.closeRoomSockets(p, h.Room, "the room is released, not parked")
	}
	p.node.Release(ctx, h)
	w.stats.Releases++
}
