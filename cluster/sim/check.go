package sim

import (
	"strings"
	"time"

	"github.com/wasmkeep/wasmkeep/cluster"
)

// The invariants, checked after every step:
//
//   - never a process that counts its lease valid while the bucket has
//     that lease fenced, released or naming another process (what the
//     lease timing guarantees, and the others rest on);
//   - never two processes acting on one room (holding a hold that is
//     valid by their own clock);
//   - never a record naming a running process whose lease is valid, that
//     neither holds it, nor has a release pending, nor an acquisition in
//     flight or unresolved that wrote it (a leak);
//   - never one generation for two holds of a room (checked as each hold
//     is granted, in serve);
//   - never a room taken (a write naming a node landing on its record)
//     while another running process keeps it parked with a valid lease,
//     nor while another running process with a valid lease, not draining
//     and not moving the room, holds open sockets of it; unless that
//     process's own wake of the room had an unknown outcome or found
//     another holder (it keeps its parked entry or sockets then, and is
//     exposed: counted apart). Checked as each such write lands
//     (checkTaken);
//   - never a process that an operator fenced by hand running again (it
//     was dead, or hung for good);
//
// and, where the member does what they are about (checked as it acts):
//
//   - every event is answered or refused within eventBound of its landing,
//     besides its origin's bucket calls and pauses (deadline), and at the
//     end as many were answered and refused as landed (Run);
//   - no event is relayed twice (the hop rule; relayed);
//   - a take that starts while its node drains never succeeds, nor does
//     a park (serve, hibernate);
//   - a drain reports drained only when no record names its process
//     (checkDrained);
//   - the owner sweep closes the sockets of a room only when its record
//     does not name the sweeping process (checkSweepClose);
//   - a move that ends as taken by another node leaves no record naming
//     the node it moved from (moveEnded);
//   - a drain reports drained within drainBound, besides its process's
//     pauses and bucket outages, unless the process ends first
//     (drainDeadline);
//   - a move the target answered leaves the room's record at the hold the
//     target took (or free after it), or at a later hold; and the node it
//     moved from no longer acts on it (checkMove).
//
//   - a room parked here, whose record names this process at the parked
//     hold's generation, is never routed to another node, unless this
//     node drains (checkNotAway): its events would go, and its sockets
//     close, away from the node that keeps them;
//   - a call between rooms, as it begins to run (checkCallRun), has not
//     run before, nor been answered refused (not run); it is not in a
//     cycle; it begins before its caller's deadline, moved on by the
//     time it took to reach its node (the time left travels, not the
//     deadline: nothing can tell a call read late); and it runs where
//     its room is held: its node acts on the room, no other node does,
//     and the record names its node at the hold's generation;
//   - every call is answered by its deadline (or at once, if made past
//     it), besides its origin's bucket calls and pauses (callOnTime),
//     and at the end as many were answered and dropped as made (Run); a
//     call in a cycle is answered StatusCycle at once, and no other is
//     (callAnswered); a call answered refused never ran, nor runs later.
//
// A hung process runs no more: whatever its clock says, it acts on
// nothing, so the first two skip it.
//
// A step can break one of the first four only through what it changed:
// the state of the process that ran (only its own steps can make it act,
// extend its lease or drop what accounts for a record; time passing only
// ends validity), or an object a write applied to. So check looks at
// those, unless Config.CheckEverything asks it to look at everything.

// check looks for a broken invariant after a step in which ran (nil for
// the scheduler's own events) ran and the writes to w.touched applied.
func (w *World) check(ran *process) {
	if ran != nil && ran.machine.proc == ran && w.handFenced[ran.member.Core().Instance()] {
		w.fail("%s, fenced by hand, ran again", ran.name)
		return
	}
	if w.cfg.CheckEverything {
		for _, m := range w.machines {
			if m.proc != nil {
				w.checkProcess(m.proc)
			}
		}
		for i := range w.rooms {
			w.checkRecord(i)
		}
		w.touched = w.touched[:0]
		return
	}
	if ran != nil && ran.machine.proc == ran {
		w.checkProcess(ran)
	}
	for _, key := range w.touched {
		if i, ok := w.roomOf[key]; ok {
			w.checkRecord(i)
		} else if m := w.machineOf[key]; m != nil && m.proc != nil {
			w.checkProcess(m.proc)
		}
	}
	w.touched = w.touched[:0]
}

