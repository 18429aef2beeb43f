package wasmkeep

import (
	"errors"
	"strings"
	"unsafe"

	"github.com/wasmkeep/wasmkeep/abi"
)

// Calls between rooms (docs/abi.md, "Calls between rooms").

// Errors a call fails with, one per kind of failure: test with errors.Is
// on the *CallError a call returns.
var (
	// ErrNotFound: no such class, or it takes no calls.
	ErrNotFound = errors.New("wasmkeep: " + abi.StatusNotFound.String())
	// ErrRefused: the call did not run (the room or its node was
	// overloaded, draining or stopping): it is safe to retry.
	ErrRefused = errors.New("wasmkeep: " + abi.StatusRefused.String())
	// ErrTimeout: no answer within the call timeout; the call may have
	// run.
	ErrTimeout = errors.New("wasmkeep: " + abi.StatusTimeout.String())
	// ErrCrashed: the callee crashed handling the call; its state rolled
	// back to its last snapshot (the caller goes on).
	ErrCrashed = errors.New("wasmkeep: " + abi.StatusCrashed.String())
	// ErrCycle: the callee already waits on this call's chain.
	ErrCycle = errors.New("wasmkeep: " + abi.StatusCycle.String())
	// ErrTooDeep: the chain of calls is as long as it may be.
	ErrTooDeep = errors.New("wasmkeep: " + abi.StatusTooDeep.String())
	// ErrTooMany: the room has as many calls unanswered as it may.
	ErrTooMany = errors.New("wasmkeep: " + abi.StatusTooMany.String())
)

// CallError is a call's failure: which room was called, the status the
// host answered and, where the host said more, its message.
type CallError struct {
	Class, Name string
	Status      abi.Status
	Message     string
}

// Error describes e.
func (e *CallError) Error() string {
	msg := "wasmkeep: call to " + e.Class + "/" + e.Name + ": " + e.Status.String()
	if e.Message != "" {
		msg += ": " + e.Message
	}
	return msg
}

// Unwrap returns the sentinel error for e.Status, such as ErrTimeout.
func (e *CallError) Unwrap() error { return statusError(e.Status) }

// Caller is who made a call: a room, or a front (Name empty).
type Caller struct{ Class, Name string }

// IsFront reports whether the call came from a front.
func (c Caller) IsFront() bool { return c.Name == "" }

// PendingCall is a call under way (StartCall).
type PendingCall struct {
	class, name string
	handle      int32
	err         error
	done        bool
	reply       []byte
}

// StartCall starts a call to the room class/name with payload and returns
// it under way: the room's code goes on, and Wait collects the answer.
// Calls to different rooms run at once; calls to one room run there in
// the order they were started. A call the event does not wait for still
// runs; its answer is dropped. An error here is the call's (StartCall
// never fails itself): Wait returns it.
func StartCall(class, name string, payload []byte) *PendingCall {
	p := &PendingCall{class: class, name: name}
	callBuf = abi.AppendCall(callBuf[:0], &abi.Call{Class: class, Name: name, Payload: payload})
	st := hostCallStart(bytesPtr(callBuf), uint32(len(callBuf)))
	if st < 0 {
		p.err, p.done = &CallError{Class: class, Name: name, Status: abi.Status(st)}, true
		return p
	}
	p.handle = st
	return p
}

// callBuf holds the encoding of the call being started.
var callBuf []byte

// Wait waits for the call's answer and returns the callee's reply. The
// time the room waits does not count toward its event time limit.
func (p *PendingCall) Wait() ([]byte, error) {
	if p.done {
		return p.reply, p.err
	}
	p.done = true
	st := hostCallWait(p.handle)
	out, rst := hostResult(p.handle, hostCallResult)
	if rst < 0 {
		p.err = &CallError{Class: p.class, Name: p.name, Status: abi.Status(rst)}
		return nil, p.err
	}
	if st < 0 {
		p.err = &CallError{Class: p.class, Name: p.name, Status: abi.Status(st), Message: string(out)}
		return nil, p.err
	}
	p.reply = out
	return out, nil
}

// hostResult copies a call's or a fetch's answer (or error message) out
// of the host with result, the import that frees the handle.
func hostResult(handle int32, result func(handle int32, ptr unsafe.Pointer, capacity uint32) int32) ([]byte, int32) {
	buf := make([]byte, 256)
	for {
		n := result(handle, bytesPtr(buf), uint32(len(buf)))
		if n < 0 {
			return nil, n
		}
		if int(n) <= len(buf) {
			return buf[:n], n
		}
		buf = make([]byte, n)
	}
}

// Call calls the room class/name with payload and waits for its reply:
// StartCall then Wait.
func Call(class, name string, payload []byte) ([]byte, error) {
	return StartCall(class, name, payload).Wait()
}

// onCallFunc is the room's call handler, nil when not registered.
var onCallFunc func(from Caller, payload []byte) []byte

// HandleCall registers the handler for calls from other rooms and fronts.
// What it returns is the reply (nil: an empty one); the caller gets it
// once the event's sends and checkpoint are done. A panic in it is a
// crash like any other: the room rolls back, and the caller gets
// ErrCrashed. Without a handler a class takes no calls (ErrNotFound).
func HandleCall(h func(from Caller, payload []byte) []byte) { onCallFunc = h }

//go:wasmexport wasmkeep_on_call
func onCall(ptr unsafe.Pointer, n uint32) {
	handleCall(ptr, n)
	collectIfDue()
}

func handleCall(ptr unsafe.Pointer, n uint32) {
	rec, err := abi.DecodeCall(payload(ptr, n))
	if err != nil {
		Error("wasmkeep: malformed call record from the host")
		return
	}
	if onCallFunc == nil {
		// Exported by every guest of this SDK: without a handler a call
		// is answered with nothing.
		return
	}
	// The payload aliases inbuf, which the next event overwrites.
	reply := onCallFunc(Caller{Class: rec.Class, Name: rec.Name}, append([]byte(nil), rec.Payload...))
	collectSeen += uint64(len(reply))
	if st := hostCallReply(bytesPtr(reply), uint32(len(reply))); st < 0 {
		Error("wasmkeep: call_reply: " + abi.Status(st).String())
	}
}

// HandOver answers a front's WebSocket upgrade by handing the socket to
// the room class/name: the host accepts it for that room, on the room's
// node, as if the client had come to /actor/class/name, with headers in
// place of the request's of the same names (what the front learnt of the
// client, say). Return what it returns from the request handler. Only a
// front may hand over, and only an upgrade (Request.IsUpgrade): anything
// else is answered 500.
func HandOver(class, name string, headers ...Header) *Response {
	handOverBuf = abi.AppendHandOver(handOverBuf[:0], &abi.HandOver{Class: class, Name: name, Headers: headers})
	return handOverResponse
}

// handOverResponse is what HandOver returns, for respond to recognise;
// handOverBuf is the record it sends.
var (
	handOverResponse = &Response{Status: 500, Body: []byte("the request could not be handed to a room")}
	handOverBuf      []byte
)

// IsUpgrade reports whether the request asks for a WebSocket.
func (r *Request) IsUpgrade() bool {
	return headerHasToken(r.Header("Upgrade"), "websocket")
}

// headerHasToken reports whether a comma-separated header value holds
// token, case-insensitively.
func headerHasToken(v, token string) bool {
	for part := range strings.SplitSeq(v, ",") {
		if strings.EqualFold(strings.TrimSpace(part), token) {
			return true
		}
	}
	return false
}
