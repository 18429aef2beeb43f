// Package images keeps hibernated rooms' memories on the node's local
// disk, each in a file the engine can map, so that a room woken on the
// node that hibernated it need not decode its snapshot: its memory is
// mapped copy-on-write from the file and each page is read in when the
// guest first touches it (issue 13 §2: a Go room's cold wake was the
// decoding and writing back of megabytes it mostly never reads).
//
// An image is a cache of a snapshot, never a source of truth: it is tied
// to the bytes of the manifest it equals (Lookup compares them), and a
// room whose stored manifest differs (another node ran it, it was
// deleted, imported or upgraded elsewhere) restores from the store. Each
// file has a name in the cache's directory (its id), which the cache owns
// alone (a flock), and is open only while an Image of it is or a Store
// writes it: an image costs the node no open file while it waits, so the
// bound on images is disk, not the process's file limit. Nothing written
// before a crash is ever read after it: a start that finds no index of a
// clean stop removes every file (keep.go). The files live in the page
// cache while used, so they cost the node no resident memory beyond the
// pages a woken room touches, and the kernel may write them out and drop
// them under memory pressure. A directory on a memory-backed file system
// (tmpfs) would hold them in RAM instead, so the cache refuses one.
//
// A file holds the memory at offset 0 (page-aligned, so it maps as is)
// and after it the hash of each 4 KiB page (snapshot.HashPages), which
// the room's next snapshot diffs against and the next Store uses to
// write only the pages that changed.
package images

import (
	"container/list"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"sync"

	"github.com/wasmkeep/wasmkeep/host/snapshot"
	"github.com/wasmkeep/wasmkeep/internal/limits"
)

// Defaults of Config.
const (
	// DefaultMaxBytes holds some two hundred Go rooms of a few MiB of
	// memory each: the rooms a node woke lately, which are the ones
	// likeliest to wake again here.
	DefaultMaxBytes = 1 << 30
	// DefaultMaxFiles bounds the files in the directory (and so the
	// index a clean stop writes). An image holds no open file while it
	// waits, and one is at least DefaultMinBytes, so under the default
	// byte bound the bytes are the tighter one.
	DefaultMaxFiles = 4096
	// DefaultMinBytes: a memory smaller than this restores from its
	// snapshot in well under a millisecond (an AssemblyScript room's 64
	// KiB in microseconds), so an image would cost a file for nothing.
	DefaultMinBytes = 1 << 20
)

// ErrMemoryBacked: the directory is on a file system that keeps files in
// memory (tmpfs, ramfs), where images would hold RAM the kernel cannot
// reclaim without swap.
var ErrMemoryBacked = errors.New("images: the directory is on a memory-backed file system")

// ErrUnsupported: memory images are Linux's (the engine maps them only
// there).
var ErrUnsupported = errors.New("images: memory images are not supported on this system")

// Config is a cache's directory and bounds.
type Config struct {
	// Dir is where the files are made; it is created if missing, and
	// the cache owns what it holds. It should be on the node's local
	// disk.
	Dir string
	// MaxBytes bounds the memory bytes of all images together; past it
	// the least recently stored or used go.
	MaxBytes int64
	// MaxFiles bounds how many images are kept.
	MaxFiles int
	// MinBytes: smaller memories are not kept.
	MinBytes int64
}

// Stats counts what a cache did since it was made.
type Stats struct {
	Files        int   // images kept now
	Bytes        int64 // their memory bytes
	Hits, Misses int64 // Lookups
	Writes       int64 // Stores that wrote an image
	BytesWritten int64 // the pages and hashes those wrote
	Evictions    int64 // images dropped to stay within the bounds
	Errors       int64 // Stores that failed
}

// Cache is a node's images, by room. Its methods are safe for concurrent
// use, but a room's Store and Lookup must not overlap (a room hibernates
// and wakes one at a time).
type Cache struct {
	cfg Config

	mu     sync.Mutex
	by     map[string]*entry
	lru    list.List // of *entry, most recent first
	bytes  int64
	nextID uint64
	stats  Stats

	// hold is the cache's lock on the directory (keep.go); kept and
	// keptErr say what New picked up. persisted: the files are the
	// index's, and dropping an entry leaves its name.
	hold      *os.File
	kept      int
	keptErr   error
	persisted bool
}

