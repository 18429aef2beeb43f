package rooms

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/wasmkeep/wasmkeep/host/snapshot"
	"github.com/wasmkeep/wasmkeep/host/store"
)

// What listings and the dashboard show about each room besides its state:
// why a resident room is in memory, its memory, when it last handled an
// event, and what its snapshot takes in the store.

// AwakeReason says why a resident room is in memory.
type AwakeReason string

// Awake reasons, in the order a listing checks them: the first that holds
// is the room's.
const (
	// AwakeRequest: an HTTP request waits for the room's answer (it is
	// running, or queued behind other events).
	AwakeRequest AwakeReason = "request"
	// AwakeHibernating: the room is being put to sleep (idle, evicted,
	// asked by an admin, or the node is stopping).
	AwakeHibernating AwakeReason = "hibernating"
	// AwakeEvent: a socket event is running, or events wait in the mailbox.
	AwakeEvent AwakeReason = "event"
	// AwakePinned: an operator pinned the room (Manager.Pin); the idle
	// timeout and --max-resident leave it in memory.
	AwakePinned AwakeReason = "pinned"
	// AwakeRecent: the room handled an event less than the idle timeout
	// ago.
	AwakeRecent AwakeReason = "recent"
	// AwakeIdle: idle past the idle timeout; the next sweep hibernates it
	// (a room whose snapshot write failed stays resident, and is retried).
	AwakeIdle AwakeReason = "idle"
)

// liveFacts are what a listing reads of a room in memory, under the
// manager's lock.
type liveFacts struct {
	resident bool
	awake    AwakeReason
	detail   string // the reason in words
	pending  int
	open     int
	memory   uint32
	last     int64 // monotonic time of its last event
	sockets  int
	pinned   bool
	version  string // the resident instance's module version
}

// liveFactsOf reads a room's in-memory facts. The caller holds m.mu.
func (m *Manager) liveFactsOf(r *Room) liveFacts {
	r.mu.Lock()
	pending := len(r.queue) - r.head
	running := r.running && !r.lingering
	r.mu.Unlock()
	f := liveFacts{
		resident: r.residentNow(),
		pending:  pending,
		open:     int(r.openRequests.Load()),
		last:     r.lastActive.Load(),
		sockets:  int(r.socketCount.Load()),
		pinned:   r.pinned.Load(),
	}
	if !f.resident {
		return f
	}
	f.memory = r.memory.Load()
	f.version = r.runningVersion()
	idle := time.Duration(m.clock.Now() - f.last)
	switch {
	case f.open > 0:
		f.awake, f.detail = AwakeRequest, fmt.Sprintf("%d HTTP requests wait for its answer", f.open)
		if f.open == 1 {
			f.detail = "an HTTP request waits for its answer"
		}
	case r.hibernatePending.Load():
		f.awake, f.detail = AwakeHibernating, "it is being hibernated"
	case running && pending == 0:
		f.awake, f.detail = AwakeEvent, "an event is running"
	case pending > 0:
		f.awake, f.detail = AwakeEvent, fmt.Sprintf("%d events are waiting", pending)
	case f.pinned:
		f.awake, f.detail = AwakePinned, "pinned: the idle timeout and --max-resident leave it in memory until it is unpinned"
	case idle < m.cfg.IdleTimeout:
		f.awake, f.detail = AwakeRecent, fmt.Sprintf("recent activity: idle for %s of the %s idle timeout", idle.Round(time.Millisecond), m.cfg.IdleTimeout)
	default:
		f.awake, f.detail = AwakeIdle, fmt.Sprintf("idle for %s, past the %s idle timeout: the next sweep hibernates it", idle.Round(time.Millisecond), m.cfg.IdleTimeout)
	}
	return f
}

// lastEventAt is a room's last event as a listing shows it: wall time,
// to the millisecond (nil if unknown), from its monotonic time and a
// reading of both clocks now.
func lastEventAt(wallNow time.Time, now, mono int64) *time.Time {
	if mono == 0 {
		return nil
	}
	t := wallNow.Add(-time.Duration(now - mono)).UTC().Round(time.Millisecond)
	return &t
}

// idleSeconds is the time since a room's last event, by the node's
// monotonic clock, in seconds to the millisecond (nil if unknown).
func idleSeconds(now, last int64) *float64 {
	if last == 0 {
		return nil
	}
	s := float64(max(now-last, 0)/int64(time.Millisecond)) / 1000
	return &s
}

// snapFact is what a listing remembers of a room's stored snapshot, so
// that it reads a manifest again only when the room may have written a new
// one since.
type snapFact struct {
	// gen changes whenever the entry is invalidated; a read that started
	// under another gen is not stored.
	gen uint64
	// valid: the fields below hold the manifest as it was when the room's
	// stamp (its last activity and residency) was stamp and resident.
	valid    bool
	inMemory bool
	stamp    int64
	resident bool

	bytes   uint64 // the manifest and the segments it references
	memory  uint32
	taken   time.Time
	version string     // the module version the snapshot names
	alarm   *time.Time // the room's alarm, nil if none

	// last is the monotonic time of the room's last event, kept when the
	// room leaves memory (0: unknown, the node has not run it).
	last int64
}

// snapFacts is the listing's cache of snapshot facts.
type snapFacts struct {
	mu  sync.Mutex
	m   map[Key]*snapFact
	gen uint64
}

