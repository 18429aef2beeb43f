package sim

import (
	"context"
	"slices"
	"time"

	"github.com/wasmkeep/wasmkeep/cluster"
	"github.com/wasmkeep/wasmkeep/cluster/member"
)

// Sockets (seed 000, socket home). A client's WebSocket is opened on the
// node that runs its room: the upgrade is routed like any event, and the
// node that holds the room keeps the socket. The socket outlives the
// room's residence: when the room goes idle with a socket still open, the
// member parks its hold instead of releasing it, so the record goes on
// naming this node, every other node routes the room's events here, and
// the room wakes here, at a new generation.
//
// What a node does with its sockets is the member's (cluster/member):
// it closes them when their room runs elsewhere, on a drain, a move, a
// lapse or a clean stop, and releases a parked record when its room's last
// socket goes. This file is the fake of the rooms the member asks about
// (member.Rooms), and the clients: the world opens sockets for random
// rooms on the process that runs them and closes each after a while, as
// its client would.

// socket is one client's WebSocket to a room, on the process that ran the
// room when it connected.
type socket struct {
	id   int
	room cluster.Room
	p    *process
	open bool
	// got are the ids of the calls whose runs broadcast to it.
	got []int
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
			if _, held := p.holds[room]; held && p.member.Core().Acting(room) {
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

// lastSocketGone tells the member that room has no socket left on p,
// as a room's worker does: not while the room is resident (its worker is
// busy with it, and it parks or releases as it goes idle), and not if a
// wake came first.
func (w *World) lastSocketGone(p *process, room cluster.Room) {
	if _, held := p.holds[room]; held {
		return
	}
	if _, parked := p.member.Core().Parked(room); !parked {
		return
	}
	w.s.Spawn(p.group, "last socket "+room.Name, func(ctx context.Context) {
		if _, held := p.holds[room]; held || w.openSockets(p, room) > 0 {
			return // woken meanwhile
		}
		p.member.SocketsGone(ctx, room)
	})
}

// forgetSockets drops p's sockets as its process ends: they are gone with
// it (their clients see the connection fail).
func (w *World) forgetSockets(p *process) {
	for _, s := range p.sockets {
		s.open = false
	}
	p.sockets = nil
}

// fakeRooms is a process's rooms and sockets as its member sees them
// (member.Rooms).
type fakeRooms struct {
	w *World
	p *process
}

// WithSockets lists the rooms with sockets open on the process, in the
// order their first open socket opened (deterministic).
func (r fakeRooms) WithSockets() []cluster.Room {
	var out []cluster.Room
	for _, s := range r.p.sockets {
		if !slices.Contains(out, s.room) {
			out = append(out, s.room)
		}
	}
	return out
}

func (r fakeRooms) Sockets(room cluster.Room) int { return r.w.openSockets(r.p, room) }

// CloseSockets closes the sockets at once: the simulation's sockets close
// in no time.
func (r fakeRooms) CloseSockets(room cluster.Room, reason string) {
	r.w.closeSockets(r.p, reason, func(x cluster.Room) bool { return x == room })
}

// HandOver ends a resident room's hold, not parking it.
func (r fakeRooms) HandOver(ctx context.Context, room cluster.Room, why member.HandOverReason) error {
	h, held := r.p.holds[room]
	if !held {
		return nil
	}
	delete(r.p.holds, room)
	reason := "drain"
	if why == member.HandOverMove {
		reason = "move"
	}
	r.p.member.End(ctx, h, reason, false)
	return nil
}

// DropAll drops every resident room: their holds end, unwritten.
func (r fakeRooms) DropAll(ctx context.Context) {
	for _, room := range r.w.rooms {
		if h, held := r.p.holds[room]; held {
			delete(r.p.holds, room)
			r.p.member.End(ctx, h, "lapse", false)
		}
	}
}
