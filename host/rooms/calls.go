package rooms

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync/atomic"
	"time"
	"unicode/utf8"

	"github.com/VictoriaMetrics/metrics"

	"github.com/wasmkeep/wasmkeep/abi"
	"github.com/wasmkeep/wasmkeep/calls"
	"github.com/wasmkeep/wasmkeep/host/classes"
	"github.com/wasmkeep/wasmkeep/host/engine"
	"github.com/wasmkeep/wasmkeep/host/store"
	"github.com/wasmkeep/wasmkeep/internal/clock"
)

// Calls between rooms (docs/abi.md, "Calls between rooms"). A guest's
// call starts here (StartCall, on the worker of the calling room, or on
// the goroutine of a front's request: Manager.StartCall), goes
// to the node's router (Config.Calls: the cluster member's routing, or
// this node alone: LocalRouter), and is served by the callee's room as an
// event of its own (ServeCall), whose reply goes back the same way.

// StartCall starts a call the room's guest made during an event (see
// engine.CallHost): it carries the chain of the call the room is
// handling, if any, and gives up at the call timeout, or at that call's
// deadline if sooner.
func (r *Room) StartCall(to calls.Room, payload []byte) (*calls.Pending, *calls.Error) {
	c := &calls.Call{To: to, Payload: payload, Deadline: r.m.clock.Now() + int64(r.m.cfg.CallTimeout)}
	if in := r.callIn; in != nil {
		c.Chain = slices.Clip(in.Chain)
		c.Deadline = min(c.Deadline, in.Deadline)
	}
	c.Chain = append(c.Chain, calls.Room{Class: r.key.Class, Name: r.key.Name})
	return r.m.StartCall(&r.caller, c, r.m.met.calls)
}

// Caller is the calls one guest instance has under way: a room's, or
// one of a front's instances' (host/fronts). It keeps two rules of calls
// for whoever makes them: the calls one event makes to one room run there
// in the order made (each waits, off the instance, for the answer to the
// one before), and an instance has at most calls.MaxInFlight calls
// unanswered, those of events that did not wait for them included. The
// zero Caller is ready to use; its order belongs to the goroutine that
// runs the instance's events.
type Caller struct {
	inFlight atomic.Int32
	// order is the event's latest call to each room.
	order map[calls.Room]*calls.Pending
}

// EndEvent forgets the order of the event that ended: calls of the next
// event wait for none of its calls.
func (c *Caller) EndEvent() { c.order = nil }

// StartCall starts c, made by caller's instance during an event (c's
// chain ends with the caller), and returns it under way: a goroutine
// routes it through the node's router once the answer to the event's call
// before it to the same room has come, gives up at c's deadline, and
// counts the answer in outcomes (by calls.Outcome). The payload is copied:
// it may be the guest's memory. StartCall fails at once if the caller has
// calls.MaxInFlight calls unanswered, or names a room that cannot be.
func (m *Manager) StartCall(caller *Caller, c *calls.Call, outcomes map[string]*metrics.Counter) (*calls.Pending, *calls.Error) {
	if err := CheckKey(c.To.Class, c.To.Name, store.MaxNameLen); err != nil {
		return nil, calls.Errorf(abi.StatusInvalid, "%v", err)
	}
	if caller.inFlight.Load() >= calls.MaxInFlight {
		return nil, calls.Errorf(abi.StatusTooMany, "%s has %d calls unanswered, the limit", c.From(), calls.MaxInFlight)
	}
	c.Payload = slices.Clone(c.Payload)
	p := calls.NewPending()
	prev := caller.order[c.To]
	put(&caller.order, c.To, p)
	caller.inFlight.Add(1)
	go func() {
		// A stop ends the node's calls at once: the rooms waiting on
		// them are being stopped too.
		ctx, cancel := m.deadlineCtx(m.callsCtx, c.Deadline)
		defer cancel()
		res := calls.Result{}
		if prev != nil {
			select {
			case <-prev.Done():
			case <-ctx.Done():
			}
		}
		var front bool
		switch res, front = m.toFront(ctx, c); {
		case front:
		case ctx.Err() != nil:
			res = calls.Expired(c)
		default:
			res = m.router().Route(ctx, c)
		}
		caller.inFlight.Add(-1)
		outcomes[calls.Outcome(res)].Inc()
		p.Finish(res)
	}()
	return p, nil
}

// Router is where the node's calls go (Config.Calls, or LocalRouter).
func (m *Manager) Router() calls.Router { return m.router() }

// CallTimeout is how long a call waits for its answer (Config.CallTimeout).
func (m *Manager) CallTimeout() time.Duration { return m.cfg.CallTimeout }

// CallsContext is the parent of the node's calls: a stop ends it.
func (m *Manager) CallsContext() context.Context { return m.callsCtx }

// CheckKey checks a room's class and name, from a URL, a JSON body or a
// guest's call: a class name classes.NamePattern takes, and a room name
// of 1 to maxName bytes of UTF-8 without control characters.
func CheckKey(class, name string, maxName int) error {
	if !classes.NamePattern.MatchString(class) {
		return fmt.Errorf("invalid class name %q", class)
	}
	if name == "" || len(name) > maxName || !utf8.ValidString(name) || strings.ContainsFunc(name, isControl) {
		return fmt.Errorf("invalid room name: 1–%d bytes of UTF-8 without control characters", maxName)
	}
	return nil
}

func isControl(r rune) bool { return r < 0x20 || r == 0x7f }

// router is where the node's calls go.
func (m *Manager) router() calls.Router {
	if m.cfg.Calls != nil {
		return m.cfg.Calls
	}
	return LocalRouter{m}
}

