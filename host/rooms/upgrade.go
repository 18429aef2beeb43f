package rooms

import (
	"context"
	"errors"
	"sort"
	"sync"
	"time"

	"github.com/VictoriaMetrics/metrics"

	"github.com/wasmkeep/wasmkeep/host/engine"
	"github.com/wasmkeep/wasmkeep/host/rooms/life"
	"github.com/wasmkeep/wasmkeep/host/snapshot"
)

// Upgrades: a room's memory only makes sense to the module version that
// wrote it, so a room moves to a newer version of its class by a handoff
// at a wake: the old version, restored from its snapshot, encodes its state
// (engine.Instance.Upgrade); a fresh instance of the new version starts
// from it (StartFrom); the room's sockets, held by the host, carry over
// with their ids. The new instance's state is written at once, so the
// snapshot names the new version from then on.
//
// Every way this can fail leaves the room where it was: the old version's
// instance is dropped after the attempt (its code ran, so its memory
// changed) and the room is restored again from the same snapshot. The
// failure is remembered per room with a backoff (upgradeBook), so a room
// whose upgrade keeps failing is not made to pay an attempt at every wake;
// a room whose version offers no handoff (or whose next version takes
// none) stays on its version until a newer upload, or is reset when the
// upload asks for it.

// UpgradePolicy is what a class's current version asks of its rooms that
// run other versions.
type UpgradePolicy struct {
	// Current is the version rooms move to ("" when the class is gone).
	Current string
	// Never: rooms stay on their versions.
	Never bool
	// ResetWithoutHandoff resets a room that cannot hand over its state
	// (its state is deleted and it starts fresh on Current, its sockets
	// kept) instead of leaving it on its version.
	ResetWithoutHandoff bool
}

// upgradeOutcome is what an attempt at a wake came to.
type upgradeOutcome int

const (
	upgradeNone  upgradeOutcome = iota // nothing tried: the room stays, untouched
	upgradeDone                        // the room runs the new version
	upgradeKept                        // tried and failed or refused: restore the old version again
	upgradeReset                       // no handoff, and the policy resets such rooms
)

// Upgrade states a listing shows for a room.
const (
	// UpgradeFailed: the last attempt failed (a trap, a timeout, a write);
	// the room stays on its version and is tried again after a backoff.
	UpgradeFailed = "failed"
	// UpgradeNoHandoff: the room's version offers no handoff, or the
	// current version takes none; it stays until it is reset.
	UpgradeNoHandoff = "no-handoff"
)

// RoomUpgrade is what the node knows of a room's move to its class's
// current version, for listings.
type RoomUpgrade struct {
	To       string     `json:"to"`
	State    string     `json:"state"`
	Attempts int        `json:"attempts"`
	Error    string     `json:"error,omitempty"`
	RetryAt  *time.Time `json:"retry_at,omitempty"`
}

// VersionUpgrades counts the attempts to move rooms off one version.
type VersionUpgrades struct {
	Done      int `json:"done"`
	Failed    int `json:"failed"`
	NoHandoff int `json:"no_handoff"`
	Reset     int `json:"reset"`
}

// upgradeBook remembers, per room, the attempts that did not move it, and
// per version what became of its rooms' attempts. In memory only: a
// restart forgets backoffs, which costs one attempt per room again.
type upgradeBook struct {
	mu      sync.Mutex
	rooms   map[Key]*roomUpgrade
	from    map[string]*VersionUpgrades
	outcome map[string]*metrics.Counter
}

type roomUpgrade struct {
	to        string
	attempts  int
	retryAt   int64 // node clock
	noHandoff bool
	err       string
}

// maxUpgradeNotes bounds the rooms the book remembers: past it a room that
// failed is simply tried again at its next wake.
const maxUpgradeNotes = 100_000

func newUpgradeBook(set *metrics.Set) *upgradeBook {
	b := &upgradeBook{rooms: map[Key]*roomUpgrade{}, from: map[string]*VersionUpgrades{}, outcome: map[string]*metrics.Counter{}}
	for _, o := range []string{"done", "failed", "no_handoff", "reset"} {
		b.outcome[o] = set.NewCounter(`wasmkeep_room_upgrades_total{outcome="` + o + `"}`)
	}
	return b
}

