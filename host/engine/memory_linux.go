//go:build linux

package engine

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"os"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"unsafe"
	"weak"

	"github.com/tetratelabs/wazero/experimental"
	"golang.org/x/sys/unix"

	"github.com/wasmkeep/wasmkeep/host/engine/wasmrw"
)

const defaultMemoryBackend = memoryImage

var (
	osPageSize = uint64(os.Getpagesize())
	zeroPage   = make([]byte, osPageSize)
)

func roundToPage(n uint64) uintptr { return uintptr((n + osPageSize - 1) &^ (osPageSize - 1)) }

// mappedMemory is a guest's memory in a private mapping outside the Go
// heap. The whole maximum is reserved up front (PROT_NONE and
// MAP_NORESERVE, so it costs address space but no memory and no overcommit
// charge) and made readable and writable as the memory grows: a grow never
// moves or copies the memory, and only the pages the guest touches become
// resident. The start of the reservation may map the class's initial
// memory (classImage).
type mappedMemory struct {
	base      unsafe.Pointer // start of the reservation; nil once freed
	reserved  uintptr        // bytes reserved
	usable    uintptr        // bytes from base that are readable and writable
	max       uint64         // largest size Reallocate accepts
	data      []wasmrw.DataSegment
	image     *classImage // mapped over the first imageSize bytes, or nil
	imageSize uintptr
	file      bool // a room's image file is mapped over its start (mapImage)
	cleanup   runtime.Cleanup
	// registered: the reservation is registered with the write tracker;
	// tracking: the writes to its usable pages are tracked since the
	// last snapshot (written_linux.go).
	registered, tracking bool
}

// mapping is what the garbage-collection backstop of a mappedMemory
// releases.
type mapping struct {
	base unsafe.Pointer
	size uintptr
	m    weak.Pointer[mappedMemory]
}

// liveMappings finds a mappedMemory by its base address, for trimMemory.
var liveMappings sync.Map // unsafe.Pointer → weak.Pointer[mappedMemory]

// A process may have vm.max_map_count mappings (65,530 by default), and
// the Go runtime dies if it cannot map its own. A mapped memory is up to
// three (the image, the accessible rest, the reservation beyond), so
// memories fall back to the Go heap before they could use more than what
// the limit leaves after mapsForOthers: about 16,000 memories by default.
const (
	mapsPerMemory = 3
	mapsForOthers = 16384
)

var (
	liveMemories atomic.Int64
	mapLimit     atomic.Int64 // vm.max_map_count, read once (tests lower it)
)

func maxMapCount() int64 {
	if n := mapLimit.Load(); n != 0 {
		return n
	}
	n := int64(65530)
	if b, err := os.ReadFile("/proc/sys/vm/max_map_count"); err == nil {
		if v, err := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64); err == nil && v > 0 {
			n = v
		}
	}
	mapLimit.CompareAndSwap(0, n)
	return mapLimit.Load()
}

func unmap(r mapping) {
	liveMappings.CompareAndDelete(r.base, r.m)
	_ = unix.MunmapPtr(r.base, r.size)
	liveMemories.Add(-1)
}

// reserve maps maxBytes of inaccessible address space, or returns nil.
func reserve(maxBytes uint64) *mappedMemory {
	size := roundToPage(maxBytes)
	if size == 0 {
		return nil
	}
	if liveMemories.Add(1)*mapsPerMemory+mapsForOthers > maxMapCount() {
		liveMemories.Add(-1)
		return nil
	}
	p, err := unix.MmapPtr(-1, 0, nil, size, unix.PROT_NONE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS|unix.MAP_NORESERVE)
	if err != nil {
		liveMemories.Add(-1)
		return nil
	}
	m := &mappedMemory{base: p, reserved: size, max: maxBytes}
	w := weak.Make(m)
	liveMappings.Store(p, w)
	// wazero frees a memory when its module is closed; but a module closed
	// asynchronously (its context was cancelled during a call) releases its
	// resources only when a later call notices, and an instance dropped
	// before that would leak its mapping. So the mapping also goes when
	// this object becomes garbage: wazero reaches the memory only through
	// it, and the engine keeps no view of the memory past a call.
	m.cleanup = runtime.AddCleanup(m, unmap, mapping{p, size, w})
	return m
}

