package snapshot

import (
	"encoding/binary"
	"fmt"
	"math/bits"
)

var (
	manifestMagic = [8]byte{'W', 'K', 'M', 'A', 'N', 0, 0, 2}
	segmentMagic  = [8]byte{'W', 'K', 'S', 'E', 'G', 0, 0, 1}
)

// Manifest is a room's snapshot: its header, and per chunk of memory where
// the chunk's bytes live.
type Manifest struct {
	Header
	// Generation is that of the hold that wrote the manifest.
	Generation uint64
	// Seq counts the room's manifests: each one written is the previous
	// one's Seq + 1.
	Seq uint64
	// Codec compresses every blob the manifest references.
	Codec Codec
	// Segments are the segments chunks refer to, by index.
	Segments []SegmentRef
	// Chunks has one entry per 64 KiB chunk of memory.
	Chunks []ChunkRef
}

// SegmentRef names a segment and gives the size of its blob area.
type SegmentRef struct {
	ID   string
	Size uint32
}

// ChunkRef says what a chunk holds: Base pages equal the module's initial
// memory, the pages of the parts' Live masks are stored, the others are
// zero.
type ChunkRef struct {
	Base  uint16
	Parts []Part
}

// Part is a blob of stored pages: Blob says which pages of the chunk the
// blob at [Off, Off+Len) of segment Seg holds, in page order; Live says
// which of them are still the chunk's current content (a later snapshot
// may have stored newer versions of the others elsewhere). The Live masks
// of a chunk's parts are disjoint.
type Part struct {
	Seg        int32
	Off, Len   uint32
	Blob, Live uint16
}

// Stored is the mask of the chunk's stored pages.
func (c *ChunkRef) Stored() uint16 {
	var m uint16
	for _, p := range c.Parts {
		m |= p.Live
	}
	return m
}

// MemorySize is the memory's size in bytes.
func (m *Manifest) MemorySize() uint32 { return uint32(len(m.Chunks)) * ChunkSize }

// Pages reports how many 4 KiB pages the memory has, how many are stored,
// and how many equal the base image (the rest are zero).
func (m *Manifest) Pages() (total, stored, base int) {
	for i := range m.Chunks {
		stored += bits.OnesCount16(m.Chunks[i].Stored())
		base += bits.OnesCount16(m.Chunks[i].Base)
	}
	return len(m.Chunks) * pagesPerChunk, stored, base
}

// Bytes reports the blob bytes the manifest uses (live: the share of each
// blob its live pages make up) and the blob bytes of the segments it
// references (total); total - live is dead weight a compaction would drop.
func (m *Manifest) Bytes() (live, total uint64) {
	for i := range m.Chunks {
		for _, p := range m.Chunks[i].Parts {
			live += uint64(p.Len) * uint64(bits.OnesCount16(p.Live)) / uint64(bits.OnesCount16(p.Blob))
		}
	}
	for _, s := range m.Segments {
		total += uint64(s.Size)
	}
	return live, total
}

// largestSegment returns the index of the manifest's largest segment
// (-1 if it has none).
func (m *Manifest) largestSegment() int32 {
	best := int32(-1)
	for i, s := range m.Segments {
		if best < 0 || s.Size > m.Segments[best].Size {
			best = int32(i)
		}
	}
	return best
}

// SegmentIDs lists the segments the manifest references.
func (m *Manifest) SegmentIDs() []string {
	ids := make([]string, len(m.Segments))
	for i, s := range m.Segments {
		ids[i] = s.ID
	}
	return ids
}

