package member

import (
	"context"
	"testing"
	"time"

	"github.com/wasmkeep/wasmkeep/abi"
	"github.com/wasmkeep/wasmkeep/calls"
	"github.com/wasmkeep/wasmkeep/cluster"
	"github.com/wasmkeep/wasmkeep/host/store"
)

type observerFunc func(Event)

func (f observerFunc) Observe(e Event) { f(e) }

// TestACallPastItsDeadlineIsNotSent: a call whose deadline passes while
// it is routed (a slow read, a wait for the room's node) is answered
// timed out without being sent. Its node is not to blame: nothing tried
// to connect to it, so it is not taken for unreachable (which would send
// its rooms' events to the failover wait until its next renewal).
func TestACallPastItsDeadlineIsNotSent(t *testing.T) {
	bucket := store.NewMem()
	var a *fixture
	a = newFixture(t, bucket, "a", func(c *Config) {
		c.Observer = observerFunc(func(e Event) {
			if e.Kind == Routed {
				a.clk.Advance(time.Second) // the routing read took that long
			}
		})
	})
	b := newFixture(t, bucket, "b")
	a.join(t)
	b.join(t)
	if _, err := b.m.Acquire(ctx, room); err != nil {
		t.Fatal(err)
	}
	c := &calls.Call{To: calls.Room{Class: room.Class, Name: room.Name}, Chain: calls.Chain{{Class: "front"}},
		Deadline: a.clk.Now() + int64(500*time.Millisecond)}
	serve := func(context.Context, *calls.Call) calls.Result {
		t.Error("served here")
		return calls.Result{}
	}
	send := func(context.Context, string, string, *calls.Call) (calls.Result, bool) {
		t.Error("sent past its deadline")
		return calls.Fail(abi.StatusRefused, "cannot connect"), false
	}
	if res := a.m.Call(ctx, c, false, serve, send); res.Err == nil || res.Err.Status != abi.StatusTimeout {
		t.Fatalf("the call: %+v, want timed out", res)
	}
	if w, err := a.m.Route(ctx, room); err != nil || w.Kind != cluster.Elsewhere || w.Node != "b" {
		t.Errorf("after the call, the room routes to %+v (%v); want b, reachable", w, err)
	}
}
