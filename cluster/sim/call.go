package sim

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"time"

	"github.com/wasmkeep/wasmkeep/abi"
	"github.com/wasmkeep/wasmkeep/calls"
	"github.com/wasmkeep/wasmkeep/cluster"
	"github.com/wasmkeep/wasmkeep/cluster/member"
)

// Calls between rooms (package calls; the member's Call). A front on a
// random machine calls a random room, as a front's request that makes a
// call would, with a deadline a few hundred milliseconds to a few seconds
// off on that machine's clock. The member there routes it (Member.Call):
// served by the fake rooms here, sent over the machines' network (peer.go)
// to the node that holds or parks the room, whose member routes it again
// (forwarded), or refused. A call travels as a server sends it: encoded,
// its deadline as the time left (calls.AppendWire), decoded on the other
// side when a task of the process there reads it.
//
// Serving a call (callServe) stands in for the room manager's ServeCall:
// the room is acquired or woken through the member as for any event,
// then the call waits for its turn (one call at a time runs in a room)
// and runs in a task of its own (the room's worker): it broadcasts to the
// room's sockets here, takes a little time, and may call the next room
// of its plan, its chain extended and its deadline kept (A → B → C, or a
// cycle, A → B → A). The server gives up on a run at the call's deadline
// (the run goes on, its answer dropped), and serves no call past it.
//
// The world knows every call by the id its payload carries, and the
// deadline its caller meant, in virtual time: the checks (checkCallRun,
// callAnswered) judge by those, not by what travelled.

const (
	// callEvery is the mean time between two fronts' calls.
	callEvery = 250 * time.Millisecond
	// A front's call timeout is drawn from [callTimeoutMin,
	// callTimeoutMax): short, so that calls outlive their deadline often.
	callTimeoutMin = 300 * time.Millisecond
	callTimeoutMax = 5 * time.Second
	// callRunMax bounds the time a run takes besides its nested call.
	callRunMax = 200 * time.Millisecond
	// callRunSlack is how long after its deadline a call may begin to
	// run (the rounding of the clocks' rates); callAnswerSlack how long
	// after it the caller may get its answer (legs, rounding).
	callRunSlack    = 10 * time.Millisecond
	callAnswerSlack = 100 * time.Millisecond
)

// CallFaults are what may happen to a call between rooms on the
// machines' network, besides what happens to any call there (peer.go).
type CallFaults struct {
	// Break: the connection breaks after the call was delivered, within
	// BreakWithin: the caller sees a reset, the callee runs the call.
	Break       float64
	BreakWithin time.Duration
	// AnswerLost: the answer never arrives.
	AnswerLost float64
	// Slow: a leg takes from 50 ms up to SlowMax.
	Slow    float64
	SlowMax time.Duration
}

// DefaultCallFaults are the simulation's.
var DefaultCallFaults = CallFaults{Break: 0.04, BreakWithin: time.Second, AnswerLost: 0.02, Slow: 0.05, SlowMax: 2 * time.Second}

// front is the caller of the calls the world makes: a front, which keeps
// no state and is never in a cycle.
var front = calls.Room{Class: "front"}

// The outcomes of calls (Stats.CallOutcomes).
const (
	callOK = iota
	callRefused
	callTimedOut
	callCycle
	callOther
	nCallOutcomes
)

// CallOutcomeNames name the outcomes of Stats.CallOutcomes, in order.
var CallOutcomeNames = [nCallOutcomes]string{"ok", "refused", "timeout", "cycle", "other"}

// roomCall is one call between rooms, from its making to its answer.
type roomCall struct {
	id    int
	to    calls.Room
	chain calls.Chain
	// plan is where the chain goes on: the callee calls plan[0], which
	// calls plan[1], and so on.
	plan    []calls.Room
	timeout time.Duration
	// cycle: the callee is a room already in the chain.
	cycle bool
	// origin is the process that made it, task the task it was made in
	// (a front's, or the worker of the room that made it).
	origin *process
	task   *Task
	made   int64
	// due is when its caller gives up on it (virtual time): the deadline
	// it set.
	due int64
	// bucketAt is task's time in bucket calls when it was made; excused
	// its origin's pauses since.
	bucketAt, excused int64
	// runs are where it ran; refused: it was answered StatusRefused (it
	// did not run).
	runs    []callRun
	refused bool
	done    bool
	res     calls.Result
}