// LocalRouter routes every call to a room of this node: the router of a
// node alone.
type LocalRouter struct{ M *Manager }

// Route checks the call's chain and serves it here.
func (l LocalRouter) Route(ctx context.Context, c *calls.Call) calls.Result {
	if err := calls.Check(c.Chain, c.To); err != nil {
		return calls.Result{Err: err}
	}
	return l.M.ServeCall(ctx, c)
}

// deadlineCtx is parent ending at deadline on the manager's clock.
func (m *Manager) deadlineCtx(parent context.Context, deadline int64) (context.Context, context.CancelFunc) {
	return clock.WithTimeout(m.clock, parent, time.Duration(deadline-m.clock.Now()))
}

// toFront answers a call to a front's class, which has no rooms: where
// the call is made (StartCall), so that no node routes it, and where it is
// served, for a node whose view of the fronts was older. Should the
// fronts' prefixes not be readable, the call goes on: its wake needs the
// bucket too.
func (m *Manager) toFront(ctx context.Context, c *calls.Call) (calls.Result, bool) {
	if front, _ := m.classes.IsFront(ctx, c.To.Class); front {
		return calls.Fail(abi.StatusNotFound, "%s is a front: it serves HTTP under its path prefixes and takes no calls", c.To.Class), true
	}
	return calls.Result{}, false
}

// ServeCall runs a call in its room here, as the room's next event, and
// returns the room's answer. A call whose deadline passes before it
// runs is dropped unrun.
func (m *Manager) ServeCall(ctx context.Context, c *calls.Call) calls.Result {
	if m.clock.Now() >= c.Deadline {
		return calls.Expired(c)
	}
	if res, front := m.toFront(ctx, c); front {
		return res
	}
	ctx, cancel := m.deadlineCtx(ctx, c.Deadline)
	defer cancel()
	ev := &event{kind: evCall, ctx: ctx, call: c, answer: make(chan calls.Result, 1)}
	if c.Alarm != nil {
		ev.kind = evAlarm
	}
	if _, err := m.enqueueNewRoom(Key{Class: c.To.Class, Name: c.To.Name}, ev, false); err != nil {
		return callError(c, err)
	}
	select {
	case res := <-ev.answer:
		return res
	case <-ctx.Done():
		// The event still runs if it already started; its answer is dropped.
		return calls.Expired(c)
	}
}

func (r *Room) handleCall(ev *event) {
	var res calls.Result
	if ev.kind == evAlarm {
		res = r.serveAlarm(ev)
	} else {
		res = r.serveCall(ev)
	}
	r.emitReply(func(err error) {
		if err != nil {
			res = callError(ev.call, err) // undone: as if it had not run
		}
		r.lastActive.Store(r.m.clock.Now())
		ev.answer <- res
	})
}

// serveCall runs a call event and returns its answer.
func (r *Room) serveCall(ev *event) calls.Result {
	c := ev.call
	if ev.ctx.Err() != nil {
		return calls.Expired(c)
	}
	if err := r.ensureResident(ev.ctx); err != nil {
		return callError(c, err)
	}
	if !r.inst.Handles(engine.EventCall) {
		return calls.Fail(abi.StatusNotFound, "class %s takes no calls: it exports no %s", c.To.Class, abi.ExportOnCall)
	}
	from := c.From()
	payload := abi.AppendCall(nil, &abi.Call{Class: from.Class, Name: from.Name, Payload: c.Payload})
	r.callIn = c
	defer func() { r.callIn = nil }()
	var reply []byte
	tooLarge := false
	err := r.deliver(func(inst Instance) (err error) {
		reply, err = inst.Call(payload)
		if errors.Is(err, engine.ErrReplyTooLarge) {
			// The event ran and stands; only its reply cannot go.
			tooLarge, err = true, nil
		}
		if reply != nil {
			reply = append([]byte{}, reply...)
		}
		return err
	})
	switch {
	case err == nil && tooLarge:
		return calls.Fail(abi.StatusTooLarge, "%s replied with more than %d bytes", c.To, calls.MaxReply)
	case errors.Is(err, ErrNotDurable):
		return callError(c, err)
	case err != nil:
		return callError(c, &CrashError{Cause: err})
	case reply == nil:
		return calls.Fail(abi.StatusNotFound, "%s did not reply: its class has no call handler", c.To)
	}
	return calls.Result{Reply: reply}
}

// callError is the answer to a call that failed with err. Every error
// that reaches it but a crash's and ErrNotDurable's (an event undone)
// came before the call ran: those are refused, safe to send again.
func callError(c *calls.Call, err error) calls.Result {
	var crash *CrashError
	switch {
	case errors.Is(err, classes.ErrUnknownClass):
		return calls.Fail(abi.StatusNotFound, "no class %q", c.To.Class)
	case errors.Is(err, ErrNotDurable):
		// The event was undone before its answer: as if it had not run.
		return calls.Fail(abi.StatusRefused, "%s could not make its state durable: %v", c.To, err)
	case errors.As(err, &crash):
		return calls.Fail(abi.StatusCrashed, "%s crashed handling the call and restarts from its last snapshot: %v", c.To, crash.Cause)
	case errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		return calls.Expired(c)
	case errors.Is(err, ErrOverloaded), errors.Is(err, ErrNodeFull), errors.Is(err, ErrStopping),
		errors.Is(err, ErrElsewhere), errors.Is(err, ErrUnavailable):
		return calls.Fail(abi.StatusRefused, "%s refused the call: %v", c.To, err)
	}
	return calls.Fail(abi.StatusRefused, "%s: %v", c.To, err)
}
