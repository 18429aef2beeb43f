// Package calls holds the rules of calls between rooms, once, for every
// place that makes or routes one: the host's rooms (a call made on one
// node), the cluster member (a call routed to another node) and the
// simulation that runs the member. It decides; it does no I/O.
//
// A call carries its chain: the rooms waiting on it, the first caller
// first. A room already in the chain cannot be called again (a cycle: its
// event waits on this very call, so the call could only wait for the
// deadline), and a chain MaxDepth long goes no deeper. Both fail at once,
// where the call is made, with a typed error the guest can tell apart.
//
// A call has a deadline on the clock of the node that holds it; on the
// wire it travels as the time left (nodes' clocks are not compared), and
// a node serves no call past its deadline: its caller has given up on it.
package calls

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/wasmkeep/wasmkeep/abi"
)

// The limits of calls, as the ABI states them.
const (
	MaxDepth    = abi.MaxCallDepth
	MaxPayload  = abi.MaxCallPayload
	MaxReply    = abi.MaxCallReply
	MaxInFlight = abi.MaxCallsInFlight
	// DefaultTimeout is how long a caller waits for a call's answer
	// (wasmkeep serve --call-timeout).
	DefaultTimeout = 10 * time.Second
)

// Room names a room, or a front (Name empty), by its class and name.
type Room struct{ Class, Name string }

// String is the room as errors show it.
func (r Room) String() string {
	if r.Name == "" {
		return r.Class + " (front)"
	}
	return r.Class + "/" + r.Name
}

// Chain is the rooms waiting on a call, the first caller first: the
// caller of a call is its chain's last room.
type Chain []Room

// Contains reports whether r is in the chain.
func (c Chain) Contains(r Room) bool {
	for _, x := range c {
		if x == r {
			return true
		}
	}
	return false
}

// String is the chain as errors show it: "a/x → b/y".
func (c Chain) String() string {
	parts := make([]string, len(c))
	for i, r := range c {
		parts[i] = r.String()
	}
	return strings.Join(parts, " → ")
}

// Check says whether the caller at the end of chain may call to: not if to
// is in the chain (a cycle), nor if the chain is MaxDepth rooms long. A
// front is never in a cycle: it keeps no state and serves requests at once
// on several instances, so it may be called by a room it called.
func Check(chain Chain, to Room) *Error {
	if to.Name != "" && chain.Contains(to) {
		return Errorf(abi.StatusCycle, "%s → %s", chain, to)
	}
	if len(chain) >= MaxDepth {
		return Errorf(abi.StatusTooDeep, "%s is %d rooms, the limit", chain, len(chain))
	}
	return nil
}

// Call is a call on its way: who makes it, to whom, with what, and until
// when.
type Call struct {
	To    Room
	Chain Chain // ends with the caller
	// Payload is the caller's bytes, at most MaxPayload.
	Payload []byte
	// Deadline is when the caller gives up, on the clock of the node that
	// holds the call (nanoseconds of its monotonic clock).
	Deadline int64
	// Alarm, when set, makes this not a guest's call but the delivery of
	// the callee's alarm (host/alarms), routed as a call is; Chain and
	// Payload are empty.
	Alarm *Alarm
}

// Alarm is what a delivery of a room's alarm names: the alarm (its time,
// Unix ms, and its index entry), how many runs of it failed before, and
// whether it is to be dropped unrun (after its last retry).
type Alarm struct {
	At    int64
	Entry string
	Retry uint32
	Drop  bool
}

// From is the room that makes the call: the chain's last.
func (c *Call) From() Room {
	if len(c.Chain) == 0 {
		return Room{}
	}
	return c.Chain[len(c.Chain)-1]
}

// Result is a call's answer: the callee's reply, or why there is none.
type Result struct {
	Reply []byte
	Err   *Error
}

// Error is why a call has no reply. Status is what the guest sees.
type Error struct {
	Status abi.Status
	Msg    string
}

// Errorf makes an Error.
func Errorf(st abi.Status, format string, args ...any) *Error {
	return &Error{Status: st, Msg: fmt.Sprintf(format, args...)}
}

func (e *Error) Error() string { return e.Msg }

// Retryable reports whether the callee provably did not run the call.
func (e *Error) Retryable() bool { return e.Status == abi.StatusRefused }

// Fail is a Result with an error.
func Fail(st abi.Status, format string, args ...any) Result {
	return Result{Err: Errorf(st, format, args...)}
}

// Router takes a call to its room, wherever it runs, and returns its
// answer. It gives up at the call's deadline (StatusTimeout) or when ctx
// ends.
type Router interface {
	Route(ctx context.Context, c *Call) Result
}

// Expired is the answer to a call found past its deadline.
func Expired(c *Call) Result {
	return Fail(abi.StatusTimeout, "no answer from %s within the call's time; it may have run", c.To)
}

