package sim

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/wasmkeep/wasmkeep/cluster"
	"github.com/wasmkeep/wasmkeep/cluster/member"
)

// Events, and the fake of a node's rooms. Every process runs the real
// cluster member (cluster/member) over its real core (cluster): the
// member routes each event, ends holds, drains, moves and sweeps exactly
// as a server's does. What the simulation owns is only what stands in for
// the rest of a server:
//
//   - the rooms (this file and socket.go): a room the member routes Here
//     is served by a fake room manager, which acquires it through the
//     member (Acquire), keeps it resident for a while and then ends its
//     hold through the member (End, parking it if sockets are open here);
//   - the peers (peer.go): the member's forwards and a move's ask to take
//     a room travel over the simulated network to the member of the
//     process on the target machine;
//   - the workload (ops.go): clients' events and sockets, crashes,
//     pauses, hangs, clean stops, cut links, and an operator's drains,
//     moves and fences by hand;
//   - the checks (check.go).

// reason is why an event was refused.
type reason uint8

// Why events are refused (Stats.Reasons).
const (
	refusedDown        reason = iota // its machine ran no process, or a hung one
	refusedDropped                   // its process died or hung while it was under way
	refusedInactive                  // this node's lease was not valid (joining, lapsed, stopping)
	refusedWait                      // nobody could run the room within the failover wait
	refusedMoved                     // relayed here, but not here (the hop rule)
	refusedUnreachable               // the room's node could not be reached, once more
	refusedRelay                     // a relay connected but was not answered (timeout, reset)
	refusedHeld                      // the take found the room held by another instance
	refusedBusy                      // another acquisition of the room was under way here
	refusedContended                 // the record changed under the take, twice
	refusedUnknown                   // the take's answer was lost (the resolver settles it)
	refusedDraining                  // the take came after this node started draining
	refusedBucket                    // a bucket error while routing or taking
	refusedMoving                    // the take came while this node moves the room away
	nReasons
)

// ReasonNames name the reasons of Stats.Reasons, in order.
var ReasonNames = [nReasons]string{"down", "dropped", "inactive", "wait", "moved", "unreachable", "relay",
	"held", "busy", "contended", "unknown", "draining", "bucket", "moving"}

// Variants break what the simulation's world does on purpose, as
// cluster.Variants and member.Variants break the core's and the member's
// rules: its network and its operator.
type Variants struct {
	// ForwardWithoutTimeout waits for a forward's answer for ever, as an
	// HTTP client without a timeout does.
	ForwardWithoutTimeout bool
	// FencePaused has the operator fence by hand a process that is only
	// paused, taking it for hung: it resumes.
	FencePaused bool
	// AlarmWithoutHold has the fake room manager run an alarm on the hold
	// it has, without asking the member whether it is still valid (what
	// host/rooms does before every event).
	AlarmWithoutHold bool
}

// VariantNames are the names of Variants' fields.
var VariantNames = []string{"ForwardWithoutTimeout", "FencePaused", "AlarmWithoutHold"}

// variant returns the Variants with the one of that name switched on,
// and whether there is one of that name.
func variant(name string) (Variants, bool) {
	var v Variants
	switch name {
	case "ForwardWithoutTimeout":
		v.ForwardWithoutTimeout = true
	case "FencePaused":
		v.FencePaused = true
	case "AlarmWithoutHold":
		v.AlarmWithoutHold = true
	default:
		return v, false
	}
	return v, true
}

// request is one event for a room, from its landing to its answer.
type request struct {
	id     int
	room   cluster.Room
	origin *process
	task   *Task // the task that routes it on its origin
	landed int64
	// excused is time the bound does not count besides its task's bucket
	// calls: its origin's pauses.
	excused int64
	done    bool
	// r is its outcome, once done.
	r reply
}

// eventBound is the longest an event may take, on its origin's clock,
// besides its origin's bucket calls and pauses: the member dials at most
// twice in vain, waits once for the failover, and makes one forward that
// connects.
const eventBound = 2*dialTimeout + member.DefaultFailoverWait + headerTimeout

// eventSlack covers the legs, the event's run on its hold, and the
// rounding of the clocks' rates.
const eventSlack = time.Second

// event lands a request for a random room on a random machine.
func (w *World) event() {
	if w.s.Now() < int64(w.cfg.Duration) {
		w.s.At(w.after(150*time.Millisecond), "event", w.event)
	}
	m := w.machines[w.rng.IntN(len(w.machines))]
	w.land(m, w.rooms[w.rng.IntN(len(w.rooms))])
}