// callRun is a run of a call in a room: on which process, at which
// generation of its hold, when.
type callRun struct {
	proc string
	gen  uint64
	at   int64
}

// callCopy is a call as one node holds it: its own copy of the call
// (made there, or decoded from the wire), the world's record of it, and
// the deadline its caller meant, in virtual time, moved on by the time
// the copy took to reach the node (the time left travels, not the
// deadline: a call read late, by a paused process, is served that much
// later; nothing can tell).
type callCopy struct {
	rc  *roomCall
	due int64
	// sentDue is the due of the copy it was sent from (due, for a copy
	// made here).
	sentDue int64
	// deadline is the copy's deadline on the holding node's clock, as its
	// caller set it: where the node's own waits for the call end.
	deadline int64
}

// callEvent is a front on a random machine calling a random room.
func (w *World) callEvent() {
	if w.s.Now() < int64(w.cfg.Duration) {
		w.s.At(w.after(callEvery), "call", w.callEvent)
	}
	m := w.machines[w.rng.IntN(len(w.machines))]
	to := w.rooms[w.rng.IntN(len(w.rooms))]
	w.frontCall(m, to, w.callPlan(to), w.between(callTimeoutMin, callTimeoutMax))
}

// callPlan draws where a call to room to goes on: nowhere, to one or two
// other rooms, or back into a room of the chain.
func (w *World) callPlan(to cluster.Room) []calls.Room {
	other := func(not ...cluster.Room) cluster.Room {
		for {
			if r := w.rooms[w.rng.IntN(len(w.rooms))]; !slices.Contains(not, r) {
				return r
			}
		}
	}
	var plan []cluster.Room
	switch x := w.rng.IntN(10); {
	case x < 4:
	case x < 6:
		plan = []cluster.Room{other(to)}
	case x < 8:
		b := other(to)
		plan = []cluster.Room{b, other(to, b)}
	case x < 9:
		plan = []cluster.Room{other(to), to} // A → B → A
	default:
		b := other(to)
		c := other(to, b)
		back := to
		if w.rng.IntN(2) == 0 {
			back = b
		}
		plan = []cluster.Room{b, c, back} // A → B → C → A, or → B
	}
	out := make([]calls.Room, len(plan))
	for i, r := range plan {
		out[i] = calls.Room{Class: r.Class, Name: r.Name}
	}
	return out
}

// frontCall has a front on machine m call room to, its plan plan, with
// timeout; the call is made when the front's task runs (after a pause of
// its process, if it is paused). It returns the call, once made, through
// made, for the tests (nil: no process runs there).
func (w *World) frontCall(m *machine, to cluster.Room, plan []calls.Room, timeout time.Duration) (made func() *roomCall) {
	var rc *roomCall
	made = func() *roomCall { return rc }
	p := m.proc
	if p == nil || p.hung {
		w.stats.CallsDown++
		return made
	}
	w.s.Spawn(p.group, "front call to "+to.Name, func(ctx context.Context) {
		rc = w.newCall(calls.Room{Class: to.Class, Name: to.Name}, calls.Chain{front}, plan, timeout)
		w.makeCall(ctx, p, rc, p.clock.Now()+int64(timeout), w.s.Now()+p.clock.global(timeout))
	})
	return made
}

// newCall is a new call, not yet made.
func (w *World) newCall(to calls.Room, chain calls.Chain, plan []calls.Room, timeout time.Duration) *roomCall {
	w.calls = append(w.calls, nil)
	rc := &roomCall{id: len(w.calls), to: to, chain: chain, plan: plan, timeout: timeout,
		cycle: to.Name != "" && chain.Contains(to)}
	w.calls[rc.id-1] = rc
	return rc
}

// callOf is the call whose id a payload carries.
func (w *World) callOf(payload []byte) *roomCall {
	if len(payload) != 8 {
		return nil
	}
	id := binary.LittleEndian.Uint64(payload)
	if id == 0 || id > uint64(len(w.calls)) {
		return nil
	}
	return w.calls[id-1]
}

