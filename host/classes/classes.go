// Package classes keeps the node's actor classes: uploaded modules stored by
// content hash in the bucket, names pointing at their current version, and
// the compiled form of each version in use.
//
// Bucket layout:
//
//	classes/<name>       JSON Record: the version a name points at, and
//	                     every version of the name still kept
//	modules/<hex>.wasm   the module bytes, immutable, by content hash
//
// A room's snapshot names the module hash it was taken with: its memory
// only makes sense to that binary. A room moves to a newer version only by
// a handoff (the old version encodes its state, the new one starts from
// it; see host/rooms), at the time the upload's upgrade policy says.
//
// The record is written with conditional writes (If-Match on the etag it
// was read at), so two uploads of one class through two nodes at once both
// land in its version list.
package classes

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/wasmkeep/wasmkeep/host/engine"
	"github.com/wasmkeep/wasmkeep/host/store"
)

// Errors.
var (
	// ErrUnknownClass: no class has that name (or no module that hash).
	ErrUnknownClass = errors.New("classes: unknown class")
	// ErrBadName: a class name outside NamePattern.
	ErrBadName = errors.New("classes: invalid class name")
	// ErrTooLarge: a module over the configured size limit.
	ErrTooLarge = errors.New("classes: module too large")
)

// NamePattern is what a class name must match: it appears in URLs and keys.
var NamePattern = regexp.MustCompile(`^[a-z0-9][a-z0-9_-]{0,62}$`)

// Record is what a class name points at: its current version (the fields
// of the latest upload or rollback), and the versions kept.
type Record struct {
	Name     string    `json:"name"`
	Hash     string    `json:"hash"`
	ABI      int       `json:"abi"`
	Size     int       `json:"size"`
	Uploaded time.Time `json:"uploaded"`
	// Upgrade is the current version's policy for rooms on other versions
	// (UpgradeLazy when empty); ResetWithoutHandoff resets, rather than
	// leaves, the rooms whose version offers no handoff.
	Upgrade             string `json:"upgrade,omitempty"`
	ResetWithoutHandoff bool   `json:"reset_without_handoff,omitempty"`
	// Versions are every version kept, the current one among them, the
	// most recently made current first.
	Versions []Version `json:"versions,omitempty"`
	// Durability is DurabilityEvent when every event that changes a room's
	// memory makes its state durable before the event's output goes out
	// (what an upload that names none gets for a new class); otherwise
	// (DurabilityHibernate, or "" in a record written before per-event
	// durability was the default) state is made durable at hibernation,
	// clean stop and when the guest calls checkpoint().
	Durability string `json:"durability,omitempty"`
}

// Version is one upload of a class.
type Version struct {
	Hash     string    `json:"hash"`
	ABI      int       `json:"abi"`
	Size     int       `json:"size"`
	Uploaded time.Time `json:"uploaded"`
	// Offers: a blank room of the version hands over a state, so its
	// rooms hand theirs to a newer version; Takes: it starts from an older
	// version's state (engine.Class.Handoff says how this is found out).
	Offers bool `json:"offers_handoff"`
	Takes  bool `json:"takes_handoff"`
	// Retired is when another version was made current instead (nil for
	// the current version); Collect counts its grace from then.
	Retired *time.Time `json:"retired,omitempty"`
}

// Upgrade policies of an upload, for the rooms on other versions.
const (
	// UpgradeLazy (the default): a room moves at its next wake.
	UpgradeLazy = "lazy"
	// UpgradeNow: every room is moved at once, in the background.
	UpgradeNow = "now"
	// UpgradeNever: rooms stay on their versions; new rooms start on this.
	UpgradeNever = "never"
)

// Policy returns the record's upgrade policy, UpgradeLazy for none.
func (r Record) Policy() string {
	if r.Upgrade == "" {
		return UpgradeLazy
	}
	return r.Upgrade
}

// Version returns the kept version with hash, if any.
func (r Record) Version(hash string) (Version, bool) {
	for _, v := range r.Versions {
		if v.Hash == hash {
			return v, true
		}
	}
	return Version{}, false
}

