package rooms

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/wasmkeep/wasmkeep/abi"
	"github.com/wasmkeep/wasmkeep/host/engine"
	"github.com/wasmkeep/wasmkeep/host/images"
	"github.com/wasmkeep/wasmkeep/host/rooms/life"
	"github.com/wasmkeep/wasmkeep/host/snapshot"
	"github.com/wasmkeep/wasmkeep/host/store"
	"github.com/wasmkeep/wasmkeep/internal/limits"
)

// A room's objects in the bucket:
//
//	rooms/<class>/<name>/manifest    the current snapshot's manifest (conditional writes)
//	rooms/<class>/<name>/seg/<id>    immutable segments (If-None-Match), id = <generation>-<n>
//
// Class and room names are escaped into single key segments.

func (k Key) prefix() string {
	return "rooms/" + store.EscapeSegment(k.Class) + "/" + store.EscapeSegment(k.Name) + "/"
}

// classPrefix is the prefix of every room of k's class.
func (k Key) classPrefix() string { return "rooms/" + store.EscapeSegment(k.Class) + "/" }

func (k Key) manifestKey() string         { return k.prefix() + "manifest" }
func (k Key) segmentKey(id string) string { return k.prefix() + "seg/" + id }

// parseRoomKey splits a bucket key under rooms/ into its room and the rest
// ("manifest" or "seg/<id>").
func parseRoomKey(s string) (Key, string, bool) {
	parts := strings.SplitN(s, "/", 4)
	if len(parts) != 4 || parts[0] != "rooms" {
		return Key{}, "", false
	}
	class, err1 := store.UnescapeSegment(parts[1])
	name, err2 := store.UnescapeSegment(parts[2])
	if err1 != nil || err2 != nil {
		return Key{}, "", false
	}
	return Key{class, name}, parts[3], true
}

// ErrFenced: the room's snapshot was written by a hold at least as new as
// the one this node was granted, so this node may not run it.
var ErrFenced = errors.New("rooms: the room's snapshot belongs to a newer hold")

// errHoldLost: the placement no longer grants the room's hold, so nothing
// it holds may be written.
var errHoldLost = errors.New("rooms: the room's hold is no longer valid")

// ErrNotDurable: the room's state could not be made durable, so the event
// that needed it is undone (the room rolls back) and fails.
var ErrNotDurable = errors.New("rooms: the room's state could not be made durable")

// errDropped fails what a room's events held when its instance is dropped
// unwritten (an operator's delete or drop, a hold no longer valid).
var errDropped = fmt.Errorf("%w: the room's instance was dropped", ErrNotDurable)