// AppendWire appends the encoding of c for another node: its deadline as
// the time left at now, on the same clock.
//
//	to:room chain:count(room)* left_ns:u64 payload:bytes [alarm]
//	room = class:str name:str
//	alarm = 1:u8 at:i64 entry:str retry:u32 drop:u8
//
// The alarm comes last, and only on a delivery: a node of an older
// version refuses one as malformed, and its sender tries again later.
func AppendWire(dst []byte, c *Call, now int64) []byte {
	dst = appendRoom(dst, c.To)
	dst = binary.LittleEndian.AppendUint32(dst, uint32(len(c.Chain)))
	for _, r := range c.Chain {
		dst = appendRoom(dst, r)
	}
	dst = binary.LittleEndian.AppendUint64(dst, uint64(max(c.Deadline-now, 0)))
	dst = appendBytes(dst, c.Payload)
	if a := c.Alarm; a != nil {
		dst = append(dst, 1)
		dst = binary.LittleEndian.AppendUint64(dst, uint64(a.At))
		dst = appendBytes(dst, []byte(a.Entry))
		dst = binary.LittleEndian.AppendUint32(dst, a.Retry)
		drop := byte(0)
		if a.Drop {
			drop = 1
		}
		dst = append(dst, drop)
	}
	return dst
}

// maxAlarmEntry bounds an alarm's entry name on the wire.
const maxAlarmEntry = 64

// ErrMalformed: the bytes are not a whole call.
var ErrMalformed = errors.New("calls: malformed call")

// maxName bounds a class or room name on the wire; the node checks it
// again as it checks a name in a URL.
const maxName = 1024

// DecodeWire decodes a call AppendWire encoded, its deadline put on the
// receiving node's clock at now. A call whose chain is longer than
// MaxDepth is malformed: no sender makes one.
func DecodeWire(b []byte, now int64) (Call, error) {
	d := wire{b: b}
	var c Call
	c.To = d.room()
	n := d.u32()
	if n > MaxDepth {
		return c, ErrMalformed
	}
	for range n {
		c.Chain = append(c.Chain, d.room())
	}
	left := d.u64()
	c.Payload = d.bytes(MaxPayload)
	if !d.bad && len(d.b) > 0 && d.b[0] == 1 {
		d.b = d.b[1:]
		a := &Alarm{At: int64(d.u64()), Entry: string(d.bytes(maxAlarmEntry))}
		a.Retry = d.u32()
		if len(d.b) == 0 || d.b[0] > 1 {
			return Call{}, ErrMalformed
		}
		a.Drop, d.b = d.b[0] == 1, d.b[1:]
		c.Alarm = a
	}
	if d.bad || len(d.b) != 0 || left > uint64(time.Hour) {
		return Call{}, ErrMalformed
	}
	c.Deadline = now + int64(left)
	return c, nil
}

// AppendResult appends r's encoding: status:i32 bytes, the reply or the
// error's message.
func AppendResult(dst []byte, r Result) []byte {
	if r.Err != nil {
		dst = binary.LittleEndian.AppendUint32(dst, uint32(int32(r.Err.Status)))
		return appendBytes(dst, []byte(r.Err.Msg))
	}
	dst = binary.LittleEndian.AppendUint32(dst, 0)
	return appendBytes(dst, r.Reply)
}

// DecodeResult decodes what AppendResult encoded.
func DecodeResult(b []byte) (Result, error) {
	d := wire{b: b}
	st := abi.Status(int32(d.u32()))
	body := d.bytes(MaxReply)
	if d.bad || len(d.b) != 0 || st > 0 {
		return Result{}, ErrMalformed
	}
	if st != abi.Success {
		return Result{Err: &Error{Status: st, Msg: string(body)}}, nil
	}
	return Result{Reply: body}, nil
}

func appendRoom(dst []byte, r Room) []byte {
	return appendBytes(appendBytes(dst, []byte(r.Class)), []byte(r.Name))
}

func appendBytes(dst, b []byte) []byte {
	dst = binary.LittleEndian.AppendUint32(dst, uint32(len(b)))
	return append(dst, b...)
}

type wire struct {
	b   []byte
	bad bool
}

func (d *wire) u32() uint32 {
	if len(d.b) < 4 {
		d.bad = true
		return 0
	}
	v := binary.LittleEndian.Uint32(d.b)
	d.b = d.b[4:]
	return v
}

func (d *wire) u64() uint64 {
	if len(d.b) < 8 {
		d.bad = true
		return 0
	}
	v := binary.LittleEndian.Uint64(d.b)
	d.b = d.b[8:]
	return v
}

func (d *wire) bytes(limit int) []byte {
	n := d.u32()
	if d.bad || uint64(n) > uint64(len(d.b)) || int(n) > limit {
		d.bad = true
		return nil
	}
	v := d.b[:n:n]
	d.b = d.b[n:]
	return v
}

func (d *wire) room() Room {
	return Room{Class: string(d.bytes(maxName)), Name: string(d.bytes(maxName))}
}

// Pending is a call under way: Finish gives its answer once, Done closes
// then.
type Pending struct {
	done chan struct{}
	res  Result
}

// NewPending makes a Pending.
func NewPending() *Pending { return &Pending{done: make(chan struct{})} }

// Finish gives the call's answer; only the first counts.
func (p *Pending) Finish(r Result) {
	select {
	case <-p.done:
	default:
		p.res = r
		close(p.done)
	}
}

// Done is closed once the call has its answer.
func (p *Pending) Done() <-chan struct{} { return p.done }

// Result is the call's answer, once Done is closed.
func (p *Pending) Result() Result {
	<-p.done
	return p.res
}
