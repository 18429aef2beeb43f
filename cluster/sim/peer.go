package sim

import (
	"context"
	"errors"
	"time"

	"github.com/wasmkeep/wasmkeep/cluster"
	"github.com/wasmkeep/wasmkeep/cluster/member"
)

// Calls between machines: a relayed event, a move's take, or a room's
// call (call.go). They travel over the machines' links, which may be cut
// (partition), to the process running on the target machine, which
// handles them in a task of its own; the caller blocks until the answer,
// an error or its timeout, as a forwarding node's HTTP client does
// (host/server/forward.go).
//
// What becomes of a call:
//   - the link is cut: the dial fails after dialTimeout (errUnreachable);
//   - no process runs on the target machine: the connection is refused
//     at once (errUnreachable);
//   - otherwise the call arrives after a leg and a task of the target's
//     process handles it (at once, or when a paused process resumes, or
//     never, for a hung one). Its answer travels back a leg, and is lost
//     if the link is cut by then; a process that dies while handling it
//     resets the connection (errReset). The caller gives up at
//     headerTimeout (errTimeout), a room's call at its deadline if
//     sooner.
//
// A room's call meets more: a leg may be slow, the connection may break
// after the call was delivered, and the answer may be lost (exchange).
// The timeouts are the ones a member's Forward keeps.
const (
	dialTimeout   = member.ForwardDialTimeout
	headerTimeout = member.ForwardHeaderTimeout
	// peerLegMax bounds one leg of a call on the machines' network.
	peerLegMax = 3 * time.Millisecond
)

var (
	// errUnreachable: the call could not connect; nothing was sent.
	errUnreachable = errors.New("sim: peer unreachable")
	// errReset: the target's process died while handling the call, or
	// the connection broke.
	errReset = errors.New("sim: connection reset by peer")
	// errRefused: the target refused the call.
	errRefused = errors.New("sim: the peer refused")
	// errTimeout: no answer came within headerTimeout.
	errTimeout = errors.New("sim: peer answered nothing in time")
)

// reply is the answer to an event or a call: answered, or refused for a
// reason; a take's answer names the generation of the hold it took.
type reply struct {
	answered bool
	why      reason
	gen      uint64
	// relayed: answered by the node the event was relayed to.
	relayed bool
	// body is the encoded answer to a room's call (calls.AppendResult).
	body []byte
}

func refuse(why reason) reply { return reply{why: why} }

// call is one call in flight.
type call struct {
	from, to *machine
	caller   *Task
	// waiting: the caller is still blocked on this call (not timed out,
	// not dead), so an answer may wake it.
	waiting  bool
	answered bool
	r        reply
	err      error
	// flaky: a room's call, which meets the faults of exchange; broken:
	// its connection broke (the caller was told, the callee was not).
	flaky, broken bool
}

// leg is the time one message takes between two machines.
func (w *World) leg() int64 { return 1 + w.rng.Int64N(int64(peerLegMax)) }

// cut reports whether the link between machines a and b is cut now.
func (w *World) cut(a, b *machine) bool { return a.cutUntil[b.idx] > w.s.Now() }

// call sends a call named what from p (the calling task's process) to
// machine to, where handle runs in a task of the process there, and
// blocks the caller until the answer, an error, or its timeout.
func (w *World) call(ctx context.Context, p *process, to *machine, what string, handle func(ctx context.Context, q *process) reply) (reply, error) {
	giveUp := w.s.Now() + p.clock.global(headerTimeout)
	if w.cfg.World.ForwardWithoutTimeout {
		giveUp = Forever
	}
	return w.exchange(ctx, p, to, what, giveUp, false, handle)
}

