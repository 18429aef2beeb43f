package sim

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/wasmkeep/wasmkeep/cluster"
)

// The host: what a node does with the events that land on it, with the
// same calls of the core as clusternode's member and host/server's
// routing make (clusternode/member.go, host/server/forward.go). An event
// lands on a random machine, which routes it:
//
//   - Here: the room is held here, or Take writes over the routing read
//     (ErrContended: Acquire once more; a room parked here wakes so, at a
//     new generation). The event runs on the hold, and the room stays
//     resident for a while, then goes idle: parked if it has sockets
//     here, else released (socket.go). A take that finds another holder
//     closes the room's sockets here.
//   - Elsewhere: the room's sockets here, if any, close (it runs
//     elsewhere), and the event is relayed to that node. A relay that
//     cannot connect tells the core (Unreachable) and routes once more; a
//     second Elsewhere to the same node, or after a second dial, is
//     refused.
//     The node an event was relayed to routes it once and refuses it
//     unless it is here: an event is relayed at most once (the hop rule).
//   - Wait: the host polls the route (50 ms doubling to 500 ms) for up to
//     the failover wait, then refuses the event.

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

// HostVariants break the simulated host's rules on purpose, one at a
// time, as cluster.Variants do the core's, to show that the checks catch
// each break.
type HostVariants struct {
	// Bounce relays a relayed event that is not here once more, instead
	// of refusing it.
	Bounce bool
	// DrainUntold drains the host (it hands its rooms over) without
	// telling its core (SetDraining), which then goes on taking rooms.
	DrainUntold bool
	// ForwardWithoutTimeout waits for a relay's answer for ever, as an
	// HTTP client without a timeout does.
	ForwardWithoutTimeout bool
	// FencePaused has the operator fence by hand a process that is only
	// paused, taking it for hung: it resumes.
	FencePaused bool
	// ReleaseOnHibernation releases the hold of a room that goes idle
	// with sockets open here, instead of parking it: the room's next
	// event may wake it on another node, away from its sockets.
	ReleaseOnHibernation bool
	// GiveUpKeepsSockets leaves a room's sockets open when its move
	// ends unfinished: they stay on a node that neither holds nor parks
	// the room, which another node then takes.
	GiveUpKeepsSockets bool
}

// HostVariantNames are the names of HostVariants' fields.
var HostVariantNames = []string{"Bounce", "DrainUntold", "ForwardWithoutTimeout", "FencePaused", "ReleaseOnHibernation", "GiveUpKeepsSockets"}

// HostVariant returns the HostVariants with the one of that name switched
// on, and whether there is one of that name.
func HostVariant(name string) (HostVariants, bool) {
	var v HostVariants
	switch name {
	case "Bounce":
		v.Bounce = true
	case "DrainUntold":
		v.DrainUntold = true
	case "ForwardWithoutTimeout":
		v.ForwardWithoutTimeout = true
	case "FencePaused":
		v.FencePaused = true
	case "ReleaseOnHibernation":
		v.ReleaseOnHibernation = true
	case "GiveUpKeepsSockets":
		v.GiveUpKeepsSockets = true
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
	landed int64
	// excused is time the bound does not count: the origin's bucket
	// calls (callFrom is the start of the one under way, if inCall) and
	// its pauses.
	excused  int64
	callFrom int64
	inCall   bool
	done     bool
	// r is its outcome, once done.
	r reply
}

// eventBound is the longest an event may take, on its origin's clock,
// besides its origin's bucket calls and pauses: the host's loop dials at
// most twice in vain, waits once for the failover, and makes one relay
// that connects.
const eventBound = 2*dialTimeout + failoverWait + headerTimeout

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
		w.close(ev, w.route(ctx, p, ev, false))
	})
	return ev
}

