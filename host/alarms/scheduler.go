package alarms

import (
	"container/heap"
	"context"
	"errors"
	"log/slog"
	"sync"
	"time"

	"github.com/VictoriaMetrics/metrics"

	"github.com/wasmkeep/wasmkeep/abi"
	"github.com/wasmkeep/wasmkeep/calls"
	"github.com/wasmkeep/wasmkeep/host/store"
	"github.com/wasmkeep/wasmkeep/internal/clock"
)

// Defaults of a Config.
const (
	// DefaultScanInterval is how often a node reads the index for alarms
	// it was not told of.
	DefaultScanInterval = 10 * time.Second
	// DefaultGrace is how long after its time a node delivers an alarm
	// its scan found (unless it is the only node, Config.Alone): the node
	// that last ran the room was told of it and delivers it on time, so
	// that the others find its entry gone.
	DefaultGrace = 5 * time.Second
	// DefaultDeliveryTimeout bounds a delivery: routing, a wake, the
	// handler and the commit after it.
	DefaultDeliveryTimeout = 30 * time.Second
	// DefaultParallel bounds the deliveries under way at once.
	DefaultParallel = 32
	// DefaultMaxPending bounds the alarms a node keeps in memory; past
	// it, the alarms it is told of are left to the scans.
	DefaultMaxPending = 200_000
)

// scanPage and scanPages bound a scan's reads: at most scanPages pages of
// scanPage keys.
const (
	scanPage  = 200
	scanPages = 25
)

// maxDropped bounds the entries remembered as dropped.
const maxDropped = 10_000

// Config is a Scheduler's settings and parts.
type Config struct {
	// Bucket holds the index; Router delivers (calls.Router: the node's
	// own rooms on one node, the cluster member's routing in a cluster).
	Bucket store.Bucket
	Router calls.Router
	Clock  clock.Clock
	// ScanInterval, Grace, DeliveryTimeout, Parallel and MaxPending: zero
	// means their Default*.
	ScanInterval time.Duration
	Grace        time.Duration
	// Alone: this node is the only one on its bucket, so it delivers what
	// its scans find on time, with no grace.
	Alone           bool
	DeliveryTimeout time.Duration
	Parallel        int
	MaxPending      int
	Metrics         *metrics.Set // nil: not registered
	Logger          *slog.Logger
}

func (c Config) withDefaults() Config {
	if c.ScanInterval <= 0 {
		c.ScanInterval = DefaultScanInterval
	}
	if c.Grace <= 0 {
		c.Grace = DefaultGrace
	}
	if c.DeliveryTimeout <= 0 {
		c.DeliveryTimeout = DefaultDeliveryTimeout
	}
	if c.Parallel <= 0 {
		c.Parallel = DefaultParallel
	}
	if c.MaxPending <= 0 {
		c.MaxPending = DefaultMaxPending
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	if c.Metrics == nil {
		c.Metrics = metrics.NewSet()
	}
	return c
}

// Scheduler delivers the alarms of a node: those its rooms' commits and
// wakes tell it of (Schedule), on time, and those its scans of the index
// find overdue (another node's, whose node died or stopped). One delivery
// of an alarm at a time, and a retry only once the run before it has
// answered, so two runs of one alarm from one node never overlap; runs
// from different nodes are serialized by the room, which runs one event
// at a time on the one node that holds it.
type Scheduler struct {
	cfg Config

	mu      sync.Mutex
	items   map[string]*item // by index key
	due     dueHeap          // items waiting, earliest first
	running int
	dropped map[string]bool
	wake    chan struct{}

	fired, stale, retried, droppedN, scans *metrics.Counter
	late                                   *metrics.Histogram
}

// item is an alarm the scheduler will deliver.
type item struct {
	e   Entry
	key string
	// at is when to deliver it next (Unix ms on this node's wall clock).
	at    int64
	retry uint32
	// running: a delivery is under way (it is not in the heap).
	running bool
	// told: a room here told of it (else a scan found it).
	told  bool
	index int
}

// New returns a scheduler; Run runs it.
func New(cfg Config) *Scheduler {
	cfg = cfg.withDefaults()
	s := &Scheduler{cfg: cfg, items: map[string]*item{}, dropped: map[string]bool{}, wake: make(chan struct{}, 1)}
	set := cfg.Metrics
	s.fired = set.NewCounter(`wasmkeep_alarms_fired_total`)
	s.stale = set.NewCounter(`wasmkeep_alarms_stale_total`)
	s.retried = set.NewCounter(`wasmkeep_alarms_retried_total`)
	s.droppedN = set.NewCounter(`wasmkeep_alarms_dropped_total`)
	s.scans = set.NewCounter(`wasmkeep_alarms_scans_total`)
	s.late = set.NewHistogram(`wasmkeep_alarms_late_seconds`)
	set.NewGauge(`wasmkeep_alarms_pending`, func() float64 {
		s.mu.Lock()
		defer s.mu.Unlock()
		return float64(len(s.items))
	})
	return s
}

// Schedule implements rooms.AlarmScheduler: e is a room's alarm, stored;
// it is delivered at its time.
func (s *Scheduler) Schedule(e Entry) {
	s.add(e, e.At, true)
}

// Unschedule implements rooms.AlarmScheduler: e is no alarm any more.
func (s *Scheduler) Unschedule(e Entry) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if it := s.items[e.Key()]; it != nil && !it.running {
		heap.Remove(&s.due, it.index)
		delete(s.items, it.key)
	}
}

