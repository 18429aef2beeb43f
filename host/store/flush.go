package store

import (
	"os"
	"sync"
)

// groupSync makes a filesystem's writes durable for many writers at once:
// one sync of the whole filesystem (syncfs(2)) covers every write that
// completed before it started, so the writers that wait while one sync
// runs share the next one. Durable commits of many rooms then cost a few
// flushes a round, not two fsyncs a write each: what the directory store
// spends on a durable event is mostly these flushes.
type groupSync struct {
	flushFS func() error // flushes the whole filesystem

	mu       sync.Mutex
	done     *sync.Cond
	running  bool
	started  uint64           // syncs started
	finished uint64           // syncs finished, in order
	failed   map[uint64]error // the syncs that failed, while a writer may ask
	waiting  int              // writers waiting for a sync another runs (tests)
}

func newGroupSync(flushFS func() error) *groupSync {
	g := &groupSync{flushFS: flushFS, failed: map[uint64]error{}}
	g.done = sync.NewCond(&g.mu)
	return g
}

// wait returns once a sync that started after the call began has
// finished: every write the caller completed before calling is durable,
// unless that sync failed, whose error it returns.
func (g *groupSync) wait() error {
	g.mu.Lock()
	defer g.mu.Unlock()
	// A sync running now may have started before the caller's writes:
	// the caller needs the one after it.
	need := g.started + 1
	for g.finished < need {
		if g.running {
			g.waiting++
			g.done.Wait()
			g.waiting--
			continue
		}
		g.running = true
		g.started++
		n := g.started
		g.mu.Unlock()
		err := g.flushFS()
		g.mu.Lock()
		g.running = false
		g.finished = n
		if err != nil {
			g.failed[n] = err
		}
		g.done.Broadcast()
	}
	err := g.failed[need]
	// A failure is kept for the writers of its round; a later sync is
	// not taken to cover a write whose flush failed, since the kernel
	// may have dropped its pages.
	for k := range g.failed {
		if k+maxKeptFailures < g.finished {
			delete(g.failed, k)
		}
	}
	return err
}

// maxKeptFailures bounds how many rounds back a failed sync is reported:
// a writer waits for the round after the one running when it came, so
// it asks at most one round after its own has finished.
const maxKeptFailures = 64

// flush makes the changes of f (a file, or a directory's entries)
// durable: its fsync, or its filesystem's group sync.
func (d *Dir) flush(f *os.File) error {
	if d.noSync {
		return nil
	}
	if d.group != nil {
		return d.group.wait()
	}
	return f.Sync()
}
