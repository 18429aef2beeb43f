// Package rooms runs rooms: one mailbox per room that delivers its events
// one at a time, the lifecycle that wakes a room from its snapshot and puts
// it back to sleep when idle or evicted, and the host side of its sockets.
//
// A room is resident (an engine instance in memory) or hibernated (a
// snapshot in the bucket). Its sockets belong to the node, not to the
// instance: they stay open while the room sleeps, and a message or a close
// wakes it. Everything a room does to the outside during an event (socket
// sends, closes, broadcasts) is held until the event returns and dropped if
// it crashed, so a crash never leaks a partial result; the room then restarts
// from its last snapshot, and only the request or socket that caused the
// crash sees an error.
package rooms

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/VictoriaMetrics/metrics"

	"github.com/wasmkeep/wasmkeep/abi"
	"github.com/wasmkeep/wasmkeep/calls"
	"github.com/wasmkeep/wasmkeep/host/images"
	"github.com/wasmkeep/wasmkeep/host/rooms/life"
	"github.com/wasmkeep/wasmkeep/host/snapshot"
	"github.com/wasmkeep/wasmkeep/host/store"
	"github.com/wasmkeep/wasmkeep/internal/clock"
	"github.com/wasmkeep/wasmkeep/internal/limits"
)

// Key names a room.
type Key struct{ Class, Name string }

func (k Key) String() string { return k.Class + "/" + k.Name }

// Classes resolves what rooms run.
type Classes interface {
	// Current is the version new rooms of a class start with.
	Current(ctx context.Context, name string) (Class, error)
	// ByHash is a version a snapshot names.
	ByHash(ctx context.Context, hash string) (Class, error)
	// Durable reports whether the class asks for its rooms' state to be
	// made durable after every event.
	Durable(ctx context.Context, name string) (bool, error)
	// Upgrade is what the class's current version asks of rooms on
	// other versions.
	Upgrade(ctx context.Context, name string) (UpgradePolicy, error)
	// IsFront reports whether the class is a front (host/fronts): it
	// has no rooms, and takes no calls.
	IsFront(ctx context.Context, name string) (bool, error)
}

// Config holds the room layer's settings. A zero field means its Default*
// constant, and limits.Off turns off the limits that say so
// (internal/limits has the convention).
type Config struct {
	// IdleTimeout hibernates a room with no event for this long
	// (DefaultIdleTimeout).
	IdleTimeout time.Duration
	// MaxResident bounds resident rooms (DefaultMaxResident): a wake takes one
	// of MaxResident places (resident rooms and wakes under way hold one
	// each), and one that finds none free hibernates the least recently
	// used idle rooms and waits for a place.
	MaxResident int
	// WakeWait bounds how long a wake waits for a place under MaxResident
	// (DefaultWakeWait); past it the event fails with ErrNodeFull.
	WakeWait time.Duration
	// MailboxSize bounds each room's queue of pending events
	// (DefaultMailboxSize).
	// A request that finds it full gets 503; a socket's reader waits, which
	// pushes back on the client through TCP.
	MailboxSize int
	// Codec compresses snapshot segments (DefaultCodec). snapshot.Raw is
	// the codec's zero value, and so means the default here too: raw
	// segments are for snapshot's own tests and measurements.
	Codec snapshot.Codec
	// MaxChain bounds the segments a snapshot may reference before the
	// next one folds or compacts them (snapshot.DefaultMaxChain).
	MaxChain int
	// SweepInterval spaces the sweeps for orphaned segments
	// (DefaultSweepInterval; the first runs a minute after start;
	// limits.Off: never).
	SweepInterval time.Duration
	// SweepLimit bounds the segments one sweep deletes (DefaultSweepLimit).
	SweepLimit int
	// WarmMemory bounds what the instances of rooms that the idle sweep
	// hibernated are counted for while the node keeps them, so that a
	// room woken again soon resumes its instance instead of restoring its
	// snapshot (warm.go): each counts for its linear memory and 128 KiB
	// (DefaultWarmMemory; limits.Off: none are kept). Past it the oldest
	// kept instance goes.
	WarmMemory int64
	// WarmFor is how long after its hibernation an instance is kept at
	// most (DefaultWarmFor; limits.Off: none are kept).
	WarmFor time.Duration
	// ImageDir, if set, is where the node keeps the memories of rooms it
	// hibernated (host/images), so that a wake here maps the memory
	// rather than decoding the snapshot; it should be on local disk.
	// Empty: no images.
	ImageDir string
	// ImageBytes bounds the images' memory bytes together
	// (DefaultImageBytes; limits.Off: no images).
	ImageBytes int64
	// ImageFiles bounds how many images are kept, each a file in
	// ImageDir, open only while used (DefaultImageFiles).
	ImageFiles int
	// ImageMinBytes: smaller memories get no image, since they restore
	// from the store in well under a millisecond (DefaultImageMinBytes).
	ImageMinBytes int64
	// MaxEventOutput bounds what one event's sends, broadcasts, closes,
	// channel pushes and presence changes hold until the event returns:
	// their payloads plus 128 bytes each (DefaultMaxEventOutput). A call
	// past it answers the guest abi.StatusTooLarge and queues nothing.
	MaxEventOutput int
	// NumberedManifests keeps each room's manifests as a new object a
	// commit rather than one object overwritten (manifests.go): what the
	// bucket's format object says (store.Format).
	NumberedManifests bool
	// CommitWindow is the least time between the starts of two writes of
	// one room's state under per-event durability (commit.go): events in
	// between wait for the next write together, which bounds a busy
	// room's writes (and a store's request bill) at the price of their
	// latency. 0: a write starts as soon as the one before it landed.
	CommitWindow time.Duration
	// CallTimeout is how long a room's call waits for its answer
	// (DefaultCallTimeout); a call made while handling a call gives up by
	// that call's deadline too.
	CallTimeout time.Duration
	// Calls routes the calls rooms make (nil: to rooms of this node,
	// LocalRouter).
	Calls calls.Router
	// Alarms is told of the alarms the rooms here keep (nil: nobody
	// fires them).
	Alarms AlarmScheduler
	// Refuse, if set, says why no room may wake now (nil: they may): a
	// node that cannot open the app's secrets runs no room. A wake it
	// refuses fails with ErrUnavailable and the reason.
	Refuse func() error
	// Framer encodes socket messages (default: Message values).
	Framer  Framer
	Logger  *slog.Logger
	Metrics *metrics.Set
	// Clock is the manager's one source of time (default clock.Real()).
	Clock clock.Clock
}

