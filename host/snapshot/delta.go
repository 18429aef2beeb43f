package snapshot

import (
	"bytes"
	"fmt"
	"math/bits"
	"sync"
	"sync/atomic"

	"github.com/cespare/xxhash/v2"
)

// Capture is the state of a room to snapshot.
type Capture struct {
	Header
	// Memory is the room's linear memory. It is read, never kept, so it may
	// be a view of a live instance's memory (which must not run meanwhile).
	Memory []byte
	// Base is the module's initial memory: pages still equal to it are not
	// stored.
	Base []byte
	// Generation is that of the hold taking the snapshot.
	Generation uint64
	// SegmentID names the new segment, if one is written (default:
	// SegmentID(Generation, the manifest's Seq)). Callers that may retry a
	// failed write pass a name they never used before.
	SegmentID string
	// PrevPages are the page hashes of the memory as the previous manifest
	// has it (Delta.PageHashes of that snapshot, or what Restore returned);
	// nil stores every changed chunk whole.
	PrevPages []uint64
	// Pages, if not nil, are the hashes of Memory's pages, which the
	// caller computed (from PrevPages and the pages written since: host
	// engine's write tracking); nil: the encoder hashes every page.
	Pages []uint64
}

// Delta is the outcome of a snapshot: the new manifest, and the segment to
// write before it (nil when no stored page changed).
type Delta struct {
	Manifest *Manifest
	// SegmentID and Segment are the new segment, if any.
	SegmentID string
	Segment   []byte
	// Compacted is true when the segment holds every stored page and the
	// manifest references nothing older.
	Compacted bool
	// Folded is true when the segment holds, besides the changed pages,
	// those of every older segment but the largest, which the manifest
	// references besides it (the chain bound was reached with little
	// dead).
	Folded bool
	// Changed counts the pages whose content differed from prev.
	Changed int
	// Garbage lists the segments prev referenced and the new manifest does
	// not: once the manifest is written, they can be deleted.
	Garbage []string
	// PageHashes are the memory's page hashes: pass them as PrevPages to
	// the next snapshot once this one is written.
	PageHashes []uint64
}

// HashPages returns the hash of every 4 KiB page of mem.
func HashPages(mem []byte) []uint64 {
	h := make([]uint64, len(mem)/PageSize)
	for i := range h {
		h[i] = HashPage(mem[i*PageSize : (i+1)*PageSize])
	}
	return h
}

// HashPage returns the hash of one page, as HashPages has it.
func HashPage(page []byte) uint64 { return xxhash.Sum64(page) }

// ZeroPageHash is the hash of a page of zeros.
var ZeroPageHash = xxhash.Sum64(make([]byte, PageSize))

// Snapshot makes the next manifest after prev (nil for a room's first) for
// c. Only the pages whose hash changed since prev go into the new segment,
// unless the chain of segments would pass the encoder's bound, or carry more
// dead bytes than live ones, or full is set: then it compacts, writing every
// stored page into the new segment.
func (e *Encoder) Snapshot(prev *Manifest, c *Capture, full bool) (*Delta, error) {
	if len(c.Memory)%ChunkSize != 0 || uint64(len(c.Memory)) > maxMemory {
		return nil, fmt.Errorf("snapshot: memory of %d bytes is not a whole number of pages", len(c.Memory))
	}
	pages := c.Pages
	if len(pages) != len(c.Memory)/PageSize {
		pages = HashPages(c.Memory)
	}
	seq := uint64(1)
	if prev != nil {
		seq = prev.Seq + 1
	}
	usable := prev != nil && prev.ModuleHash == c.ModuleHash && prev.Codec == e.codec &&
		len(prev.Chunks)*pagesPerChunk <= len(pages)
	if usable && !full {
		d := e.build(prev, c, pages, seq, -1)
		live, total := d.Manifest.Bytes()
		if total-live <= live {
			if len(d.Manifest.Segments) <= e.maxChain {
				return d, nil
			}
			// Too long a chain, but little dead: the pages of every
			// segment but the largest (the last full snapshot's) go
			// into the new one. They are the few a room keeps
			// writing, so this costs about a delta, where a full
			// snapshot compresses the whole memory again.
			d = e.build(prev, c, pages, seq, prev.largestSegment())
			if live, total := d.Manifest.Bytes(); len(d.Manifest.Segments) <= e.maxChain && total-live <= live {
				d.Folded = true
				return d, nil
			}
		}
	}
	d := e.build(nil, c, pages, seq, -1)
	if prev != nil {
		d.Garbage = prev.SegmentIDs()
	}
	return d, nil
}

