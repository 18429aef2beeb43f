package rooms

import (
	"bytes"
	"sync"

	"github.com/wasmkeep/wasmkeep/host/rooms/life"
	"github.com/wasmkeep/wasmkeep/host/snapshot"
)

// Warm rooms (issue 13 §2). A room that the idle sweep hibernates has its
// state written to the store like any other, but its instance need not go
// at once: it is kept, up to Config.WarmMemory for all such instances and
// for Config.WarmFor each, so that a room woken soon after (a chat that
// went quiet for a little longer than the idle timeout) resumes it rather
// than reading and restoring its snapshot, which for a Go room is most of
// a wake (decoding and writing back megabytes of memory).
//
// A resumed instance is exactly what a restore would give, because the
// wake still reads the room's manifest from the store, and resumes only if
// the store holds the very bytes this node wrote when the instance was
// kept (or last restored it): the instance's memory, globals and the
// host-side state (known sockets, joins) are then those of the manifest,
// and the wake goes on as after a restore (the same fence check against
// the new hold's generation, the same upgrade to a new version, the same
// reconciling of sockets). Any other writer (another node that ran the
// room meanwhile, a state delete, an import, an upgrade elsewhere) wrote
// other bytes, and the wake restores. The one thing that differs is the
// guest's clock, which a kept instance carries on by the node's monotonic
// clock where a restore advances it by the wall time since the snapshot:
// both make it continue from where it stopped, and the monotonic one is
// the more exact.
//
// Only idle hibernations keep: an eviction under --max-resident makes
// room for another wake, a stop or a hand-over means the room goes away,
// and a crash or a hold found invalid must not leave an instance behind.
// Kept instances hold no place under MaxResident, and count as hibernated
// rooms; their closes, when they expire, are instance closes like any
// other (the node's memory reclaim counts them).

// keptOverhead is what a kept instance is counted for besides its linear
// memory: wazero's structures for it and its share of the Go heap
// (docs/PERFORMANCE.md: about 0.12 MiB for a small room).
const keptOverhead = 128 << 10

// kept is a hibernated room's instance in memory, and what it restores
// the same as.
type kept struct {
	inst Instance
	man  *snapshot.Manifest
	// body is the manifest as stored: a wake resumes only if the store
	// still has these bytes.
	body  []byte
	pages []uint64
	image uint64 // Room.image
}

// Why kept instances are closed without being resumed, as metric labels.
const (
	warmExpired = "expired" // WarmFor passed
	warmMemory  = "memory"  // made room under WarmMemory
	warmChanged = "changed" // the stored state is no longer the one it holds
	warmStop    = "stop"    // the node stops
)

// warmSet is the manager's kept instances. Its lock comes after m.mu and
// every room's mu: nothing is locked while it is held.
type warmSet struct {
	mu   sync.Mutex
	keep life.Keep[*Room]
	by   map[*Room]kept
}

// keepInstance keeps r's instance after a hibernation for why, if the
// room's state in the store is its instance's (the caller wrote it, or it
// had not changed) and there is room. It reports whether it did: then the
// instance is no longer r's to close.
func (r *Room) keepInstance(why life.EndReason) bool {
	m := r.m
	if why != life.EndIdle || r.inst == nil || r.man == nil || r.manBody == nil || r.etag == "" || r.changed || m.isStopping() {
		return false
	}
	k := kept{inst: r.inst, man: r.man, body: r.manBody, pages: r.pages, image: r.image}
	cost := int64(r.inst.MemorySize()) + keptOverhead
	w := &m.warm
	w.mu.Lock()
	out := w.keep.Put(r, cost, m.clock.Now())
	if w.by == nil {
		w.by = map[*Room]kept{}
	}
	w.by[r] = k
	var closes []kept
	var rooms []*Room
	for _, o := range out {
		closes = append(closes, w.by[o])
		delete(w.by, o)
		if o != r {
			rooms = append(rooms, o)
		}
	}
	w.mu.Unlock()
	m.closeKept(closes, warmMemory)
	for _, o := range rooms {
		m.forget(o)
	}
	for _, o := range out {
		if o == r {
			return false // it did not fit, and is closed
		}
	}
	return true
}

// takeKept returns r's kept instance, which the caller then owns, if it
// has one.
func (m *Manager) takeKept(r *Room) (kept, bool) {
	w := &m.warm
	w.mu.Lock()
	defer w.mu.Unlock()
	if !w.keep.Take(r) {
		return kept{}, false
	}
	k := w.by[r]
	delete(w.by, r)
	return k, true
}

// dropKept closes r's kept instance, if it has one, for why.
func (m *Manager) dropKept(r *Room, why string) {
	if k, ok := m.takeKept(r); ok {
		m.closeKept([]kept{k}, why)
	}
}

// hasKept reports whether r has a kept instance.
func (m *Manager) hasKept(r *Room) bool {
	m.warm.mu.Lock()
	defer m.warm.mu.Unlock()
	_, ok := m.warm.by[r]
	return ok
}

// expireKept closes the kept instances that have been kept WarmFor, and
// forgets their rooms if nothing else holds them.
func (m *Manager) expireKept(now int64) {
	m.releaseKept(func(k *life.Keep[*Room]) []*Room { return k.Expire(now) }, warmExpired)
}

// dropAllKept closes every kept instance (a stop).
func (m *Manager) dropAllKept() {
	m.releaseKept(func(k *life.Keep[*Room]) []*Room { return k.All() }, warmStop)
}

func (m *Manager) releaseKept(pick func(*life.Keep[*Room]) []*Room, why string) {
	w := &m.warm
	w.mu.Lock()
	out := pick(&w.keep)
	closes := make([]kept, 0, len(out))
	for _, r := range out {
		closes = append(closes, w.by[r])
		delete(w.by, r)
	}
	w.mu.Unlock()
	m.closeKept(closes, why)
	for _, r := range out {
		m.forget(r)
	}
}

func (m *Manager) closeKept(ks []kept, why string) {
	for _, k := range ks {
		k.inst.Close()
	}
	if len(ks) > 0 {
		m.met.warmDropped[why].Add(len(ks))
	}
}

// warmCounts is how many instances are kept and what they are counted for.
func (m *Manager) warmCounts() (n int, cost int64) {
	m.warm.mu.Lock()
	defer m.warm.mu.Unlock()
	return m.warm.keep.Len(), m.warm.keep.Bytes()
}

// resumable reports whether a kept instance is the state the store holds
// now, whose manifest is body.
func (k kept) resumable(body []byte) bool { return bytes.Equal(k.body, body) }

// Warm is how many instances of idle-hibernated rooms the manager keeps
// (Config.WarmMemory, WarmFor), and what they are counted for. A node's
// memory reclaim watches it: when the last kept instance of a burst goes,
// the burst's memory can be given back.
func (m *Manager) Warm() (instances int, bytes int64) { return m.warmCounts() }