func (c Config) withDefaults() Config {
	limits.Default(&c.IdleTimeout, DefaultIdleTimeout)
	limits.Default(&c.MaxResident, DefaultMaxResident)
	limits.Default(&c.WakeWait, DefaultWakeWait)
	limits.Default(&c.MailboxSize, DefaultMailboxSize)
	limits.Default(&c.CallTimeout, DefaultCallTimeout)
	if c.Codec == snapshot.Raw {
		c.Codec = DefaultCodec
	}
	limits.Default(&c.MaxChain, snapshot.DefaultMaxChain)
	limits.DefaultOrOff(&c.SweepInterval, DefaultSweepInterval)
	limits.Default(&c.SweepLimit, DefaultSweepLimit)
	limits.DefaultOrOff(&c.WarmMemory, DefaultWarmMemory)
	limits.DefaultOrOff(&c.WarmFor, DefaultWarmFor)
	limits.DefaultOrOff(&c.ImageBytes, DefaultImageBytes)
	limits.Default(&c.ImageFiles, DefaultImageFiles)
	limits.Default(&c.ImageMinBytes, DefaultImageMinBytes)
	limits.Default(&c.MaxEventOutput, DefaultMaxEventOutput)
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	if c.Framer == nil {
		c.Framer = defaultFramer
	}
	if c.Metrics == nil {
		c.Metrics = metrics.NewSet()
	}
	if c.Clock == nil {
		c.Clock = clock.Real()
	}
	return c
}

// Defaults of Config.
const (
	// DefaultIdleTimeout keeps a room that a client uses now and then
	// resident between its events, and one that nobody uses for a few
	// seconds out of memory.
	DefaultIdleTimeout = 10 * time.Second
	// DefaultMaxResident keeps a node of Go rooms that hold little state
	// under a GiB (docs/architecture.md: about 0.8 MiB a resident room).
	DefaultMaxResident = 1000
	// DefaultMailboxSize holds a burst of requests for one room; past it
	// a request gets 503 at once rather than a long wait in the queue.
	DefaultMailboxSize = 1024
	// DefaultCallTimeout is how long a call between rooms waits for its
	// answer.
	DefaultCallTimeout = calls.DefaultTimeout
	// DefaultCodec is S2: a room durable per event takes a snapshot at
	// every commit, compressing a few pages of each of a few chunks, and
	// zstd's cost for each such call is about twice S2's (a counter's
	// commit: 0.19 ms against 0.10 ms), as is its restore CPU a fifth
	// more; its segments are about a third smaller. Snapshots written with
	// zstd stay readable; the next write after one compacts.
	DefaultCodec = snapshot.S2
	// DefaultSweepInterval: orphans are rare (a crash between a segment's
	// write and its manifest's), so a sweep now and then is enough.
	DefaultSweepInterval = 30 * time.Minute
	// DefaultSweepLimit bounds one sweep's deletes, so that a store with
	// many orphans is cleaned over several sweeps.
	DefaultSweepLimit = 10000
	// DefaultWarmMemory keeps about a dozen Go rooms of a few MiB of
	// linear memory each (their resident share is a fifth of that), so
	// that what a node keeps after a burst of idle hibernations stays a
	// small part of what the burst's rooms held (docs/PERFORMANCE.md,
	// issue 13 §2).
	DefaultWarmMemory = 32 << 20
	// DefaultWarmFor resumes a room woken within a few seconds of its
	// idle hibernation, and gives the memory back soon after a burst of
	// them: by then the node's reclaim after the burst has run.
	DefaultWarmFor = 3 * time.Second
	// DefaultImageBytes, DefaultImageFiles and DefaultImageMinBytes are
	// the image cache's own defaults (host/images).
	DefaultImageBytes    = images.DefaultMaxBytes
	DefaultImageFiles    = images.DefaultMaxFiles
	DefaultImageMinBytes = images.DefaultMinBytes
	// DefaultMaxEventOutput is far more than any one socket's queue takes
	// (socket.QueueLimitFactor times its budget): enough for a message of
	// a few KiB sent to each of 10,000 sockets one by one, not enough for
	// a guest to make the host hold gigabytes.
	DefaultMaxEventOutput = 64 << 20
	// DefaultS3CommitWindow is the commit window (Config.CommitWindow) a
	// node on S3 uses unless told otherwise: at most 10 writes a second of
	// one room, 20 PUTs (docs/operations.md has what that costs), for at
	// most 100 ms more on an answer, about what a PUT takes.
	DefaultS3CommitWindow = 100 * time.Millisecond
	// DefaultWakeWait rides out a burst of wakes (a place frees up in the
	// time one idle room takes to hibernate, a few milliseconds) while
	// still answering a client well before its own timeouts.
	DefaultWakeWait = 5 * time.Second
)

