package sim

import (
	"fmt"
	"testing"
	"time"

	"github.com/wasmkeep/wasmkeep/cluster"
)

// quiet are faults that never happen: the scenario's bucket answers every
// request, within Latency.
var quiet = Faults{Latency: 20 * time.Millisecond, Timeout: 8 * time.Second, LateMax: 12 * time.Second}

// runUntil steps w, checking every invariant, until cond holds; it fails
// t if that takes more than within of virtual time, or if an invariant
// breaks.
func runUntil(t *testing.T, w *World, within time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := w.s.Now() + int64(within)
	for !cond() {
		if w.failure != "" {
			t.Fatalf("%s: %s", what, w.failure)
		}
		if !w.step(deadline) {
			t.Fatalf("%s: not within %v", what, within)
		}
	}
	if w.failure != "" {
		t.Fatalf("%s: %s", what, w.failure)
	}
}

// joined is whether every machine's process has joined and sees the
// others live.
func joined(w *World) func() bool {
	return func() bool {
		for _, m := range w.machines {
			s := m.proc.member.Core().Status()
			if !s.LeaseValid || len(s.Peers) != len(w.machines)-1 {
				return false
			}
			for _, peer := range s.Peers {
				if peer.State != cluster.LeaseLive {
					return false
				}
			}
		}
		return true
	}
}

// TestARoomWakesWhereItsSocketsAre is the socket home's scenario (seed
// 000, Verification 1), on three nodes and a bucket without faults: a
// room with a socket on n1, called through n2 and then n3, wakes on n1
// each time, at a new generation each time, its socket open throughout;
// n1 is killed, and another node takes the room within the failover
// bound; that node parks it with a socket of its own, and the last socket
// closing leaves a record naming nobody.
func TestARoomWakesWhereItsSocketsAre(t *testing.T) {
	for seed := range uint64(4) {
		t.Run(fmt.Sprintf("seed %d", seed), func(t *testing.T) { socketHome(t, seed) })
	}
}

// parkedHome is a world of three machines where the one room ran first
// on n1 (p1 its process), got a socket there, and is parked there at gen.
type parkedHome struct {
	w          *World
	n1, n2, n3 *machine
	room       cluster.Room
	p1         *process
	socket     *socket
	gen        uint64
}

// parkOnN1 makes a parkedHome of cfg (one room, three machines).
func parkOnN1(t *testing.T, cfg Config) *parkedHome {
	t.Helper()
	w := newWorld(cfg)
	for _, m := range w.machines {
		w.start(m)
	}
	h := &parkedHome{w: w, n1: w.machines[0], n2: w.machines[1], n3: w.machines[2], room: w.rooms[0]}
	runUntil(t, w, time.Minute, "the nodes join", joined(w))
	ev := w.land(h.n1, h.room)
	runUntil(t, w, time.Minute, "the first event", func() bool { return ev.done })
	h.p1 = h.n1.proc
	if !ev.r.answered || w.runner(h.room) != h.p1 {
		t.Fatalf("the first event, on n1: %+v; the room runs on %v", ev.r, w.runner(h.room))
	}
	h.socket = w.openSocket(h.p1, h.room)
	h.gen = ev.r.gen
	runUntil(t, w, 2*time.Minute, "n1 parks the room", h.parkedAt(h.p1, h.gen))
	return h
}

// record is the room's ownership record as the bucket has it.
func (h *parkedHome) record() cluster.Record { return h.w.records[cluster.RecordKey(h.room)].rec }

// parkedAt holds once p keeps the room parked at generation gen.
func (h *parkedHome) parkedAt(p *process, gen uint64) func() bool {
	return func() bool { g, ok := p.member.Core().Parked(h.room); return ok && g.Generation == gen }
}

func socketHome(t *testing.T, seed uint64) {
	h := parkOnN1(t, Config{Seed: seed, Rooms: 1, Faults: quiet})
	defer h.w.s.Close()
	w, n1, n2, n3, room, p1, socket, gen := h.w, h.n1, h.n2, h.n3, h.room, h.p1, h.socket, h.gen
	record, parkedAt := h.record, h.parkedAt

	for _, via := range []*machine{n2, n3} {
		ev := w.land(via, room)
		runUntil(t, w, time.Minute, "an event through "+via.name, func() bool { return ev.done })
		if !ev.r.answered || !ev.r.relayed || ev.r.gen != gen+1 {
			t.Fatalf("an event through %s: %+v; want it relayed to n1 and answered at generation %d", via.name, ev.r, gen+1)
		}
		if rec := record(); rec.Node != n1.name || rec.Instance != p1.member.Core().Instance() || rec.Generation != gen+1 {
			t.Fatalf("after a wake through %s the record is %+v", via.name, rec)
		}
		if !socket.open {
			t.Fatalf("n1's socket closed at the wake through %s", via.name)
		}
		gen++
		runUntil(t, w, 2*time.Minute, "n1 parks the room again", parkedAt(p1, gen))
	}
	if c := p1.member.Core().Counts(); c.ParkedWakes != 2 || c.Parks != 3 {
		t.Errorf("n1 woke the room %d times at home and parked it %d times; want 2 and 3", c.ParkedWakes, c.Parks)
	}

	// n1 dies for good; events keep coming through n2.
	killed := w.s.Now()
	w.kill(p1, "killed")
	n1.down = true
	bound := (2*w.cfg.TTL+w.cfg.Grace)*102/100 + 500*time.Millisecond + time.Second
	for !record().Free && record().Node == n1.name {
		ev := w.land(n2, room)
		runUntil(t, w, time.Minute, "an event through n2 after the kill", func() bool { return ev.done })
		if ev.r.answered {
			break
		}
		if took := time.Duration(w.s.Now() - killed); took > bound {
			t.Fatalf("the room was not taken %v after n1 was killed (bound %v)", took, bound)
		}
		at := w.s.Now() + int64(200*time.Millisecond)
		runUntil(t, w, time.Second, "a client's back-off", func() bool { return w.s.Now() >= at })
	}
	took := time.Duration(w.s.Now() - killed)
	rec := record()
	if rec.Free || rec.Node == n1.name || rec.Generation <= gen || took > bound {
		t.Fatalf("%v after the kill (bound %v) the record is %+v", took, bound, rec)
	}
	t.Logf("taken by %s at generation %d, %v after n1 was killed (bound %v)", rec.Node, rec.Generation, took, bound)
	q := w.machineNamed[rec.Node].proc
	if w.runner(room) != q {
		t.Fatalf("the record names %s, but the room runs on %v", q.name, w.runner(room))
	}

	// The new node parks the room with a socket; the socket's close
	// releases the record.
	socket = w.openSocket(q, room)
	runUntil(t, w, 2*time.Minute, q.name+" parks the room", parkedAt(q, rec.Generation))
	w.closeSocket(socket, true)
	runUntil(t, w, time.Minute, "the last socket's release", func() bool { return record().Free && w.stats.LastSocketReleases > 0 })
	if rec := record(); rec.Node != "" || rec.Instance != "" {
		t.Errorf("the record after the last socket: %+v", rec)
	}
	if _, ok := q.member.Core().Parked(room); ok || w.stats.LastSocketReleases != 1 || q.member.Core().Counts().ParkedReleases != 1 {
		t.Errorf("after the last socket: parked %v, %d releases at the last socket, %d parked releases", ok, w.stats.LastSocketReleases, q.member.Core().Counts().ParkedReleases)
	}
}