// Durability options of a class.
const (
	// DurabilityHibernate: durable at hibernation, at a clean stop, and
	// on checkpoint(); a crash loses what changed since. For rooms whose
	// state is worth nothing after a crash (cursors, presence).
	DurabilityHibernate = "hibernate"
	// DurabilityEvent (the default of a new class): an event's output
	// leaves only once its state is durable (host/rooms/commit.go).
	DurabilityEvent = "event"
)

// Options are the choices made at upload.
type Options struct {
	// Durability is DurabilityHibernate or DurabilityEvent; "" keeps the
	// class's (DurabilityEvent for a new class). An upload of a new
	// version changes what its class's rooms risk only when it says so.
	Durability string
	// Upgrade is UpgradeLazy ("" too), UpgradeNow or UpgradeNever.
	Upgrade string
	// ResetWithoutHandoff resets the rooms whose version offers no
	// handoff instead of leaving them on it.
	ResetWithoutHandoff bool
	// Front, if not empty, makes the class a front serving HTTP under
	// these path prefixes (fronts.go), in place of those it held. An
	// upload without it keeps the prefixes the class holds, if any.
	Front []string
}

// ErrBadOption: an upload option outside its documented values.
var ErrBadOption = errors.New("classes: invalid class option")

// check validates o and returns it in its stored form.
func (o Options) check() (Options, error) {
	switch o.Durability {
	case "", DurabilityHibernate, DurabilityEvent:
	default:
		return o, fmt.Errorf("%w: durability %q (use %q or %q)", ErrBadOption, o.Durability, DurabilityHibernate, DurabilityEvent)
	}
	switch o.Upgrade {
	case "", UpgradeLazy:
		o.Upgrade = ""
	case UpgradeNow, UpgradeNever:
	default:
		return o, fmt.Errorf("%w: upgrade %q (use %q, %q or %q)", ErrBadOption, o.Upgrade, UpgradeLazy, UpgradeNow, UpgradeNever)
	}
	if o.ResetWithoutHandoff && o.Upgrade == UpgradeNever {
		return o, fmt.Errorf("%w: reset without handoff asks for an upgrade, and the policy is %q", ErrBadOption, UpgradeNever)
	}
	if len(o.Front) > 0 {
		front, err := checkPrefixes(o.Front)
		if err != nil {
			return o, err
		}
		o.Front = front
	}
	return o, nil
}

// Registry resolves class names and module hashes to compiled classes.
type Registry struct {
	bucket   store.Bucket
	engine   *engine.Engine
	maxBytes int

	mu       sync.Mutex
	names    map[string]*cachedRecord // cache of classes/<name>; entries are replaced, never changed
	compiled map[string]*compiling    // by hash
	asks     uint64                   // counts compile calls, for compiling.asked
	fronts   *FrontTable              // the fronts' prefixes read last (fronts.go)
	// frontsRead is held by the request that reads the fronts' prefixes
	// again.
	frontsRead sync.Mutex
}

// cachedRecord is a class record as read from the bucket, and when (on the
// engine's clock) it was last read.
type cachedRecord struct {
	rec  Record
	read int64
}

// RecordTTL is how long a class record read from the bucket is used
// before it is read again. Another node sharing the bucket may upload or
// remove the class: within RecordTTL every node serves the new version, or
// stops serving a removed class, at the price of one small read per class
// and node every RecordTTL while the class is in use.
const RecordTTL = 2 * time.Second

type compiling struct {
	done  chan struct{}
	class *engine.Class
	err   error
	// asked orders the versions by their latest use (Registry.asks), for
	// retireIdle; under the registry's lock.
	asked uint64
}

// DefaultMaxModuleBytes leaves room for large guests and still bounds what
// one upload holds in memory.
const DefaultMaxModuleBytes = 64 << 20