// close gives ev its outcome, once.
func (w *World) close(ev *request, r reply) {
	if ev.done {
		return
	}
	ev.done, ev.r = true, r
	w.open--
	w.stats.LongestEvent = max(w.stats.LongestEvent, time.Duration(w.s.Now()-ev.landed-ev.excused))
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
	excused := ev.excused
	if ev.inCall {
		excused += w.s.Now() - ev.callFrom
	}
	due := ev.landed + ev.origin.clock.global(eventBound) + int64(eventSlack) + excused
	if w.s.Now() < due || ev.inCall {
		w.s.At(max(due, w.s.Now()+int64(time.Second)), "deadline", func() { w.deadline(ev) })
		return
	}
	w.fail("event %d for room %s, landed on %s at %v, neither answered nor refused after %v (%v of it in bucket calls and pauses)",
		ev.id, ev.room, ev.origin.name, time.Duration(ev.landed), time.Duration(w.s.Now()-ev.landed), time.Duration(excused))
}

// timed runs a call of the core for ev on p; on ev's origin, the time it
// takes in the bucket does not count towards ev's bound.
func (w *World) timed(ev *request, p *process, f func()) {
	if ev == nil || ev.origin != p {
		f()
		return
	}
	ev.callFrom, ev.inCall = w.s.Now(), true
	f()
	ev.excused += w.s.Now() - ev.callFrom
	ev.inCall = false
}

func (w *World) routeOnce(ctx context.Context, p *process, ev *request) (where cluster.Where, err error) {
	w.timed(ev, p, func() { where, err = p.node.Route(ctx, ev.room) })
	return where, err
}

// route is what p's host does with ev: serve it here, relay it, or wait
// for its room to be free; relayed says ev was relayed here (host/server's
// routeCluster).
func (w *World) route(ctx context.Context, p *process, ev *request, relayed bool) reply {
	where, err := w.routeOnce(ctx, p, ev)
	waited, redialed := false, false
	for {
		if err != nil {
			return refuse(refusedBucket)
		}
		switch where.Kind {
		case cluster.Here:
			return w.serveHere(ctx, p, ev, ev.room, where)
		case cluster.Wait:
			if relayed || waited {
				return refuse(w.waitReason(p))
			}
			waited = true
			where, err = w.awaitRoute(ctx, p, ev)
		case cluster.Elsewhere:
			// The room runs elsewhere (or, from a draining node, is
			// taken elsewhere): its sockets here are not its own any
			// more.
			// A room this node moves away keeps its sockets until
			// another node holds it (the move closes them then).
			w.checkNotAway(p, ev.room, where.Node)
			if _, moving := p.node.Moving(ev.room); !moving {
				w.closeRoomSockets(p, ev.room, "the room runs on "+where.Node)
			}
			if relayed && !w.cfg.Host.Bounce {
				return refuse(refusedMoved)
			}
			to := w.machineNamed[where.Node]
			r, cerr := w.call(ctx, p, to, fmt.Sprintf("relay %d %s", ev.id, ev.room.Name), func(ctx context.Context, q *process) reply {
				return w.relayed(ctx, q, ev, relayed)
			})
			switch {
			case cerr == nil:
				return r
			case !errors.Is(cerr, errUnreachable):
				return refuse(refusedRelay)
			}
			w.stats.Dials++
			w.timed(ev, p, func() { p.node.Unreachable(ctx, where.Node) })
			gone := where.Node
			where, err = w.routeOnce(ctx, p, ev)
			if err == nil && where.Kind == cluster.Elsewhere && (redialed || where.Node == gone) {
				return refuse(refusedUnreachable)
			}
			redialed = true
		}
	}
}

// relayed is the host of q handling ev, relayed to it; again says the
// relay came from a node ev had been relayed to already (a bounce).
func (w *World) relayed(ctx context.Context, q *process, ev *request, again bool) reply {
	w.stats.Relays++
	if again {
		w.fail("event %d for room %s relayed twice, the second time to %s", ev.id, ev.room, q.name)
	}
	r := w.route(ctx, q, ev, true)
	r.relayed = r.answered
	return r
}