// checkProcess checks p's lease, the rooms it acts on and the records
// naming it.
func (w *World) checkProcess(p *process) {
	if p.hung {
		return // it runs no more: it acts on nothing, whatever its clock says
	}
	name := p.machine.name
	if l := w.leases[name]; (l.Instance != p.member.Core().Instance() || l.State != cluster.LeaseLive) && p.member.Core().LeaseValid() {
		w.fail("%s counts its lease valid, but the bucket has it %s for instance %s", p.name, l.State, l.Instance)
		return
	}
	for i, room := range w.rooms {
		// The node's holds are among the host's (Acquire hands each one
		// over at once), so a room the host does not hold is not acted
		// on.
		if _, held := p.holds[room]; held && p.member.Core().Acting(room) {
			if acting := w.actingOn(room); len(acting) > 1 {
				w.fail("room %s: %s act on it at once", room, strings.Join(acting, " and "))
				return
			}
		}
		if r := w.records[w.recordKeys[i]]; r.rec.Node == name {
			w.checkRecord(i)
		}
	}
}

// actingOn names the processes acting on room (a hung one acts on
// nothing).
func (w *World) actingOn(room cluster.Room) []string {
	var acting []string
	for _, m := range w.machines {
		if q := m.proc; q != nil && !q.hung && q.member.Core().Acting(room) {
			acting = append(acting, q.name)
		}
	}
	return acting
}

// checkRecord checks that room i's record, if it names a running process
// whose lease is valid, is accounted for there.
func (w *World) checkRecord(i int) {
	room := w.rooms[i]
	r, ok := w.records[w.recordKeys[i]]
	if !ok || r.rec.Free {
		return
	}
	m := w.machineNamed[r.rec.Node]
	if m == nil || m.proc == nil {
		return
	}
	p := m.proc
	if p.member.Core().Instance() != r.rec.Instance || !p.member.Core().LeaseValid() {
		return
	}
	if !p.member.Core().Accounts(room, r.etag, r.rec.Nonce) {
		w.fail("room %s: its record (generation %d, version %s) names %s, which has nothing that will release it", room, r.rec.Generation, r.etag, p.name)
	}
}

// checkTaken checks, as a write naming node rec.Node lands on room i's
// record, that no other node's running process keeps the room parked with
// a valid lease, or holds sockets of it with a valid lease while neither
// draining nor moving the room, unless that process's own wake of the
// room had an unknown outcome or found another holder (exposed: counted).
func (w *World) checkTaken(i int, rec cluster.Record) {
	room := w.rooms[i]
	exposed := false
	for _, m := range w.machines {
		q := m.proc
		if q == nil || q.hung || m.name == rec.Node || !q.member.Core().LeaseValid() {
			continue
		}
		h, parked := q.member.Core().Parked(room)
		sockets := w.openSockets(q, room)
		_, moving := q.member.Core().Moving(room)
		if !parked && (sockets == 0 || q.draining || moving) {
			continue
		}
		if q.exposed[room] {
			exposed = true
			continue
		}
		if parked {
			w.fail("room %s taken by %s (generation %d) while %s keeps it parked (generation %d) with a valid lease", room, rec.Node, rec.Generation, q.name, h.Generation)
		} else {
			w.fail("room %s taken by %s (generation %d) while %s, valid and not draining, holds %d sockets of it", room, rec.Node, rec.Generation, q.name, sockets)
		}
		return
	}
	if exposed {
		w.stats.Exposed++
		w.s.Note("room %s taken by %s (generation %d) while exposed", room, rec.Node, rec.Generation)
	}
}

// checkNotAway checks, as p routes room to node to, that room is not
// parked at p with its record naming p at the parked generation (a
// draining node sends every room away).
func (w *World) checkNotAway(p *process, room cluster.Room, to string) {
	h, parked := p.member.Core().Parked(room)
	if !parked || p.draining {
		return
	}
	if r := w.records[cluster.RecordKey(room)].rec; !r.Free && r.Instance == p.member.Core().Instance() && r.Generation == h.Generation {
		w.fail("%s routes room %s to %s, though it keeps the room parked (generation %d) and the record names it", p.name, room, to, h.Generation)
	}
}

