package alarms

import (
	"container/heap"
	"context"
	"errors"
	"log/slog"
	"maps"
	"slices"
	"sync"
	"time"

	"github.com/wasmkeep/wasmkeep/calls"
	"github.com/wasmkeep/wasmkeep/host/store"
)

// Defaults of a Config.
const (
	// DefaultScanInterval is how often a node reads the index for alarms
	// it was not told of.
	DefaultScanInterval = 10 * time.Second
	// DefaultGrace is how overdue an alarm must be before a node's scan
	// takes it (unless it is the only node, Config.Alone): the node told
	// of it delivers it on time and deletes its entry within this, so a
	// scan of any other node finds only the alarms no live node was told
	// of, and costs no request an alarm.
	DefaultGrace = 5 * time.Second
	// DefaultDeliveryTimeout bounds a delivery: routing, a wake, the
	// handler and the commit after it.
	DefaultDeliveryTimeout = 30 * time.Second
	// DefaultTick is the longest a pass waits before the next: an alarm
	// told of while it waits is delivered that late at most.
	DefaultTick = 100 * time.Millisecond
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

// Bucket is what the duty reads and deletes of the index.
type Bucket interface {
	ListPage(ctx context.Context, prefix, after string, limit int) ([]store.Entry, bool, error)
	Delete(ctx context.Context, key, ifMatch string) error
}

// Config is a Duty's settings and parts.
type Config struct {
	// Bucket holds the index.
	Bucket Bucket
	// Route delivers: the room manager's router on a node alone, the
	// cluster member's routing of calls in a cluster.
	Route func(ctx context.Context, c *calls.Call) calls.Result
	// Now is the node's monotonic clock (ns), for deadlines; Wall its wall
	// clock (Unix ms), for alarms' times.
	Now  func() int64
	Wall func() int64
	// Go runs a delivery off the pass: a goroutine in a server, a task in
	// the simulation.
	Go func(name string, f func(ctx context.Context))
	// ScanInterval, Grace, DeliveryTimeout, Tick, Parallel and MaxPending:
	// zero means their Default*.
	ScanInterval    time.Duration
	Grace           time.Duration
	DeliveryTimeout time.Duration
	Tick            time.Duration
	Parallel        int
	MaxPending      int
	// Alone: this node is the only one on its bucket, so it delivers what
	// its scans find on time, with no grace.
	Alone bool
	// Observer is told what the duty did (may be nil).
	Observer Observer
	Logger   *slog.Logger
	// Broken breaks the duty's rules on purpose, for the simulation.
	Broken Variants
}

// Variants break the duty's rules on purpose, one at a time, so that the
// simulation shows its checks catch each break. Servers leave it zero.
type Variants struct {
	// RetryOverlaps retries a delivery that has not answered yet once the
	// first retry's wait has passed, as a timer set at its start would:
	// the retry may run while the first run is still under way.
	RetryOverlaps bool
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
	if c.Tick <= 0 {
		c.Tick = DefaultTick
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
	return c
}

// EventKind is what an Event tells.
type EventKind uint8

// The events of a duty.
const (
	// Delivering: a delivery of Entry starts (Retry, Late: how long after
	// the alarm's time, for the first).
	Delivering EventKind = iota
	// Fired: its handler ran, and the room's state after it is durable.
	Fired
	// Retried: a delivery failed (Err) and is tried again later.
	Retried
	// Dropped: the alarm was cleared unrun, after its last retry (or in a
	// class with no handler).
	Dropped
	// Stale: the entry was not its room's alarm; it was deleted.
	Stale
	// Scanned: a scan read Read entries of the index (Err if it failed).
	Scanned
)

// Event is one thing the duty did.
type Event struct {
	Kind  EventKind
	Entry Entry
	Retry uint32
	Late  time.Duration
	Read  int
	Err   error
}

// Observer is told what a duty did, for metrics (a server) or statistics
// and checks (the simulation). It must not block nor call back.
type Observer interface {
	Observe(Event)
}

// Duty delivers the alarms of a node: those its rooms' commits and wakes
// tell it of (Schedule), on time, and those its scans of the index find
// overdue by the grace (another node's, whose node died, stopped or
// drains). It decides; Pass, run in a loop by its node, acts. One
// delivery of an alarm at a time, and a retry only once the delivery
// before it has answered; runs reaching different nodes are kept apart by
// the room, which runs one event at a time on the one node that holds it.
type Duty struct {
	cfg Config

	mu       sync.Mutex
	items    map[string]*item // by index key
	due      dueHeap          // items waiting, earliest first
	running  int
	dropped  map[string]bool
	nextScan int64
	scanned  bool
	stopped  bool
}

// Stop ends the duty's passes: a stopping node delivers no more (the
// next process, or another node's scan, delivers what it leaves).
func (d *Duty) Stop() {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.stopped = true
}

// item is an alarm the duty will deliver.
type item struct {
	e   Entry
	key string
	// at is when to deliver it next (Unix ms on this node's wall clock).
	at    int64
	retry uint32
	// running: a delivery is under way (it is not in the heap); since:
	// when it started (monotonic), for the RetryOverlaps variant.
	running bool
	since   int64
	index   int
}

// NewDuty returns a duty; its node runs Pass in a loop.
func NewDuty(cfg Config) (*Duty, error) {
	if cfg.Bucket == nil || cfg.Route == nil || cfg.Now == nil || cfg.Wall == nil || cfg.Go == nil {
		return nil, errors.New("alarms: a duty needs a bucket, a route, clocks and a way to run deliveries")
	}
	return &Duty{cfg: cfg.withDefaults(), items: map[string]*item{}, dropped: map[string]bool{}}, nil
}

func (d *Duty) observe(e Event) {
	if d.cfg.Observer != nil {
		d.cfg.Observer.Observe(e)
	}
}

// Schedule implements rooms.AlarmScheduler: e is a room's alarm, stored;
// it is delivered at its time.
func (d *Duty) Schedule(e Entry) { d.add(e, e.At, true) }

// Unschedule implements rooms.AlarmScheduler: e is no alarm any more.
func (d *Duty) Unschedule(e Entry) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if it := d.items[e.Key()]; it != nil && !it.running {
		heap.Remove(&d.due, it.index)
		delete(d.items, it.key)
	}
}

// Pending counts the alarms the duty will deliver.
func (d *Duty) Pending() int {
	d.mu.Lock()
	defer d.mu.Unlock()
	return len(d.items)
}

// add queues e to be delivered at at, or earlier if it is queued already;
// told: a room here told of it, not a scan (the bound on the queue
// refuses only those: a scan finds them again).
func (d *Duty) add(e Entry, at int64, told bool) {
	key := e.Key()
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.dropped[key] {
		return
	}
	it := d.items[key]
	switch {
	case it == nil && told && len(d.items) >= d.cfg.MaxPending:
	case it == nil:
		it = &item{e: e, key: key, at: at}
		d.items[key] = it
		heap.Push(&d.due, it)
	case !it.running && at < it.at && it.retry == 0:
		it.at = at
		heap.Fix(&d.due, it.index)
	}
}

// Pass is the duty's step: a scan of the index when one is due, then
// every delivery due now (at most Parallel under way). It returns how
// long to wait before the next pass.
func (d *Duty) Pass(ctx context.Context) time.Duration {
	d.mu.Lock()
	stopped := d.stopped
	d.mu.Unlock()
	if stopped {
		return d.cfg.Tick
	}
	if now := d.cfg.Now(); !d.scanned || now >= d.nextScan {
		d.scanned = true
		_, _ = d.Scan(ctx)
		d.nextScan = d.cfg.Now() + int64(d.cfg.ScanInterval)
	}
	for _, it := range d.takeDue() {
		d.cfg.Go("alarm of "+it.e.Room.String(), func(ctx context.Context) { d.deliver(ctx, it) })
	}
	wait := min(time.Duration(d.nextScan-d.cfg.Now()), d.cfg.Tick)
	if next, ok := d.nextDue(); ok {
		wait = min(wait, next)
	}
	return max(wait, time.Millisecond)
}

// takeDue takes the items due now, as many as may run.
func (d *Duty) takeDue() []*item {
	now := d.cfg.Wall()
	d.mu.Lock()
	defer d.mu.Unlock()
	var out []*item
	for d.due.Len() > 0 && d.due[0].at <= now && d.running < d.cfg.Parallel {
		it := heap.Pop(&d.due).(*item)
		it.running, it.since = true, d.cfg.Now()
		d.running++
		out = append(out, it)
	}
	if d.cfg.Broken.RetryOverlaps {
		// A retry timer set as each delivery started, whether or not it
		// has answered (in the order of their keys: the simulation
		// replays a seed exactly).
		keys := slices.Sorted(maps.Keys(d.items))
		for _, k := range keys {
			if it := d.items[k]; it.running && d.cfg.Now()-it.since >= int64(FirstRetry) && it.retry == 0 {
				cp := *it
				cp.retry = 1
				it.retry = 1
				out = append(out, &cp)
			}
		}
	}
	return out
}

// nextDue is the wait until the earliest item waiting, if one can start
// then.
func (d *Duty) nextDue() (time.Duration, bool) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.due.Len() == 0 || d.running >= d.cfg.Parallel {
		return 0, false
	}
	return time.Duration(d.due[0].at-d.cfg.Wall()) * time.Millisecond, true
}