// due reports whether a room should try to move to version to now. A room
// known to have no handoff is due again only when the policy resets such
// rooms.
func (b *upgradeBook) due(key Key, to string, reset bool, now int64) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	n := b.rooms[key]
	if n == nil || n.to != to {
		return true
	}
	if n.noHandoff {
		return reset
	}
	return now >= n.retryAt
}

// record notes an attempt's outcome.
func (b *upgradeBook) record(key Key, from, to string, outcome string, err error, now int64) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.outcome[outcome].Inc()
	v := b.from[from]
	if v == nil {
		v = &VersionUpgrades{}
		b.from[from] = v
	}
	switch outcome {
	case "done", "reset":
		if outcome == "done" {
			v.Done++
		} else {
			v.Reset++
		}
		delete(b.rooms, key)
		return
	case "no_handoff":
		v.NoHandoff++
	default:
		v.Failed++
	}
	n := b.rooms[key]
	if n == nil || n.to != to {
		if len(b.rooms) >= maxUpgradeNotes {
			return
		}
		n = &roomUpgrade{to: to}
		b.rooms[key] = n
	}
	n.attempts++
	n.noHandoff = outcome == "no_handoff"
	n.err = ""
	if err != nil {
		n.err = err.Error()
	}
	n.retryAt = now + life.Retry(n.attempts)
}

// forget drops what the book knows of a room (deleted, reset).
func (b *upgradeBook) forget(key Key) {
	b.mu.Lock()
	delete(b.rooms, key)
	b.mu.Unlock()
}

// Upgrade returns what the node knows of a room's pending move, if any.
func (m *Manager) Upgrade(key Key) (RoomUpgrade, bool) {
	b := m.upgrades
	b.mu.Lock()
	defer b.mu.Unlock()
	n := b.rooms[key]
	if n == nil {
		return RoomUpgrade{}, false
	}
	u := RoomUpgrade{To: n.to, State: UpgradeFailed, Attempts: n.attempts, Error: n.err}
	if n.noHandoff {
		u.State = UpgradeNoHandoff
	} else {
		t := m.clock.Wall().Add(time.Duration(n.retryAt - m.clock.Now())).UTC().Truncate(time.Second)
		u.RetryAt = &t
	}
	return u, true
}

// UpgradesFrom returns, per version, what became of the attempts to move
// its rooms since the node started.
func (m *Manager) UpgradesFrom() map[string]VersionUpgrades {
	b := m.upgrades
	b.mu.Lock()
	defer b.mu.Unlock()
	out := make(map[string]VersionUpgrades, len(b.from))
	for h, v := range b.from {
		out[h] = *v
	}
	return out
}

// upgradeAtWake moves a room just restored on version from to its class's
// current version, if the policy asks for it and the room is due. inst is
// the restored instance: on any outcome but upgradeNone it has been closed,
// and on upgradeDone next is the instance of version to.
func (r *Room) upgradeAtWake(ctx context.Context, from string, inst Instance) (next Instance, to string, outcome upgradeOutcome) {
	m := r.m
	pol, err := m.classes.Upgrade(ctx, r.key.Class)
	if err != nil || pol.Current == "" || pol.Current == from || pol.Never || !m.upgrades.due(r.key, pol.Current, pol.ResetWithoutHandoff, m.clock.Now()) {
		return nil, "", upgradeNone
	}
	to = pol.Current
	state, err := inst.Upgrade()
	if err == nil {
		next, err = r.startFrom(ctx, pol.Current, from, state)
	}
	inst.Close()
	switch {
	case err == nil:
		m.upgrades.record(r.key, from, pol.Current, "done", nil, m.clock.Now())
		m.log.Info("room upgraded", "room", r.key.String(), "from", from, "to", pol.Current, "state_bytes", len(state))
		return next, to, upgradeDone
	case errors.Is(err, engine.ErrNoHandoff) || errors.Is(err, engine.ErrNotTakenOver):
		if pol.ResetWithoutHandoff {
			m.upgrades.record(r.key, from, pol.Current, "reset", nil, m.clock.Now())
			m.log.Info("room reset for an upgrade: no handoff", "room", r.key.String(), "from", from, "to", pol.Current, "why", err)
			return nil, to, upgradeReset
		}
		m.upgrades.record(r.key, from, pol.Current, "no_handoff", err, m.clock.Now())
		m.log.Info("room stays on its version: no handoff", "room", r.key.String(), "version", from, "current", pol.Current, "why", err)
	default:
		m.upgrades.record(r.key, from, pol.Current, "failed", err, m.clock.Now())
		m.log.Warn("room upgrade failed; the room stays on its version", "room", r.key.String(), "from", from, "to", pol.Current, "err", err)
	}
	return nil, to, upgradeKept
}