// load creates the instance: resumed from the instance kept since its
// idle hibernation if the store still holds the state it was kept with
// (warm.go), else restored from the bucket, or started fresh when the room
// has never been stored.
func (r *Room) load(ctx context.Context, hold Hold) (inst Instance, restored bool, err error) {
	m := r.m
	r.firstVersion = "" // a new hold: its first commit is to come
	body, etag, err := m.layout.latest(ctx, m.bucket, r.key)
	if errors.Is(err, store.ErrNotFound) {
		m.dropKept(r, warmChanged) // its state was deleted meanwhile
		if r.onlyStored {
			return nil, false, errNotStored
		}
		return r.startFresh(ctx)
	}
	if err != nil {
		return nil, false, fmt.Errorf("%w: reading its manifest: %v", ErrUnavailable, err)
	}
	warm, resume := m.takeKept(r)
	if resume && !warm.resumable(body) {
		// Another writer's state (another node, an import, a delete and
		// a new start): only a restore gives it.
		m.closeKept([]kept{warm}, warmChanged)
		resume = false
	}
	var (
		man  *snapshot.Manifest
		segs map[string]*snapshot.Segment
		st   savedState
		img  *images.Image // the memory's image, if this node has it (image.go)
	)
	defer func() {
		if img != nil {
			img.Close()
		}
	}()
	if !resume {
		img = r.lookupImage(body)
	}
	switch {
	case resume:
		man = warm.man
		st, err = decodeState(man.RoomState)
	case img != nil:
		if man, err = snapshot.DecodeManifest(body); err == nil {
			st, err = decodeState(man.RoomState)
		}
	default:
		man, segs, st, err = r.readSnapshot(ctx, body)
	}
	if err != nil {
		if resume {
			m.closeKept([]kept{warm}, warmChanged)
		}
		m.unreadable(r.key, err)
		return nil, false, fmt.Errorf("%w: its snapshot is unreadable: %v", ErrUnavailable, err)
	}
	if man.Generation >= hold.Generation {
		// The owner fence: a manifest written by this hold's generation
		// or a later one was written by another holder since this one was
		// granted; running on it would fork the room.
		if resume {
			m.closeKept([]kept{warm}, warmChanged)
		}
		m.met.snapshotConflict.Inc()
		m.log.Error("room snapshot is from a later hold than this node's; refusing to wake it", "room", r.key.String(),
			"snapshot_generation", man.Generation, "hold_generation", hold.Generation)
		return nil, false, fmt.Errorf("%w: %w (snapshot generation %d, hold %d)", ErrUnavailable, ErrFenced, man.Generation, hold.Generation)
	}
	resumed := false   // inst is the kept one, whose page hashes are warm.pages
	image := uint64(0) // the image inst was restored from
	restore := func() (Instance, error) {
		if resume {
			// The class lookup a restore makes, so that a version no
			// longer in the store is not woken from memory either.
			resume = false
			class, err := m.classes.ByHash(ctx, man.ModuleHash)
			if err != nil || class.Hash() != man.ModuleHash {
				warm.inst.Close()
				return nil, fmt.Errorf("%w: its module version: %v", ErrUnavailable, err)
			}
			resumed = true
			image = warm.image
			m.met.resumes.Inc()
			return warm.inst, nil
		}
		resumed, image = false, 0
		if img != nil {
			// Once: a second restore (after a failed upgrade) reads the
			// segments, as does a class that cannot map the image.
			from := img
			img = nil
			inst, err := r.restoreImage(ctx, man, from)
			from.Close()
			if err == nil {
				image = from.ID
				return inst, nil
			}
		}
		if segs == nil {
			// A second restore after a resume or an image (a failed
			// upgrade ran the instance), or an image that could not be
			// mapped: the segments are read now.
			var err error
			if segs, err = r.readSegments(ctx, man); err != nil {
				m.unreadable(r.key, err)
				return nil, fmt.Errorf("%w: its snapshot is unreadable: %v", ErrUnavailable, err)
			}
		}
		var inst Instance
		err := engine.ErrRetired
		for try := 0; errors.Is(err, engine.ErrRetired) && try < 3; try++ {
			var class Class
			if class, err = m.classes.ByHash(ctx, man.ModuleHash); err != nil {
				return nil, fmt.Errorf("%w: its module version: %v", ErrUnavailable, err)
			}
			inst, err = class.Restore(ctx, man, segs, r)
		}
		if err != nil {
			if errors.Is(err, snapshot.ErrCorrupt) {
				m.unreadable(r.key, err)
			}
			return nil, fmt.Errorf("%w: restoring: %v", ErrUnavailable, err)
		}
		m.met.restores.Inc()
		return inst, nil
	}
	if inst, err = restore(); err != nil {
		return nil, false, err
	}
	next, to, outcome := r.upgradeAtWake(ctx, man.ModuleHash, inst)
	switch outcome {
	case upgradeDone:
		inst = next
		r.upgraded = true
	case upgradeReset:
		r.resetForUpgrade.Store(true)
		if err := r.deleteStored(ctx); err != nil {
			return nil, false, fmt.Errorf("%w: resetting it for an upgrade: %v", ErrUnavailable, err)
		}
		return r.startFresh(ctx)
	case upgradeKept:
		// The attempt ran the old version's code, which changed its
		// memory: the room goes on from its snapshot, as it was.
		if inst, err = restore(); err != nil {
			return nil, false, err
		}
	}
	r.man, r.manBody, r.etag, r.pages, r.image = man, body, etag, inst.RestoredPages(), image
	if resumed {
		r.pages = warm.pages
	}
	r.setVersion(man.ModuleHash)
	if r.upgraded {
		r.pages = nil // a new version's memory: the next snapshot is whole
		r.image = 0
		r.setVersion(to)
	}
	r.everStored.Store(true)
	r.known = make(map[uint32]bool, len(st.Sockets))
	for _, id := range st.Sockets {
		r.known[id] = true
	}
	r.nextSocket = max(r.nextSocket, st.NextSocket)
	r.joins = make(map[joinKey]bool, len(st.Joins))
	for _, j := range st.Joins {
		r.joins[j] = true
	}
	r.alarmLoaded(st.Alarm)
	return inst, true, nil
}