// entry is one image, in the file its id names. Its file may outlive it
// while Images of it are open (refs).
type entry struct {
	key   string
	id    uint64
	f     *os.File // open while refs > 0 (file)
	size  int64    // memory bytes, at the start of the file
	tag   [sha256.Size]byte
	valid bool // the file holds the memory of the manifest whose hash is tag
	refs  int  // open Images, and a Store writing it
	gone  bool // dropped from the cache (and its name removed)
	elem  *list.Element
}

// New makes a cache in cfg.Dir. Zero bounds take the defaults.
func New(cfg Config) (*Cache, error) {
	if !supported {
		return nil, ErrUnsupported
	}
	limits.Default(&cfg.MaxBytes, DefaultMaxBytes)
	limits.Default(&cfg.MaxFiles, DefaultMaxFiles)
	limits.Default(&cfg.MinBytes, DefaultMinBytes)
	if err := os.MkdirAll(cfg.Dir, 0o700); err != nil {
		return nil, fmt.Errorf("images: %w", err)
	}
	mem, err := memoryBacked(cfg.Dir)
	if err != nil {
		return nil, fmt.Errorf("images: %w", err)
	}
	if mem {
		return nil, fmt.Errorf("%w: %s", ErrMemoryBacked, cfg.Dir)
	}
	c := &Cache{cfg: cfg, by: map[string]*entry{}}
	if c.hold, err = lockDir(cfg.Dir); err != nil {
		return nil, fmt.Errorf("images: %w", err)
	}
	if c.hold == nil {
		return nil, fmt.Errorf("%w: %s", ErrShared, cfg.Dir)
	}
	// A file the cache cannot make now it will not make later either.
	probe, err := os.CreateTemp(cfg.Dir, probePrefix)
	if err == nil {
		probe.Close()
		err = os.Remove(probe.Name())
	}
	if err != nil {
		c.hold.Close()
		return nil, fmt.Errorf("images: %w", err)
	}
	c.kept, c.keptErr = c.load()
	return c, nil
}

// Kept reports how many images New picked up from the last clean stop
// (Persist), and what kept it from others: files that were missing or
// damaged, or a damaged index.
func (c *Cache) Kept() (int, error) { return c.kept, c.keptErr }

// Image is an open image: the file, whose first len(Pages) pages are the
// memory, and the memory's page hashes. Close it once mapped; a mapping
// keeps the file's pages.
type Image struct {
	File *os.File
	// ID tells this file from others: pass it to Store when saving the
	// memory of the instance restored from it.
	ID    uint64
	Pages []uint64
	c     *Cache
	e     *entry
}

// Close releases the image.
func (im *Image) Close() {
	if im.c != nil {
		im.c.release(im.e)
		im.c = nil
	}
}

func tagOf(manifest []byte) [sha256.Size]byte { return sha256.Sum256(manifest) }

// Lookup returns key's image if it holds the memory of the manifest whose
// stored bytes are manifest.
func (c *Cache) Lookup(key string, manifest []byte) (*Image, bool) {
	c.mu.Lock()
	e := c.by[key]
	// Hashed only for a room that has an image: most wakes' rooms (small
	// memories) have none.
	if e == nil || !e.valid || e.tag != tagOf(manifest) {
		c.stats.Misses++
		c.mu.Unlock()
		return nil, false
	}
	e.refs++
	c.lru.MoveToFront(e.elem)
	c.mu.Unlock()
	f, err := c.file(e)
	var pages []uint64
	if err == nil {
		pages, err = readPages(f, e.size)
	}
	if err != nil {
		c.release(e)
		c.drop(key, e)
	}
	c.mu.Lock()
	if err != nil {
		c.stats.Misses++
	} else {
		c.stats.Hits++
	}
	c.mu.Unlock()
	if err != nil {
		return nil, false
	}
	return &Image{File: f, ID: e.id, Pages: pages, c: c, e: e}, true
}

// file returns e's file, opened if no other ref has it open. The caller
// holds a ref, so the file stays open until its release; a room's
// Lookups and Stores do not overlap, so two never open one file at once.
func (c *Cache) file(e *entry) (*os.File, error) {
	c.mu.Lock()
	f, gone := e.f, e.gone
	c.mu.Unlock()
	if f != nil {
		return f, nil
	}
	if gone {
		return nil, os.ErrNotExist // its name went with it
	}
	f, err := os.OpenFile(fileName(c.cfg.Dir, e.id), os.O_RDWR|noFollow, 0)
	if err != nil {
		return nil, err
	}
	c.mu.Lock()
	e.f = f
	c.mu.Unlock()
	return f, nil
}

