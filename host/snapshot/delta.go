package snapshot

import (
	"bytes"
	"fmt"
	"math/bits"
	"sync"

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
	// Changed counts the chunks whose content differed from prev.
	Changed int
	// Garbage lists the segments prev referenced and the new manifest does
	// not: once the manifest is written, they can be deleted.
	Garbage []string
}

// Snapshot makes the next manifest after prev (nil for a room's first) for
// c. Only chunks whose hash differs from prev's go into the new segment,
// unless the chain of segments would pass the encoder's bound, or carry more
// dead bytes than live ones, or full is set: then it compacts, writing every
// stored page into the new segment.
func (e *Encoder) Snapshot(prev *Manifest, c *Capture, full bool) (*Delta, error) {
	if len(c.Memory)%ChunkSize != 0 || uint64(len(c.Memory)) > maxMemory {
		return nil, fmt.Errorf("snapshot: memory of %d bytes is not a whole number of pages", len(c.Memory))
	}
	n := len(c.Memory) / ChunkSize
	hashes := make([]uint64, n)
	for i := range hashes {
		hashes[i] = xxhash.Sum64(c.Memory[i*ChunkSize : (i+1)*ChunkSize])
	}
	seq := uint64(1)
	if prev != nil {
		seq = prev.Seq + 1
	}
	usable := prev != nil && prev.ModuleHash == c.ModuleHash && prev.Codec == e.codec && len(prev.Chunks) <= n
	if usable && !full {
		d := e.build(prev, c, hashes, seq, false)
		live, total := d.Manifest.Bytes()
		if len(d.Manifest.Segments) <= e.maxChain && total-live <= live {
			return d, nil
		}
	}
	if !usable {
		prev0 := prev
		prev = nil
		d := e.build(nil, c, hashes, seq, true)
		if prev0 != nil {
			d.Garbage = prev0.SegmentIDs()
		}
		return d, nil
	}
	return e.build(prev, c, hashes, seq, true), nil
}

// build writes the new segment and manifest. With full, every chunk is
// written; otherwise only those whose hash changed, the rest keep their
// place in prev's segments.
func (e *Encoder) build(prev *Manifest, c *Capture, hashes []uint64, seq uint64, full bool) *Delta {
	m := &Manifest{
		Header:     c.Header,
		Generation: c.Generation,
		Seq:        seq,
		Codec:      e.codec,
		Chunks:     make([]ChunkRef, len(hashes)),
	}
	id := c.SegmentID
	if id == "" {
		id = SegmentID(c.Generation, seq)
	}
	d := &Delta{Manifest: m, Compacted: full}
	seg := appendSegmentHeader(nil, e.codec, c.Generation)
	// Segments of prev still referenced keep their place in the list, in
	// prev's order; the new segment is appended last.
	remap := map[int32]int32{}
	var scratch []byte
	for i, h := range hashes {
		if !full && i < len(prev.Chunks) && prev.Chunks[i].Hash == h {
			ref := prev.Chunks[i]
			if ref.Seg >= 0 {
				to, ok := remap[ref.Seg]
				if !ok {
					to = int32(len(m.Segments))
					remap[ref.Seg] = to
					m.Segments = append(m.Segments, prev.Segments[ref.Seg])
				}
				ref.Seg = to
			}
			m.Chunks[i] = ref
			continue
		}
		d.Changed++
		ref := ChunkRef{Hash: h, Seg: -1}
		scratch = scratch[:0]
		for p := 0; p < pagesPerChunk; p++ {
			off := i*ChunkSize + p*PageSize
			page := c.Memory[off : off+PageSize]
			switch {
			case off+PageSize <= len(c.Base) && bytes.Equal(page, c.Base[off:off+PageSize]):
				ref.Base |= 1 << p
			case isZero(page):
			default:
				ref.Stored |= 1 << p
				scratch = append(scratch, page...)
			}
		}
		if ref.Stored != 0 {
			before := len(seg)
			seg = e.compress(seg, scratch)
			ref.Seg = -2 // the new segment; its index is known at the end
			ref.Off, ref.Len = uint32(before-segmentHeader), uint32(len(seg)-before)
		}
		m.Chunks[i] = ref
	}
	if len(seg) > segmentHeader {
		idx := int32(len(m.Segments))
		m.Segments = append(m.Segments, SegmentRef{ID: id, Size: uint32(len(seg) - segmentHeader)})
		for i := range m.Chunks {
			if m.Chunks[i].Seg == -2 {
				m.Chunks[i].Seg = idx
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
// references, by id.
func (m *Manifest) Restore(dst []byte, segs map[string]*Segment, dirty func(page int) bool) error {
	if uint64(len(dst)) != uint64(m.MemorySize()) {
		return fmt.Errorf("%w: have %d bytes, snapshot has %d", ErrMemorySize, len(dst), m.MemorySize())
	}
	resolved := make([]*Segment, len(m.Segments))
	for i, ref := range m.Segments {
		s := segs[ref.ID]
		if s == nil {
			return fmt.Errorf("%w: %s", ErrMissingSegment, ref.ID)
		}
		if s.Size() != ref.Size || s.Codec != m.Codec {
			return fmt.Errorf("%w: segment %s does not match its manifest", ErrCorrupt, ref.ID)
		}
		resolved[i] = s
	}
	var scratch *[ChunkSize]byte
	defer func() {
		if scratch != nil {
			scratchPool.Put(scratch)
		}
	}()
	for i, c := range m.Chunks {
		out := dst[i*ChunkSize : (i+1)*ChunkSize : (i+1)*ChunkSize]
		for p := 0; p < pagesPerChunk; p++ {
			if (c.Stored|c.Base)&(1<<p) == 0 && (dirty == nil || dirty(i*pagesPerChunk+p)) {
				clear(out[p*PageSize : (p+1)*PageSize])
			}
		}
		if c.Stored == 0 {
			continue
		}
		blob := resolved[c.Seg].blobs[c.Off : c.Off+c.Len]
		if c.Stored == 0xFFFF {
			if err := inflate(m.Codec, out, blob); err != nil {
				return fmt.Errorf("%w: chunk %d: %v", ErrCorrupt, i, err)
			}
			continue
		}
		if scratch == nil {
			scratch = scratchPool.Get().(*[ChunkSize]byte)
		}
		size := bits.OnesCount16(c.Stored) * PageSize
		if err := inflate(m.Codec, scratch[:size:size], blob); err != nil {
			return fmt.Errorf("%w: chunk %d: %v", ErrCorrupt, i, err)
		}
		src := scratch[:size]
		for p := 0; p < pagesPerChunk; p++ {
			if c.Stored&(1<<p) != 0 {
				copy(out[p*PageSize:(p+1)*PageSize], src[:PageSize])
				src = src[PageSize:]
			}
		}
	}
	return nil
}

var scratchPool = sync.Pool{New: func() any { return new([ChunkSize]byte) }}
