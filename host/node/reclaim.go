package node

import (
	"runtime/debug"
	"time"

	"github.com/VictoriaMetrics/metrics"

	"github.com/wasmkeep/wasmkeep/internal/limits"
)

// Returning memory after a burst (issue 13, docs/PERFORMANCE.md "Memory
// after a burst"). A room's instance holds a few hundred kilobytes of Go
// heap (wazero's structures, the garbage of its start) besides its linear
// memory, which is unmapped when the instance closes. When many rooms
// hibernate together and the node then goes quiet, that heap is garbage
// that nothing collects: the Go runtime starts a cycle only when the heap
// grows to twice what was live at the previous one (taken while the rooms
// were resident), or after two minutes, and even then its scavenger
// returns freed pages to the OS only down to that goal and slowly. 8,000
// idle sockets over 800 chat rooms kept 45 KB of RSS a socket for two
// minutes, against 1.3 KB of live heap. So the node collects and returns
// the memory itself once a burst of closes pauses.

// spareFor is how long the engine keeps the memory of a closed instance
// for a restore to write into (engine.Engine.DropSpares): a wake from the
// store soon after a hibernation of the class does not fault its pages
// in, and RSS still falls back a second after a burst.
const spareFor = time.Second

// DefaultReclaimCloses is Config.ReclaimCloses: the heap a few rooms leave
// is not worth a collection; that of sixteen (some 5 MB) is.
const DefaultReclaimCloses = 16

const (
	// reclaimTick is how often the node looks at its count of closed
	// instances: a burst that pauses for a tick is over.
	reclaimTick = 250 * time.Millisecond
	// reclaimMaxWait bounds how long a stream of closes that never pauses
	// puts off a reclaim.
	reclaimMaxWait = 5 * time.Second
	// reclaimMinGap spaces reclaims by a second at least.
	reclaimMinGap = time.Second
	// Reclaims spend a budget of CPU time (reclaimCost) that grows by
	// 1/reclaimShare of the time that passes, up to reclaimBudget: over
	// time they take at most 2% of one core, whatever the size of the
	// heap, while one that lands in the middle of a burst still leaves
	// room for the one after it.
	reclaimShare  = 50
	reclaimBudget = time.Second
)

// reclaimPolicy decides when the node collects garbage and returns freed
// memory to the OS, from the count of closed instances read on each tick;
// times are the node clock's nanoseconds. It does no I/O.
type reclaimPolicy struct {
	minCloses uint64
	seen      uint64 // closes counted at the previous tick
	// kept is how many instances the room layer kept at the previous
	// tick (rooms.Manager.Warm); released is set when they have all gone
	// since the last reclaim.
	kept      int
	released  bool
	reclaimed uint64 // closes counted at the last reclaim
	pending   int64  // when minCloses closes were first found waiting (0: not yet)
	budget    int64  // reclaim time the node may spend, as of at
	at        int64
	last      int64 // when the last reclaim began
}

func newReclaimPolicy(minCloses uint64, now int64) *reclaimPolicy {
	return &reclaimPolicy{minCloses: minCloses, budget: int64(reclaimBudget), at: now, last: now - int64(reclaimMinGap)}
}

// due reports whether to reclaim now, closes having been counted so far
// and kept instances being kept by the room layer: when at least
// minCloses closed since the last reclaim, or at least one did and every
// instance the room layer kept has gone since (the rooms of a burst whose
// instances were kept a few seconds after it, rooms.Config.WarmFor, close
// after its reclaim, and may be fewer than minCloses), and either none
// closed during the last tick (the burst paused) or they have waited
// reclaimMaxWait, the last reclaim is reclaimMinGap back, and the budget
// is not spent.
func (p *reclaimPolicy) due(now int64, closes uint64, kept int) bool {
	p.budget = min(p.budget+(now-p.at)/reclaimShare, int64(reclaimBudget))
	p.at = now
	quiet := closes == p.seen
	p.seen = closes
	if p.kept > 0 && kept == 0 {
		p.released = true
	}
	p.kept = kept
	if n := closes - p.reclaimed; n < p.minCloses && (n == 0 || !p.released) {
		return false
	}
	if p.pending == 0 {
		p.pending = now
	}
	if now-p.last < int64(reclaimMinGap) || p.budget <= 0 {
		return false
	}
	return quiet || now-p.pending >= int64(reclaimMaxWait)
}

// done records a reclaim that began at now with closes counted and took
// cost.
func (p *reclaimPolicy) done(now, cost int64, closes uint64) {
	p.reclaimed, p.pending, p.last, p.released = closes, 0, now, false
	p.budget -= cost
}

// reclaimer runs the policy on the node's clock until stop closes.
func (n *Node) reclaimer(stop <-chan struct{}, done chan<- struct{}, reclaims *metrics.Counter, seconds *metrics.FloatCounter) {
	defer close(done)
	clk := n.cfg.Clock
	p := newReclaimPolicy(uint64(n.cfg.ReclaimCloses), clk.Now())
	t := clk.NewTicker(reclaimTick)
	defer t.Stop()
	for {
		select {
		case <-stop:
			return
		case <-t.C():
		}
		now := clk.Now()
		n.Engine.DropSpares(spareFor)
		closes := n.Engine.Stats().ClosedInstances
		kept, _ := n.Rooms.Warm()
		if !p.due(now, closes, kept) {
			continue
		}
		// FreeOSMemory collects (concurrently with the rest of the
		// node; the caller waits) and then returns every free page.
		cost := reclaimCost(func() { debug.FreeOSMemory() }, clk.Now)
		p.done(now, int64(cost), closes)
		reclaims.Inc()
		seconds.Add(cost.Seconds())
	}
}

// reclaimCost runs reclaim and returns what it is charged: the CPU time
// the process spent meanwhile where the OS tells (so that other
// processes on a loaded machine do not inflate it: a reclaim that took 2
// s of wall time on shared cores spent the whole budget, and none ran
// after the burst it was for), else the time that passed on now's clock.
func reclaimCost(reclaim func(), now func() int64) time.Duration {
	cpu0, ok0 := processCPU()
	t0 := now()
	reclaim()
	if cpu1, ok1 := processCPU(); ok0 && ok1 {
		return cpu1 - cpu0
	}
	return time.Duration(now() - t0)
}

// startReclaimer starts the reclaimer unless Config.ReclaimCloses is off,
// with a closer that stops it.
func (n *Node) startReclaimer() {
	if limits.IsOff(n.cfg.ReclaimCloses) {
		return
	}
	reclaims := n.Metrics.NewCounter(`wasmkeep_memory_reclaims_total`)
	seconds := n.Metrics.NewFloatCounter(`wasmkeep_memory_reclaim_seconds_total`)
	stop, done := make(chan struct{}), make(chan struct{})
	go n.reclaimer(stop, done, reclaims, seconds)
	n.closers = append(n.closers, func() error { close(stop); <-done; return nil })
}
