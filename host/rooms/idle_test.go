package rooms

import (
	"context"
	"slices"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/wasmkeep/wasmkeep/abi"
)

// TestIdleCallAfterTheBurst: the call a guest asks for with idle_call
// comes once its event's output has gone, and what it changes in the
// room's memory is kept: written at the next hibernation even when the
// event itself had already been made durable.
func TestIdleCallAfterTheBurst(t *testing.T) {
	h := newHarness(t, Config{})
	a, ca := h.open("r")
	h.waitFor("the open", func() bool { return len(ca.sent()) == 1 })
	var seen atomic.Pointer[[]string]
	f := func(*fakeInstance) { sent := ca.sent(); seen.Store(&sent) }
	h.classes.byName["c"].onIdle.Store(&f)
	if err := a.Message(abi.MessageText, []byte("idle, checkpoint")); err != nil {
		t.Fatal(err)
	}
	h.waitFor("the idle call", func() bool { return h.counter(`wasmkeep_room_idle_calls_total`) == 1 })
	if got := *seen.Load(); !slices.Contains(got, "idle, checkpoint") {
		t.Fatalf("at the idle call the socket had been sent %q: the event's echo had not gone", got)
	}
	// No event between the idle call and the hibernation: the call alone
	// must make the state be written.
	if err := h.m.Hibernate(context.Background(), Key{"c", "r"}); err != nil {
		t.Fatal(err)
	}
	if st := h.state("r"); st != StateHibernated {
		t.Fatalf("after Hibernate: %s", st)
	}
	h.expect("r", "GET", "/idles", "1") // the idle call's change was written
	if got := h.counter(`wasmkeep_room_idle_calls_total`); got != 1 {
		t.Fatalf("idle calls: %v, want 1: a call asked for once is made once", got)
	}
}

// TestIdleCallCrash: a trap in the idle call is a crash: the room
// restarts from its last snapshot, and its sockets stay.
func TestIdleCallCrash(t *testing.T) {
	h := newHarness(t, Config{})
	a, ca := h.open("r")
	h.waitFor("the open", func() bool { return len(ca.sent()) == 1 })
	h.expect("r", "POST", "/", "1")
	if err := h.m.Hibernate(context.Background(), Key{"c", "r"}); err != nil {
		t.Fatal(err)
	}
	h.expect("r", "POST", "/", "2") // not written
	if err := a.Message(abi.MessageText, []byte("idle, then trap")); err != nil {
		t.Fatal(err)
	}
	h.waitFor("the crash", func() bool { return h.counter(`wasmkeep_room_crashes_total{cause="trap"}`) == 1 })
	h.expect("r", "GET", "/", "1")
	if ca.closeCode() != 0 {
		t.Fatalf("the socket closed with %d: no event of it crashed", ca.closeCode())
	}
	if got := ca.sent(); !slices.Contains(got, "idle, then trap") {
		t.Fatalf("the socket got %q: its event's echo had gone before the idle call", got)
	}
}

// TestIdleCallInALongBurst: a room that never runs out of events still
// gets its idle call, after the burst of maxBurst events that the worker
// handles before it lets its sockets write.
func TestIdleCallInALongBurst(t *testing.T) {
	h := newHarness(t, Config{})
	a, ca := h.open("r")
	h.waitFor("the open", func() bool { return len(ca.sent()) == 1 })
	var countAtIdle atomic.Int64
	countAtIdle.Store(-1)
	f := func(i *fakeInstance) { countAtIdle.Store(int64(i.get(offCounter))) }
	c := h.classes.byName["c"]
	c.onIdle.Store(&f)
	if err := a.Message(abi.MessageText, []byte("idle, then wait")); err != nil {
		t.Fatal(err)
	}
	room := a.room
	h.waitFor("the room to run the message", func() bool { return queued(room) == 0 })
	const requests = maxBurst + 10
	var wg sync.WaitGroup
	errs := make(chan error, requests)
	for range requests {
		wg.Go(func() {
			if _, err := h.request("r", "POST", "/"); err != nil {
				errs <- err
			}
		})
	}
	h.waitFor("the requests to queue", func() bool { return queued(room) == requests })
	close(c.gate)
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	h.waitFor("the idle call", func() bool { return h.counter(`wasmkeep_room_idle_calls_total`) == 1 })
	// The burst's first event asked; the call came after its 64th, the
	// 63rd request.
	if got := countAtIdle.Load(); got != maxBurst-1 {
		t.Fatalf("the idle call came after %d requests, want %d (a burst of %d events)", got, maxBurst-1, maxBurst)
	}
}
