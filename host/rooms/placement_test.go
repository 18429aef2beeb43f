package rooms

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/wasmkeep/wasmkeep/abi"
	"github.com/wasmkeep/wasmkeep/host/rooms/life"
	"github.com/wasmkeep/wasmkeep/host/store"
)

// What the placement hears of a room's holds and sockets (issue 9's seams;
// seed 000 §1–3): every end of a hold with its reason and the sockets open
// here, the last socket going, a close that could not reach the guest,
// and what a hold found invalid does.

func expectCalls(t *testing.T, h *harness, want ...string) {
	t.Helper()
	if got := h.place.took(); !slices.Equal(got, want) {
		t.Fatalf("placement heard %q, want %q", got, want)
	}
}

func TestHoldEndsIdleWithAnOpenSocket(t *testing.T) {
	h := newHarness(t, Config{IdleTimeout: 10 * time.Second})
	_, conn := h.open("r")
	h.waitFor("the open", func() bool { return len(conn.sent()) == 1 })
	expectCalls(t, h, "acquire c/r")
	h.clock.Advance(10 * time.Second)
	h.waitFor("the idle hibernation", func() bool { return h.state("r") == StateHibernated })
	expectCalls(t, h, "end c/r idle open=1")
}

func TestHoldEndsWithACrash(t *testing.T) {
	h := newHarness(t, Config{})
	h.expect("a", "POST", "/", "1")
	if _, err := h.request("a", "POST", "/trap"); err == nil {
		t.Fatal("the trap did not fail the request")
	}
	expectCalls(t, h, "acquire c/a", "end c/a crash open=0")
}

func TestClosingSocketsDoNotCountAsOpen(t *testing.T) {
	h := newHarness(t, Config{})
	s, conn := h.open("r")
	h.waitFor("the open", func() bool { return len(conn.sent()) == 1 })
	if err := s.Message(abi.MessageText, []byte("close")); err != nil {
		t.Fatal(err)
	}
	h.waitFor("the room to close it", func() bool { return conn.closeCode() == 4000 })
	// Its close event has not arrived yet: the socket is closing.
	if err := h.m.Hibernate(context.Background(), Key{"c", "r"}); err != nil {
		t.Fatal(err)
	}
	expectCalls(t, h, "acquire c/r", "end c/r admin open=0")
	s.Closed(4000, "bye")
	h.waitFor("the last socket to go", func() bool { return h.place.heard("sockets gone c/r") })
}

func TestLastSocketGone(t *testing.T) {
	h := newHarness(t, Config{})
	a, ca := h.open("r")
	b, cb := h.open("r")
	h.waitFor("both opens", func() bool { return len(ca.sent()) == 1 && len(cb.sent()) == 1 })
	h.place.took()
	a.Closed(1000, "")
	b.Closed(1000, "")
	h.waitFor("the last socket to go", func() bool { return h.place.heard("sockets gone c/r") })
	if got := h.place.took(); !slices.Equal(got, []string{"sockets gone c/r"}) {
		t.Fatalf("two closes: the placement heard %q; want one sockets-gone, after the second", got)
	}
}

// TestCloseThatCannotReachTheGuest: a socket of a hibernated room closes
// and the room cannot wake to hear it (its snapshot cannot be read): the
// placement is told, rather than the close being dropped unseen.
func TestCloseThatCannotReachTheGuest(t *testing.T) {
	h := newHarness(t, Config{})
	s, conn := h.open("r")
	h.waitFor("the open", func() bool { return len(conn.sent()) == 1 })
	if err := h.m.Hibernate(context.Background(), Key{"c", "r"}); err != nil {
		t.Fatal(err)
	}
	expectCalls(t, h, "acquire c/r", "end c/r admin open=1")
	h.bucket.SetFaults(func(op store.Op) store.Fault {
		if op.Kind == store.OpGet && strings.HasSuffix(op.Key, "/manifest") {
			return store.FailBefore(errors.New("unreachable"))
		}
		return store.Fault{}
	})
	s.Closed(1001, "gone")
	// The last socket's going is told after the wake that would have
	// delivered its close (which would take a parked record back).
	h.waitFor("the placement to hear", func() bool { return h.place.heard("sockets gone c/r") })
	expectCalls(t, h, "acquire c/r", "end c/r failed_restore open=0", "close lost c/r", "sockets gone c/r")
}

// TestInvalidHoldActsNoMore: once the placement no longer grants a hold,
// the room's instance is dropped unwritten before its next event, which
// wakes it anew from its last snapshot; a hibernation writes nothing.
func TestInvalidHoldActsNoMore(t *testing.T) {
	h := newHarness(t, Config{})
	key := Key{"c", "a"}
	h.expect("a", "POST", "/", "1")
	if err := h.m.Hibernate(context.Background(), key); err != nil {
		t.Fatal(err)
	}
	h.expect("a", "POST", "/", "2") // resident, not written
	h.place.took()
	h.place.setValid(key, false)
	writes := h.counter("wasmkeep_snapshot_writes_total")
	if err := h.m.Hibernate(context.Background(), key); err != nil {
		t.Fatal(err)
	}
	if got := h.counter("wasmkeep_snapshot_writes_total"); got != writes {
		t.Fatal("a hold no longer valid wrote its snapshot")
	}
	expectCalls(t, h, "end c/a dropped open=0")
	h.place.setValid(key, true)
	h.expect("a", "GET", "/", "1")

	h.expect("a", "POST", "/", "2")
	h.place.took()
	h.place.setValid(key, false)
	h.expect("a", "GET", "/", "1") // dropped before the event, woken anew
	expectCalls(t, h, "end c/a dropped open=0", "acquire c/a")
}

