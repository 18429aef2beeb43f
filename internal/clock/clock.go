// Package clock is the one source of time of a node's runtime: the room
// manager, the socket hub and the engine read the time and arm their
// timers through a Clock given to them, never through package time. The
// real clock is package time; the manual one moves only when a test says
// so, which turns idle timeouts, pings and deadlines into logic a test can
// drive step by step, on no real milliseconds.
//
// As in wazero's sys/clock.go, time is injected; unlike it, one interface
// carries both readings and timers, since the parts of a node that read
// the time also wait on it.
package clock

import (
	"context"
	"time"
)

// Clock is a monotonic clock, a wall clock and timers on the monotonic one.
type Clock interface {
	// Now is the monotonic clock in nanoseconds since an origin of the
	// clock's own; it never goes backwards. Compare readings of one Clock
	// only.
	Now() int64
	// Wall is the wall clock: for what is shown to people and stored
	// across processes, never for measuring intervals.
	Wall() time.Time
	// NewTimer fires once, d after now on this clock.
	NewTimer(d time.Duration) Timer
	// NewTicker fires every d on this clock, dropping ticks a slow
	// receiver misses (as time.Ticker does).
	NewTicker(d time.Duration) Ticker
}

// Timer is a time.Timer of a Clock.
type Timer interface {
	// C delivers the time the timer fired (on a channel with room for
	// one).
	C() <-chan time.Time
	// Stop prevents the timer from firing, reporting whether it was armed.
	Stop() bool
	// Reset arms the timer to fire d from now, reporting whether it was
	// armed.
	Reset(d time.Duration) bool
}

// Ticker is a time.Ticker of a Clock.
type Ticker interface {
	C() <-chan time.Time
	Stop()
	// Reset makes the ticker fire every d from now on.
	Reset(d time.Duration)
}

// Real returns the clock of package time. Its monotonic readings count
// from the call to Real.
func Real() Clock { return realClock{start: time.Now()} }

type realClock struct{ start time.Time }

func (c realClock) Now() int64      { return int64(time.Since(c.start)) }
func (c realClock) Wall() time.Time { return time.Now() }

func (c realClock) NewTimer(d time.Duration) Timer { return realTimer{time.NewTimer(d)} }

func (c realClock) NewTicker(d time.Duration) Ticker { return realTicker{time.NewTicker(d)} }

type realTimer struct{ t *time.Timer }

func (t realTimer) C() <-chan time.Time        { return t.t.C }
func (t realTimer) Stop() bool                 { return t.t.Stop() }
func (t realTimer) Reset(d time.Duration) bool { return t.t.Reset(d) }

type realTicker struct{ t *time.Ticker }

func (t realTicker) C() <-chan time.Time   { return t.t.C }
func (t realTicker) Stop()                 { t.t.Stop() }
func (t realTicker) Reset(d time.Duration) { t.t.Reset(d) }

// WithTimeout is context.WithTimeout on c: the context ends d after now
// on c's clock. On the real clock it is context.WithTimeout itself (one
// runtime timer, no goroutine: it is on the path of every call between
// rooms); on another clock a goroutine waits on c's timer.
func WithTimeout(c Clock, parent context.Context, d time.Duration) (context.Context, context.CancelFunc) {
	if _, real := c.(realClock); real {
		return context.WithTimeout(parent, d)
	}
	ctx, cancel := context.WithCancel(parent)
	t := c.NewTimer(max(0, d))
	go func() {
		select {
		case <-t.C():
			cancel()
		case <-ctx.Done():
			t.Stop()
		}
	}()
	return ctx, cancel
}