// makeCall makes rc on p, in the calling task, with deadline on p's clock
// (due in virtual time): the member routes it, and its answer is checked.
func (w *World) makeCall(ctx context.Context, p *process, rc *roomCall, deadline, due int64) calls.Result {
	t := TaskOf(ctx)
	rc.origin, rc.task, rc.made, rc.due, rc.bucketAt = p, t, w.s.Now(), due, t.bucketTime
	if len(rc.chain) > 1 {
		w.stats.NestedCalls++
	} else {
		w.stats.Calls++
	}
	w.openCalls++
	p.calls = append(p.calls, rc)
	w.s.At(max(rc.due, rc.made)+int64(callAnswerSlack), "call deadline", func() { w.callDeadline(rc) })
	c := &calls.Call{To: rc.to, Chain: rc.chain, Payload: binary.LittleEndian.AppendUint64(nil, uint64(rc.id)), Deadline: deadline}
	here := callCopy{rc: rc, due: due, sentDue: due, deadline: deadline}
	res := p.member.Call(ctx, c, false, w.callServe(p, here), w.callSend(p, here))
	w.callAnswered(rc, res)
	return res
}

// callSend is p's member.CallSend for its copy cp of a call: the call,
// encoded, over the machines' network to the member of the process on
// the target machine, which routes it as forwarded there. The sender
// gives up at the deadline of its copy (as its request's context would),
// or at the header timeout: then the call was sent and is not answered
// (StatusTimeout: it may have run). One that finds its deadline passed
// is not sent.
func (w *World) callSend(p *process, cp callCopy) member.CallSend {
	return func(ctx context.Context, node, _ string, c *calls.Call) (calls.Result, bool) {
		giveUp := min(p.clock.trueAt(cp.deadline), w.s.Now()+p.clock.global(headerTimeout))
		if giveUp <= w.s.Now() {
			w.stats.CallsUnsent++
			return calls.Expired(c), false
		}
		// The time its caller meant it to have left, on p's clock.
		left := max(p.clock.at(cp.due)-p.clock.Now(), 0)
		what := fmt.Sprintf("call %d to %s", cp.rc.id, c.To.Name)
		return w.sendCall(ctx, p, node, c, giveUp, what, func(ctx context.Context, q *process, dc *calls.Call) (calls.Result, bool) {
			rc := w.callOf(dc.Payload)
			if rc == nil {
				return calls.Result{}, false
			}
			w.stats.CallsSent++
			there := callCopy{rc: rc, due: q.clock.trueAt(q.clock.Now() + left), sentDue: cp.due, deadline: dc.Deadline}
			return q.member.Call(ctx, dc, true, w.callServe(q, there), w.callSend(q, there)), true
		})
	}
}

// sendCall sends c from p to node over the machines' network, as a
// server's peer client does, giving up at giveUp (virtual time): the
// process there decodes it and serves it (false: it cannot read it). It
// returns the answer, and whether the call was sent (false: it could not
// connect). what names it in the trace.
func (w *World) sendCall(ctx context.Context, p *process, node string, c *calls.Call, giveUp int64, what string,
	serve func(ctx context.Context, q *process, dc *calls.Call) (calls.Result, bool)) (calls.Result, bool) {
	wire := calls.AppendWire(nil, c, p.clock.Now())
	r, err := w.exchange(ctx, p, w.machineNamed[node], what, giveUp, true, func(ctx context.Context, q *process) reply {
		dc, err := calls.DecodeWire(wire, q.clock.Now())
		var res calls.Result
		ok := err == nil
		if ok {
			res, ok = serve(ctx, q, &dc)
		}
		if !ok {
			w.fail("%s cannot read the %s %s sent it: %v", q.name, what, p.name, err)
			return reply{}
		}
		return reply{body: calls.AppendResult(nil, res)}
	})
	switch {
	case errors.Is(err, errUnreachable):
		w.stats.CallDials++
		return calls.Fail(abi.StatusRefused, "%s cannot be reached", node), false
	case err != nil:
		return calls.Fail(abi.StatusTimeout, "no answer from %s (%v); it may have run", node, err), true
	}
	res, err := calls.DecodeResult(r.body)
	if err != nil {
		w.fail("%s cannot read the answer of %s to the %s: %v", p.name, node, what, err)
	}
	return res, true
}