// Encode returns the manifest's bytes.
func (m *Manifest) Encode() []byte {
	b := make([]byte, 0, 128+8*len(m.Globals)+len(m.RoomState)+40*len(m.Segments)+24*len(m.Chunks))
	b = append(b, manifestMagic[:]...)
	b = append(b, byte(m.Codec))
	b = binary.LittleEndian.AppendUint64(b, m.Generation)
	b = binary.LittleEndian.AppendUint64(b, m.Seq)
	b = appendBytes(b, []byte(m.ModuleHash))
	b = binary.LittleEndian.AppendUint32(b, m.ABI)
	b = binary.LittleEndian.AppendUint64(b, uint64(m.Nanotime))
	b = binary.LittleEndian.AppendUint64(b, uint64(m.WallUnixNano))
	b = binary.LittleEndian.AppendUint32(b, uint32(len(m.Globals)))
	for _, g := range m.Globals {
		b = binary.LittleEndian.AppendUint64(b, g)
	}
	b = appendBytes(b, m.RoomState)
	b = binary.LittleEndian.AppendUint32(b, uint32(len(m.Segments)))
	for _, s := range m.Segments {
		b = appendBytes(b, []byte(s.ID))
		b = binary.LittleEndian.AppendUint32(b, s.Size)
	}
	// The chunk table is most of a manifest and is rewritten with every
	// snapshot, so it is kept small: varints, and no part for a chunk with
	// nothing stored.
	b = binary.LittleEndian.AppendUint32(b, uint32(len(m.Chunks)))
	for _, c := range m.Chunks {
		b = binary.LittleEndian.AppendUint16(b, c.Base)
		b = append(b, byte(len(c.Parts)))
		for _, p := range c.Parts {
			b = binary.AppendUvarint(b, uint64(p.Seg))
			b = binary.AppendUvarint(b, uint64(p.Off))
			b = binary.AppendUvarint(b, uint64(p.Len))
			b = binary.LittleEndian.AppendUint16(b, p.Blob)
			b = binary.LittleEndian.AppendUint16(b, p.Live)
		}
	}
	return appendChecksum(b, 0)
}

// DecodeManifest parses and checks a manifest. The result does not alias b.
func DecodeManifest(b []byte) (*Manifest, error) {
	body, err := verify(b, manifestMagic, "manifest")
	if err != nil {
		return nil, err
	}
	d := decoder{b: body}
	m := &Manifest{Codec: Codec(d.u8()), Generation: d.u64(), Seq: d.u64()}
	if m.Codec > S2 {
		return nil, fmt.Errorf("%w: unknown codec %d", ErrCorrupt, m.Codec)
	}
	m.ModuleHash = string(d.bytes(maxString))
	m.ABI = d.u32()
	m.Nanotime = int64(d.u64())
	m.WallUnixNano = int64(d.u64())
	n := d.u32()
	if n > maxGlobals || uint64(n)*8 > uint64(len(d.b)) {
		return nil, fmt.Errorf("%w: %d globals", ErrCorrupt, n)
	}
	m.Globals = make([]uint64, n)
	for i := range m.Globals {
		m.Globals[i] = d.u64()
	}
	m.RoomState = append([]byte(nil), d.bytes(maxRoomState)...)
	n = d.u32()
	if n > maxSegments || uint64(n)*8 > uint64(len(d.b)) {
		return nil, fmt.Errorf("%w: %d segments", ErrCorrupt, n)
	}
	m.Segments = make([]SegmentRef, n)
	for i := range m.Segments {
		m.Segments[i] = SegmentRef{ID: string(d.bytes(maxString)), Size: d.u32()}
		if !validSegmentID(m.Segments[i].ID) {
			return nil, fmt.Errorf("%w: segment id %q", ErrCorrupt, m.Segments[i].ID)
		}
	}
	n = d.u32()
	if uint64(n)*ChunkSize > maxMemory || uint64(n)*3 > uint64(len(d.b)) {
		return nil, fmt.Errorf("%w: %d chunks", ErrCorrupt, n)
	}
	m.Chunks = make([]ChunkRef, n)
	for i := range m.Chunks {
		c := &m.Chunks[i]
		c.Base = d.u16()
		parts := int(d.u8())
		if parts > maxParts || d.bad {
			return nil, fmt.Errorf("%w: chunk %d has %d parts", ErrCorrupt, i, parts)
		}
		if parts > 0 {
			c.Parts = make([]Part, parts)
		}
		for k := range c.Parts {
			seg, off, ln := d.uvarint(), d.uvarint(), d.uvarint()
			if seg > maxSegments || off > maxMemory || ln > maxMemory {
				d.bad = true
			}
			c.Parts[k] = Part{Seg: int32(seg), Off: uint32(off), Len: uint32(ln), Blob: d.u16(), Live: d.u16()}
		}
	}
	if d.bad || len(d.b) != 0 {
		return nil, fmt.Errorf("%w: manifest fields", ErrCorrupt)
	}
	for i, c := range m.Chunks {
		if err := m.checkChunk(c); err != nil {
			return nil, fmt.Errorf("%w: chunk %d: %v", ErrCorrupt, i, err)
		}
	}
	return m, nil
}

