package engine

import (
	"context"
	"errors"
	"strconv"
	"testing"
	"time"

	"github.com/wasmkeep/wasmkeep/abi"
	"github.com/wasmkeep/wasmkeep/internal/clock"
	"github.com/wasmkeep/wasmkeep/internal/limits"
)

// get sends a request for method and path to inst and returns its body as
// a number.
func getNumber(tb testing.TB, inst *Instance, method, path string) int64 {
	tb.Helper()
	body := request(tb, inst, abi.AppendRequest(nil, &abi.Request{Method: method, Path: path}))
	n, err := strconv.ParseInt(body, 10, 64)
	if err != nil {
		tb.Fatalf("%s %s: %q is not a number", method, path, body)
	}
	return n
}

// startOn starts a room of c on an engine whose clock is the manual clk.
// A Go guest sleeps while it initializes (its runtime waits a millisecond),
// which takes moving the clock on: whenever more than armed timers (those
// the engine holds while no guest sleeps) are armed, the clock moves a
// millisecond.
func startOn(tb testing.TB, clk *clock.Manual, c *Class, armed int) *Instance {
	tb.Helper()
	if clk.Now() == 0 {
		// The Go runtime refuses a monotonic clock that reads zero ("fatal
		// error: nanotime returning zero"); a real clock has run since
		// boot.
		clk.Advance(time.Second)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	type started struct {
		inst *Instance
		err  error
	}
	done := make(chan started, 1)
	go func() {
		inst, err := c.Start(ctx, &fakeHost{})
		done <- started{inst, err}
	}()
	for {
		sleeping := make(chan error, 1)
		wait, stop := context.WithCancel(ctx)
		go func() { sleeping <- clk.WaitTimers(wait, armed+1) }()
		select {
		case r := <-done:
			stop()
			if r.err != nil {
				tb.Fatal(r.err)
			}
			return r.inst
		case err := <-sleeping:
			stop()
			if err != nil {
				tb.Fatal("the guest neither started nor slept:", err)
			}
			clk.Advance(time.Millisecond)
		}
	}
}

// TestGuestClocksAreTheHosts: a guest's monotonic and wall clocks and its
// sleeps are the engine's clock, so a manual clock drives them exactly; a
// restored guest's monotonic clock goes on by the wall time it slept, and
// never back when the wall clock was set back.
func TestGuestClocksAreTheHosts(t *testing.T) {
	clk := clock.NewManual(time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC))
	e := newEngine(t, Config{Clock: clk, EventTimeout: limits.Off})
	c := compile(t, e, "./testdata/guests/clock")
	inst := startOn(t, clk, c, 0)
	if got, want := getNumber(t, inst, "GET", "/wall"), clk.Wall().UnixMilli(); got != want {
		t.Fatalf("guest wall clock %d ms, host %d ms", got, want)
	}
	before := getNumber(t, inst, "GET", "/elapsed")
	clk.Advance(3 * time.Second)
	if got := getNumber(t, inst, "GET", "/elapsed") - before; got != int64(3*time.Second) {
		t.Fatalf("guest monotonic clock moved %v while the host's moved 3s", time.Duration(got))
	}

	// A sleep inside an event waits for the clock, however long it takes
	// in real time.
	slept := make(chan int64, 1)
	go func() {
		body := request(t, inst, abi.AppendRequest(nil, &abi.Request{Method: "POST", Path: "/sleep", Query: "ms=250"}))
		n, _ := strconv.ParseInt(body, 10, 64)
		slept <- n
	}()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := clk.WaitTimers(ctx, 1); err != nil {
		t.Fatal("the guest's sleep armed no timer:", err)
	}
	select {
	case n := <-slept:
		t.Fatalf("the sleep ended after %v before the clock moved", time.Duration(n))
	default:
	}
	clk.Advance(250 * time.Millisecond)
	if n := <-slept; n != int64(250*time.Millisecond) {
		t.Fatalf("a 250 ms sleep took %v on the guest's clock", time.Duration(n))
	}

	// Hibernated for an hour: the restored guest's clock has gone on by it.
	at := getNumber(t, inst, "GET", "/elapsed")
	snap, segs := takeSnapshot(t, inst, nil)
	inst.Close()
	clk.Advance(time.Hour)
	woken, err := c.Restore(context.Background(), snap, segs, &fakeHost{})
	if err != nil {
		t.Fatal(err)
	}
	if got := getNumber(t, woken, "GET", "/elapsed") - at; got != int64(time.Hour) {
		t.Fatalf("after an hour asleep the guest's clock moved %v", time.Duration(got))
	}
	// Asleep again while the wall clock is set back a day: the monotonic
	// clock stands still rather than going back.
	at = getNumber(t, woken, "GET", "/elapsed")
	snap, segs = takeSnapshot(t, woken, nil)
	woken.Close()
	clk.SetWall(clk.Wall().Add(-24 * time.Hour))
	again, err := c.Restore(context.Background(), snap, segs, &fakeHost{})
	if err != nil {
		t.Fatal(err)
	}
	if got := getNumber(t, again, "GET", "/elapsed") - at; got != 0 {
		t.Fatalf("with the wall clock set back the guest's clock moved %v", time.Duration(got))
	}
	if got, want := getNumber(t, again, "GET", "/wall"), clk.Wall().UnixMilli(); got != want {
		t.Fatalf("guest wall clock %d ms after the step back, host %d ms", got, want)
	}
}

// TestEventTimeoutOnTheClock: the watchdog measures a call's time on the
// engine's clock: a guest spinning forever is interrupted once the clock
// passes the event timeout, and not before.
func TestEventTimeoutOnTheClock(t *testing.T) {
	clk := clock.NewManual(time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC))
	const timeout = 2 * time.Second
	e := newEngine(t, Config{Clock: clk, EventTimeout: timeout})
	armed, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := clk.WaitTimers(armed, 1); err != nil {
		t.Fatal("the watchdog armed no ticker:", err)
	}
	c := compile(t, e, "./testdata/guests/hostile")
	inst := startOn(t, clk, c, 1)
	done := make(chan error, 1)
	go func() {
		_, err := inst.Request(abi.AppendRequest(nil, &abi.Request{Method: "POST", Path: "/loop"}))
		done <- err
	}()
	for inst.callStart.Load() == 0 {
		select {
		case err := <-done:
			t.Fatalf("the loop returned at once: %v", err)
		case <-time.After(time.Millisecond):
		}
	}
	tick := timeout / 20
	for clk.Now()-inst.callStart.Load() < int64(timeout) {
		clk.Advance(tick)
		select {
		case err := <-done:
			t.Fatalf("interrupted after %v of a %v timeout: %v", time.Duration(clk.Now()-inst.callStart.Load()), timeout, err)
		default:
		}
	}
	// Past the timeout: the watchdog's next tick ends the call.
	clk.Advance(tick)
	select {
	case err := <-done:
		if !errors.Is(err, ErrTimeout) {
			t.Fatalf("the loop ended with %v, want %v", err, ErrTimeout)
		}
	case <-time.After(time.Minute):
		t.Fatal("the loop was not interrupted past its timeout")
	}
}