// New returns a registry over bucket. maxBytes caps uploads (zero:
// DefaultMaxModuleBytes).
func New(bucket store.Bucket, eng *engine.Engine, maxBytes int) *Registry {
	if maxBytes <= 0 {
		maxBytes = DefaultMaxModuleBytes
	}
	return &Registry{
		bucket:   bucket,
		engine:   eng,
		maxBytes: maxBytes,
		names:    map[string]*cachedRecord{},
		compiled: map[string]*compiling{},
	}
}

// MaxBytes is the upload size limit.
func (r *Registry) MaxBytes() int { return r.maxBytes }

func nameKey(name string) string { return "classes/" + name }

func moduleKey(hash string) string {
	return "modules/" + strings.TrimPrefix(hash, "sha256:") + ".wasm"
}

// Put validates and compiles wasm, stores it, and makes it the current
// version of name, with the upgrade policy opts gives.
func (r *Registry) Put(ctx context.Context, name string, wasm []byte, opts Options) (Record, error) {
	opts, err := opts.check()
	if err != nil {
		return Record{}, err
	}
	if !NamePattern.MatchString(name) {
		return Record{}, fmt.Errorf("%w %q: use 1–63 of a-z, 0-9, '_' and '-', starting with a letter or digit", ErrBadName, name)
	}
	if len(wasm) > r.maxBytes {
		return Record{}, fmt.Errorf("%w: %d bytes, the limit is %d", ErrTooLarge, len(wasm), r.maxBytes)
	}
	hash := engine.Hash(wasm)
	class, err := r.compile(ctx, hash, func() ([]byte, error) { return wasm, nil })
	if err != nil {
		return Record{}, err
	}
	if _, err := r.bucket.Put(ctx, moduleKey(hash), wasm, store.Cond{}); err != nil {
		return Record{}, fmt.Errorf("storing module: %w", err)
	}
	offers, takes, err := class.Handoff(ctx)
	if err != nil {
		return Record{}, fmt.Errorf("%w: %v", engine.ErrInvalidModule, err)
	}
	v := Version{Hash: hash, ABI: class.ABI, Size: len(wasm), Uploaded: time.Now().UTC().Truncate(time.Second),
		Offers: offers, Takes: takes}
	if len(opts.Front) > 0 {
		// The prefixes first: an upload refused them leaves the class
		// as it was.
		if err := r.claim(ctx, name, opts.Front); err != nil {
			return Record{}, err
		}
	}
	return r.update(ctx, name, true, func(rec *Record) error {
		rec.makeCurrent(v, opts, r.wall())
		return nil
	})
}

// wall is the registry's wall clock: the engine's, which is the node's.
func (r *Registry) wall() time.Time {
	return r.engine.Config().Clock.Wall().UTC().Truncate(time.Second)
}

// makeCurrent points the record at v with opts, keeping v once in the
// version list, first; the version it replaces is retired as of now.
func (rec *Record) makeCurrent(v Version, opts Options, now time.Time) {
	prev := rec.Hash
	rec.Hash, rec.ABI, rec.Size, rec.Uploaded = v.Hash, v.ABI, v.Size, v.Uploaded
	rec.Upgrade, rec.ResetWithoutHandoff = opts.Upgrade, opts.ResetWithoutHandoff
	switch {
	case opts.Durability != "":
		rec.Durability = opts.Durability
	case prev == "":
		// A new class. A record that has a version and no choice keeps
		// "", which reads as hibernate: what it was uploaded under.
		rec.Durability = DurabilityEvent
	}
	v.Retired = nil
	vs := []Version{v}
	for _, o := range rec.Versions {
		if o.Hash == v.Hash {
			continue
		}
		if o.Hash == prev || o.Retired == nil {
			t := now
			o.Retired = &t
		}
		vs = append(vs, o)
	}
	rec.Versions = vs
}

// DefaultVersionGrace is how long a version that is no longer current is
// kept at least, even when no stored snapshot names it: a room that runs
// it on some node and has not hibernated since has no snapshot to show
// for it yet, and one that hibernates will write one that names it. A day
// is far past any idle timeout; a room busy for longer without a
// snapshot is the one risk (see docs/upgrades.md).
const DefaultVersionGrace = 24 * time.Hour