// startFresh starts the room from its class's current version, as one
// that has never been stored.
func (r *Room) startFresh(ctx context.Context) (Instance, bool, error) {
	m := r.m
	var inst Instance
	err := engine.ErrRetired
	// A version retired between the lookup and the start is compiled
	// again by the next lookup.
	for try := 0; errors.Is(err, engine.ErrRetired) && try < 3; try++ {
		var class Class
		if class, err = m.classes.Current(ctx, r.key.Class); err != nil {
			return nil, false, err
		}
		inst, err = class.Start(ctx, r)
		if err == nil {
			r.setVersion(class.Hash())
		}
	}
	if err != nil {
		r.crashedAtStart(err)
		return nil, false, fmt.Errorf("%w: the room crashed while initializing: %v", ErrUnavailable, err)
	}
	r.man, r.manBody, r.etag, r.pages, r.image = nil, nil, "", nil, 0
	r.known = map[uint32]bool{}
	r.joins = nil
	r.alarmLoaded(alarmState{})
	return inst, false, nil
}

// readSnapshot decodes a manifest and fetches the segments it references.
// Any flaw (a missing segment included) is an error: a room never wakes
// with part of its memory.
func (r *Room) readSnapshot(ctx context.Context, body []byte) (*snapshot.Manifest, map[string]*snapshot.Segment, savedState, error) {
	man, err := snapshot.DecodeManifest(body)
	if err != nil {
		return nil, nil, savedState{}, err
	}
	st, err := decodeState(man.RoomState)
	if err != nil {
		return nil, nil, savedState{}, err
	}
	segs, err := r.readSegments(ctx, man)
	if err != nil {
		return nil, nil, savedState{}, err
	}
	return man, segs, st, nil
}

// segmentReads is how many of a wake's segment reads run at once. On S3
// each is a round trip of milliseconds; a wake after many hibernations
// names several segments, and reading them one after another would add the
// round trips up.
const segmentReads = 8