// Store saves mem, the memory of the manifest whose stored bytes are
// manifest, as key's image, and returns the image's id. pages are mem's
// page hashes (nil: they are computed). from is the ID the memory's
// instance was restored from or last saved to (0: none): if that is still
// key's image, only the pages whose hashes changed are written, into the
// same file; else a new file replaces key's image. Writing into a file
// that an instance maps is safe because a room has one instance at a time
// (so no other live instance maps it) and a page whose content differs
// from the file's is one that instance wrote, so its mapping holds its own
// copy: no instance ever sees the file change under it. A memory under
// MinBytes, or one the bounds cannot hold, is not kept (id 0, no error).
func (c *Cache) Store(key string, manifest []byte, mem []byte, pages []uint64, from uint64) (uint64, error) {
	size := int64(len(mem))
	if size%snapshot.PageSize != 0 {
		return 0, fmt.Errorf("images: memory of %d bytes is not whole pages", size)
	}
	if size < c.cfg.MinBytes || size > c.cfg.MaxBytes {
		c.Forget(key)
		return 0, nil
	}
	if pages == nil {
		pages = snapshot.HashPages(mem)
	}
	if int64(len(pages))*snapshot.PageSize != size {
		return 0, fmt.Errorf("images: %d page hashes for %d bytes", len(pages), size)
	}
	tag := tagOf(manifest)
	c.mu.Lock()
	e := c.by[key]
	inPlace := e != nil && from != 0 && e.id == from
	var id uint64
	if inPlace {
		// Unusable until written: a Lookup meanwhile misses.
		e.valid = false
		e.refs++
	} else {
		c.nextID++
		id = c.nextID
	}
	c.mu.Unlock()
	var (
		written int64
		err     error
	)
	if inPlace {
		written, err = c.update(e, mem, pages)
		c.release(e)
	} else {
		written, err = c.write(id, mem, pages)
	}
	if err != nil {
		c.Forget(key)
		c.mu.Lock()
		c.stats.Errors++
		c.mu.Unlock()
		return 0, fmt.Errorf("images: %w", err)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	switch {
	case !inPlace:
		n := &entry{key: key, id: id, size: size, tag: tag, valid: true}
		if old := c.by[key]; old != nil {
			c.remove(old)
		}
		n.elem = c.lru.PushFront(n)
		c.by[key] = n
		c.bytes += size
		e = n
	case c.by[key] == e: // not dropped while it was written
		c.bytes += size - e.size
		e.size, e.tag, e.valid = size, tag, true
		c.lru.MoveToFront(e.elem)
	}
	c.stats.Writes++
	c.stats.BytesWritten += written
	c.evict()
	return e.id, nil
}

// write makes image id's file, holding mem and its page hashes. Zero
// pages are not written: the file is sparse there.
func (c *Cache) write(id uint64, mem []byte, pages []uint64) (int64, error) {
	name := fileName(c.cfg.Dir, id)
	f, err := os.OpenFile(name, os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return 0, err
	}
	size := int64(len(mem))
	err = f.Truncate(size)
	var written int64
	if err == nil {
		written, err = writeRuns(f, mem, func(p int) bool { return nonZero(mem, pages, p) })
	}
	if err == nil {
		var n int64
		n, err = writePages(f, size, pages)
		written += n
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		os.Remove(name)
		return 0, err
	}
	return written, nil
}

// update writes into e's file the pages of mem whose hashes differ from
// those the file holds, then the new hashes.
func (c *Cache) update(e *entry, mem []byte, pages []uint64) (int64, error) {
	f, err := c.file(e)
	if err != nil {
		return 0, err
	}
	old, err := readPages(f, e.size)
	if err != nil {
		return 0, err
	}
	size := int64(len(mem))
	if size < e.size {
		return 0, fmt.Errorf("the memory shrank from %d to %d bytes", e.size, size)
	}
	if size > e.size {
		// The memory grew: the old hashes lie where its new pages go.
		// Cutting the file back to the old memory and out again makes
		// that part a hole of zeros, as a new file's is.
		if err := f.Truncate(e.size); err != nil {
			return 0, err
		}
		if err := f.Truncate(size); err != nil {
			return 0, err
		}
	}
	written, err := writeRuns(f, mem, func(p int) bool {
		if p < len(old) {
			return old[p] != pages[p]
		}
		return nonZero(mem, pages, p)
	})
	if err != nil {
		return written, err
	}
	n, err := writePages(f, size, pages)
	return written + n, err
}

// nonZero reports whether page p of mem, whose hash is pages[p], holds
// anything but zeros: the pages a file's hole (zeros) would not hold.
func nonZero(mem []byte, pages []uint64, p int) bool {
	return pages[p] != snapshot.ZeroPageHash || !snapshot.IsZero(mem[p*snapshot.PageSize:(p+1)*snapshot.PageSize])
}

// writeRuns writes each run of pages of mem that want selects at its
// offset in f.
func writeRuns(f *os.File, mem []byte, want func(page int) bool) (int64, error) {
	var written int64
	n := len(mem) / snapshot.PageSize
	run := -1
	for p := 0; p <= n; p++ {
		if p < n && want(p) {
			if run < 0 {
				run = p
			}
			continue
		}
		if run >= 0 {
			b := mem[run*snapshot.PageSize : p*snapshot.PageSize]
			if _, err := f.WriteAt(b, int64(run)*snapshot.PageSize); err != nil {
				return written, err
			}
			written += int64(len(b))
			run = -1
		}
	}
	return written, nil
}

// writePages writes the page hashes after the memory.
func writePages(f *os.File, size int64, pages []uint64) (int64, error) {
	b := make([]byte, 8*len(pages))
	for i, h := range pages {
		binary.LittleEndian.PutUint64(b[8*i:], h)
	}
	_, err := f.WriteAt(b, size)
	return int64(len(b)), err
}

// readPages reads the page hashes of a memory of size bytes.
func readPages(f *os.File, size int64) ([]uint64, error) {
	b := make([]byte, 8*(size/snapshot.PageSize))
	if _, err := f.ReadAt(b, size); err != nil {
		return nil, err
	}
	pages := make([]uint64, len(b)/8)
	for i := range pages {
		pages[i] = binary.LittleEndian.Uint64(b[8*i:])
	}
	return pages, nil
}

// Forget drops key's image, if any (its room's stored state changed).
func (c *Cache) Forget(key string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if e := c.by[key]; e != nil {
		c.remove(e)
	}
}

func (c *Cache) drop(key string, e *entry) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.by[key] == e {
		c.remove(e)
	}
}