// startFrom starts version to from the state version from handed over.
func (r *Room) startFrom(ctx context.Context, to, from string, state []byte) (Instance, error) {
	class, err := r.m.classes.ByHash(ctx, to)
	if err != nil {
		return nil, err
	}
	next, err := class.Start(ctx, r)
	if err != nil {
		return nil, err
	}
	if err := next.StartFrom(from, state); err != nil {
		next.Close()
		return nil, err
	}
	return next, nil
}

// UpgradeJob is the progress of moving every room of a class to its
// current version at once (Manager.UpgradeAll).
type UpgradeJob struct {
	Class string `json:"class"`
	To    string `json:"to"`
	// Total rooms found; Done those on To now (moved, or there already),
	// Failed, NoHandoff and Reset as for a wake; Elsewhere: rooms another
	// node holds, which move at their next wake there.
	Total     int        `json:"total"`
	Done      int        `json:"done"`
	Failed    int        `json:"failed"`
	NoHandoff int        `json:"no_handoff"`
	Reset     int        `json:"reset"`
	Elsewhere int        `json:"elsewhere"`
	Started   time.Time  `json:"started"`
	Finished  *time.Time `json:"finished,omitempty"`
}

// Running reports whether the job is still under way.
func (j UpgradeJob) Running() bool { return j.Finished == nil }

// DefaultUpgradeConcurrency is how many rooms an UpgradeAll moves at once:
// each move wakes a room (a restore and a cold start of the new version),
// so a few at a time keep the node's events going meanwhile.
const DefaultUpgradeConcurrency = 4

type upgradeJobs struct {
	mu   sync.Mutex
	jobs map[string]*UpgradeJob // by class; the latest job of each
}

// UpgradeJobs returns the latest upgrade job of every class that had one,
// sorted by class.
func (m *Manager) UpgradeJobs() []UpgradeJob {
	m.jobs.mu.Lock()
	defer m.jobs.mu.Unlock()
	out := make([]UpgradeJob, 0, len(m.jobs.jobs))
	for _, j := range m.jobs.jobs {
		out = append(out, *j)
	}
	sort.Slice(out, func(i, k int) bool { return out[i].Class < out[k].Class })
	return out
}

// UpgradeAll moves every room of class it knows (resident, or stored in
// the bucket) to the class's current version now, in the background, at
// most concurrency at a time (zero: DefaultUpgradeConcurrency), and
// returns at once. A resident room is hibernated and woken again (its
// sockets stay open); a hibernated one is woken and, once moved, left to
// sleep again at its idle timeout. Progress is in UpgradeJobs. A job for a
// class replaces the class's earlier one, which stops taking new rooms.
func (m *Manager) UpgradeAll(class string, concurrency int) error {
	pol, err := m.classes.Upgrade(m.ctx, class)
	if err != nil {
		return err
	}
	if concurrency <= 0 {
		concurrency = DefaultUpgradeConcurrency
	}
	job := &UpgradeJob{Class: class, To: pol.Current, Started: m.clock.Wall().UTC()}
	m.jobs.mu.Lock()
	if m.jobs.jobs == nil {
		m.jobs.jobs = map[string]*UpgradeJob{}
	}
	m.jobs.jobs[class] = job
	m.jobs.mu.Unlock()
	if err := m.goBackground(func() { m.runUpgradeJob(job, concurrency) }); err != nil {
		m.jobs.mu.Lock()
		if m.jobs.jobs[class] == job {
			delete(m.jobs.jobs, class)
		}
		m.jobs.mu.Unlock()
		return err
	}
	return nil
}

