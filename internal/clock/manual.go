package clock

import (
	"context"
	"sort"
	"sync"
	"time"
)

// Manual is a Clock that moves only when Advance is called: timers and
// tickers fire, in deadline order, as Advance passes their deadlines. Its
// wall clock moves with it from a start the test chooses. It is safe for
// concurrent use.
type Manual struct {
	mu      sync.Mutex
	now     int64
	wall    time.Time
	waiters []*manualTimer
	changed chan struct{} // closed when a timer is armed or stopped
}

var _ Clock = (*Manual)(nil)

// NewManual returns a manual clock whose monotonic reading starts at 0 and
// whose wall clock starts at wall.
func NewManual(wall time.Time) *Manual {
	return &Manual{wall: wall, changed: make(chan struct{})}
}

// Now implements Clock.
func (m *Manual) Now() int64 {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.now
}

// Wall implements Clock.
func (m *Manual) Wall() time.Time {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.wall.Add(time.Duration(m.now))
}

// SetWall moves the wall clock alone (to step it back, as an operator or
// NTP may): the monotonic clock and the timers do not notice.
func (m *Manual) SetWall(t time.Time) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.wall = t.Add(-time.Duration(m.now))
}

// Advance moves the clock forward by d, firing every timer and ticker whose
// deadline it passes, earliest first.
func (m *Manual) Advance(d time.Duration) {
	m.mu.Lock()
	defer m.mu.Unlock()
	end := m.now + int64(d)
	for {
		sort.Slice(m.waiters, func(i, j int) bool { return m.waiters[i].at < m.waiters[j].at })
		if len(m.waiters) == 0 || m.waiters[0].at > end {
			break
		}
		t := m.waiters[0]
		m.now = t.at
		t.fire(m.wall.Add(time.Duration(m.now)))
		if t.period > 0 {
			t.at += int64(t.period)
		} else {
			m.remove(t)
		}
	}
	m.now = end
}

// Timers counts the armed timers and tickers.
func (m *Manual) Timers() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return len(m.waiters)
}

// WaitTimers returns once at least n timers and tickers are armed (the code
// under test has reached its wait), or with ctx's error.
func (m *Manual) WaitTimers(ctx context.Context, n int) error {
	for {
		m.mu.Lock()
		armed, changed := len(m.waiters), m.changed
		m.mu.Unlock()
		if armed >= n {
			return nil
		}
		select {
		case <-changed:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// NewTimer implements Clock.
func (m *Manual) NewTimer(d time.Duration) Timer {
	t := &manualTimer{m: m, c: make(chan time.Time, 1)}
	t.Reset(d)
	return t
}

// NewTicker implements Clock.
func (m *Manual) NewTicker(d time.Duration) Ticker {
	if d <= 0 {
		panic("clock: non-positive interval for NewTicker")
	}
	t := &manualTimer{m: m, c: make(chan time.Time, 1), period: d}
	t.Reset(d)
	return manualTicker{t}
}

// remove disarms t; the caller holds m.mu.
func (m *Manual) remove(t *manualTimer) bool {
	for i, w := range m.waiters {
		if w == t {
			m.waiters = append(m.waiters[:i], m.waiters[i+1:]...)
			m.notify()
			return true
		}
	}
	return false
}

// notify wakes WaitTimers; the caller holds m.mu.
func (m *Manual) notify() {
	close(m.changed)
	m.changed = make(chan struct{})
}

type manualTimer struct {
	m      *Manual
	c      chan time.Time
	at     int64
	period time.Duration // a ticker's; 0 for a timer
}

func (t *manualTimer) fire(now time.Time) {
	select {
	case t.c <- now:
	default: // a tick the receiver has not taken yet: dropped
	}
}

func (t *manualTimer) C() <-chan time.Time { return t.c }

func (t *manualTimer) Stop() bool {
	t.m.mu.Lock()
	defer t.m.mu.Unlock()
	return t.m.remove(t)
}

func (t *manualTimer) Reset(d time.Duration) bool {
	t.m.mu.Lock()
	defer t.m.mu.Unlock()
	armed := t.m.remove(t)
	t.at = t.m.now + int64(max(d, 0))
	t.m.waiters = append(t.m.waiters, t)
	t.m.notify()
	if d <= 0 {
		t.fire(t.m.wall.Add(time.Duration(t.m.now)))
		t.m.remove(t)
	}
	return armed
}

type manualTicker struct{ t *manualTimer }

func (k manualTicker) C() <-chan time.Time { return k.t.c }
func (k manualTicker) Stop()               { k.t.Stop() }

func (k manualTicker) Reset(d time.Duration) {
	if d <= 0 {
		panic("clock: non-positive interval for Ticker.Reset")
	}
	k.t.m.mu.Lock()
	k.t.period = d
	k.t.m.mu.Unlock()
	k.t.Reset(d)
}