// build writes the new segment and manifest. Without prev (a full
// snapshot) every stored page goes into the new segment; with it, only the
// pages that changed, the others keep their place in prev's segments,
// except that with keepOnly >= 0 only the pages in prev's segment of that
// index keep theirs: the others go into the new segment too.
func (e *Encoder) build(prev *Manifest, c *Capture, pages []uint64, seq uint64, keepOnly int32) *Delta {
	full := prev == nil
	nchunks := len(c.Memory) / ChunkSize
	m := &Manifest{Header: c.Header, Generation: c.Generation, Seq: seq, Codec: e.codec, Chunks: make([]ChunkRef, nchunks)}
	id := c.SegmentID
	if id == "" {
		id = SegmentID(c.Generation, seq)
	}
	d := &Delta{Manifest: m, Compacted: full, PageHashes: pages}
	seg := appendSegmentHeader(nil, e.codec, c.Generation)
	remap := map[int32]int32{} // prev's segment index -> the new manifest's
	keep := func(p Part) Part {
		to, ok := remap[p.Seg]
		if !ok {
			to = int32(len(m.Segments))
			remap[p.Seg] = to
			m.Segments = append(m.Segments, prev.Segments[p.Seg])
		}
		p.Seg = to
		return p
	}
	var scratch []byte
	for i := range nchunks {
		var old *ChunkRef
		if prev != nil && i < len(prev.Chunks) {
			old = &prev.Chunks[i]
		}
		// Which pages changed: by page hash when the previous ones are
		// known, else the whole chunk counts as changed.
		var changed uint16
		for p := range pagesPerChunk {
			k := i*pagesPerChunk + p
			if old == nil || c.PrevPages == nil || k >= len(c.PrevPages) || c.PrevPages[k] != pages[k] {
				changed |= 1 << p
			}
		}
		if old != nil && keepOnly >= 0 {
			for _, p := range old.Parts {
				if p.Seg != keepOnly {
					changed |= p.Live
				}
			}
		}
		ref := ChunkRef{}
		if old != nil {
			ref.Base = old.Base &^ changed
			for _, p := range old.Parts {
				if p.Live &^= changed; p.Live != 0 {
					ref.Parts = append(ref.Parts, p)
				}
			}
		}
		d.Changed += bits.OnesCount16(changed)
		// A chunk spread over too many blobs is written whole again.
		if len(ref.Parts) >= maxParts {
			changed, ref = 0xFFFF, ChunkRef{}
		}
		var stored uint16
		scratch = scratch[:0]
		for p := range pagesPerChunk {
			if changed&(1<<p) == 0 {
				continue
			}
			off := i*ChunkSize + p*PageSize
			page := c.Memory[off : off+PageSize]
			switch {
			case off+PageSize <= len(c.Base) && bytes.Equal(page, c.Base[off:off+PageSize]):
				ref.Base |= 1 << p
			case pages[i*pagesPerChunk+p] == ZeroPageHash && isZero(page):
			default:
				stored |= 1 << p
				scratch = append(scratch, page...)
			}
		}
		for k := range ref.Parts {
			ref.Parts[k] = keep(ref.Parts[k])
		}
		if stored != 0 {
			before := len(seg)
			seg = e.compress(seg, scratch)
			ref.Parts = append(ref.Parts, Part{Seg: -2, Off: uint32(before - segmentHeader), Len: uint32(len(seg) - before), Blob: stored, Live: stored})
		}
		m.Chunks[i] = ref
	}
	if len(seg) > segmentHeader {
		idx := int32(len(m.Segments))
		m.Segments = append(m.Segments, SegmentRef{ID: id, Size: uint32(len(seg) - segmentHeader)})
		for i := range m.Chunks {
			for k := range m.Chunks[i].Parts {
				if m.Chunks[i].Parts[k].Seg == -2 {
					m.Chunks[i].Parts[k].Seg = idx
				}
			}
		}
		d.SegmentID, d.Segment = id, appendChecksum(seg, 0)
	}
	if prev != nil {
		kept := map[string]bool{}
		for _, s := range m.Segments {
			kept[s.ID] = true
		}
		for _, s := range prev.Segments {
			if !kept[s.ID] {
				d.Garbage = append(d.Garbage, s.ID)
			}
		}
	}
	return d
}

