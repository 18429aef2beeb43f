package sim

import (
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/wasmkeep/wasmkeep/calls"
)

// quietCalls are call faults that never happen.
var quietCalls = CallFaults{BreakWithin: time.Second, SlowMax: time.Second}

// TestSimFrontCallsWakeTheRoomAtHome is the socket home's scenario of
// calls (seed 000 §9), on three nodes, a bucket and a network without
// faults: a chat room with a socket on n1 hibernates (parked there);
// fronts on n2 and n3 call it, in turn, several times. Each call is sent
// to n1, wakes the room there at a new generation and runs there once;
// what it broadcasts reaches the socket, which stays open throughout; and
// no owner sweep closes a socket on any node, though each sweeps.
func TestSimFrontCallsWakeTheRoomAtHome(t *testing.T) {
	for seed := range uint64(4) {
		t.Run(fmt.Sprintf("seed %d", seed), func(t *testing.T) { frontCallsHome(t, seed) })
	}
}

func frontCallsHome(t *testing.T, seed uint64) {
	h := parkOnN1(t, Config{Seed: seed, Rooms: 1, Faults: quiet, CallFaults: quietCalls})
	defer h.w.s.Close()
	w, n1, n2, n3, room, p1, socket, gen := h.w, h.n1, h.n2, h.n3, h.room, h.p1, h.socket, h.gen
	record, parkedAt := h.record, h.parkedAt
	var ids []int
	for i, via := range []*machine{n2, n3, n2, n3, n2} {
		made := w.frontCall(via, room, nil, calls.DefaultTimeout)
		what := fmt.Sprintf("call %d, from a front on %s", i+1, via.name)
		runUntil(t, w, time.Minute, what, func() bool { rc := made(); return rc != nil && rc.done })
		rc := made()
		if rc.res.Err != nil {
			t.Fatalf("%s: %v", what, rc.res.Err)
		}
		if len(rc.runs) != 1 || rc.runs[0].proc != p1.name || rc.runs[0].gen != gen+1 {
			t.Fatalf("%s ran %+v; want once, on %s at generation %d", what, rc.runs, p1.name, gen+1)
		}
		if rec := record(); rec.Node != n1.name || rec.Instance != p1.member.Core().Instance() || rec.Generation != gen+1 {
			t.Fatalf("after %s the record is %+v", what, rec)
		}
		ids = append(ids, rc.id)
		if !socket.open || !slices.Equal(socket.got, ids) {
			t.Fatalf("after %s n1's socket is open %v, has the broadcasts of calls %v; want %v", what, socket.open, socket.got, ids)
		}
		gen++
		runUntil(t, w, 2*time.Minute, "n1 parks the room again", parkedAt(p1, gen))
	}
	if c := p1.member.Core().Counts(); c.ParkedWakes != 5 || c.Parks != 6 {
		t.Errorf("n1 woke the room %d times at home and parked it %d times; want 5 and 6", c.ParkedWakes, c.Parks)
	}
	if w.stats.CallRunsSent != 5 || w.stats.SocketsClosedByNode != 0 {
		t.Errorf("%d calls ran on the node they were sent to, want 5; %d sockets closed by their node", w.stats.CallRunsSent, w.stats.SocketsClosedByNode)
	}
	for _, m := range w.machines {
		if sweeps := m.proc.member.Sweeps(); sweeps == 0 {
			t.Errorf("%s never swept", m.proc.name)
		}
	}
	if w.stats.SweepCloses != 0 {
		t.Errorf("the owner sweep closed the sockets of %d rooms", w.stats.SweepCloses)
	}
}