// Errors events can fail with.
var (
	// ErrNodeFull: the node is at MaxResident with no room it could
	// hibernate in time (every resident room is busy, pinned, or failing
	// to write its snapshot). The client should retry later.
	ErrNodeFull = errors.New("rooms: the node is at its limit of resident rooms (--max-resident)")
	// ErrStopping: the node is shutting down and takes no new work.
	ErrStopping = errors.New("rooms: node is stopping")
	// ErrOverloaded: the room's mailbox is full.
	ErrOverloaded = errors.New("rooms: room is overloaded")
	// ErrUnavailable: the room cannot be woken (its snapshot is unreadable,
	// its module is missing...). Other rooms are unaffected.
	ErrUnavailable = errors.New("rooms: room unavailable")
	// ErrElsewhere: the placement would not grant this node the room: it
	// runs (or is being taken) on another node, or this node may not take
	// rooms now (draining, lease not valid). A placement wraps its
	// refusals in it; the client should reconnect or retry, and will be
	// routed.
	ErrElsewhere = errors.New("rooms: the room runs on another node")
)

// Manager owns every room of the node.
type Manager struct {
	cfg     Config
	clock   clock.Clock
	classes Classes
	bucket  store.Bucket
	layout  manifestLayout // how rooms' manifests are kept (manifests.go)
	place   Placement
	enc     *snapshot.Encoder
	log     *slog.Logger
	met     *roomMetrics

	gc *collector
	// instance is random per start: presence refs carry it, so that a
	// client never sees a ref from before a restart again.
	instance string

	mu       sync.Mutex
	rooms    map[Key]*Room // resident, busy, or with sockets
	resident map[*Room]struct{}
	stored   int // rooms with a snapshot in the bucket
	stopping bool
	reported map[Key]bool // rooms whose unreadable snapshot was logged

	// places counts the places under MaxResident (takePlace), under mu.
	places life.Places
	// placeFreed is closed (and cleared) when a place may have come free
	// for a wake that waits for one: a room left memory, a wake gave its
	// place back, an eviction came to nothing. Nil while nobody waits.
	placeFreed chan struct{}
	// placeWaiters counts the wakes waiting for a place, so that the hot
	// path signals only when someone waits.
	placeWaiters atomic.Int32

	snaps snapFacts // what listings know of rooms' snapshots (facts.go)
	warm  warmSet   // instances of idle-hibernated rooms kept (warm.go)
	// images are the memories of rooms hibernated here (image.go); nil:
	// none are kept.
	images *images.Cache

	upgrades *upgradeBook // rooms that did not move to a new version (upgrade.go)
	jobs     upgradeJobs  // UpgradeAll's progress

	// stop closes when Shutdown begins; background is the manager's own
	// goroutines (the idle sweep, the collector, the orphan sweep).
	stop       chan struct{}
	background sync.WaitGroup
	workers    workerCount
	// closed: Close has returned; events are dropped, no worker starts.
	closed atomic.Bool
	// ctx is the manager's own, for the store calls of work no caller
	// waits on (idle hibernations, socket events, the collector, sweeps);
	// Close cancels it. stopCtx is Shutdown's, for the stop's writes.
	ctx     context.Context
	cancel  context.CancelFunc
	stopCtx atomic.Pointer[context.Context]
	// callsCtx is the parent of the calls rooms make; Shutdown cancels
	// it as it begins.
	callsCtx    context.Context
	cancelCalls context.CancelFunc
	// stopFailures names the rooms whose state the stop could not write.
	stopFailures map[Key]error
}