// Collect forgets the versions of name that are not current, were retired
// at least grace ago, and that inUse says no room runs (its snapshot or
// its instance), and deletes their module bytes unless another class
// keeps the same module. It returns the hashes it collected.
func (r *Registry) Collect(ctx context.Context, name string, inUse func(hash string) bool, grace time.Duration) ([]string, error) {
	now := r.wall()
	var gone []string
	_, err := r.update(ctx, name, false, func(rec *Record) error {
		gone = gone[:0]
		kept := rec.Versions[:0:0]
		for _, v := range rec.Versions {
			if v.Hash != rec.Hash && v.Retired != nil && now.Sub(*v.Retired) >= grace && !inUse(v.Hash) {
				gone = append(gone, v.Hash)
				continue
			}
			kept = append(kept, v)
		}
		if len(gone) == 0 {
			return errUnchanged
		}
		rec.Versions = kept
		return nil
	})
	if errors.Is(err, errUnchanged) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	others, err := r.List(ctx)
	if err != nil {
		return gone, err
	}
	for _, h := range gone {
		shared := false
		for _, o := range others {
			if _, ok := o.Version(h); ok || o.Hash == h {
				shared = true
			}
		}
		if !shared {
			if err := r.bucket.Delete(ctx, moduleKey(h), ""); err != nil && !errors.Is(err, store.ErrNotFound) {
				return gone, fmt.Errorf("deleting module %s: %w", h, err)
			}
		}
	}
	r.retireIdle()
	return gone, nil
}

// errUnchanged ends an update without a write: the record already
// says what the caller wants.
var errUnchanged = errors.New("classes: nothing to change")

// recordWrites bounds the attempts of a conditional update of a class
// record that other writers keep overtaking.
const recordWrites = 8

// update reads name's record, applies change and writes it back if the
// record was not changed meanwhile, retrying on a lost race. create allows
// a name with no record yet (change gets a record with only the name).
func (r *Registry) update(ctx context.Context, name string, create bool, change func(*Record) error) (Record, error) {
	var rec Record
	_, err := r.rewrite(ctx, nameKey(name), "class record", func(body []byte, exists bool) ([]byte, error) {
		rec = Record{Name: name}
		switch {
		case !exists && !create:
			return nil, fmt.Errorf("%w %q", ErrUnknownClass, name)
		case exists:
			if err := json.Unmarshal(body, &rec); err != nil {
				return nil, fmt.Errorf("class record %q: %w", name, err)
			}
			rec.upgradeFormat()
		}
		if err := change(&rec); err != nil {
			return nil, err
		}
		return json.Marshal(rec)
	})
	if err != nil {
		return Record{}, err
	}
	r.remember(rec)
	return rec, nil
}

// rewrite reads key, makes its new body with change (given the body read,
// and whether there was one) and writes it if key was not changed
// meanwhile, retrying on a lost race: the class records and the fronts'
// prefixes (fronts.go) are written so, and two writers through two nodes
// at once both land. It returns what it wrote. what names the object in
// errors. An error of change (errUnchanged: nothing to write) ends it.
func (r *Registry) rewrite(ctx context.Context, key, what string, change func(body []byte, exists bool) ([]byte, error)) ([]byte, error) {
	for range recordWrites {
		body, etag, err := r.bucket.Get(ctx, key)
		exists := err == nil
		if err != nil && !errors.Is(err, store.ErrNotFound) {
			return nil, fmt.Errorf("reading %s: %w", what, err)
		}
		out, err := change(body, exists)
		if err != nil {
			return nil, err
		}
		cond := store.IfMatch(etag)
		if !exists {
			cond = store.IfNoneMatch()
		}
		_, err = r.bucket.Put(ctx, key, out, cond)
		if errors.Is(err, store.ErrPrecondition) || errors.Is(err, store.ErrConflict) {
			continue // another writer landed first: apply ours to it
		}
		if errors.Is(err, store.ErrUnknownOutcome) {
			// The write may have landed; if the object now says what ours
			// said, it did (or an identical one did).
			if now, _, gerr := r.bucket.Get(ctx, key); gerr == nil && bytes.Equal(now, out) {
				err = nil
			} else {
				continue
			}
		}
		if err != nil {
			return nil, fmt.Errorf("storing %s: %w", what, err)
		}
		return out, nil
	}
	return nil, fmt.Errorf("storing %s %q: %w (%d attempts overtaken by other writers)", what, key, store.ErrConflict, recordWrites)
}