func (c *snapFacts) entry(k Key) *snapFact {
	if c.m == nil {
		c.m = map[Key]*snapFact{}
	}
	e := c.m[k]
	if e == nil {
		c.gen++
		e = &snapFact{gen: c.gen}
		c.m[k] = e
	}
	return e
}

// forgotten invalidates a room's snapshot facts as it leaves memory (it
// may have written a new snapshot since they were read, and nothing marks
// a change once it is gone) and keeps the time of its last event.
func (c *snapFacts) forgotten(k Key, last int64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	e := c.entry(k)
	c.gen++
	e.gen, e.valid, e.last = c.gen, false, last
}

// invalidate drops what is known of a room's snapshot (an import replaced
// it, an export checkpointed it).
func (c *snapFacts) invalidate(k Key) {
	c.mu.Lock()
	defer c.mu.Unlock()
	e := c.entry(k)
	c.gen++
	e.gen, e.valid = c.gen, false
}

// manifestReads bounds the manifests one listing reads at once.
const manifestReads = 8

// snapshotFacts fills the snapshot fields of the listed rooms: from the
// cache, or from their manifests when the cache may be stale. live has the
// in-memory rooms' facts; stored says which rooms have a manifest.
func (m *Manager) snapshotFacts(ctx context.Context, out []RoomInfo, live map[Key]liveFacts, stored map[Key]bool) error {
	type job struct {
		i    int
		gen  uint64
		live liveFacts
		mem  bool
	}
	var jobs []job
	c := &m.snaps
	now, wallNow := m.clock.Now(), m.clock.Wall()
	c.mu.Lock()
	for i := range out {
		k := Key{out[i].Class, out[i].Name}
		f, inMem := live[k]
		e := c.entry(k)
		if inMem {
			out[i].IdleSeconds = idleSeconds(now, f.last)
		} else if e.last != 0 {
			out[i].LastEvent, out[i].IdleSeconds = lastEventAt(wallNow, now, e.last), idleSeconds(now, e.last)
		}
		if !stored[k] {
			continue
		}
		fresh := e.valid && e.inMemory == inMem && (!inMem || (e.stamp == f.last && e.resident == f.resident))
		if fresh {
			out[i].fill(e)
			continue
		}
		jobs = append(jobs, job{i: i, gen: e.gen, live: f, mem: inMem})
	}
	c.mu.Unlock()
	if len(jobs) == 0 {
		return nil
	}

	var (
		wg   sync.WaitGroup
		mu   sync.Mutex
		errs []error
		sem  = make(chan struct{}, manifestReads)
	)
	for _, j := range jobs {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer func() { <-sem; wg.Done() }()
			k := Key{out[j.i].Class, out[j.i].Name}
			body, _, err := m.layout.latest(ctx, m.bucket, k)
			if errors.Is(err, store.ErrNotFound) {
				return // gone since the bucket was listed
			}
			if err != nil {
				mu.Lock()
				errs = append(errs, err)
				mu.Unlock()
				return
			}
			e := snapFact{valid: true, inMemory: j.mem, stamp: j.live.last, resident: j.live.resident}
			if man, err := snapshot.DecodeManifest(body); err == nil {
				_, total := man.Bytes()
				e.bytes = total + uint64(len(body))
				e.memory = man.MemorySize()
				e.taken = time.Unix(0, man.WallUnixNano).UTC()
				e.version = man.ModuleHash
				e.alarm = storedAlarmTime(man)
			} else {
				e.bytes = uint64(len(body)) // unreadable: at least the manifest
			}
			out[j.i].fill(&e)
			c.mu.Lock()
			if cur := c.entry(k); cur.gen == j.gen {
				last := cur.last
				*cur = e
				cur.gen, cur.last = j.gen, last
			}
			c.mu.Unlock()
		}()
	}
	wg.Wait()
	return errors.Join(errs...)
}

// fill sets the snapshot fields of a listing from e.
func (ri *RoomInfo) fill(e *snapFact) {
	ri.SnapshotBytes = e.bytes
	if !e.taken.IsZero() {
		t := e.taken
		ri.SnapshotAt = &t
	}
	if ri.Memory == 0 {
		ri.Memory = e.memory
	}
	if ri.Version == "" {
		ri.Version = e.version
	}
	ri.Alarm = e.alarm
}

// Totals are the node's room counters since it started.
type Totals struct {
	Wakes        uint64 `json:"wakes"`
	ColdStarts   uint64 `json:"cold_starts"`
	Hibernations uint64 `json:"hibernations"`
	Events       uint64 `json:"events"`
	Crashes      uint64 `json:"crashes"`
}

// Totals reads the node's room counters (the sums of their labelled
// metrics).
func (m *Manager) Totals() Totals {
	t := Totals{Wakes: m.met.wakes.Get(), ColdStarts: m.met.coldStarts.Get()}
	for _, c := range m.met.hibernations {
		t.Hibernations += c.Get()
	}
	for _, c := range m.met.events {
		t.Events += c.Get()
	}
	for _, c := range m.met.crashes {
		t.Crashes += c.Get()
	}
	return t
}

// IdleTimeout is the manager's idle timeout.
func (m *Manager) IdleTimeout() time.Duration { return m.cfg.IdleTimeout }

// MaxResident is the manager's bound on resident rooms.
func (m *Manager) MaxResident() int { return m.cfg.MaxResident }