// maxParts bounds the blobs one chunk's pages may be spread over; a
// snapshot that would pass it rewrites the chunk whole.
const maxParts = 4

func (m *Manifest) checkChunk(c ChunkRef) error {
	var live uint16
	for _, p := range c.Parts {
		switch {
		case p.Live == 0 || p.Live&^p.Blob != 0:
			return fmt.Errorf("a part's live pages are not a non-empty subset of its blob's")
		case p.Live&live != 0:
			return fmt.Errorf("a page stored in two parts")
		case p.Seg < 0 || int(p.Seg) >= len(m.Segments) || p.Len == 0:
			return fmt.Errorf("a part without a blob")
		case uint64(p.Off)+uint64(p.Len) > uint64(m.Segments[p.Seg].Size):
			return fmt.Errorf("blob past the end of its segment")
		}
		live |= p.Live
	}
	if live&c.Base != 0 {
		return fmt.Errorf("a page both stored and base")
	}
	return nil
}

// validSegmentID keeps segment ids to what SegmentID makes, so that a
// manifest cannot point a reader at another key.
func validSegmentID(id string) bool {
	if id == "" || len(id) > 64 {
		return false
	}
	for _, r := range id {
		if !(r >= '0' && r <= '9' || r >= 'a' && r <= 'f' || r == '-') {
			return false
		}
	}
	return true
}

// SegmentID names the segment a hold of the given generation writes with
// its manifest of the given sequence number. The generation comes first, so
// a collector can tell which hold wrote a segment from its name alone.
func SegmentID(generation, seq uint64) string { return fmt.Sprintf("%016x-%08x", generation, seq) }

// SegmentGeneration reads the generation out of a segment id.
func SegmentGeneration(id string) (uint64, bool) {
	var gen, seq uint64
	if !validSegmentID(id) {
		return 0, false
	}
	if _, err := fmt.Sscanf(id, "%016x-%x", &gen, &seq); err != nil {
		return 0, false
	}
	return gen, true
}

// Segment is a decoded segment: its blob area still aliases the input.
type Segment struct {
	Codec      Codec
	Generation uint64
	blobs      []byte
}

const segmentHeader = 8 + 1 + 8

func appendSegmentHeader(dst []byte, codec Codec, generation uint64) []byte {
	dst = append(dst, segmentMagic[:]...)
	dst = append(dst, byte(codec))
	return binary.LittleEndian.AppendUint64(dst, generation)
}

// DecodeSegment checks a segment and returns it; it aliases b.
func DecodeSegment(b []byte) (*Segment, error) {
	body, err := verify(b, segmentMagic, "segment")
	if err != nil {
		return nil, err
	}
	d := decoder{b: body}
	s := &Segment{Codec: Codec(d.u8()), Generation: d.u64()}
	if d.bad || s.Codec > S2 {
		return nil, fmt.Errorf("%w: segment header", ErrCorrupt)
	}
	s.blobs = d.b
	return s, nil
}

// Size is the size of the segment's blob area.
func (s *Segment) Size() uint32 { return uint32(len(s.blobs)) }