// callServe is p's serve of its copy cp of a call, the fake of the room
// manager's ServeCall: the room is acquired or woken through the member
// as for any event (serve), the call waits for its turn, then runs in a
// task of its own; the answer is the run's, or StatusTimeout if the
// deadline comes first. A call is served only before its deadline.
func (w *World) callServe(p *process, cp callCopy) func(context.Context, *calls.Call) calls.Result {
	return func(ctx context.Context, c *calls.Call) calls.Result {
		room := cluster.Room{Class: c.To.Class, Name: c.To.Name}
		if p.clock.Now() >= c.Deadline {
			return calls.Expired(c)
		}
		if r := w.serve(ctx, p, room); !r.answered {
			return calls.Fail(abi.StatusRefused, "%s refused the call: %s", c.To, ReasonNames[r.why])
		}
		if !w.takeTurn(ctx, p, room, c.Deadline) {
			return calls.Expired(c)
		}
		h, held := p.holds[room]
		switch {
		case p.clock.Now() >= c.Deadline:
			w.giveTurn(p, room)
			return calls.Expired(c)
		case !held || !p.member.Valid(h):
			// Gone while the call waited (a lapse, a hand-over): a room
			// manager would wake it again, which the event routing
			// decides; the caller may send it again.
			w.giveTurn(p, room)
			return calls.Fail(abi.StatusRefused, "%s is not resident here any more", c.To)
		}
		w.checkCallRun(cp, p, h)
		return w.runInTurn(ctx, p, room, c, fmt.Sprintf("run call %d in %s", cp.rc.id, room.Name), func(ctx context.Context) calls.Result {
			return w.runCall(ctx, p, cp, c)
		})
	}
}

// runInTurn runs run in a task of its own on p, as the room's worker
// would, in the turn its caller took (given back when run ends), and
// waits for its answer until c's deadline: StatusTimeout past it (the
// run goes on, its answer dropped).
func (w *World) runInTurn(ctx context.Context, p *process, room cluster.Room, c *calls.Call, name string, run func(ctx context.Context) calls.Result) calls.Result {
	wait := &runWait{caller: TaskOf(ctx), waiting: true}
	w.s.Spawn(p.group, name, func(ctx context.Context) {
		defer w.giveTurn(p, room)
		res := run(ctx)
		wait.res, wait.done = res, true
		if wait.waiting {
			w.s.Unpark(wait.caller)
		}
	})
	wait.caller.BlockUntil(p.clock.trueAt(c.Deadline))
	wait.waiting = false
	if !wait.done {
		return calls.Expired(c)
	}
	return wait.res
}

// runWait is a serve waiting for its run.
type runWait struct {
	caller        *Task
	waiting, done bool
	res           calls.Result
}

// runCall runs call c in its room on p: it broadcasts to the room's
// sockets here, takes a little time, and makes the next call of its
// plan, if any, as a room's guest does (rooms.StartCall: its chain
// extended, its deadline the call's own unless the call timeout ends
// sooner).
func (w *World) runCall(ctx context.Context, p *process, cp callCopy, c *calls.Call) calls.Result {
	rc := cp.rc
	w.broadcast(p, cluster.Room{Class: c.To.Class, Name: c.To.Name}, rc.id)
	sl := sleeper{p}
	sl.Sleep(ctx, w.between(time.Millisecond, callRunMax))
	if len(rc.plan) > 0 {
		next := w.newCall(rc.plan[0], append(slices.Clip(c.Chain), c.To), rc.plan[1:], rc.timeout)
		deadline := min(p.clock.Now()+int64(rc.timeout), c.Deadline)
		due := min(w.s.Now()+p.clock.global(rc.timeout), cp.due)
		w.makeCall(ctx, p, next, deadline, due)
		sl.Sleep(ctx, w.between(0, callRunMax/4))
	}
	return calls.Result{Reply: []byte(strconv.Itoa(rc.id))}
}

// broadcast sends what call id says to the room's sockets on p.
func (w *World) broadcast(p *process, room cluster.Room, id int) {
	for _, s := range p.sockets {
		if s.room == room {
			s.got = append(s.got, id)
			w.stats.CallBroadcasts++
		}
	}
}

// turn is one room's turn on a process: one call runs in it at a time;
// the others wait in order.
type turn struct {
	busy  bool
	queue []*turnWait
}

type turnWait struct {
	t                *Task
	waiting, granted bool
}

// takeTurn waits for room's turn on p until deadline (on p's clock), and
// reports whether it got it.
func (w *World) takeTurn(ctx context.Context, p *process, room cluster.Room, deadline int64) bool {
	tn := p.turns[room]
	if tn == nil {
		tn = &turn{}
		p.turns[room] = tn
	}
	if !tn.busy {
		tn.busy = true
		return true
	}
	tw := &turnWait{t: TaskOf(ctx), waiting: true}
	tn.queue = append(tn.queue, tw)
	tw.t.BlockUntil(p.clock.trueAt(deadline))
	tw.waiting = false
	if tw.granted {
		return true
	}
	tn.queue = slices.DeleteFunc(tn.queue, func(x *turnWait) bool { return x == tw })
	return false
}