// Pending counts the alarms the scheduler will deliver.
func (s *Scheduler) Pending() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.items)
}

// add puts e in the queue to be delivered at at, or earlier if it is
// there already; told: from a room here, not a scan (which the bound
// on the queue does not refuse).
func (s *Scheduler) add(e Entry, at int64, told bool) {
	key := e.Key()
	s.mu.Lock()
	if s.dropped[key] {
		s.mu.Unlock()
		return
	}
	it := s.items[key]
	switch {
	case it == nil && told && len(s.items) >= s.cfg.MaxPending:
		s.mu.Unlock()
		return // a scan finds it
	case it == nil:
		it = &item{e: e, key: key, at: at, told: told}
		s.items[key] = it
		heap.Push(&s.due, it)
	case !it.running && at < it.at && it.retry == 0:
		it.at = at
		it.told = it.told || told
		heap.Fix(&s.due, it.index)
	case told:
		it.told = true
	}
	s.mu.Unlock()
	s.poke()
}

func (s *Scheduler) poke() {
	select {
	case s.wake <- struct{}{}:
	default:
	}
}

// Run delivers alarms until ctx ends, scanning the index every
// ScanInterval; it waits for the deliveries under way before it returns.
func (s *Scheduler) Run(ctx context.Context) {
	var wg sync.WaitGroup
	defer wg.Wait()
	nextScan := s.cfg.Clock.Now()
	t := s.cfg.Clock.NewTimer(time.Hour)
	defer t.Stop()
	for {
		if now := s.cfg.Clock.Now(); now >= nextScan {
			s.Scan(ctx)
			nextScan = s.cfg.Clock.Now() + int64(s.cfg.ScanInterval)
		}
		wait := time.Duration(nextScan - s.cfg.Clock.Now())
		for _, it := range s.takeDue() {
			wg.Add(1)
			go func() {
				defer wg.Done()
				s.deliver(ctx, it)
			}()
		}
		if next, ok := s.nextDue(); ok {
			wait = min(wait, next)
		}
		t.Reset(max(wait, time.Millisecond))
		select {
		case <-ctx.Done():
			return
		case <-t.C():
		case <-s.wake:
		}
	}
}

// nowMs is the wall clock in Unix ms.
func (s *Scheduler) nowMs() int64 { return s.cfg.Clock.Wall().UnixMilli() }

// takeDue takes the items due now, as many as may run.
func (s *Scheduler) takeDue() []*item {
	now := s.nowMs()
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []*item
	for s.due.Len() > 0 && s.due[0].at <= now && s.running < s.cfg.Parallel {
		it := heap.Pop(&s.due).(*item)
		it.running = true
		s.running++
		out = append(out, it)
	}
	return out
}

// nextDue is the wait until the earliest item waiting, if one can start
// then.
func (s *Scheduler) nextDue() (time.Duration, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.due.Len() == 0 || s.running >= s.cfg.Parallel {
		return 0, false
	}
	return time.Duration(s.due[0].at-s.nowMs()) * time.Millisecond, true
}