// checkSweepClose checks, as p's owner sweep closes the sockets of room,
// that room's record does not name p for a hold p keeps (parked, or
// acting on it): the sweep closes only the sockets of rooms that are not
// this node's. (A record left naming p by a release still on its way is
// not p's room any more.)
func (w *World) checkSweepClose(p *process, room cluster.Room) {
	if room == (cluster.Room{}) {
		return
	}
	core := p.member.Core()
	r := w.records[cluster.RecordKey(room)].rec
	if r.Free || r.Instance != core.Instance() {
		return
	}
	if h, parked := core.Parked(room); parked && h.Generation == r.Generation || core.Acting(room) {
		w.fail("%s's owner sweep closed the sockets of room %s, whose record names it for a hold it keeps (generation %d)", p.name, room, r.Generation)
	}
}

// checkCallRun checks a call's copy cp as it begins to run on p, in its
// room on hold h: the call has not run before, nor been answered refused;
// it is not in a cycle (its room waits on its chain: the run would be a
// second event in it while its first waits); it begins before its
// caller's deadline, as carried to p (callCopy); and it runs where the
// room is held: p acts on the room and no other process does (the check
// of two acting), and the record names p at h's generation.
func (w *World) checkCallRun(cp callCopy, p *process, h cluster.Hold) {
	rc, room, now := cp.rc, h.Room, w.s.Now()
	rc.runs = append(rc.runs, callRun{proc: p.name, gen: h.Generation, at: now})
	w.stats.CallRuns++
	if p.machine != rc.origin.machine {
		w.stats.CallRunsSent++
	}
	w.s.Note("call %d runs in %s on %s at generation %d", rc.id, room.Name, p.name, h.Generation)
	first := rc.runs[0]
	switch {
	case len(rc.runs) > 1:
		w.fail("call %d from %s to %s ran twice: on %s at %v (generation %d), and on %s (generation %d)",
			rc.id, rc.chain, rc.to, first.proc, time.Duration(first.at), first.gen, p.name, h.Generation)
	case rc.refused:
		w.fail("call %d from %s to %s, answered refused (not run), runs on %s", rc.id, rc.chain, rc.to, p.name)
	case rc.cycle:
		w.fail("call %d from %s to %s runs in %s on %s, which waits on its chain", rc.id, rc.chain, rc.to, room, p.name)
	case now > cp.due+int64(callRunSlack):
		w.fail("call %d from %s to %s begins to run on %s %v after its caller gave up (made on %s at %v, due at %v)",
			rc.id, rc.chain, rc.to, p.name, time.Duration(now-cp.due), rc.origin.name, time.Duration(rc.made), time.Duration(cp.due))
	case now > cp.sentDue+int64(callRunSlack):
		w.stats.CallRunsLateSent++
	}
	if acting := w.actingOn(room); len(acting) != 1 || acting[0] != p.name {
		w.fail("call %d runs in room %s on %s, while %v act on it", rc.id, room, p.name, acting)
		return
	}
	if r := w.records[cluster.RecordKey(room)].rec; r.Free || r.Instance != p.member.Core().Instance() || r.Generation != h.Generation {
		w.fail("call %d runs in room %s on %s at generation %d, but its record names %q at generation %d (free %v)",
			rc.id, room, p.name, h.Generation, r.Node, r.Generation, r.Free)
	}
}

// callOnTime checks that rc, answered or not, is not past its deadline
// (or its making, if it was made past it) by more than callAnswerSlack,
// besides what it excuses (callExcused).
func (w *World) callOnTime(rc *roomCall) {
	over := time.Duration(w.s.Now() - max(rc.due, rc.made) - w.callExcused(rc))
	if rc.done {
		w.stats.LongestCallOver = max(w.stats.LongestCallOver, over)
	}
	if over <= callAnswerSlack {
		return
	}
	if rc.done {
		w.fail("call %d from %s to %s, made on %s at %v, was answered %v after its deadline (besides %v of bucket calls and pauses)",
			rc.id, rc.chain, rc.to, rc.origin.name, time.Duration(rc.made), over, time.Duration(w.callExcused(rc)))
		return
	}
	w.fail("call %d from %s to %s, made on %s at %v, neither answered nor refused %v after its deadline (besides %v of bucket calls and pauses)",
		rc.id, rc.chain, rc.to, rc.origin.name, time.Duration(rc.made), over, time.Duration(w.callExcused(rc)))
}