// Restore writes the memory into dst, which must be MemorySize bytes and
// already hold the base image the snapshot was taken against (a fresh
// instance's memory does): base pages are left as they are. Zero pages are
// cleared only where dirty(page) says dst's page may hold non-zero bytes
// (nil dirty: every zero page is cleared), so pages of a fresh instance that
// are zero in both stay untouched. segs holds every segment the manifest
// references, by id. It returns the memory's page hashes, for the room's
// next snapshot: stored pages are hashed as they are written, base pages
// take basePages[page] (the base image's page hashes; nil: they are hashed
// from dst).
//
// With SetPrefault, the stored pages are first faulted in with one call
// per run of them.
func (m *Manifest) Restore(dst []byte, segs map[string]*Segment, dirty func(page int) bool, basePages []uint64) ([]uint64, error) {
	var pre func([]byte)
	if f := prefault.Load(); f != nil {
		pre = *f
	}
	return m.RestoreWith(dst, segs, RestoreOptions{Dirty: dirty, BasePages: basePages, Prefault: pre})
}

// RestoreOptions are Restore's arguments past the memory and segments.
type RestoreOptions struct {
	// Dirty and BasePages are Restore's dirty and basePages.
	Dirty     func(page int) bool
	BasePages []uint64
	// Prefault, if set, is called on each run of stored pages before
	// they are written (Restore passes SetPrefault's function; a memory
	// whose pages are mostly present already gains nothing from it).
	Prefault func([]byte)
}

// RestoreWith is Restore with its options spelled out.
func (m *Manifest) RestoreWith(dst []byte, segs map[string]*Segment, o RestoreOptions) ([]uint64, error) {
	dirty, basePages := o.Dirty, o.BasePages
	if uint64(len(dst)) != uint64(m.MemorySize()) {
		return nil, fmt.Errorf("%w: have %d bytes, snapshot has %d", ErrMemorySize, len(dst), m.MemorySize())
	}
	resolved := make([]*Segment, len(m.Segments))
	for i, ref := range m.Segments {
		s := segs[ref.ID]
		if s == nil {
			return nil, fmt.Errorf("%w: %s", ErrMissingSegment, ref.ID)
		}
		if s.Size() != ref.Size || s.Codec != m.Codec {
			return nil, fmt.Errorf("%w: segment %s does not match its manifest", ErrCorrupt, ref.ID)
		}
		resolved[i] = s
	}
	hashes := make([]uint64, len(m.Chunks)*pagesPerChunk)
	stored := 0
	for i := range m.Chunks {
		stored += bits.OnesCount16(m.Chunks[i].Stored())
	}
	if o.Prefault != nil && stored > 0 {
		m.prefaultStored(dst, o.Prefault)
	}
	return hashes, m.restoreChunks(dst, resolved, dirty, basePages, hashes, 0, len(m.Chunks))
}

// prefault, if set, is called on each run of pages a restore is about to
// write, so that the kernel can fault them in with one call rather than
// one trap each (MADV_POPULATE_WRITE on Linux). The engine sets it on
// Linux (host/engine/prefault_linux.go); this package stays free of
// system calls.
var prefault atomic.Pointer[func([]byte)]