// deliver delivers it once and decides what follows from the answer.
func (s *Scheduler) deliver(ctx context.Context, it *item) {
	drop := it.retry > MaxRetries
	if !it.told && it.retry == 0 && !s.cfg.Alone && !s.exists(ctx, it) {
		// Delivered by the node that was told of it, most likely: a read
		// of its entry costs less than waking the room for nothing.
		s.finish(it, true)
		return
	}
	if it.retry == 0 {
		s.late.Update(max(0, float64(s.nowMs()-it.e.At)/1000))
	}
	c := &calls.Call{To: it.e.Room, Deadline: s.cfg.Clock.Now() + int64(s.cfg.DeliveryTimeout),
		Alarm: &calls.Alarm{At: it.e.At, Entry: it.e.Entry, Retry: min(it.retry, MaxRetries), Drop: drop}}
	dctx, cancel := clock.WithTimeout(s.cfg.Clock, ctx, s.cfg.DeliveryTimeout)
	res := s.cfg.Router.Route(dctx, c)
	cancel()
	if ctx.Err() != nil {
		s.finish(it, false) // a stop: the next process delivers it
		return
	}
	switch {
	case res.Err == nil && string(res.Reply) == Ran:
		s.fired.Inc()
		s.finish(it, true)
	case res.Err == nil && string(res.Reply) == Dropped:
		s.droppedN.Inc()
		s.finish(it, true)
	case res.Err == nil && string(res.Reply) == Stale,
		res.Err != nil && res.Err.Status == abi.StatusNotFound && drop:
		// Not the room's alarm (any more): its entry is garbage.
		s.stale.Inc()
		if err := s.cfg.Bucket.Delete(ctx, it.key, ""); err != nil && !errors.Is(err, store.ErrNotFound) {
			s.cfg.Logger.Warn("alarms: deleting a stale index entry failed; a scan finds it again", "key", it.key, "err", err)
		}
		s.finish(it, true)
	case drop:
		// Even the drop failed: remembered, so that scans pass it over
		// until this process ends.
		s.droppedN.Inc()
		s.cfg.Logger.Warn("alarms: an alarm was dropped after its last retry, and could not be cleared", "room", it.e.Room.String(), "err", res.Err)
		s.mu.Lock()
		if len(s.dropped) < maxDropped {
			s.dropped[it.key] = true
		}
		s.mu.Unlock()
		s.finish(it, true)
	default:
		it.retry++
		s.retried.Inc()
		if it.retry > MaxRetries {
			s.cfg.Logger.Warn("alarms: an alarm's handler failed after its last retry; dropping it", "room", it.e.Room.String(), "err", res.Err)
		}
		s.retry(it, RetryAfter(int(min(it.retry, MaxRetries))))
	}
}

// exists reports whether it's entry is still in the index (true when the
// bucket cannot tell).
func (s *Scheduler) exists(ctx context.Context, it *item) bool {
	page, _, err := s.cfg.Bucket.ListPage(ctx, it.key, "", 1)
	return err != nil || (len(page) == 1 && page[0].Key == it.key)
}

// finish ends a delivery: the item goes (done) or waits again where it
// was.
func (s *Scheduler) finish(it *item, done bool) {
	s.mu.Lock()
	s.running--
	it.running = false
	if done {
		delete(s.items, it.key)
	} else {
		heap.Push(&s.due, it)
	}
	s.mu.Unlock()
	s.poke()
}

// retry puts it back, due after d.
func (s *Scheduler) retry(it *item, d time.Duration) {
	it.at = s.nowMs() + d.Milliseconds()
	s.finish(it, false)
}

// Scan reads the index's first entries, those due before the next scan,
// and queues each to be delivered at its time plus the grace, at most
// scanPages pages a pass. It reports the entries it read, or the bucket's
// error.
func (s *Scheduler) Scan(ctx context.Context) (int, error) {
	s.scans.Inc()
	cutoff := s.nowMs() + s.cfg.ScanInterval.Milliseconds()
	grace := s.cfg.Grace.Milliseconds()
	if s.cfg.Alone {
		grace = 0
	}
	after, read := "", 0
	for range scanPages {
		page, more, err := s.cfg.Bucket.ListPage(ctx, Prefix, after, scanPage)
		if err != nil {
			s.cfg.Logger.Warn("alarms: reading the alarm index failed", "err", err)
			return read, err
		}
		for _, en := range page {
			read++
			e, err := ParseKey(en.Key)
			if err != nil {
				continue // not ours to judge: passed over
			}
			if e.At > cutoff {
				return read, nil
			}
			s.add(e, e.At+grace, false)
		}
		if !more || len(page) == 0 {
			return read, nil
		}
		after = page[len(page)-1].Key
	}
	return read, nil
}

// dueHeap orders items by the time they are due.
type dueHeap []*item

func (h dueHeap) Len() int           { return len(h) }
func (h dueHeap) Less(i, j int) bool { return h[i].at < h[j].at }
func (h dueHeap) Swap(i, j int) {
	h[i], h[j] = h[j], h[i]
	h[i].index, h[j].index = i, j
}
func (h *dueHeap) Push(x any) {
	it := x.(*item)
	it.index = len(*h)
	*h = append(*h, it)
}
func (h *dueHeap) Pop() any {
	old := *h
	it := old[len(old)-1]
	old[len(old)-1] = nil
	*h = old[:len(old)-1]
	return it
}
