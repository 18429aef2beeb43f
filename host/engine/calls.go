package engine

import (
	"context"
	"errors"
	"slices"

	"github.com/tetratelabs/wazero/api"

	"github.com/wasmkeep/wasmkeep/abi"
	"github.com/wasmkeep/wasmkeep/calls"
)

// CallHost is a Host whose guest may call other rooms. StartCall starts a
// call the guest made during an event and returns it under way, or fails
// at once (a cycle, a chain too deep, too many calls in flight). The
// engine has checked the payload's size; the host checks the rest, and
// answers the Pending by the call's deadline.
type CallHost interface {
	StartCall(to calls.Room, payload []byte) (*calls.Pending, *calls.Error)
}

// callSlot is one of an event's calls, by handle.
type callSlot struct {
	p      *calls.Pending
	res    calls.Result
	waited bool
}

// ErrReplyTooLarge: the guest handled a call and tried to reply with more
// than calls.MaxReply bytes (call_reply answered it StatusTooLarge). The
// instance lives on: the event ran, only its reply is missing.
var ErrReplyTooLarge = errors.New("engine: the reply is over the limit of a call's reply")

// Call delivers an encoded abi.Call (naming the caller) and returns the
// reply the guest gave, nil if it gave none (an empty reply is not nil),
// or ErrReplyTooLarge. The reply aliases the instance's buffer until its
// next event.
func (i *Instance) Call(payload []byte) ([]byte, error) {
	i.inCall, i.replied, i.replyTooLarge, i.callReply = true, false, false, i.callReply[:0]
	defer func() { i.inCall = false }()
	if err := i.event(EventCall, 0, 0, 0, payload); err != nil {
		return nil, err
	}
	if !i.replied && i.replyTooLarge {
		return nil, ErrReplyTooLarge
	}
	if !i.replied {
		return nil, nil
	}
	if i.callReply == nil {
		i.callReply = []byte{}
	}
	return i.callReply, nil
}

// handles are an event's calls or fetches under way, by handle (1 or
// more). They are the event's only: the host forgets them when it
// returns (end), and what they stand for goes on, its answer dropped.
type handles[T any] struct {
	byHandle map[int32]*T
	next     int32
}

// add keeps v and returns its handle, as the guest is given it.
func (h *handles[T]) add(v *T) abi.Status {
	if h.byHandle == nil {
		h.byHandle = map[int32]*T{}
	}
	h.next++
	h.byHandle[h.next] = v
	return abi.Status(h.next)
}

// get returns the value of the handle a guest passed (an i32 argument,
// whose upper half wazero leaves undefined), nil if it is none.
func (h *handles[T]) get(arg uint64) (*T, int32) {
	handle := int32(uint32(arg))
	return h.byHandle[handle], handle
}

func (h *handles[T]) free(handle int32) { delete(h.byHandle, handle) }

func (h *handles[T]) end() {
	clear(h.byHandle)
	h.next = 0
}

// await is the start of a wait import (call_wait, fetch_wait): the value
// of the handle in stack[0] once done is closed, waited for out of the
// event's time limit (waitOutside). Without one it has answered the guest
// itself: StatusInvalid for a handle that is not one, StatusState when
// the instance closed first (the event ends now).
func await[T any](ctx context.Context, stack []uint64, table func(*Instance) *handles[T], done func(*T) <-chan struct{}) *T {
	inst := eventInstance(ctx, stack)
	if inst == nil {
		return nil
	}
	v, _ := table(inst).get(stack[0])
	switch {
	case v == nil:
		ret(stack, abi.StatusInvalid)
	case !inst.waitOutside(done(v)):
		ret(stack, abi.StatusState)
	default:
		return v
	}
	return nil
}

// callStart starts a call (see abi.ImportCallStart).
func callStart(ctx context.Context, mod api.Module, stack []uint64) {
	inst := eventInstance(ctx, stack)
	if inst == nil {
		return
	}
	host, ok := inst.host.(CallHost)
	if !ok {
		ret(stack, abi.StatusUnsupported)
		return
	}
	b, ok := guestBytes(mod, stack[0], stack[1])
	if !ok {
		ret(stack, abi.StatusInvalid)
		return
	}
	c, err := abi.DecodeCall(b)
	switch {
	case err != nil || c.Class == "" || c.Name == "":
		ret(stack, abi.StatusInvalid)
		return
	case len(c.Payload) > calls.MaxPayload:
		ret(stack, abi.StatusTooLarge)
		return
	}
	// The host copies the payload before it returns (the guest's memory
	// is the guest's again).
	p, cerr := host.StartCall(calls.Room{Class: c.Class, Name: c.Name}, c.Payload)
	if cerr != nil {
		ret(stack, cerr.Status)
		return
	}
	ret(stack, inst.calls.add(&callSlot{p: p}))
}

