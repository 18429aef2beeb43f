package fronts

import (
	"context"
	"errors"
	"testing"
	"time"
)

// testPool is a pool of a front with at most instances slots and queue
// requests waiting. Its slots run no instance: these tests are of the
// slots and the queue, the node's tests of the instances.
func testPool(instances, queue int) *pool {
	f := &Fronts{cfg: Config{Instances: instances, Queue: queue}.withDefaults()}
	return &pool{f: f, name: "front"}
}

// acquired waits for a request's slot.
func acquired(t *testing.T, got <-chan *slot) *slot {
	t.Helper()
	select {
	case s := <-got:
		return s
	case <-time.After(10 * time.Second):
		t.Fatal("a waiting request got no slot")
		return nil
	}
}

// wait starts a request that waits for a slot; its slot (nil if it
// failed) comes on the channel, once it has one.
func wait(t *testing.T, p *pool, ctx context.Context) <-chan *slot {
	t.Helper()
	got := make(chan *slot, 1)
	before := p.info().Waiting
	go func() {
		s, err := p.acquire(ctx)
		if err != nil {
			s = nil
		}
		got <- s
	}()
	for p.info().Waiting == before {
		time.Sleep(time.Millisecond) // until it queues: a condition, not a guess
	}
	return got
}

// TestPoolQueue: slots are made up to the bound, then requests wait in
// order, up to the queue's bound; past it they are refused; a request
// that gives up leaves the queue; a closed pool refuses and wakes those
// waiting.
func TestPoolQueue(t *testing.T) {
	ctx := context.Background()
	p := testPool(2, 2)
	s1, err := p.acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	s2, err := p.acquire(ctx)
	if err != nil || s1 == s2 {
		t.Fatalf("second slot: %v (same as the first: %v)", err, s1 == s2)
	}
	first := wait(t, p, ctx)
	gone, giveUp := context.WithCancel(ctx)
	quitter := wait(t, p, gone)
	if _, err := p.acquire(ctx); !errors.Is(err, ErrBusy) {
		t.Fatalf("a request past the queue: %v, want ErrBusy", err)
	}
	if i := p.info(); i.Busy != 2 || i.Waiting != 2 {
		t.Fatalf("info: %+v, want 2 busy and 2 waiting", i)
	}
	giveUp()
	if s := acquired(t, quitter); s != nil {
		t.Fatal("a request that gave up got a slot")
	}
	last := wait(t, p, ctx) // the quitter's place is free again
	p.release(s1)
	if s := acquired(t, first); s != s1 {
		t.Fatal("the first waiting request did not get the released slot")
	}
	p.release(s2)
	if s := acquired(t, last); s != s2 {
		t.Fatal("the next waiting request did not get the next slot")
	}
	p.release(s1)
	if i := p.info(); i.Busy != 1 || i.Waiting != 0 {
		t.Fatalf("info: %+v, want 1 busy and none waiting", i)
	}
	// The idle slot is taken again, not a new one made.
	if s, err := p.acquire(ctx); err != nil || s != s1 {
		t.Fatalf("an idle slot: %v, same slot %v", err, s == s1)
	}
	waiting := wait(t, p, ctx)
	p.close()
	if s := acquired(t, waiting); s != nil {
		t.Fatal("a request waiting when the pool closed got a slot")
	}
	if _, err := p.acquire(ctx); !errors.Is(err, ErrStopping) {
		t.Fatalf("after close: %v, want ErrStopping", err)
	}
	p.release(s1)
	p.release(s2)
	if i := p.info(); i.Busy != 0 {
		t.Fatalf("after close and release: %+v", i)
	}
}
