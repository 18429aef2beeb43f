package clock

import (
	"context"
	"testing"
	"time"
)

var start = time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)

func fired(c <-chan time.Time) (time.Time, bool) {
	select {
	case t := <-c:
		return t, true
	default:
		return time.Time{}, false
	}
}

func TestManualTimer(t *testing.T) {
	m := NewManual(start)
	tm := m.NewTimer(10 * time.Second)
	m.Advance(9 * time.Second)
	if _, ok := fired(tm.C()); ok {
		t.Fatal("fired before its deadline")
	}
	m.Advance(time.Second)
	at, ok := fired(tm.C())
	if !ok || !at.Equal(start.Add(10*time.Second)) {
		t.Fatalf("at its deadline: fired %v at %v", ok, at)
	}
	if m.Timers() != 0 || tm.Stop() {
		t.Fatal("a fired timer is still armed")
	}
	if tm.Reset(time.Second) {
		t.Fatal("Reset of a fired timer reports it armed")
	}
	if !tm.Stop() {
		t.Fatal("Stop of an armed timer reports it was not")
	}
	m.Advance(time.Hour)
	if _, ok := fired(tm.C()); ok {
		t.Fatal("a stopped timer fired")
	}
	if got := m.Now(); got != int64(10*time.Second+time.Hour) {
		t.Fatalf("Now = %d", got)
	}
}

func TestManualTimersFireInOrder(t *testing.T) {
	m := NewManual(start)
	late, early := m.NewTimer(2*time.Second), m.NewTimer(time.Second)
	m.Advance(5 * time.Second)
	a, _ := fired(early.C())
	b, _ := fired(late.C())
	if !a.Before(b) {
		t.Fatalf("early fired at %v, late at %v", a, b)
	}
}

func TestManualTicker(t *testing.T) {
	m := NewManual(start)
	tk := m.NewTicker(time.Second)
	for i := 1; i <= 3; i++ {
		m.Advance(time.Second)
		at, ok := fired(tk.C())
		if !ok || !at.Equal(start.Add(time.Duration(i)*time.Second)) {
			t.Fatalf("tick %d: %v %v", i, ok, at)
		}
	}
	m.Advance(10 * time.Second) // a slow receiver gets one tick, not ten
	fired(tk.C())
	if _, ok := fired(tk.C()); ok {
		t.Fatal("ticks were queued for a slow receiver")
	}
	tk.Reset(time.Minute)
	m.Advance(59 * time.Second)
	if _, ok := fired(tk.C()); ok {
		t.Fatal("ticked before its new period")
	}
	tk.Stop()
	m.Advance(time.Hour)
	if _, ok := fired(tk.C()); ok || m.Timers() != 0 {
		t.Fatal("a stopped ticker ticked")
	}
}

func TestManualWaitTimersAndWall(t *testing.T) {
	m := NewManual(start)
	done := make(chan struct{})
	go func() {
		defer close(done)
		<-m.NewTimer(time.Minute).C()
	}()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := m.WaitTimers(ctx, 1); err != nil {
		t.Fatal(err)
	}
	m.Advance(time.Minute)
	<-done
	if got := m.Wall(); !got.Equal(start.Add(time.Minute)) {
		t.Fatalf("Wall = %v", got)
	}
	m.SetWall(start.Add(-time.Hour)) // a step back of the wall clock
	if got, now := m.Wall(), m.Now(); !got.Equal(start.Add(-time.Hour)) || now != int64(time.Minute) {
		t.Fatalf("after SetWall: wall %v, monotonic %d", got, now)
	}
}

func TestReal(t *testing.T) {
	c := Real()
	a := c.Now()
	<-c.NewTimer(time.Millisecond).C()
	if b := c.Now(); b-a < int64(time.Millisecond) {
		t.Fatalf("monotonic clock moved %d ns over a 1 ms timer", b-a)
	}
	if time.Since(c.Wall()) > time.Minute {
		t.Fatal("the real wall clock is off")
	}
}

func TestWithTimeout(t *testing.T) {
	m := NewManual(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	ctx, cancel := WithTimeout(m, context.Background(), time.Second)
	defer cancel()
	m.Advance(999 * time.Millisecond)
	if ctx.Err() != nil {
		t.Fatal("done before its time on the manual clock")
	}
	m.Advance(time.Millisecond)
	<-ctx.Done() // the test's deadline ends a hang
	real, cancelReal := WithTimeout(Real(), context.Background(), time.Millisecond)
	defer cancelReal()
	if _, ok := real.Deadline(); !ok {
		t.Fatal("on the real clock the context has no deadline")
	}
	<-real.Done()
}