// SetPrefault sets the function Restore calls on each run of pages it is
// about to write (nil: none), and returns the one it replaces. It must
// only make the pages present: a failure is ignored, and the pages fault
// in as they are written.
func SetPrefault(f func([]byte)) (previous func([]byte)) {
	var p *func([]byte)
	if f != nil {
		p = &f
	}
	if old := prefault.Swap(p); old != nil {
		return *old
	}
	return nil
}

// prefaultStored calls f on each run of stored pages of dst.
func (m *Manifest) prefaultStored(dst []byte, f func([]byte)) {
	run := -1
	for i := range m.Chunks {
		stored := m.Chunks[i].Stored()
		for p := range pagesPerChunk {
			k := i*pagesPerChunk + p
			switch {
			case stored&(1<<p) != 0:
				if run < 0 {
					run = k
				}
			case run >= 0:
				f(dst[run*PageSize : k*PageSize])
				run = -1
			}
		}
	}
	if run >= 0 {
		f(dst[run*PageSize:])
	}
}

// restoreChunks restores chunks [from, to) of dst and their page hashes.
func (m *Manifest) restoreChunks(dst []byte, resolved []*Segment, dirty func(page int) bool, basePages, hashes []uint64, from, to int) error {
	var scratch *[ChunkSize]byte
	defer func() {
		if scratch != nil {
			scratchPool.Put(scratch)
		}
	}()
	for i := from; i < to; i++ {
		c := &m.Chunks[i]
		out := dst[i*ChunkSize : (i+1)*ChunkSize : (i+1)*ChunkSize]
		stored := c.Stored()
		for p := range pagesPerChunk {
			k := i*pagesPerChunk + p
			switch {
			case stored&(1<<p) != 0:
			case c.Base&(1<<p) != 0:
				if k < len(basePages) {
					hashes[k] = basePages[k]
				} else {
					hashes[k] = xxhash.Sum64(out[p*PageSize : (p+1)*PageSize])
				}
			default:
				if dirty == nil || dirty(k) {
					clear(out[p*PageSize : (p+1)*PageSize])
				}
				hashes[k] = ZeroPageHash
			}
		}
		for _, part := range c.Parts {
			size := bits.OnesCount16(part.Blob) * PageSize
			blob := resolved[part.Seg].blobs[part.Off : part.Off+part.Len]
			if first, ok := run(part.Blob); ok && part.Live == part.Blob {
				// Every page of the blob is live and they are adjacent (a
				// compacted chunk's usually are): decoded straight into
				// place, without the copy out of the scratch buffer.
				at := first * PageSize
				if err := inflate(m.Codec, out[at:at+size:at+size], blob); err != nil {
					return fmt.Errorf("%w: chunk %d: %v", ErrCorrupt, i, err)
				}
				for p := first; p < first+size/PageSize; p++ {
					hashes[i*pagesPerChunk+p] = xxhash.Sum64(out[p*PageSize : (p+1)*PageSize])
				}
				continue
			}
			if scratch == nil {
				scratch = scratchPool.Get().(*[ChunkSize]byte)
			}
			if err := inflate(m.Codec, scratch[:size:size], blob); err != nil {
				return fmt.Errorf("%w: chunk %d: %v", ErrCorrupt, i, err)
			}
			src := scratch[:size]
			for p := range pagesPerChunk {
				if part.Blob&(1<<p) == 0 {
					continue
				}
				if part.Live&(1<<p) != 0 {
					page := out[p*PageSize : (p+1)*PageSize]
					copy(page, src[:PageSize])
					hashes[i*pagesPerChunk+p] = xxhash.Sum64(page)
				}
				src = src[PageSize:]
			}
		}
	}
	return nil
}

var scratchPool = sync.Pool{New: func() any { return new([ChunkSize]byte) }}

// run reports whether mask's pages are one run of adjacent pages, and
// its first page.
func run(mask uint16) (first int, ok bool) {
	if mask == 0 {
		return 0, false
	}
	first = bits.TrailingZeros16(mask)
	m := mask >> first
	return first, m&(m+1) == 0
}