// upgradeFormat fills the version list of a record written before
// versions were kept: its one version is the current one.
func (rec *Record) upgradeFormat() {
	if len(rec.Versions) == 0 && rec.Hash != "" {
		rec.Versions = []Version{{Hash: rec.Hash, ABI: rec.ABI, Size: rec.Size, Uploaded: rec.Uploaded}}
	}
}

// remember caches rec as just read, and retires compiled versions a
// change of the current one left idle.
func (r *Registry) remember(rec Record) {
	r.mu.Lock()
	prev, had := r.names[rec.Name]
	r.names[rec.Name] = &cachedRecord{rec, r.now()}
	r.mu.Unlock()
	if had && prev.rec.Hash != rec.Hash {
		r.retireIdle()
	}
}

// ErrUnknownVersion: the class keeps no version with that hash.
var ErrUnknownVersion = errors.New("classes: no such version of the class")

// Rollback makes an older kept version of name current again: hash, or
// when empty the version made current before the current one. opts gives
// the policy for the rooms on other versions, as for an upload: rooms that
// moved to the version rolled back from move back by a handoff the newer
// code gives and the older code takes; where it cannot, they stay.
func (r *Registry) Rollback(ctx context.Context, name, hash string, opts Options) (Record, error) {
	if len(opts.Front) > 0 {
		return Record{}, fmt.Errorf("%w: a rollback keeps the front prefixes the class holds; an upload changes them", ErrBadOption)
	}
	opts, err := opts.check()
	if err != nil {
		return Record{}, err
	}
	return r.update(ctx, name, false, func(rec *Record) error {
		target, ok := Version{}, false
		switch {
		case hash != "":
			target, ok = rec.Version(hash)
		case len(rec.Versions) > 1:
			target, ok = rec.Versions[1], true
		}
		if !ok {
			if hash == "" {
				return fmt.Errorf("%w: %s has no version before the current one", ErrUnknownVersion, name)
			}
			return fmt.Errorf("%w: %s has no kept version %s", ErrUnknownVersion, name, hash)
		}
		rec.makeCurrent(target, opts, r.wall()) // its durability kept
		return nil
	})
}

// KeptIdleVersions is how many module versions that no class name points
// at and no room runs stay compiled, the most recently used first: rooms
// left on an older version (their snapshots name it) wake without
// compiling it again, while a class uploaded a hundred times costs the
// memory of a few versions, not of a hundred.
const KeptIdleVersions = 2

// retireIdle closes the compiled form of the idle module versions past
// KeptIdleVersions: their machine code, their pool of blank instances and
// the goroutine that fills it. A room that wakes on one later compiles it
// again (from the compilation cache, when the node has one).
func (r *Registry) retireIdle() {
	r.mu.Lock()
	defer r.mu.Unlock()
	current := map[string]bool{}
	for _, c := range r.names {
		current[c.rec.Hash] = true
	}
	var idle []string
	for hash, c := range r.compiled {
		select {
		case <-c.done:
		default:
			continue // still compiling
		}
		if c.class != nil && !current[hash] && c.class.InUse() == 0 {
			idle = append(idle, hash)
		}
	}
	if len(idle) <= KeptIdleVersions {
		return
	}
	sort.Slice(idle, func(i, j int) bool { return r.compiled[idle[i]].asked > r.compiled[idle[j]].asked })
	for _, hash := range idle[KeptIdleVersions:] {
		if r.compiled[hash].class.Retire() {
			delete(r.compiled, hash)
		}
	}
}

// now is the registry's clock: the engine's, which is the node's.
func (r *Registry) now() int64 { return r.engine.Config().Clock.Now() }