// NewManager starts a room manager. It counts the stored snapshots once so
// the hibernated-rooms gauge is right from the start.
func NewManager(ctx context.Context, cfg Config, classes Classes, bucket store.Bucket, place Placement) (*Manager, error) {
	cfg = cfg.withDefaults()
	enc, err := snapshot.NewEncoder(cfg.Codec, snapshot.Options{MaxChain: cfg.MaxChain})
	if err != nil {
		return nil, err
	}
	m := &Manager{
		cfg:      cfg,
		clock:    cfg.Clock,
		classes:  classes,
		bucket:   bucket,
		place:    place,
		enc:      enc,
		log:      cfg.Logger,
		rooms:    map[Key]*Room{},
		resident: map[*Room]struct{}{},
		places:   life.Places{Max: cfg.MaxResident},
		reported: map[Key]bool{},
		instance: randomID(),
		stop:     make(chan struct{}),
	}
	m.ctx, m.cancel = context.WithCancel(context.Background())
	m.callsCtx, m.cancelCalls = context.WithCancel(m.ctx)
	keys, err := bucket.List(ctx, "rooms/")
	if err != nil {
		return nil, fmt.Errorf("listing rooms: %w", err)
	}
	m.layout = layoutOf(cfg.NumberedManifests)
	m.stored = len(m.storedRooms(keys))
	m.gc = newCollector(m, bucket)
	m.openImages()
	m.met = newRoomMetrics(cfg.Metrics, m)
	m.upgrades = newUpgradeBook(cfg.Metrics)
	if !limits.IsOff(cfg.WarmMemory) && !limits.IsOff(cfg.WarmFor) {
		m.warm.keep = life.Keep[*Room]{Max: cfg.WarmMemory, For: int64(cfg.WarmFor)}
	}
	m.goBackground(m.sweeper)
	m.goBackground(func() { m.gc.run(m.stop) })
	m.goBackground(m.sweepLoop)
	return m, nil
}

// goBackground starts one of the manager's own goroutines; Shutdown waits
// for them.
func (m *Manager) goBackground(f func()) error {
	// Under m.mu with the stopping check: Shutdown sets stopping under
	// m.mu before it waits, so no Add can race with that Wait.
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.stopping {
		return ErrStopping
	}
	m.background.Add(1)
	go func() {
		defer m.background.Done()
		f()
	}()
	return nil
}

// forget drops a room's in-memory state once nothing refers to it: not
// resident, no sockets, no pending events.
func (m *Manager) forget(r *Room) {
	m.mu.Lock()
	defer m.mu.Unlock()
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.running || r.head < len(r.queue) || r.isResident.Load() || r.socketCount.Load() > 0 || r.pinned.Load() || m.hasKept(r) {
		return
	}
	if m.rooms[r.key] == r {
		delete(m.rooms, r.key)
		m.snaps.forgotten(r.key, r.lastActive.Load())
	}
}

// takePlace reserves one of the MaxResident places for a wake of r. A
// wake that finds none free asks the least recently used idle rooms to
// hibernate, enough for every wake that waits, and waits for a place, up
// to WakeWait: so resident rooms never outnumber MaxResident, however many
// clients wake new rooms at once, and memory stays proportional to it.
func (m *Manager) takePlace(ctx context.Context, r *Room) error {
	var timer clock.Timer
	for {
		m.mu.Lock()
		if m.stopping {
			m.mu.Unlock()
			return ErrStopping
		}
		if m.places.Take() {
			m.mu.Unlock()
			if timer != nil {
				timer.Stop()
				m.placeWaiters.Add(-1)
			}
			return nil
		}
		if timer == nil {
			m.met.wakeWaits.Inc()
			m.placeWaiters.Add(1)
			timer = m.clock.NewTimer(m.cfg.WakeWait)
		}
		victims := m.evictionsNeeded()
		if m.placeFreed == nil {
			m.placeFreed = make(chan struct{})
		}
		freed := m.placeFreed
		m.mu.Unlock()
		for _, v := range victims {
			v.requestHibernate(life.EndEvict, nil)
		}
		var err error
		select {
		case <-freed:
			continue
		case <-timer.C():
			m.met.wakesRefused.Inc()
			err = fmt.Errorf("%w: no room could be hibernated within %s", ErrNodeFull, m.cfg.WakeWait)
		case <-ctx.Done():
			err = ctx.Err()
		case <-m.stop:
			err = ErrStopping
		}
		timer.Stop()
		m.placeWaiters.Add(-1)
		return err
	}
}

// evictionsNeeded marks and returns the idle rooms to hibernate so that
// every waiting wake (placeWaiters, the caller's included) has a place on
// its way to being free: rooms already on their way out count. The caller
// holds m.mu.
func (m *Manager) evictionsNeeded() []*Room {
	cands, leaving := m.candidates()
	m.places.Waiting = int(m.placeWaiters.Load())
	return m.markLeaving(life.Victims(cands, m.places.Evictions(leaving), m.clock.Now()))
}