func TestHoldEndsAtStop(t *testing.T) {
	h := newHarness(t, Config{})
	h.expect("a", "POST", "/", "1")
	h.place.took()
	if err := h.m.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	expectCalls(t, h, "end c/a stop open=0")
}

func TestPlacementCallbacks(t *testing.T) {
	h := newHarness(t, Config{})
	_, conn := h.open("r")
	h.expect("a", "POST", "/", "1")
	h.waitFor("the open", func() bool { return len(conn.sent()) == 1 })
	if got := h.m.RoomsWithSockets(); !slices.Equal(got, []Key{{"c", "r"}}) {
		t.Fatalf("rooms with sockets: %v", got)
	}
	if err := h.m.CloseSockets(context.Background(), Key{"c", "r"}, abi.CloseServiceRestart, "moving"); err != nil {
		t.Fatal(err)
	}
	if conn.closeCode() != abi.CloseServiceRestart {
		t.Fatalf("closed with %d", conn.closeCode())
	}
	h.place.took()
	if err := h.m.DropAll(context.Background()); err != nil {
		t.Fatal(err)
	}
	got := h.place.took()
	slices.Sort(got)
	if want := []string{"end c/a lapse open=0", "end c/r lapse open=0"}; !slices.Equal(got, want) {
		t.Fatalf("drop all: %q, want %q", got, want)
	}
	if c := h.m.Counts(); c.Resident != 0 {
		t.Fatalf("%d rooms resident after DropAll", c.Resident)
	}
	h.expect("a", "GET", "/", "0") // never written: its next event starts it fresh
	if r, err := h.m.Route(context.Background(), Key{"c", "a"}); err != nil || r.Kind != RouteHere {
		t.Fatalf("route: %+v, %v", r, err)
	}
}

// TestHibernateAll: every resident room hibernates, for the reason given,
// with its state written: the next event finds it.
func TestHibernateAll(t *testing.T) {
	h := newHarness(t, Config{})
	h.expect("a", "POST", "/", "1")
	h.expect("b", "POST", "/", "1")
	h.place.took()
	if err := h.m.HibernateAll(context.Background(), life.EndAdmin); err != nil {
		t.Fatal(err)
	}
	got := h.place.took()
	slices.Sort(got)
	if want := []string{"end c/a admin open=0", "end c/b admin open=0"}; !slices.Equal(got, want) {
		t.Fatalf("hibernate all: %q, want %q", got, want)
	}
	if c := h.m.Counts(); c.Resident != 0 {
		t.Fatalf("%d rooms resident after HibernateAll", c.Resident)
	}
	h.expect("a", "GET", "/", "1")
}

func TestGenerationFloorIsTheStoredCountersEnd(t *testing.T) {
	ctx := context.Background()
	b := store.NewMem()
	if g, err := GenerationFloor(ctx, b); err != nil || g != 0 {
		t.Fatalf("an empty bucket's floor: %d, %v", g, err)
	}
	l, err := NewStoredLocal(ctx, b, 5000)
	if err != nil {
		t.Fatal(err)
	}
	h, err := l.Acquire(ctx, Key{Class: "c", Name: "r"})
	if err != nil {
		t.Fatal(err)
	}
	g, err := GenerationFloor(ctx, b)
	if err != nil || g <= h.Generation {
		t.Errorf("floor %d (%v) is not above the hold's generation %d", g, err, h.Generation)
	}
	if _, err := b.Put(ctx, generationKey, []byte("junk"), store.Cond{}); err != nil {
		t.Fatal(err)
	}
	if _, err := GenerationFloor(ctx, b); err == nil {
		t.Error("a garbled counter gave a floor")
	}
}

// TestRoomTakenElsewhereClosesItsSocketsForAReconnect: a room that
// hibernated with a socket open here and was then taken by another node
// cannot wake here; the socket whose message needed the wake is closed
// with 1012, so that its client reconnects and is routed to the room, and
// a request gets the placement's refusal, not "unavailable".
func TestRoomTakenElsewhereClosesItsSocketsForAReconnect(t *testing.T) {
	h := newHarness(t, Config{})
	s, conn := h.open("a")
	h.settle("a")
	if err := h.m.Hibernate(context.Background(), Key{"c", "a"}); err != nil {
		t.Fatal(err)
	}
	h.place.mu.Lock()
	h.place.refuse[Key{"c", "a"}] = fmt.Errorf("%w: held by node n2", ErrElsewhere)
	h.place.mu.Unlock()
	if _, err := h.request("a", "GET", "/"); !errors.Is(err, ErrElsewhere) || errors.Is(err, ErrUnavailable) {
		t.Errorf("a request for a room taken elsewhere: %v", err)
	}
	if err := s.Message(abi.MessageText, []byte("hello")); err != nil {
		t.Fatal(err)
	}
	h.waitFor("the socket closed", func() bool { return conn.closeCode() != 0 })
	if got := conn.closeCode(); got != abi.CloseServiceRestart {
		t.Errorf("the socket closed with %v, want 1012", got)
	}
}