// newMappedMemory reserves maxBytes whose first Reallocate writes data, or
// returns nil.
func newMappedMemory(maxBytes uint64, data []wasmrw.DataSegment) experimental.LinearMemory {
	m := reserve(maxBytes)
	if m == nil {
		return nil
	}
	m.data = data
	return m
}

// Reallocate implements experimental.LinearMemory. It returns nil, failing
// the grow, past the maximum or if the kernel refuses the memory.
func (m *mappedMemory) Reallocate(size uint64) []byte {
	if size > m.max || m.base == nil {
		return nil
	}
	if need := roundToPage(size); need > m.usable {
		grown := unsafe.Slice((*byte)(unsafe.Add(m.base, m.usable)), need-m.usable)
		if err := unix.Mprotect(grown, unix.PROT_READ|unix.PROT_WRITE); err != nil {
			return nil
		}
		old := m.usable
		m.usable = need
		m.grown(old)
	}
	buf := unsafe.Slice((*byte)(m.base), size)
	if m.data != nil {
		writeData(buf, m.data)
		m.data = nil
	}
	return buf
}

// Free implements experimental.LinearMemory: wazero calls it once the
// instance is closed. A memory that maps its class's image is kept as a
// spare (spare_linux.go) while its class keeps them; any other is
// unmapped.
func (m *mappedMemory) Free() {
	if m.base == nil {
		return
	}
	if m.image != nil && !m.file && m.image.keepSpare(m) {
		return
	}
	m.release()
}

// release unmaps the memory, once.
func (m *mappedMemory) release() {
	if m.base == nil {
		return
	}
	m.cleanup.Stop()
	unmap(mapping{m.base, m.reserved, weak.Make(m)})
	m.base = nil
}

// classImage is a class's initial memory (its data segments over zeros,
// the module's initial size) in a sealed memfd. Instances map it privately:
// a page stays shared by all of them until one writes it.
type classImage struct {
	mu   sync.RWMutex
	fd   int    // -1 once closed
	view []byte // the image, mapped read-only; nil once closed

	spares spares
}

// imageSlot builds a class's image once.
type imageSlot struct {
	once  sync.Once
	img   *classImage
	ready atomic.Pointer[classImage] // img, once built
}

// loaded returns the slot's image if it was built, without building it.
func (s *imageSlot) loaded() *classImage { return s.ready.Load() }

// images holds each class's image. Keys are weak so that a class that is
// dropped without Close (tests do) releases its image when collected.
var images sync.Map // weak.Pointer[Class] → *imageSlot

// imageMemory returns a memory that maps the class's image, or nil if the
// image cannot be had (then the caller falls back to mappedMemory).
func (c *Class) imageMemory(_, maxBytes uint64) experimental.LinearMemory {
	key := weak.Make(c)
	v, ok := images.Load(key)
	if !ok {
		var loaded bool
		v, loaded = images.LoadOrStore(key, &imageSlot{})
		if !loaded {
			runtime.AddCleanup(c, dropImage, key)
		}
	}
	slot := v.(*imageSlot)
	slot.once.Do(func() {
		slot.img = newClassImage(uint64(c.info.Memory.Min)<<16, c.info.Data)
		if slot.img != nil {
			slot.img.spares.now = c.e.clock.Now
			slot.ready.Store(slot.img)
		}
	})
	if slot.img == nil {
		return nil
	}
	return slot.img.newMemory(maxBytes)
}

// releaseMemoryImage closes the class's image, for Class.Close: instances
// that map it keep their mappings; later ones fall back to mappedMemory.
func (c *Class) releaseMemoryImage() {
	if v, ok := images.Load(weak.Make(c)); ok {
		v.(*imageSlot).close()
	}
}

// dropImage forgets a collected class's image.
func dropImage(key weak.Pointer[Class]) {
	if v, ok := images.LoadAndDelete(key); ok {
		v.(*imageSlot).close()
	}
}