// Get returns the record a name points at. A record read from the bucket
// within RecordTTL is used as it is; an older one is read again, so that a
// class uploaded or removed through another node sharing the bucket is
// seen within RecordTTL. While the bucket cannot be read, the record last
// read goes on being used.
func (r *Registry) Get(ctx context.Context, name string) (Record, error) {
	now := r.now()
	r.mu.Lock()
	cached, ok := r.names[name]
	r.mu.Unlock()
	if ok && now-cached.read < int64(RecordTTL) {
		return cached.rec, nil
	}
	if !NamePattern.MatchString(name) {
		return Record{}, fmt.Errorf("%w %q", ErrUnknownClass, name)
	}
	body, _, err := r.bucket.Get(ctx, nameKey(name))
	if errors.Is(err, store.ErrNotFound) {
		r.mu.Lock()
		removed := ok && r.names[name] == cached
		if removed {
			delete(r.names, name)
		}
		r.mu.Unlock()
		if removed {
			r.retireIdle()
		}
		return Record{}, fmt.Errorf("%w %q", ErrUnknownClass, name)
	}
	var rec Record
	if err == nil {
		if err = json.Unmarshal(body, &rec); err != nil {
			err = fmt.Errorf("class record %q: %w", name, err)
		}
		rec.upgradeFormat()
	}
	if err != nil {
		if ok && ctx.Err() == nil {
			// Read again after another RecordTTL, not at every call.
			r.mu.Lock()
			if r.names[name] == cached {
				r.names[name] = &cachedRecord{cached.rec, now}
			}
			r.mu.Unlock()
			return cached.rec, nil
		}
		return Record{}, err
	}
	r.remember(rec)
	return rec, nil
}

// Current returns the compiled current version of a class.
func (r *Registry) Current(ctx context.Context, name string) (*engine.Class, error) {
	rec, err := r.Get(ctx, name)
	if err != nil {
		return nil, err
	}
	return r.ByHash(ctx, rec.Hash)
}

// UpgradeTarget is what name's current version asks of the rooms on other
// versions: its hash, its policy (UpgradeLazy, UpgradeNow, UpgradeNever)
// and whether rooms without a handoff are reset.
func (r *Registry) UpgradeTarget(ctx context.Context, name string) (current, policy string, reset bool, err error) {
	rec, err := r.Get(ctx, name)
	if err != nil {
		return "", "", false, err
	}
	return rec.Hash, rec.Policy(), rec.ResetWithoutHandoff, nil
}

// Durable reports whether a class asks for durability after every event.
func (r *Registry) Durable(ctx context.Context, name string) (bool, error) {
	rec, err := r.Get(ctx, name)
	return rec.Durability == DurabilityEvent, err
}

// ByHash returns a compiled module version, loading it from the bucket the
// first time.
func (r *Registry) ByHash(ctx context.Context, hash string) (*engine.Class, error) {
	return r.compile(ctx, hash, func() ([]byte, error) {
		wasm, _, err := r.bucket.Get(ctx, moduleKey(hash))
		if errors.Is(err, store.ErrNotFound) {
			return nil, fmt.Errorf("%w: no module %s in the store", ErrUnknownClass, hash)
		}
		return wasm, err
	})
}

// compile compiles a version once, however many callers ask at once.
func (r *Registry) compile(ctx context.Context, hash string, load func() ([]byte, error)) (*engine.Class, error) {
	r.mu.Lock()
	c, ok := r.compiled[hash]
	if !ok {
		c = &compiling{done: make(chan struct{})}
		r.compiled[hash] = c
	}
	r.asks++
	c.asked = r.asks
	r.mu.Unlock()
	if ok {
		<-c.done
		return c.class, c.err
	}
	wasm, err := load()
	if err == nil && engine.Hash(wasm) != hash {
		err = fmt.Errorf("module %s in the store does not match its hash", hash)
	}
	if err == nil {
		c.class, err = r.engine.Compile(ctx, wasm)
	}
	if err == nil {
		c.class.SetIdleHook(r.retireIdle)
	}
	c.err = err
	close(c.done)
	if err != nil {
		// Failures are not cached: the next caller tries again.
		r.mu.Lock()
		delete(r.compiled, hash)
		r.mu.Unlock()
	}
	return c.class, c.err
}