// giveTurn passes room's turn on p to the next call waiting for it.
func (w *World) giveTurn(p *process, room cluster.Room) {
	tn := p.turns[room]
	for len(tn.queue) > 0 {
		tw := tn.queue[0]
		tn.queue = tn.queue[1:]
		if tw.waiting {
			tw.granted = true
			w.s.Unpark(tw.t)
			return
		}
	}
	tn.busy = false
}

// turnTaken reports whether a call runs in room on p, or waits to.
func (w *World) turnTaken(p *process, room cluster.Room) bool {
	tn := p.turns[room]
	return tn != nil && (tn.busy || len(tn.queue) > 0)
}

// callAnswered gives rc its answer, once, and checks it (callOnTime): a
// call in a cycle fails at once with StatusCycle; a call refused did not
// run.
func (w *World) callAnswered(rc *roomCall, res calls.Result) {
	if rc.done {
		return
	}
	w.closeCall(rc)
	rc.res = res
	st := abi.Success
	if res.Err != nil {
		st = res.Err.Status
	}
	switch st {
	case abi.Success:
		w.stats.CallOutcomes[callOK]++
	case abi.StatusRefused:
		w.stats.CallOutcomes[callRefused]++
	case abi.StatusTimeout:
		w.stats.CallOutcomes[callTimedOut]++
	case abi.StatusCycle:
		w.stats.CallOutcomes[callCycle]++
	default:
		w.stats.CallOutcomes[callOther]++
	}
	switch {
	case rc.cycle && st != abi.StatusCycle:
		w.fail("call %d from %s to %s, a cycle, was answered %s on %s: %v", rc.id, rc.chain, rc.to, statusName(st), rc.origin.name, res.Err)
	case rc.cycle && w.s.Now() != rc.made:
		w.fail("call %d from %s to %s, a cycle, waited %v for its answer", rc.id, rc.chain, rc.to, time.Duration(w.s.Now()-rc.made))
	case !rc.cycle && st == abi.StatusCycle:
		w.fail("call %d from %s to %s, no cycle, was answered StatusCycle on %s", rc.id, rc.chain, rc.to, rc.origin.name)
	case st == abi.StatusRefused && len(rc.runs) > 0:
		w.fail("call %d to %s was answered refused (not run) on %s, but ran on %s at %v", rc.id, rc.to, rc.origin.name, rc.runs[0].proc, time.Duration(rc.runs[0].at))
	}
	rc.refused = st == abi.StatusRefused
	w.callOnTime(rc)
}

func statusName(st abi.Status) string {
	if st == abi.Success {
		return "ok"
	}
	return fmt.Sprintf("status %d", st)
}

// closeCall ends rc: answered, or dropped with its process.
func (w *World) closeCall(rc *roomCall) {
	rc.done = true
	w.openCalls--
	p := rc.origin
	p.calls = slices.DeleteFunc(p.calls, func(x *roomCall) bool { return x == rc })
}

// dropCalls drops the calls p made and has not had answered: its
// process died or hung.
func (w *World) dropCalls(p *process) {
	for _, rc := range slices.Clone(p.calls) {
		w.closeCall(rc)
		w.stats.CallsDropped++
	}
}

// callExcused is the time rc's answer's bound does not count: its
// origin's pauses, and the bucket calls of its task since it was made
// (the one under way too).
func (w *World) callExcused(rc *roomCall) int64 {
	t := rc.task
	e := rc.excused + t.bucketTime - rc.bucketAt
	if t.inBucket {
		e += w.s.Now() - t.bucketFrom
	}
	return e
}

// callDeadline checks that rc was answered by its deadline, besides what
// it excuses; it looks again later while that grows.
func (w *World) callDeadline(rc *roomCall) {
	if rc.done {
		return
	}
	if due := max(rc.due, rc.made) + int64(callAnswerSlack) + w.callExcused(rc); w.s.Now() < due || rc.task.inBucket {
		w.s.At(max(due, w.s.Now()+int64(100*time.Millisecond)), "call deadline", func() { w.callDeadline(rc) })
		return
	}
	w.callOnTime(rc)
}