// remove takes e out of the cache; c.mu is held.
func (c *Cache) remove(e *entry) {
	delete(c.by, e.key)
	c.lru.Remove(e.elem)
	c.bytes -= e.size
	e.gone = true
	if !c.persisted {
		// An open Image keeps the file; the next start clears a name
		// this fails to remove.
		os.Remove(fileName(c.cfg.Dir, e.id))
	}
	// Its file, if open, is a ref's: the last release closes it.
}

// evict drops the least recent images past the bounds; c.mu is held. An
// image being written in place is passed over: removing its name would
// fail that Store (a burst of hibernations did, as "file does not
// exist"), which evicts again when it is done.
func (c *Cache) evict() {
	for el := c.lru.Back(); el != nil && (c.bytes > c.cfg.MaxBytes || c.lru.Len() > c.cfg.MaxFiles); {
		e := el.Value.(*entry)
		el = el.Prev()
		if !e.valid {
			continue
		}
		c.remove(e)
		c.stats.Evictions++
	}
}

func (c *Cache) release(e *entry) {
	c.mu.Lock()
	defer c.mu.Unlock()
	e.refs--
	if e.refs == 0 && e.f != nil {
		e.f.Close() // an idle image holds no open file
		e.f = nil
	}
}

// Stats reports the cache's counts.
func (c *Cache) Stats() Stats {
	c.mu.Lock()
	defer c.mu.Unlock()
	s := c.stats
	s.Files, s.Bytes = c.lru.Len(), c.bytes
	return s
}

// Close drops every image and gives up the directory. Images still open
// stay readable until closed.
func (c *Cache) Close() {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, e := range c.by {
		c.remove(e)
	}
	if c.hold != nil {
		c.hold.Close() // and with it the flock
		c.hold = nil
	}
}