// readSegments reads and decodes the segments man references, up to
// segmentReads at once. The first failure cancels the others.
func (r *Room) readSegments(ctx context.Context, man *snapshot.Manifest) (map[string]*snapshot.Segment, error) {
	refs := man.Segments
	decoded := make([]*snapshot.Segment, len(refs))
	read := func(ctx context.Context, i int) error {
		id := refs[i].ID
		b, _, err := r.m.bucket.Get(ctx, r.key.segmentKey(id))
		if errors.Is(err, store.ErrNotFound) {
			return fmt.Errorf("%w: %s", snapshot.ErrMissingSegment, id)
		}
		if err != nil {
			return err
		}
		if decoded[i], err = snapshot.DecodeSegment(b); err != nil {
			return fmt.Errorf("segment %s: %w", id, err)
		}
		return nil
	}
	if len(refs) == 1 {
		// The common case after a compaction: no goroutine to wait for.
		if err := read(ctx, 0); err != nil {
			return nil, err
		}
		return map[string]*snapshot.Segment{refs[0].ID: decoded[0]}, nil
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var (
		wg       sync.WaitGroup
		mu       sync.Mutex
		firstErr error
	)
	fail := func(err error) {
		mu.Lock()
		defer mu.Unlock()
		if firstErr == nil {
			firstErr = err
			cancel()
		}
	}
	next := make(chan int)
	for range min(segmentReads, len(refs)) {
		wg.Go(func() {
			for i := range next {
				if err := read(ctx, i); err != nil {
					fail(err)
				}
			}
		})
	}
feed:
	for i := range refs {
		select {
		case next <- i:
		case <-ctx.Done():
			break feed
		}
	}
	close(next)
	wg.Wait()
	if firstErr != nil {
		return nil, firstErr
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	segs := make(map[string]*snapshot.Segment, len(refs))
	for i, ref := range refs {
		segs[ref.ID] = decoded[i]
	}
	return segs, nil
}

// unreadable counts a room whose snapshot cannot be read and logs it once:
// the room refuses events with 503 until an operator looks, rather than
// starting blank.
func (m *Manager) unreadable(key Key, err error) {
	m.met.snapshotCorrupt.Inc()
	m.mu.Lock()
	first := !m.reported[key]
	if first && len(m.reported) < 10000 {
		m.reported[key] = true
	}
	m.mu.Unlock()
	if first {
		m.log.Error("room snapshot unreadable; the room refuses events until it is repaired", "room", key.String(), "err", err)
	}
}

// writeSnapshot writes the room's next snapshot now, on the worker: a
// segment with the chunks that changed (or all of them, when compacting),
// then the manifest, each with a conditional write (writeCommit). No
// group commit may be in flight (settle).
func (r *Room) writeSnapshot(ctx context.Context) error {
	job, err := r.capture()
	if err != nil || job == nil {
		return err
	}
	if err := r.m.writeCommit(ctx, r.key, job); err != nil {
		r.changed = true // still to be written
		return err
	}
	r.landed(job)
	return nil
}

// sameState reports whether the snapshot d would restore exactly what prev
// does: no page differs, and neither the globals nor the host-side state.
func sameState(prev *snapshot.Manifest, d *snapshot.Delta) bool {
	next := d.Manifest
	return prev != nil && d.Changed == 0 && prev.MemorySize() == next.MemorySize() && prev.ModuleHash == next.ModuleHash &&
		slices.Equal(prev.Globals, next.Globals) && bytes.Equal(prev.RoomState, next.RoomState)
}

// collector deletes segments no manifest references, in the background:
// a batch at a time, several deletes of a batch at once (on the directory
// store they share their flushes), and with a pause between batches
// while little is pending, so that a burst of hibernations does not turn
// into a burst of deletes in front of the next wakes. Rooms durable per
// event make about one segment of garbage a commit, hundreds or thousands
// a second on a busy node: past a backlog of backlogBatches batches the
// collector deletes without pausing, or garbage would pile up faster
// than it goes.
type collector struct {
	bucket store.Bucket
	m      *Manager
	batch  int
	pause  time.Duration

	mu      sync.Mutex
	pending []string
	wake    chan struct{}
	// passing is held by a pass for its whole run, its deletes included,
	// so that DrainGarbage returns only once a pass under way is done.
	passing sync.Mutex
}

// maxPending bounds the collector's queue; what overflows is left to the
// orphan sweep.
const maxPending = 100000

func newCollector(m *Manager, bucket store.Bucket) *collector {
	return &collector{bucket: bucket, m: m, batch: 100, pause: 100 * time.Millisecond, wake: make(chan struct{}, 1)}
}

// Tuning of the collector: deletes of a batch run this many at once, and
// past backlogBatches batches pending it does not pause.
const (
	collectorDeleters = 8
	backlogBatches    = 10
)

func (c *collector) add(key string) {
	c.mu.Lock()
	if len(c.pending) < maxPending {
		c.pending = append(c.pending, key)
	}
	c.mu.Unlock()
	select {
	case c.wake <- struct{}{}:
	default:
	}
}

func (c *collector) size() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.pending)
}

// run deletes pending keys, at most batch per pause, until stop closes.
func (c *collector) run(stop <-chan struct{}) {
	for {
		select {
		case <-stop:
			return
		case <-c.wake:
		}
		for left := c.pass(c.m.ctx); left > 0; left = c.pass(c.m.ctx) {
			if left >= backlogBatches*c.batch {
				select {
				case <-stop:
					return
				default:
				}
				continue
			}
			if !c.rest(stop) {
				return
			}
		}
	}
}

// rest waits out the pause between two batches, or less if the backlog
// passes backlogBatches batches meanwhile. It reports false if stop
// closed.
func (c *collector) rest(stop <-chan struct{}) bool {
	t := c.m.clock.NewTimer(c.pause)
	defer t.Stop()
	for {
		select {
		case <-stop:
			return false
		case <-t.C():
			return true
		case <-c.wake:
			if c.size() >= backlogBatches*c.batch {
				return true
			}
		}
	}
}