// candidates describes the resident rooms for life.Victims and life.Idle,
// and counts those already leaving. The caller holds m.mu.
func (m *Manager) candidates() ([]life.Candidate[*Room], int) {
	cands := make([]life.Candidate[*Room], 0, len(m.resident))
	leaving := 0
	for r := range m.resident {
		c := life.Candidate[*Room]{ID: r, LastActive: r.lastActive.Load(), Busy: r.busy(), Pinned: r.pinned.Load(),
			Leaving: r.hibernatePending.Load(), RetryAt: r.retryAt.Load()}
		if c.Leaving {
			leaving++
		}
		cands = append(cands, c)
	}
	return cands, leaving
}

// markLeaving marks rooms as asked to hibernate, so that no other sweep or
// wake picks them again meanwhile. The caller holds m.mu.
func (m *Manager) markLeaving(rs []*Room) []*Room {
	for _, r := range rs {
		r.hibernatePending.Store(true)
	}
	return rs
}

// givePlace returns the place of a wake that failed.
func (m *Manager) givePlace() {
	m.mu.Lock()
	m.places.GiveBack()
	m.placesChangedLocked()
	m.mu.Unlock()
}

// placesChanged wakes the wakes that wait for a place, to look again.
func (m *Manager) placesChanged() {
	if m.placeWaiters.Load() == 0 {
		return
	}
	m.mu.Lock()
	m.placesChangedLocked()
	m.mu.Unlock()
}

func (m *Manager) placesChangedLocked() {
	if m.placeFreed != nil {
		close(m.placeFreed)
		m.placeFreed = nil
	}
}

// becameResident turns a wake's place into a resident room's.
func (m *Manager) becameResident(r *Room) {
	m.mu.Lock()
	m.places.Woke()
	m.resident[r] = struct{}{}
	m.mu.Unlock()
}

func (m *Manager) noLongerResident(r *Room) {
	m.mu.Lock()
	if _, ok := m.resident[r]; ok {
		delete(m.resident, r)
		m.places.Left()
	}
	m.placesChangedLocked()
	m.mu.Unlock()
}

func (m *Manager) snapshotCreated() {
	m.mu.Lock()
	m.stored++
	m.mu.Unlock()
}

func (m *Manager) snapshotDeleted() {
	m.mu.Lock()
	m.stored--
	m.mu.Unlock()
}

// sweeper hibernates rooms idle past the idle timeout.
func (m *Manager) sweeper() {
	tick := min(max(m.cfg.IdleTimeout/4, 10*time.Millisecond), time.Second)
	t := m.clock.NewTicker(tick)
	defer t.Stop()
	for {
		select {
		case <-m.stop:
			return
		case <-t.C():
		}
		m.mu.Lock()
		cands, _ := m.candidates()
		idle := m.markLeaving(life.Idle(cands, m.clock.Now(), int64(m.cfg.IdleTimeout)))
		m.mu.Unlock()
		for _, r := range idle {
			r.requestHibernate(life.EndIdle, nil)
		}
		m.expireKept(m.clock.Now())
	}
}

// sleep waits d on the manager's clock, or until stop closes (then it
// reports false).
func (m *Manager) sleep(d time.Duration, stop <-chan struct{}) bool {
	t := m.clock.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C():
		return true
	case <-stop:
		return false
	}
}

// since is the time from start, a reading of the manager's clock, to
// now, in seconds (for histograms).
func (m *Manager) since(start int64) float64 {
	return float64(m.clock.Now()-start) / float64(time.Second)
}

// ErrUnknownRoom: no such room, in memory or in the bucket.
var ErrUnknownRoom = errors.New("rooms: no such room")

// Hibernate puts a room to sleep now and waits until it is done. A room
// that is already hibernated is left as it is; one the node has never seen
// is ErrUnknownRoom.
func (m *Manager) Hibernate(ctx context.Context, key Key) error {
	return m.HandOver(ctx, key, life.EndAdmin)
}

// HandOver hibernates a room for why (a drain, a move, an operator) and
// waits until its state is written and its hold ended: the placement is
// told why, so a cluster releases the record for another node to take.
// A room that is already hibernated is left as it is; one the node has
// never seen is ErrUnknownRoom.
func (m *Manager) HandOver(ctx context.Context, key Key, why life.EndReason) error {
	m.mu.Lock()
	r := m.rooms[key]
	m.mu.Unlock()
	if r == nil {
		_, _, err := m.layout.latest(ctx, m.bucket, key)
		if errors.Is(err, store.ErrNotFound) {
			return fmt.Errorf("%w: %s", ErrUnknownRoom, key)
		}
		return err
	}
	return r.handOver(ctx, why)
}

// handOver hibernates r for why and waits until it is done.
func (r *Room) handOver(ctx context.Context, why life.EndReason) error {
	done := make(chan error, 1)
	r.requestHibernate(why, done)
	select {
	case err := <-done:
		return err
	case <-ctx.Done():
		return ctx.Err()
	}
}

// HibernateAll hibernates every resident room for why (an operator: a
// node that may run no room any more) and waits until they are done.
func (m *Manager) HibernateAll(ctx context.Context, why life.EndReason) error {
	var errs []error
	for _, r := range m.residentRooms() {
		if err := r.handOver(ctx, why); err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", r.key, err))
		}
	}
	return errors.Join(errs...)
}