// callWait waits for a call's answer (see abi.ImportCallWait), out of the
// event's time limit (waitOutside).
func callWait(ctx context.Context, _ api.Module, stack []uint64) {
	slot := await(ctx, stack, callTable, func(s *callSlot) <-chan struct{} { return s.p.Done() })
	if slot == nil {
		return
	}
	if !slot.waited {
		slot.res, slot.waited = slot.p.Result(), true
	}
	if slot.res.Err != nil {
		ret(stack, slot.res.Err.Status)
		return
	}
	ret(stack, abi.Success)
}

// callResult copies a call's reply or error message out (see
// abi.ImportCallResult).
func callResult(ctx context.Context, mod api.Module, stack []uint64) {
	answer(ctx, mod, stack, callTable, func(s *callSlot) ([]byte, bool) {
		if s.res.Err != nil {
			return []byte(s.res.Err.Msg), s.waited
		}
		return s.res.Reply, s.waited
	})
}

func callTable(i *Instance) *handles[callSlot] { return &i.calls }

// answer is a result import (call_result, fetch_result): out gives the
// answer of the handle in stack[0], or false before its wait
// (StatusInvalid, as for a handle that is none); writeResult writes it,
// and the handle is freed once it has.
func answer[T any](ctx context.Context, mod api.Module, stack []uint64, table func(*Instance) *handles[T], out func(*T) ([]byte, bool)) {
	inst := eventInstance(ctx, stack)
	if inst == nil {
		return
	}
	slot, handle := table(inst).get(stack[0])
	var b []byte
	ok := slot != nil
	if ok {
		b, ok = out(slot)
	}
	if !ok {
		ret(stack, abi.StatusInvalid)
		return
	}
	if writeResult(mod, stack, b) {
		table(inst).free(handle)
	}
}

// waitOutside waits for done out of the event's time limit: the watchdog
// skips the instance meanwhile, and the event's start moves on by the
// wait. It reports false if the instance was closed first (the event
// ends now).
func (i *Instance) waitOutside(done <-chan struct{}) bool {
	select {
	case <-done:
		return true
	default:
	}
	e := i.class.e
	i.waiting.Store(true)
	began := e.nanotime()
	select {
	case <-done:
	case <-i.ctx.Done(): // the instance is being closed
	}
	i.callStart.Add(e.nanotime() - began)
	i.waiting.Store(false)
	select {
	case <-done:
		return true
	default:
		return false
	}
}

// writeResult answers a result import (handle, ptr, cap): out at ptr if
// it fits in cap, and its length in any case. It reports whether it
// wrote it: the handle is free then.
func writeResult(mod api.Module, stack []uint64, out []byte) bool {
	if uint64(len(out)) > uint64(uint32(stack[2])) {
		ret(stack, abi.Status(len(out)))
		return false
	}
	if len(out) > 0 && !mod.Memory().Write(uint32(stack[1]), out) {
		ret(stack, abi.StatusInvalid)
		return false
	}
	ret(stack, abi.Status(len(out)))
	return true
}

// callReply takes the reply to the call being handled (see
// abi.ImportCallReply).
func callReply(ctx context.Context, mod api.Module, stack []uint64) {
	inst := instanceOf(ctx)
	b, ok := guestBytes(mod, stack[0], stack[1])
	switch {
	case inst == nil || !inst.inCall || inst.replied:
		ret(stack, abi.StatusState)
	case !ok:
		ret(stack, abi.StatusInvalid)
	case len(b) > calls.MaxReply:
		inst.replyTooLarge = true
		ret(stack, abi.StatusTooLarge)
	default:
		inst.callReply = append(inst.callReply[:0], b...)
		inst.replied = true
		ret(stack, abi.Success)
	}
}

// FrontRequest is Request for a front: the guest may hand a WebSocket
// upgrade (upgrade says the request is one) to a room instead of
// answering it, and FrontRequest then returns the room it chose, with no
// response.
//
// An instance that served one is a front's for good: a front keeps no
// state, so its checkpoint and state_delete answer StatusState.
func (i *Instance) FrontRequest(payload []byte, upgrade bool) ([]byte, *abi.HandOver, error) {
	i.front = true
	i.mayHandOver, i.handOver = upgrade, nil
	defer func() { i.mayHandOver = false }()
	resp, err := i.Request(payload)
	if err != nil {
		return nil, nil, err
	}
	if i.handOver != nil {
		return nil, i.handOver, nil
	}
	return resp, nil, nil
}

// httpHandOver hands a front's upgrade to a room (see
// abi.ImportHTTPHandOver).
func httpHandOver(ctx context.Context, mod api.Module, stack []uint64) {
	inst := instanceOf(ctx)
	b, ok := guestBytes(mod, stack[0], stack[1])
	switch {
	case inst == nil || !inst.inRequest || !inst.mayHandOver || inst.responded || inst.handOver != nil:
		ret(stack, abi.StatusState)
		return
	case !ok:
		ret(stack, abi.StatusInvalid)
		return
	}
	h, err := abi.DecodeHandOver(b)
	if err != nil || h.Class == "" || h.Name == "" {
		ret(stack, abi.StatusInvalid)
		return
	}
	h.Headers = slices.Clone(h.Headers) // the strings are copies already
	inst.handOver = &h
	inst.responded = true // no response may follow
	ret(stack, abi.Success)
}