// pass deletes up to a batch of pending keys and returns how many remain.
func (c *collector) pass(ctx context.Context) int {
	c.passing.Lock()
	defer c.passing.Unlock()
	c.mu.Lock()
	n := min(c.batch, len(c.pending))
	keys := slices.Clone(c.pending[:n])
	c.pending = c.pending[n:]
	c.mu.Unlock()
	next := make(chan string)
	var wg sync.WaitGroup
	for range min(collectorDeleters, len(keys)) {
		wg.Go(func() {
			for k := range next {
				if err := c.bucket.Delete(ctx, k, ""); err != nil {
					c.m.met.gcErrors.Inc()
					c.m.log.Warn("deleting an unreferenced segment failed; the orphan sweep will retry", "key", k, "err", err)
					continue
				}
				c.m.met.segmentsDeleted.Inc()
			}
		})
	}
	for _, k := range keys {
		next <- k
	}
	close(next)
	wg.Wait()
	return c.size()
}

// Drain deletes every pending unreferenced segment now (tests, shutdown).
func (m *Manager) DrainGarbage(ctx context.Context) {
	for m.gc.pass(ctx) > 0 {
	}
}

// SweepOrphans deletes segments that no manifest references and that no
// hold can still be about to reference, at most limit of them: segments a
// crash left between their write and their manifest's, and deletes the
// collector lost. A segment is an orphan if its room's manifest does not
// reference it and it was written by an older hold than both the
// manifest's (every hold writes its segments before its manifests, and
// holds' generations only grow) and the room's fence (Placement.Fence:
// the oldest hold that may still write, from the stored ownership record
// in a cluster), so the decision rests on the store, not on which rooms
// this node happens to run. It returns how many it deleted.
func (m *Manager) SweepOrphans(ctx context.Context, limit int) (int, error) {
	keys, err := m.bucket.List(ctx, "rooms/")
	if err != nil {
		return 0, err
	}
	segs := map[Key][]string{}
	nums := map[Key][]uint64{} // numbered manifests (manifests.go)
	for _, k := range keys {
		key, rest, ok := parseRoomKey(k)
		if !ok {
			continue
		}
		if id, isSeg := strings.CutPrefix(rest, "seg/"); isSeg {
			segs[key] = append(segs[key], id)
		} else if n, isMan := m.layout.manifest(rest); isMan && n > 0 {
			nums[key] = append(nums[key], n)
		}
	}
	for key := range nums {
		if _, ok := segs[key]; !ok {
			segs[key] = nil
		}
	}
	deleted := 0
	for key, ids := range segs {
		if deleted >= limit {
			break
		}
		// Below bound no hold can still write: the owner fence of the
		// room's record (its oldest live hold), and its manifest's
		// generation, since every hold writes its segments before its
		// manifests.
		bound, err := m.place.Fence(ctx, key)
		if err != nil {
			m.log.Warn("orphan sweep: the room's fence is unknown; keeping its segments", "room", key.String(), "err", err)
			continue
		}
		body, _, err := m.layout.latest(ctx, m.bucket, key)
		referenced := map[string]bool{}
		switch {
		case errors.Is(err, store.ErrNotFound):
		case err != nil:
			return deleted, err
		default:
			man, err := snapshot.DecodeManifest(body)
			if err != nil {
				continue // an unreadable manifest proves nothing; keep its segments
			}
			bound = min(bound, man.Generation)
			for _, id := range man.SegmentIDs() {
				referenced[id] = true
			}
		}
		for _, id := range ids {
			if deleted >= limit {
				break
			}
			g, ok := snapshot.SegmentGeneration(id)
			if !ok || referenced[id] || g >= bound {
				continue
			}
			if err := m.bucket.Delete(ctx, key.segmentKey(id), ""); err != nil && !errors.Is(err, store.ErrNotFound) {
				return deleted, err
			}
			deleted++
			m.met.segmentsDeleted.Inc()
			m.met.orphansDeleted.Inc()
		}
		n, err := m.sweepManifests(ctx, key, nums[key], bound, limit-deleted)
		deleted += n
		if err != nil {
			return deleted, err
		}
	}
	return deleted, nil
}

// sweepLoop runs the orphan sweep a while after start, then periodically.
func (m *Manager) sweepLoop() {
	if limits.IsOff(m.cfg.SweepInterval) {
		return
	}
	delay := time.Minute
	for {
		if !m.sleep(delay, m.stop) {
			return
		}
		if n, err := m.SweepOrphans(m.ctx, m.cfg.SweepLimit); err != nil {
			m.log.Warn("orphan sweep failed", "err", err)
		} else if n > 0 {
			m.log.Info("orphan sweep deleted unreferenced segments", "segments", n)
		}
		delay = m.cfg.SweepInterval
	}
}