// exchange is call with the caller giving up at giveUp (virtual time),
// the dial too. A room's call (flaky) meets faults of its own, which a
// request between machines meets on a real network (Config.CallFaults):
// a leg may be slow, the connection may break after the call was
// delivered (the caller sees a reset, the callee runs it anyway), and
// the answer may be lost on the way.
func (w *World) exchange(ctx context.Context, p *process, to *machine, what string, giveUp int64, flaky bool, handle func(ctx context.Context, q *process) reply) (reply, error) {
	t := TaskOf(ctx)
	now, from := w.s.Now(), p.machine
	if w.cut(from, to) {
		w.s.Note("%s: %s to %s: the link is cut", p.name, what, to.name)
		t.BlockUntil(min(now+p.clock.global(dialTimeout), giveUp))
		return reply{}, errUnreachable
	}
	q := to.proc
	if q == nil {
		t.BlockUntil(now + w.leg())
		return reply{}, errUnreachable
	}
	c := &call{from: from, to: to, caller: t, waiting: true, flaky: flaky}
	leg := w.leg()
	if flaky {
		leg = w.flakyLeg()
	}
	w.s.At(now+leg, "deliver "+what+" to "+q.name, func() {
		if to.proc != q {
			w.answer(c, reply{}, errReset) // it died on the way
			return
		}
		q.serving = append(q.serving, c)
		if f := w.cfg.CallFaults; flaky && w.rng.Float64() < f.Break {
			w.s.At(w.s.Now()+int64(w.between(0, f.BreakWithin)), "break "+what, func() {
				if c.waiting && !c.answered && !c.broken {
					c.broken = true
					w.stats.CallBreaks++
					w.s.Note("the connection of %s from %s to %s breaks", what, c.from.name, c.to.name)
					w.answer(c, reply{}, errReset)
				}
			})
		}
		w.s.Spawn(q.group, what, func(ctx context.Context) {
			r := handle(ctx, q)
			q.serving = removeCall(q.serving, c)
			w.answer(c, r, nil)
		})
	})
	t.BlockUntil(giveUp)
	c.waiting = false
	if !c.answered {
		return reply{}, errTimeout
	}
	return c.r, c.err
}

// flakyLeg is the time one leg of a room's call takes: now and then
// slow.
func (w *World) flakyLeg() int64 {
	if f := w.cfg.CallFaults; w.rng.Float64() < f.Slow {
		w.stats.CallLegsSlow++
		return int64(w.between(50*time.Millisecond, f.SlowMax))
	}
	return w.leg()
}

// answer sends c's answer (or a reset) back to its caller: it arrives
// after a leg, unless the link is cut by then (or, for a room's call,
// it is lost), and wakes the caller if it is still waiting.
func (w *World) answer(c *call, r reply, err error) {
	leg := w.leg()
	if c.flaky && err == nil && !c.broken {
		if w.rng.Float64() < w.cfg.CallFaults.AnswerLost {
			w.stats.CallAnswersLost++
			w.s.Note("the answer from %s to %s is lost", c.to.name, c.from.name)
			return
		}
		leg = w.flakyLeg()
	}
	w.s.At(w.s.Now()+leg, "answer "+c.to.name+" to "+c.from.name, func() {
		switch {
		case w.cut(c.from, c.to):
			w.s.Note("the answer from %s to %s is lost: the link is cut", c.to.name, c.from.name)
		case !c.waiting || c.answered:
			if !c.broken {
				w.stats.Late++
			}
		default:
			c.answered, c.r, c.err = true, r, err
			w.s.Unpark(c.caller)
		}
	})
}

func removeCall(cs []*call, c *call) []*call {
	for i, x := range cs {
		if x == c {
			return append(cs[:i], cs[i+1:]...)
		}
	}
	return cs
}

// fakePeers is a process's calls to other nodes as its member makes them
// (member.Peers).
type fakePeers struct {
	w *World
	p *process
}

// AskTake asks the process on machine node to take room, as a server's
// Member.Take does: its rooms acquire and wake it. A take that answers
// is checked (checkMove).
func (f fakePeers) AskTake(ctx context.Context, node, _ string, room cluster.Room) error {
	w, p := f.w, f.p
	to := w.machineNamed[node]
	r, err := w.call(ctx, p, to, "take "+room.Name, func(ctx context.Context, q *process) reply {
		return w.serve(ctx, q, room)
	})
	if err != nil {
		return err
	}
	if !r.answered {
		return errRefused
	}
	w.stats.MovesDone++
	w.checkMove(p, to, room, r.gen)
	return nil
}