// residentRooms returns the rooms resident now.
func (m *Manager) residentRooms() []*Room {
	m.mu.Lock()
	defer m.mu.Unlock()
	all := make([]*Room, 0, len(m.resident))
	for r := range m.resident {
		all = append(all, r)
	}
	return all
}

// Route says where key's events go (Placement.Route): the server asks it
// before it resolves the room's class or admits a socket for it.
func (m *Manager) Route(ctx context.Context, key Key) (Route, error) {
	return m.place.Route(ctx, key)
}

// Drop discards a room's instance without writing its state and ends its
// hold for why: for a placement that found the hold invalid. A room that
// is not resident is left as it is.
func (m *Manager) Drop(ctx context.Context, key Key, why life.EndReason) error {
	m.mu.Lock()
	r := m.rooms[key]
	m.mu.Unlock()
	if r == nil {
		return nil
	}
	return r.await(ctx, &event{kind: evDrop, why: why})
}

// DropAll discards every resident room's instance without writing it (a
// lease lapse: no hold may act any more) and waits until they are gone.
func (m *Manager) DropAll(ctx context.Context) error {
	var errs []error
	for _, r := range m.residentRooms() {
		if err := r.await(ctx, &event{kind: evDrop, why: life.EndLapse}); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// CloseSockets closes every socket of a room on this node with code and
// reason (a drain or a move: 1012); their close events follow as usual.
func (m *Manager) CloseSockets(ctx context.Context, key Key, code abi.CloseCode, reason string) error {
	m.mu.Lock()
	r := m.rooms[key]
	m.mu.Unlock()
	if r == nil {
		return nil
	}
	return r.await(ctx, &event{kind: evCloseSockets, code: code, reason: reason})
}

// CloseSocketsLater is CloseSockets without waiting: the close is
// queued on the room's worker and this returns at once. A placement's
// End runs on that worker, and would wait on itself.
func (m *Manager) CloseSocketsLater(key Key, code abi.CloseCode, reason string) {
	m.mu.Lock()
	r := m.rooms[key]
	m.mu.Unlock()
	if r == nil {
		return
	}
	// Its answer goes to a buffer nobody reads.
	_ = r.enqueue(&event{kind: evCloseSockets, code: code, reason: reason, done: make(chan error, 1)}, false)
}

// SocketCount is how many sockets of key are open on this node (closing
// ones included).
func (m *Manager) SocketCount(key Key) int {
	m.mu.Lock()
	r := m.rooms[key]
	m.mu.Unlock()
	if r == nil {
		return 0
	}
	return int(r.socketCount.Load())
}

// RoomsWithSockets lists the rooms with sockets open on this node,
// resident or not, sorted.
func (m *Manager) RoomsWithSockets() []Key {
	m.mu.Lock()
	var keys []Key
	for k, r := range m.rooms {
		if r.socketCount.Load() > 0 {
			keys = append(keys, k)
		}
	}
	m.mu.Unlock()
	slices.SortFunc(keys, func(a, b Key) int { return strings.Compare(a.String(), b.String()) })
	return keys
}

// Delete deletes a room: its instance is dropped without being written,
// its sockets are closed (1000, "room deleted"), and its snapshot and
// segments are deleted from the store. Its next event starts it fresh, as
// if it had never run. A room the node has never seen is ErrUnknownRoom.
func (m *Manager) Delete(ctx context.Context, key Key) error {
	r, err := m.knownRoom(ctx, key)
	if err != nil {
		return err
	}
	return r.await(ctx, &event{kind: evDelete, ctx: ctx})
}

// Pin keeps a room in memory (pin true) or lets it sleep again (false).
// Pinning wakes a hibernated room now; from then on neither the idle
// timeout nor --max-resident hibernates it. An explicit Hibernate and a
// clean stop still do, and the room's next event wakes it, still pinned.
// Pins belong to the node and live in its memory only: a restart forgets
// them. A room the node has never seen is ErrUnknownRoom.
func (m *Manager) Pin(ctx context.Context, key Key, pin bool) error {
	r, err := m.knownRoom(ctx, key)
	if err != nil {
		return err
	}
	r.pinned.Store(pin)
	if !pin {
		m.placesChanged()
		m.forget(r) // a hibernated room without sockets need not stay listed
		return nil
	}
	return m.Wake(ctx, key)
}

// Wake makes a stored room resident here without an event for its guest
// (the target of a move takes the room at once, not at its next event).
// A room the node has never seen is ErrUnknownRoom.
func (m *Manager) Wake(ctx context.Context, key Key) error {
	r, err := m.knownRoom(ctx, key)
	if err != nil {
		return err
	}
	done := make(chan error, 1)
	if err := r.enqueue(&event{kind: evWake, done: done}, false); err != nil {
		return err
	}
	select {
	case err := <-done:
		return err
	case <-ctx.Done():
		return ctx.Err()
	}
}

// knownRoom returns the room's in-memory state, creating it for a room
// that is only in the bucket; ErrUnknownRoom for neither.
func (m *Manager) knownRoom(ctx context.Context, key Key) (*Room, error) {
	m.mu.Lock()
	r, stopping := m.rooms[key], m.stopping
	m.mu.Unlock()
	if stopping {
		return nil, ErrStopping
	}
	if r != nil {
		return r, nil
	}
	if _, _, err := m.layout.latest(ctx, m.bucket, key); errors.Is(err, store.ErrNotFound) {
		return nil, fmt.Errorf("%w: %s", ErrUnknownRoom, key)
	} else if err != nil {
		return nil, err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.stopping {
		return nil, ErrStopping
	}
	if r = m.rooms[key]; r == nil {
		r = newRoom(m, key)
		m.rooms[key] = r
	}
	return r, nil
}

// Shutdown hibernates every resident room and refuses new events. Sockets
// are left open: the caller closes them (with 1012) once this returns, and
// their close events are not delivered, since no room may wake any more;
// each room learns of them when it next wakes. Then the caller calls Close.
//
// Shutdown returns once no room is resident and no worker runs: a wake that
// was under way when the stop began finishes, and its room is hibernated
// by its own worker (rooms.run) before the worker exits, so nothing still
// uses the engine and no room's state is left unwritten. A room whose
// state could not be written is named in the error.
func (m *Manager) Shutdown(ctx context.Context) error {
	m.mu.Lock()
	if m.stopping {
		m.mu.Unlock()
		return nil
	}
	m.stopping = true
	m.stopCtx.Store(&ctx)
	m.stopFailures = map[Key]error{}
	var all []*Room
	for r := range m.resident {
		all = append(all, r)
	}
	m.mu.Unlock()
	close(m.stop)
	m.cancelCalls()
	m.background.Wait()
	m.dropAllKept()

	// Rooms with a worker hibernate as their mailbox empties; the others
	// get a worker for it.
	for _, r := range all {
		r.requestHibernate(life.EndStop, nil)
	}
	if n := m.workers.count(); n > 0 {
		m.log.Info("stopping: waiting for rooms to finish their events and hibernate", "rooms", n)
	}
	waitErr := m.workers.wait(ctx)
	m.dropAllKept() // kept by a hibernation that began before the stop

	m.mu.Lock()
	defer m.mu.Unlock()
	var errs []error
	for _, k := range sortedKeys(m.stopFailures) {
		errs = append(errs, fmt.Errorf("%s: its latest state could not be written: %w", k, m.stopFailures[k]))
	}
	if waitErr != nil {
		var busy []string
		for r := range m.resident {
			busy = append(busy, r.key.String())
		}
		slices.Sort(busy)
		errs = append(errs, fmt.Errorf("shutdown: %d rooms not hibernated (%s): %w", len(busy), strings.Join(busy, ", "), waitErr))
	}
	return errors.Join(errs...)
}

// Close waits for the workers that the sockets' closes started after
// Shutdown (they only record the closes) and stops the manager for good:
// later events are dropped. Only then may the engine be closed. It fails,
// and the engine must be left open, if a worker is still running when ctx
// ends.
func (m *Manager) Close(ctx context.Context) error {
	if err := m.workers.wait(ctx); err != nil {
		m.cancel() // the workers' store calls give up
		return fmt.Errorf("rooms: workers still running: %w", err)
	}
	defer m.cancel()
	m.closed.Store(true)
	err := m.workers.wait(ctx) // one that started before the flag was seen
	m.dropAllKept()            // none may outlive the manager: the engine closes next
	if m.images != nil {
		if err == nil {
			m.keepImages(ctx) // nothing runs: every image is whole
		} else {
			m.images.Close()
		}
	}
	return err
}

// stopFailed records a room whose state a stop could not write.
func (m *Manager) stopFailed(key Key, err error) {
	m.mu.Lock()
	m.stopFailures[key] = err
	m.mu.Unlock()
}

// workerCount counts running room workers, for the stop to wait on.
type workerCount struct {
	mu   sync.Mutex
	n    int
	zero chan struct{} // closed when n reaches 0; nil while nobody waits
}

func (w *workerCount) add(d int) {
	w.mu.Lock()
	w.n += d
	if w.n == 0 && w.zero != nil {
		close(w.zero)
		w.zero = nil
	}
	w.mu.Unlock()
}

func (w *workerCount) count() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.n
}

// wait returns once no worker runs, or with ctx's error.
func (w *workerCount) wait(ctx context.Context) error {
	w.mu.Lock()
	if w.n == 0 {
		w.mu.Unlock()
		return nil
	}
	if w.zero == nil {
		w.zero = make(chan struct{})
	}
	zero := w.zero
	w.mu.Unlock()
	select {
	case <-zero:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func sortedKeys[V any](m map[Key]V) []Key {
	keys := make([]Key, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.SortFunc(keys, func(a, b Key) int { return strings.Compare(a.String(), b.String()) })
	return keys
}

// RoomState is a room's state as listings show it.
type RoomState string

// Room states.
const (
	StateResident   RoomState = "resident"
	StateHibernated RoomState = "hibernated"
)

// RoomInfo describes one room for listings.
type RoomInfo struct {
	Class   string    `json:"class"`
	Name    string    `json:"name"`
	State   RoomState `json:"state"`
	Sockets int       `json:"sockets"`
	// Memory is the room's linear memory in bytes: the resident instance's,
	// else the size its snapshot restores (0 if it has none).
	Memory uint32 `json:"memory_bytes"`
	// LastEvent is when the room last handled an event, if this node has
	// run it since it started; IdleSeconds is the time since, by the
	// node's clock.
	LastEvent   *time.Time `json:"last_event,omitempty"`
	IdleSeconds *float64   `json:"idle_seconds,omitempty"`
	// SnapshotBytes is what the room's snapshot takes in the store (its
	// manifest and the segments it references), 0 if it has none;
	// SnapshotAt is when it was written.
	SnapshotBytes uint64     `json:"snapshot_bytes"`
	SnapshotAt    *time.Time `json:"snapshot_at,omitempty"`
	// Alarm is the room's alarm, as its stored state has it (none:
	// unset).
	Alarm *time.Time `json:"alarm,omitempty"`
	// Awake says why a resident room is in memory (empty for others).
	Awake AwakeReason `json:"awake,omitempty"`
	// Pending counts the events in its mailbox; OpenRequests the HTTP
	// requests waiting for its answer.
	Pending      int `json:"pending_events"`
	OpenRequests int `json:"open_requests"`
	// Pinned: an operator keeps the room in memory (Manager.Pin).
	Pinned bool `json:"pinned,omitempty"`
	// Version is the module version the room runs: the resident
	// instance's, else the one its snapshot names ("" if it has none).
	Version string `json:"version,omitempty"`
	// Upgrade is set while the room did not move to its class's current
	// version when it was asked to (no handoff, or a failure and when it
	// is tried again).
	Upgrade *RoomUpgrade `json:"upgrade,omitempty"`
}

// List returns every room the node knows: resident, hibernated with sockets
// here, and hibernated in the bucket; sorted by class and name. Snapshot
// sizes come from the rooms' manifests, read again only for rooms that may
// have written one since the last listing.
func (m *Manager) List(ctx context.Context) ([]RoomInfo, error) {
	keys, err := m.bucket.List(ctx, "rooms/")
	if err != nil {
		return nil, err
	}
	stored := m.storedRooms(keys)
	seen := map[Key]bool{}
	live := map[Key]liveFacts{}
	var out []RoomInfo
	now, wallNow := m.clock.Now(), m.clock.Wall()
	m.mu.Lock()
	for k, r := range m.rooms {
		seen[k] = true
		f := m.liveFactsOf(r)
		st := StateHibernated
		if f.resident {
			st = StateResident
		} else if !r.everStored.Load() && f.sockets == 0 && !stored[k] {
			continue // created for an event that has not run yet
		}
		live[k] = f
		out = append(out, RoomInfo{
			Class: k.Class, Name: k.Name, State: st, Sockets: f.sockets, Memory: f.memory,
			LastEvent: lastEventAt(wallNow, now, f.last), Awake: f.awake, Pending: f.pending, OpenRequests: f.open,
			Pinned: f.pinned, Version: f.version,
		})
	}
	m.mu.Unlock()
	for k := range stored {
		if !seen[k] {
			out = append(out, RoomInfo{Class: k.Class, Name: k.Name, State: StateHibernated})
		}
	}
	if err := m.snapshotFacts(ctx, out, live, stored); err != nil {
		return nil, err
	}
	for i := range out {
		if u, ok := m.Upgrade(Key{out[i].Class, out[i].Name}); ok {
			out[i].Upgrade = &u
		}
	}
	sortRooms(out)
	return out, nil
}

// Counts are the node's room totals.
type Counts struct {
	Resident              int
	Hibernated            int // rooms with a snapshot that are not resident
	HibernatedWithSockets int
	Known                 int // rooms with in-memory state
	Stored                int // rooms with a snapshot in the bucket
	// Waking counts the wakes under way (each holds a place under
	// --max-resident); PeakResident is the most rooms that have been
	// resident at once since the node started.
	Waking       int
	PeakResident int
}

// Counts returns the node's room totals.
func (m *Manager) Counts() Counts {
	m.mu.Lock()
	defer m.mu.Unlock()
	c := Counts{Resident: len(m.resident), Known: len(m.rooms), Stored: m.stored, Waking: m.places.Waking, PeakResident: m.places.Peak}
	c.Hibernated = m.stored
	for r := range m.resident {
		if r.everStored.Load() {
			c.Hibernated--
		}
	}
	for _, r := range m.rooms {
		if !r.residentNow() && r.socketCount.Load() > 0 {
			c.HibernatedWithSockets++
		}
	}
	return c
}

func randomID() string {
	var b [6]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}
