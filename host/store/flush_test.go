package store

import (
	"errors"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
)

// TestGroupSyncShares: writers that wait while a sync runs share the next
// one; none returns before a sync that started after it called; a failed
// sync fails exactly the writers of its round.
func TestGroupSyncShares(t *testing.T) {
	var (
		flushes atomic.Int32
		release = make(chan error)
		started = make(chan struct{}, 10)
	)
	g := newGroupSync(func() error {
		flushes.Add(1)
		started <- struct{}{}
		return <-release
	})
	first := make(chan error, 1)
	go func() { first <- g.wait() }()
	<-started // the first sync runs

	const later = 5
	var wg sync.WaitGroup
	errs := make(chan error, later)
	for range later {
		wg.Go(func() { errs <- g.wait() })
	}
	for !g.hasWaiting(later) {
		runtime.Gosched() // until all five wait on the running sync
	}
	// They came while the first sync ran, which may have started before
	// their writes: none may return with it.
	release <- nil
	if err := <-first; err != nil {
		t.Fatal(err)
	}
	<-started // one sync for all five
	select {
	case err := <-errs:
		t.Fatalf("a writer returned (%v) before a sync that started after its call", err)
	default:
	}
	boom := errors.New("EIO")
	release <- boom
	wg.Wait()
	close(errs)
	for err := range errs {
		if !errors.Is(err, boom) {
			t.Fatalf("a writer of the failed round: %v, want its error", err)
		}
	}
	if n := flushes.Load(); n != 2 {
		t.Fatalf("%d syncs for 6 writers in two rounds, want 2", n)
	}
	// The next round succeeds: a failure is not carried on.
	done := make(chan error, 1)
	go func() { done <- g.wait() }()
	<-started
	release <- nil
	if err := <-done; err != nil {
		t.Fatalf("the round after a failed one: %v", err)
	}
}

// hasWaiting reports whether n writers wait on a sync another runs.
func (g *groupSync) hasWaiting(n int) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.waiting == n
}