// Module returns the bytes of a stored module version.
func (r *Registry) Module(ctx context.Context, hash string) ([]byte, error) {
	wasm, _, err := r.bucket.Get(ctx, moduleKey(hash))
	if errors.Is(err, store.ErrNotFound) {
		return nil, fmt.Errorf("%w: no module %s in the store", ErrUnknownClass, hash)
	}
	return wasm, err
}

// StoreModule validates and stores a module version (an imported room's),
// and creates the class name pointing at it if the name is new here. An
// existing name is left alone: the room runs its own version regardless.
func (r *Registry) StoreModule(ctx context.Context, name string, wasm []byte) error {
	if !NamePattern.MatchString(name) {
		return fmt.Errorf("%w %q", ErrBadName, name)
	}
	hash := engine.Hash(wasm)
	if _, err := r.compile(ctx, hash, func() ([]byte, error) { return wasm, nil }); err != nil {
		return err
	}
	if _, err := r.bucket.Put(ctx, moduleKey(hash), wasm, store.Cond{}); err != nil {
		return fmt.Errorf("storing module: %w", err)
	}
	if _, err := r.Get(ctx, name); errors.Is(err, ErrUnknownClass) {
		_, err = r.Put(ctx, name, wasm, Options{})
		return err
	} else if err != nil {
		return err
	}
	// Listed among the class's versions (not current): the imported room
	// runs it, and the versions listing should say so.
	class, err := r.ByHash(ctx, hash)
	if err != nil {
		return err
	}
	offers, takes, err := class.Handoff(ctx)
	if err != nil {
		return err
	}
	now := r.wall()
	_, err = r.update(ctx, name, false, func(rec *Record) error {
		if _, ok := rec.Version(hash); ok {
			return errUnchanged // nothing to write
		}
		rec.Versions = append(rec.Versions, Version{Hash: hash, ABI: class.ABI, Size: len(wasm), Uploaded: now,
			Offers: offers, Takes: takes, Retired: &now})
		return nil
	})
	if errors.Is(err, errUnchanged) {
		err = nil
	}
	return err
}

// List returns every class record, sorted by name.
func (r *Registry) List(ctx context.Context) ([]Record, error) {
	keys, err := r.bucket.List(ctx, "classes/")
	if err != nil {
		return nil, err
	}
	recs := make([]Record, 0, len(keys))
	for _, k := range keys {
		rec, err := r.Get(ctx, strings.TrimPrefix(k, "classes/"))
		if errors.Is(err, ErrUnknownClass) {
			continue // removed meanwhile
		}
		if err != nil {
			return nil, err
		}
		recs = append(recs, rec)
	}
	sort.Slice(recs, func(i, j int) bool { return recs[i].Name < recs[j].Name })
	return recs, nil
}

// Remove deletes a class name, and the prefixes it held as a front
// (first: a front stops serving before its name goes). Stored modules
// stay: snapshots of rooms may still name them, and putting the name back
// makes those rooms reachable. A name with no record that holds prefixes
// (its first upload failed after claiming them) gives them up.
func (r *Registry) Remove(ctx context.Context, name string) error {
	_, err := r.Get(ctx, name)
	if err != nil && !errors.Is(err, ErrUnknownClass) {
		return err
	}
	held, uerr := r.unclaim(ctx, name)
	switch {
	case uerr != nil:
		return uerr
	case err != nil && !held:
		return err
	case err != nil:
		return nil // only its prefixes were left
	}
	if err := r.bucket.Delete(ctx, nameKey(name), ""); err != nil && !errors.Is(err, store.ErrNotFound) {
		return err
	}
	r.mu.Lock()
	delete(r.names, name)
	r.mu.Unlock()
	r.retireIdle()
	return nil
}