// land lands an event for room on machine m.
func (w *World) land(m *machine, room cluster.Room) *request {
	w.events++
	ev := &request{id: w.events, room: room, landed: w.s.Now()}
	w.stats.Landed++
	w.open++
	p := m.proc
	if p == nil || p.hung {
		w.close(ev, refuse(refusedDown))
		return ev
	}
	ev.origin = p
	ev.excused = w.pausedFor(p) // it waits for its process to resume
	p.events = append(p.events, ev)
	w.s.At(ev.landed+p.clock.global(eventBound)+int64(eventSlack), "deadline", func() { w.deadline(ev) })
	w.s.Spawn(p.group, fmt.Sprintf("event %d %s", ev.id, room.Name), func(ctx context.Context) {
		ev.task = TaskOf(ctx)
		w.close(ev, w.dispatch(ctx, p, ev.room, false))
	})
	return ev
}

// dispatch is what p does with an event for room: the member routes it
// (forwarded: it was forwarded to p), the fake rooms serve it if it is
// here, and a forward goes over the network to the member of the target.
func (w *World) dispatch(ctx context.Context, p *process, room cluster.Room, forwarded bool) reply {
	var answer reply
	d := p.member.Dispatch(ctx, room, forwarded, func(ctx context.Context, node, _ string) bool {
		to := w.machineNamed[node]
		r, err := w.call(ctx, p, to, "forward "+room.Name, func(ctx context.Context, q *process) reply {
			w.stats.Relays++
			if forwarded {
				w.fail("an event for room %s forwarded twice, the second time by %s to %s", room, p.name, q.name)
			}
			r := w.dispatch(ctx, q, room, true)
			r.relayed = r.answered
			return r
		})
		switch {
		case errors.Is(err, errUnreachable):
			w.stats.Dials++
			return true
		case err != nil:
			answer = refuse(refusedRelay)
		default:
			answer = r
		}
		return false
	})
	switch d.Outcome {
	case member.Serve:
		return w.serve(ctx, p, room)
	case member.Forwarded:
		return answer
	}
	switch d.Refusal {
	case member.RefusedInactive:
		return refuse(refusedInactive)
	case member.RefusedMoved:
		return refuse(refusedMoved)
	case member.RefusedUnreachable:
		return refuse(refusedUnreachable)
	case member.RefusedBucket:
		return refuse(refusedBucket)
	}
	return refuse(refusedWait)
}

// close gives ev its outcome, once.
func (w *World) close(ev *request, r reply) {
	if ev.done {
		return
	}
	ev.done, ev.r = true, r
	w.open--
	w.stats.LongestEvent = max(w.stats.LongestEvent, time.Duration(w.s.Now()-ev.landed-w.excused(ev)))
	if p := ev.origin; p != nil {
		p.events = slices.DeleteFunc(p.events, func(e *request) bool { return e == ev })
	}
	if r.answered {
		w.stats.Answered++
		if r.relayed {
			w.stats.AnsweredRelayed++
		}
		return
	}
	w.stats.Refused++
	w.stats.Reasons[r.why]++
}

// excused is the time ev's bound does not count: its origin's pauses, and
// the bucket calls of the task that routes it (the one under way too).
func (w *World) excused(ev *request) int64 {
	e := ev.excused
	if t := ev.task; t != nil {
		e += t.bucketTime
		if t.inBucket {
			e += w.s.Now() - t.bucketFrom
		}
	}
	return e
}

// dropEvents refuses the events under way on p, whose process died or
// hung: their clients' connections fail.
func (w *World) dropEvents(p *process) {
	for _, ev := range slices.Clone(p.events) {
		w.close(ev, refuse(refusedDropped))
	}
}

// deadline checks that ev was answered or refused within eventBound,
// besides what it excuses; it looks again later while that grows.
func (w *World) deadline(ev *request) {
	if ev.done {
		return
	}
	excused := w.excused(ev)
	inCall := ev.task != nil && ev.task.inBucket
	due := ev.landed + ev.origin.clock.global(eventBound) + int64(eventSlack) + excused
	if w.s.Now() < due || inCall {
		w.s.At(max(due, w.s.Now()+int64(time.Second)), "deadline", func() { w.deadline(ev) })
		return
	}
	w.fail("event %d for room %s, landed on %s at %v, neither answered nor refused after %v (%v of it in bucket calls and pauses)",
		ev.id, ev.room, ev.origin.name, time.Duration(ev.landed), time.Duration(w.s.Now()-ev.landed), time.Duration(excused))
}