func (w *World) waitReason(p *process) reason {
	if !p.node.LeaseValid() {
		return refusedInactive
	}
	return refusedWait
}

// awaitRoute polls where ev's room runs, with back-off, until it is here
// or elsewhere, or the failover wait has passed (Wait then).
func (w *World) awaitRoute(ctx context.Context, p *process, ev *request) (cluster.Where, error) {
	w.stats.FailoverWaits++
	sl := sleeper{p}
	deadline := p.clock.Now() + int64(failoverWait)
	for delay := failoverPollFirst; ; delay = min(2*delay, failoverPollMax) {
		left := time.Duration(deadline - p.clock.Now())
		if left <= 0 {
			return cluster.Where{Kind: cluster.Wait}, nil
		}
		sl.Sleep(ctx, min(delay, left))
		where, err := w.routeOnce(ctx, p, ev)
		if err != nil || where.Kind != cluster.Wait {
			return where, err
		}
	}
}

// serveHere runs an event (ev; nil for a move's take) on room here:
// on the hold the host has, or on one Take writes over where's read. A
// room taken stays resident for a while.
func (w *World) serveHere(ctx context.Context, p *process, ev *request, room cluster.Room, where cluster.Where) reply {
	node := p.node
	if h, ok := p.holds[room]; ok {
		if node.Valid(h) {
			return reply{answered: true, gen: h.Generation}
		}
		delete(p.holds, room) // dropped: the host's instance goes, unwritten
		node.Release(ctx, h)
	}
	if where.Seen.Room != room {
		// Here without a read: the core holds the room, and the host
		// has every hold of the core.
		w.fail("%s routes room %s here as held, but its host holds no valid hold of it", p.name, room)
		return refuse(refusedHeld) // the run ends at the violation
	}
	var h cluster.Hold
	var err error
	// A wake of the room parked here (an acquisition at generation + 1)
	// that finds another holder, or whose outcome is unknown (the core
	// then keeps the parked entry), exposes what it keeps here
	// (checkTaken).
	_, wake := node.Parked(room)
	// Draining at the start of the take and not undrained by its end: the
	// core must have refused it (it decides after any read of a lease the
	// take makes first, during which a drain may end).
	draining, flips := p.draining, p.drainFlips
	w.timed(ev, p, func() { h, err = node.Take(ctx, where.Seen) })
	if errors.Is(err, cluster.ErrContended) {
		draining, flips = p.draining, p.drainFlips
		_, parked := node.Parked(room)
		wake = wake || parked
		w.timed(ev, p, func() { h, err = node.Acquire(ctx, room) })
	}
	draining = draining && p.drainFlips == flips
	var held *cluster.HeldError
	switch {
	case err == nil:
	case errors.As(err, &held):
		if wake {
			p.exposed[room] = true
		}
		w.closeRoomSockets(p, room, "the room is held by "+held.Node)
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
		if _, kept := node.Parked(room); kept || wake {
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
	w.s.Spawn(p.group, "resident "+room.Name, func(ctx context.Context) { w.resident(ctx, p, h) })
	return reply{answered: true, gen: h.Generation}
}

// resident keeps a room taken here for a while, then it goes idle
// (hibernate: parked if it has sockets here, else released). Most rooms
// stay for a few events; some stay for long (a busy room), outliving
// lease renewals, cut links and fences.
func (w *World) resident(ctx context.Context, p *process, h cluster.Hold) {
	node, sl := p.node, sleeper{p}
	uses := 1 + w.rng.IntN(6)
	if w.rng.IntN(3) == 0 {
		uses = 10 + w.rng.IntN(20)
	}
	for range uses {
		sl.Sleep(ctx, w.between(100*time.Millisecond, 2*time.Second))
		if !node.Valid(h) {
			break
		}
		w.stats.Uses++
	}
	if p.holds[h.Room] == h {
		delete(p.holds, h.Room)
		w.hibernate(ctx, p, h)
	}
}