func (s *imageSlot) close() {
	s.once.Do(func() {}) // a build under way finishes first; none starts after
	if s.img != nil {
		s.img.close()
	}
}

// newClassImage writes data into a new memfd of size bytes and seals it,
// or returns nil.
func newClassImage(size uint64, data []wasmrw.DataSegment) *classImage {
	if size == 0 || uint64(roundToPage(size)) != size {
		return nil
	}
	fd, err := unix.MemfdCreate("wasmkeep-initial-memory", unix.MFD_CLOEXEC|unix.MFD_ALLOW_SEALING)
	if err != nil {
		return nil
	}
	ok := false
	defer func() {
		if !ok {
			unix.Close(fd)
		}
	}()
	if err := unix.Ftruncate(fd, int64(size)); err != nil {
		return nil
	}
	if len(data) > 0 {
		p, err := unix.MmapPtr(fd, 0, nil, uintptr(size), unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
		if err != nil {
			return nil
		}
		writeData(unsafe.Slice((*byte)(p), size), data)
		if err := unix.MunmapPtr(p, uintptr(size)); err != nil {
			return nil
		}
	}
	// Nobody may change the image under the instances that map it.
	if _, err := unix.FcntlInt(uintptr(fd), unix.F_ADD_SEALS, unix.F_SEAL_SHRINK|unix.F_SEAL_GROW|unix.F_SEAL_WRITE|unix.F_SEAL_SEAL); err != nil {
		return nil
	}
	p, err := unix.MmapPtr(fd, 0, nil, uintptr(size), unix.PROT_READ, unix.MAP_SHARED)
	if err != nil {
		return nil
	}
	ok = true
	return &classImage{fd: fd, view: unsafe.Slice((*byte)(p), size)}
}

// newMemory reserves maxBytes and maps the image at its start, or returns
// nil.
func (img *classImage) newMemory(maxBytes uint64) experimental.LinearMemory {
	img.mu.RLock()
	defer img.mu.RUnlock()
	size := uintptr(len(img.view))
	if img.fd < 0 || uint64(size) > maxBytes {
		return nil
	}
	m := reserve(maxBytes)
	if m == nil {
		return nil
	}
	if _, err := unix.MmapPtr(img.fd, 0, m.base, size, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_FIXED|unix.MAP_NORESERVE); err != nil {
		m.Free()
		return nil
	}
	m.usable, m.image, m.imageSize = size, img, size
	return m
}

func (img *classImage) close() {
	img.spares.close()
	img.mu.Lock()
	defer img.mu.Unlock()
	if img.fd >= 0 {
		unix.Close(img.fd)
		img.fd = -1
		_ = unix.MunmapPtr(unsafe.Pointer(unsafe.SliceData(img.view)), uintptr(len(img.view)))
		img.view = nil
	}
}

// pagemap is /proc/self/pagemap, or nil if it cannot be read.
var pagemap = sync.OnceValue(func() *os.File {
	f, err := os.Open("/proc/self/pagemap")
	if err != nil {
		return nil
	}
	return f
})

// Bits of a /proc/self/pagemap entry.
const (
	pagePresent   = 1 << 63
	pageSwapped   = 1 << 62
	pageFile      = 1 << 61 // a page-cache page, not a private copy
	pageExclusive = 1 << 56 // mapped once (not the zero page, not shared)
)

// private reports whether a pagemap entry is a page of the process's own.
func private(e uint64) bool {
	return e&(pagePresent|pageFile|pageExclusive) == pagePresent|pageExclusive
}

// trimMemory gives back the private pages of the instance's memory that
// hold what a fresh instance holds there: the class's image, or zeros past
// it. A Go guest leaves many: its initialization writes zeros over a few
// hundred kilobytes of pages that were zero; and on a kernel without a
// shared zero page, reading an untouched page (as a snapshot does) makes
// it resident too. After the trim, such a page is shared with the image
// again (or, past it, no longer there: it reads as zeros). Only mapped
// memories are trimmed; the instance must not be running.
func (i *Instance) trimMemory() {
	if i.dead {
		return
	}
	view, ok := i.mem.Read(0, i.mem.Size())
	if !ok || len(view) == 0 {
		return
	}
	if m := mappedOf(view); m != nil && !m.file {
		m.trim(view)
	}
}

// mappedOf returns the mapped memory view is, or nil (a memory on the Go
// heap, or one freed).
func mappedOf(view []byte) *mappedMemory {
	if len(view) == 0 {
		return nil
	}
	v, ok := liveMappings.Load(unsafe.Pointer(unsafe.SliceData(view)))
	if !ok {
		return nil
	}
	m := v.(weak.Pointer[mappedMemory]).Value()
	if m == nil || m.base != unsafe.Pointer(unsafe.SliceData(view)) || uintptr(len(view)) > m.usable {
		return nil // not this instance's memory (it was freed)
	}
	return m
}

// mapImage maps the first len(view) bytes of img privately over the
// instance's memory, whose whole view it is (already grown to the size):
// what was mapped there (the class image, zeros) is replaced, nothing is
// read now, and the guest's writes stay the instance's own. A memory that
// is not mapped, or whose first pages are not where wasm sees them, fails
// with ErrNoImage.
func (i *Instance) mapImage(view []byte, img *os.File) error {
	m := mappedOf(view)
	if m == nil || uint64(len(view))%osPageSize != 0 {
		return ErrNoImage
	}
	if _, err := unix.MmapPtr(int(img.Fd()), 0, m.base, uintptr(len(view)), unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_FIXED|unix.MAP_NORESERVE); err != nil {
		// MAP_FIXED replaces the old mapping only on success: the memory
		// is as it was, and the caller closes the instance.
		return fmt.Errorf("%w: %v", ErrNoImage, err)
	}
	// The class image no longer lies under the memory: trimming against
	// it would drop the file's pages, and a freed page of a file mapping
	// reads back as the file's, not as the class image's.
	m.image, m.imageSize, m.file = nil, 0, true
	m.registered, m.tracking = false, false // a new mapping: not registered
	runtime.KeepAlive(img)
	return nil
}

func (m *mappedMemory) trim(view []byte) {
	// Once the image is closed, the part of the memory that maps it can no
	// longer be compared: only what lies past it is trimmed.
	var image []byte
	if m.image != nil {
		m.image.mu.RLock()
		defer m.image.mu.RUnlock()
		image = m.image.view
	}
	ps := int(osPageSize)
	imagePages := int(m.imageSize) / ps
	_ = m.giveBack(len(view)/ps, func(p int, e uint64) bool {
		page := view[p*ps : (p+1)*ps]
		switch {
		case !private(e):
			return false // not there, or shared: nothing to give back
		case p < imagePages:
			return (p+1)*ps <= len(image) && bytes.Equal(page, image[p*ps:(p+1)*ps])
		default:
			return bytes.Equal(page, zeroPage)
		}
	})
}

// giveBack reads the pagemap entries of the memory's first n pages and
// gives back (MADV_DONTNEED) each run of pages p whose entry e give(p, e)
// selects. It reports false if the entries cannot be read or a page
// cannot be given back.
func (m *mappedMemory) giveBack(n int, give func(p int, e uint64) bool) bool {
	f := pagemap()
	if f == nil || m.base == nil {
		return false
	}
	ps := int(osPageSize)
	entries := make([]byte, 8*n)
	if _, err := f.ReadAt(entries, int64(uintptr(m.base)/uintptr(ps)*8)); err != nil {
		return false
	}
	view := unsafe.Slice((*byte)(m.base), n*ps)
	run := -1 // first page of the run of pages to give back
	for p := 0; p <= n; p++ {
		if p < n && give(p, binary.LittleEndian.Uint64(entries[8*p:])) {
			if run < 0 {
				run = p
			}
			continue
		}
		if run >= 0 {
			if err := unix.Madvise(view[run*ps:p*ps], unix.MADV_DONTNEED); err != nil {
				return false
			}
			run = -1
		}
	}
	return true
}