// serve is the fake room manager of p serving an event for room, which
// the member routed here: on the hold it has, or on one the member
// acquires (a wake, for a room parked here). A room taken stays resident
// for a while. It is also the target's side of a move (take).
func (w *World) serve(ctx context.Context, p *process, room cluster.Room) reply {
	mem, node := p.member, p.member.Core()
	if h, ok := p.holds[room]; ok {
		if mem.Valid(h) {
			return reply{answered: true, gen: h.Generation}
		}
		delete(p.holds, room) // dropped: the instance goes, unwritten
		mem.End(ctx, h, "invalid", false)
	}
	if node.Acting(room) {
		// The core acts on the room, and the rooms would have every
		// hold of it.
		w.fail("%s routes room %s here as held, but its rooms hold no valid hold of it", p.name, room)
		return refuse(refusedHeld) // the run ends at the violation
	}
	// A wake of the room parked here (an acquisition at generation + 1)
	// that finds another holder, or whose outcome is unknown (the core
	// then keeps the parked entry), exposes what it keeps here
	// (checkTaken).
	_, wake := node.Parked(room)
	// Draining at the start of the take and not undrained by its end: the
	// core must have refused it (it decides after any read of a lease the
	// take makes first, during which a drain may end).
	draining, flips := p.draining, p.drainFlips
	h, err := mem.Acquire(ctx, room)
	draining = draining && p.drainFlips == flips
	_, parked := node.Parked(room)
	wake = wake || parked
	var held *cluster.HeldError
	switch {
	case err == nil:
	case errors.As(err, &held):
		if wake {
			p.exposed[room] = true
		}
		return refuse(refusedHeld)
	case errors.Is(err, cluster.ErrNotActive):
		return refuse(refusedInactive)
	case errors.Is(err, cluster.ErrDraining):
		return refuse(refusedDraining)
	case errors.Is(err, cluster.ErrMoving):
		return refuse(refusedMoving)
	case errors.Is(err, cluster.ErrBusy):
		return refuse(refusedBusy)
	case errors.Is(err, cluster.ErrContended):
		return refuse(refusedContended)
	case errors.Is(err, cluster.ErrUnknown):
		// Parked now, so at the write too (nothing parks a room while
		// an acquisition of it is in flight here): a wake, even if
		// the room parked only while its read was on the way.
		if wake {
			p.exposed[room] = true
		}
		return refuse(refusedUnknown)
	default:
		return refuse(refusedBucket)
	}
	if draining {
		w.fail("%s took room %s (generation %d) while draining", p.name, room, h.Generation)
	}
	w.stats.Acquisitions++
	gens := w.granted[room]
	if gens == nil {
		gens = map[uint64]string{}
		w.granted[room] = gens
	}
	if other, dup := gens[h.Generation]; dup {
		w.fail("room %s: generation %d granted twice, to %s and to %s", room, h.Generation, other, p.name)
	}
	gens[h.Generation] = p.name
	p.holds[room] = h
	delete(p.exposed, room)
	w.alarmWoken(p, room)
	w.s.Spawn(p.group, "resident "+room.Name, func(ctx context.Context) { w.resident(ctx, p, h) })
	return reply{answered: true, gen: h.Generation}
}

// resident keeps a room taken here for a while, then it goes idle: its
// hold ends through the member, which parks it if sockets are open here.
// Most rooms stay for a few events; some stay for long (a busy room),
// outliving lease renewals, cut links and fences.
func (w *World) resident(ctx context.Context, p *process, h cluster.Hold) {
	sl := sleeper{p}
	uses := 1 + w.rng.IntN(6)
	if w.rng.IntN(3) == 0 {
		uses = 10 + w.rng.IntN(20)
	}
	for range uses {
		sl.Sleep(ctx, w.between(100*time.Millisecond, 2*time.Second))
		if !p.member.Valid(h) {
			break
		}
		w.stats.Uses++
	}
	// Not idle while a call runs in it, or waits to.
	for p.holds[h.Room] == h && p.member.Valid(h) && w.turnTaken(p, h.Room) {
		sl.Sleep(ctx, 50*time.Millisecond)
	}
	if p.holds[h.Room] == h {
		delete(p.holds, h.Room)
		w.hibernate(ctx, p, h)
	}
}

// hibernate ends a resident room's hold h as the room goes idle, through
// the member, telling it whether sockets are open here; it checks that a
// room never parks on a node that was draining throughout.
func (w *World) hibernate(ctx context.Context, p *process, h cluster.Hold) {
	draining, flips := p.draining, p.drainFlips
	p.member.End(ctx, h, "idle", w.openSockets(p, h.Room) > 0)
	if cur, parked := p.member.Core().Parked(h.Room); parked && cur == h {
		delete(p.exposed, h.Room)
		w.s.Note("%s parks %s at generation %d", p.name, h.Room.Name, h.Generation)
		if draining && p.drainFlips == flips {
			w.fail("%s parked room %s (generation %d) while draining", p.name, h.Room, h.Generation)
		}
	}
}