// runUpgradeJob moves the rooms of job's class one by one, concurrency at
// a time.
func (m *Manager) runUpgradeJob(job *UpgradeJob, concurrency int) {
	ctx := m.ctx
	keys, err := m.classRooms(ctx, job.Class)
	update := func(f func(*UpgradeJob)) {
		m.jobs.mu.Lock()
		f(job)
		m.jobs.mu.Unlock()
	}
	if err != nil {
		m.log.Error("upgrade of a class's rooms could not list them", "class", job.Class, "err", err)
	}
	update(func(j *UpgradeJob) { j.Total = len(keys) })
	sem := make(chan struct{}, concurrency)
	var wg sync.WaitGroup
	for _, key := range keys {
		m.jobs.mu.Lock()
		replaced := m.jobs.jobs[job.Class] != job
		m.jobs.mu.Unlock()
		if replaced || m.isStopping() {
			break
		}
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			res := m.upgradeRoom(ctx, key, job.To)
			update(func(j *UpgradeJob) {
				switch res {
				case "done":
					j.Done++
				case "reset":
					j.Reset++
				case "no_handoff":
					j.NoHandoff++
				case "elsewhere":
					j.Elsewhere++
				default:
					j.Failed++
				}
			})
		})
	}
	wg.Wait()
	update(func(j *UpgradeJob) {
		t := m.clock.Wall().UTC()
		j.Finished = &t
	})
}

// classRooms lists the rooms of class the node knows: in memory, and
// stored in the bucket.
func (m *Manager) classRooms(ctx context.Context, class string) ([]Key, error) {
	seen := map[Key]bool{}
	m.mu.Lock()
	for k := range m.rooms {
		if k.Class == class {
			seen[k] = true
		}
	}
	m.mu.Unlock()
	keys, err := m.bucket.List(ctx, Key{Class: class}.classPrefix())
	for k := range m.storedRooms(keys) {
		if k.Class == class {
			seen[k] = true
		}
	}
	return sortedKeys(seen), err
}

// upgradeRoom moves one room to version to now, and says what became of
// it: "done", "failed", "no_handoff", "reset" or "elsewhere".
func (m *Manager) upgradeRoom(ctx context.Context, key Key, to string) string {
	m.mu.Lock()
	r := m.rooms[key]
	m.mu.Unlock()
	wasResident := r != nil && r.residentNow()
	if wasResident {
		if version := r.runningVersion(); version == to {
			return "done"
		}
		if err := m.Hibernate(ctx, key); err != nil && !errors.Is(err, ErrUnknownRoom) {
			return "failed"
		}
	} else if m.storedVersion(ctx, key) == to {
		return "done"
	}
	// A room another node runs (or would wake, holding its sockets) is
	// that node's to move, at its next wake there: waking it here would
	// take it from the node its clients are on.
	if route, err := m.place.Route(ctx, key); err == nil && route.Kind != RouteHere {
		return "elsewhere"
	}
	m.upgrades.forgetBackoff(key)
	err := m.Wake(ctx, key)
	switch {
	case errors.Is(err, ErrElsewhere):
		return "elsewhere"
	case errors.Is(err, ErrUnknownRoom):
		return "done" // deleted meanwhile: nothing to move
	case err != nil:
		return "failed"
	}
	if !wasResident {
		// Woken only to move: let it sleep again rather than hold memory
		// until its idle timeout, a class's rooms all at once.
		_ = m.Hibernate(ctx, key)
	}
	if u, ok := m.Upgrade(key); ok && u.To == to {
		if u.State == UpgradeNoHandoff {
			return "no_handoff"
		}
		return "failed"
	}
	m.mu.Lock()
	r = m.rooms[key]
	m.mu.Unlock()
	if r != nil && r.resetForUpgrade.Swap(false) {
		return "reset"
	}
	return "done"
}

// setVersion records the module version of the instance being loaded.
func (r *Room) setVersion(v string) { r.version.Store(&v) }

// storedVersion is the module version key's stored snapshot names, "" when
// it has none or it cannot be read.
func (m *Manager) storedVersion(ctx context.Context, key Key) string {
	body, _, err := m.layout.latest(ctx, m.bucket, key)
	if err != nil {
		return ""
	}
	man, err := snapshot.DecodeManifest(body)
	if err != nil {
		return ""
	}
	return man.ModuleHash
}

// forgetBackoff lets an operator's upgrade try a room at once, whatever
// its backoff (a room without handoff stays known as such).
func (b *upgradeBook) forgetBackoff(key Key) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if n := b.rooms[key]; n != nil && !n.noHandoff {
		n.retryAt = 0
	}
}