// deliver delivers it once and decides what follows from the answer.
func (d *Duty) deliver(ctx context.Context, it *item) {
	drop := it.retry > MaxRetries
	ev := Event{Kind: Delivering, Entry: it.e, Retry: it.retry}
	if it.retry == 0 {
		ev.Late = time.Duration(max(0, d.cfg.Wall()-it.e.At)) * time.Millisecond
	}
	d.observe(ev)
	c := &calls.Call{To: it.e.Room, Deadline: d.cfg.Now() + int64(d.cfg.DeliveryTimeout),
		Alarm: &calls.Alarm{At: it.e.At, Entry: it.e.Entry, Retry: min(it.retry, MaxRetries), Drop: drop}}
	res := d.cfg.Route(ctx, c)
	if ctx.Err() != nil {
		d.finish(it, false) // a stop: the next process delivers it
		return
	}
	switch {
	case res.Err == nil && string(res.Reply) == ReplyRan:
		d.observe(Event{Kind: Fired, Entry: it.e, Retry: it.retry})
		d.finish(it, true)
	case res.Err == nil && string(res.Reply) == ReplyDropped:
		d.observe(Event{Kind: Dropped, Entry: it.e, Retry: it.retry})
		d.finish(it, true)
	case res.Err == nil && string(res.Reply) == ReplyStale:
		// Not the room's alarm (any more): its entry is garbage.
		d.observe(Event{Kind: Stale, Entry: it.e})
		if err := d.cfg.Bucket.Delete(ctx, it.key, ""); err != nil && !errors.Is(err, store.ErrNotFound) {
			d.cfg.Logger.Warn("alarms: deleting a stale index entry failed; a scan finds it again", "key", it.key, "err", err)
		}
		d.finish(it, true)
	case drop:
		// Even the drop failed: remembered, so that scans pass it over
		// until this process ends.
		d.observe(Event{Kind: Dropped, Entry: it.e, Retry: it.retry, Err: res.Err})
		d.cfg.Logger.Warn("alarms: an alarm was dropped after its last retry, and could not be cleared", "room", it.e.Room.String(), "err", res.Err)
		d.mu.Lock()
		if len(d.dropped) < maxDropped {
			d.dropped[it.key] = true
		}
		d.mu.Unlock()
		d.finish(it, true)
	default:
		var err error = errors.New("an unknown answer")
		if res.Err != nil {
			err = res.Err
		}
		d.observe(Event{Kind: Retried, Entry: it.e, Retry: it.retry, Err: err})
		it.retry++
		if it.retry > MaxRetries {
			d.cfg.Logger.Warn("alarms: an alarm's handler failed after its last retry; dropping it", "room", it.e.Room.String(), "err", err)
		}
		it.at = d.cfg.Wall() + RetryAfter(int(min(it.retry, MaxRetries))).Milliseconds()
		d.finish(it, false)
	}
}

