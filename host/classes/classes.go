// Package classes keeps the node's actor classes: uploaded modules stored by
// content hash in the bucket, names pointing at their current version, and
// the compiled form of each version in use.
//
// Bucket layout:
//
//	classes/<name>       JSON Record: the version a name points at
//	modules/<hex>.wasm   the module bytes, immutable, by content hash
//
// A room's snapshot names the module hash it was taken with, so a room keeps
// running the version it started on even after its class name is pointed at
// a newer upload: its memory only makes sense to that binary.
package classes

import (
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

// Record is what a class name points at.
type Record struct {
	Name     string    `json:"name"`
	Hash     string    `json:"hash"`
	ABI      int       `json:"abi"`
	Size     int       `json:"size"`
	Uploaded time.Time `json:"uploaded"`
	// Durability is DurabilityEvent when every event that changes a room's
	// memory makes its state durable before the event's output goes out;
	// otherwise (the default) state is made durable at hibernation, clean
	// stop and when the guest calls checkpoint().
	Durability string `json:"durability,omitempty"`
}

// Durability options of a class.
const (
	// DurabilityHibernate (the default): durable at hibernation, at a
	// clean stop, and on checkpoint().
	DurabilityHibernate = "hibernate"
	// DurabilityEvent: durable after every event, before its output.
	DurabilityEvent = "event"
)

// Options are the choices made at upload.
type Options struct {
	// Durability is DurabilityHibernate ("" too) or DurabilityEvent.
	Durability string
}

// Registry resolves class names and module hashes to compiled classes.
type Registry struct {
	bucket   store.Bucket
	engine   *engine.Engine
	maxBytes int

	mu       sync.Mutex
	names    map[string]cachedRecord // cache of classes/<name>
	compiled map[string]*compiling   // by hash
	asks     uint64                  // counts compile calls, for compiling.asked
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
		names:    map[string]cachedRecord{},
		compiled: map[string]*compiling{},
	}
}

// MaxBytes is the upload size limit.
func (r *Registry) MaxBytes() int { return r.maxBytes }

func nameKey(name string) string { return "classes/" + name }

func moduleKey(hash string) string {
	return "modules/" + strings.TrimPrefix(hash, "sha256:") + ".wasm"
}

// ErrBadOption: an upload option outside its documented values.
var ErrBadOption = errors.New("classes: invalid class option")

// Put validates and compiles wasm, stores it, and points name at it.
func (r *Registry) Put(ctx context.Context, name string, wasm []byte, opts Options) (Record, error) {
	switch opts.Durability {
	case "", DurabilityHibernate:
		opts.Durability = ""
	case DurabilityEvent:
	default:
		return Record{}, fmt.Errorf("%w: durability %q (use %q or %q)", ErrBadOption, opts.Durability, DurabilityHibernate, DurabilityEvent)
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
	rec := Record{Name: name, Hash: hash, ABI: class.ABI, Size: len(wasm), Uploaded: time.Now().UTC().Truncate(time.Second),
		Durability: opts.Durability}
	body, _ := json.Marshal(rec)
	if _, err := r.bucket.Put(ctx, nameKey(name), body, store.Cond{}); err != nil {
		return Record{}, fmt.Errorf("storing class record: %w", err)
	}
	r.mu.Lock()
	prev, had := r.names[name]
	r.names[name] = cachedRecord{rec, r.now()}
	r.mu.Unlock()
	if had && prev.rec.Hash != hash {
		r.retireIdle()
	}
	return rec, nil
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
	}
	if err != nil {
		if ok && ctx.Err() == nil {
			// Read again after another RecordTTL, not at every call.
			r.mu.Lock()
			if r.names[name] == cached {
				r.names[name] = cachedRecord{cached.rec, now}
			}
			r.mu.Unlock()
			return cached.rec, nil
		}
		return Record{}, err
	}
	r.mu.Lock()
	prev, had := r.names[name]
	r.names[name] = cachedRecord{rec, now}
	r.mu.Unlock()
	if had && prev.rec.Hash != rec.Hash {
		r.retireIdle()
	}
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
	return nil
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

// Remove deletes a class name. Stored modules stay: snapshots of rooms may
// still name them, and putting the name back makes those rooms reachable.
func (r *Registry) Remove(ctx context.Context, name string) error {
	if _, err := r.Get(ctx, name); err != nil {
		return err
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