// deleteStored deletes the room's stored state: its manifest first, so
// that no reader ever finds a manifest whose segments are gone, then its
// segments (those it cannot delete now go to the collector, and the
// orphan sweep finds any the collector loses).
func (r *Room) deleteStored(ctx context.Context) error {
	m := r.m
	if err := m.layout.remove(ctx, m.bucket, r.key); err != nil {
		return fmt.Errorf("deleting its manifest: %w", err)
	}
	r.man, r.manBody, r.etag, r.pages, r.image = nil, nil, "", nil, 0
	m.alarmGone(r.key, r.storedAlarm)
	if r.alarm != r.storedAlarm {
		m.alarmGone(r.key, r.alarm) // set by an event whose commit has not landed
	}
	r.alarm, r.storedAlarm = alarmState{}, alarmState{}
	m.dropKept(r, warmChanged)
	m.forgetImage(r.key)
	if r.everStored.Swap(false) {
		m.snapshotDeleted()
	}
	m.snaps.invalidate(r.key)
	keys, err := m.bucket.List(ctx, r.key.prefix())
	if err != nil {
		m.log.Warn("listing a deleted room's segments failed; the orphan sweep will delete them", "room", r.key.String(), "err", err)
		return nil
	}
	for _, k := range keys {
		// Only the snapshot's own keys: the prefix also holds keys of
		// others, such as the cluster's ownership record, whose loss
		// would let another node take the room while this one holds it.
		if _, rest, ok := parseRoomKey(k); !ok || !strings.HasPrefix(rest, "seg/") {
			continue
		}
		if err := m.bucket.Delete(ctx, k, ""); err != nil {
			m.gc.add(k)
			continue
		}
		m.met.segmentsDeleted.Inc()
	}
	m.met.deletions.Inc()
	return nil
}

// deleteForGuest ends an event whose guest asked for its state to be
// deleted (abi.ImportStateDelete): the stored state goes before any of the
// event's output, as a durable write would, then the instance is dropped
// unwritten. The room's sockets stay: the next event starts the room fresh
// and tells it of each (reconcile), as after a rollback. If the delete
// fails the event is undone like a crash.
func (r *Room) deleteForGuest(first func()) error {
	r.inst.CheckpointRequested() // nothing to make durable: the state goes
	// A write in flight lands (or fails, undoing this event too) before
	// the delete, which must not be overtaken by it.
	if r.commit != nil {
		r.waitCommit()
		if r.inst == nil {
			r.clearEffects()
			return ErrNotDurable
		}
	}
	if err := r.deleteStored(r.callCtx()); err != nil {
		r.clearEffects()
		err = fmt.Errorf("%w: %w", ErrNotDurable, err)
		r.crashed(err)
		return err
	}
	if first != nil {
		first()
	}
	r.applyEffects()
	// What earlier events held goes now: their state is superseded by
	// the delete, which is durable.
	r.wantCommit, r.pendingEvents = false, 0
	if o := r.takeOutbox(); !o.empty() {
		r.release(&o)
	}
	r.known, r.joins, r.gone, r.skipClose = nil, nil, nil, nil
	clear(r.goneJoins)
	r.dropInstance(life.EndDeleted)
	return nil
}

// delete deletes the room for an operator (Manager.Delete): the instance
// is dropped unwritten, every socket is closed, the stored state goes, and
// a pin is lifted. Its next event starts it fresh.
func (r *Room) delete(ctx context.Context) error {
	if ctx == nil {
		ctx = r.workCtx()
	}
	r.dropInstance(life.EndDeleted)
	for _, s := range r.sockets {
		r.dropSocket(s, abi.CloseNormal, "room deleted")
	}
	r.known, r.joins, r.gone, r.skipClose = nil, nil, nil, nil
	clear(r.goneJoins)
	clear(r.joinPayloads)
	clear(r.presence)
	r.pinned.Store(false)
	r.m.upgrades.forget(r.key)
	return r.deleteStored(ctx)
}