// finish ends a delivery: the item goes (done) or waits again.
func (d *Duty) finish(it *item, done bool) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if cur := d.items[it.key]; cur != it {
		return // a copy (RetryOverlaps), or forgotten meanwhile
	}
	d.running--
	it.running = false
	if done {
		delete(d.items, it.key)
	} else {
		heap.Push(&d.due, it)
	}
}

// Scan reads the index's first entries and queues those it is to
// deliver, at most scanPages pages a pass: in a cluster those overdue by
// more than the grace (no live node was told of them, or it would have
// delivered them and deleted their entry by then), at once; on a node
// alone, those due before its next scan, at their time. It reports the
// entries it read, or the bucket's error.
func (d *Duty) Scan(ctx context.Context) (read int, err error) {
	defer func() { d.observe(Event{Kind: Scanned, Read: read, Err: err}) }()
	cutoff := d.cfg.Wall() - d.cfg.Grace.Milliseconds()
	if d.cfg.Alone {
		cutoff = d.cfg.Wall() + d.cfg.ScanInterval.Milliseconds()
	}
	after := ""
	for range scanPages {
		page, more, err := d.cfg.Bucket.ListPage(ctx, Prefix, after, scanPage)
		if err != nil {
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
			d.add(e, e.At, false)
		}
		if !more || len(page) == 0 {
			return read, nil
		}
		after = page[len(page)-1].Key
	}
	return read, nil
}

// ForgetRoom deletes every index entry of room (the AlarmIndexDroppedOnMove
// variant of the member: what a move must not do). It reads the whole
// index.
func (d *Duty) ForgetRoom(ctx context.Context, room calls.Room) {
	after := ""
	for {
		page, more, err := d.cfg.Bucket.ListPage(ctx, Prefix, after, 0)
		if err != nil {
			return
		}
		for _, en := range page {
			if e, err := ParseKey(en.Key); err == nil && e.Room == room {
				_ = d.cfg.Bucket.Delete(ctx, en.Key, "")
				d.Unschedule(e)
			}
		}
		if !more || len(page) == 0 {
			return
		}
		after = page[len(page)-1].Key
	}
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
