// Package snapshot encodes and decodes a hibernated room: the facts needed
// to restore its instance (module hash, ABI version, globals, the guest's
// monotonic clock), the host-side room state, and its linear memory.
//
// Memory is cut into 64 KiB chunks of sixteen 4 KiB pages. A page that is
// all zeros, or that still holds what a fresh instance of the module starts
// with (its data segments, mostly), is stored as nothing but a bit in its
// chunk's masks; the other pages of a chunk are compressed together. A
// decoder restores into a fresh instance's memory, so it writes only the
// stored pages (and clears zero pages where the fresh memory is not zero):
// the work, and the pages the process touches, follow what the room changed,
// not the size of its memory. The
// whole encoding ends with a CRC-32C so that a torn or corrupted object is an
// error, never a room that wakes with garbage in its heap.
//
// The package does pure work on byte slices: no I/O, no wazero.
package snapshot

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"math/bits"
	"sync"

	"github.com/klauspost/compress/s2"
	"github.com/klauspost/compress/zstd"
)

// ChunkSize is the unit in which memory is stored: the wasm page size.
const ChunkSize = 64 << 10

// PageSize is the granularity at which a chunk's pages are told apart as
// zero, unchanged from the base, or stored.
const PageSize = 4 << 10

const pagesPerChunk = ChunkSize / PageSize

// magic begins every snapshot; its last byte is the format version.
var magic = [8]byte{'W', 'K', 'S', 'N', 'A', 'P', 0, 2}

// Codec names how chunks are compressed.
type Codec uint8

// Codecs. Raw exists for tests and for measuring the others against.
const (
	Raw  Codec = 0
	Zstd Codec = 1
	S2   Codec = 2
)

func (c Codec) String() string {
	switch c {
	case Raw:
		return "raw"
	case Zstd:
		return "zstd"
	case S2:
		return "s2"
	}
	return fmt.Sprintf("codec(%d)", uint8(c))
}

// Errors.
var (
	// ErrCorrupt means the bytes are not a whole snapshot of this format:
	// truncated, altered, or not a snapshot at all.
	ErrCorrupt = errors.New("snapshot: corrupt")
	// ErrMemorySize means the destination given to ReadMemory does not have
	// the snapshot's memory size.
	ErrMemorySize = errors.New("snapshot: memory size mismatch")
)

// Limits a decoder enforces before allocating.
const (
	maxGlobals   = 1 << 16
	maxRoomState = 64 << 20
	maxHashLen   = 128
	maxMemory    = 4 << 30 // the wasm32 address space
)

// Header is everything in a snapshot but the memory.
type Header struct {
	// ModuleHash identifies the exact module the memory belongs to.
	ModuleHash string
	// ABI is the ABI version the module was running under.
	ABI uint32
	// Globals holds every defined global's raw value, in index order.
	Globals []uint64
	// Nanotime is the guest's monotonic clock when the snapshot was taken.
	Nanotime int64
	// WallUnixNano is the host's wall clock at the same moment; a restore
	// advances the guest clock by the wall time that passed since.
	WallUnixNano int64
	// RoomState is the host-side room state, opaque to this package.
	RoomState []byte
}

// Snapshot is a decoded snapshot whose chunks still alias the input.
type Snapshot struct {
	Header
	// MemorySize is the linear memory's size in bytes.
	MemorySize uint32
	codec      Codec
	chunks     []chunk
}

// chunk is one 64 KiB chunk as stored: which pages are stored (their bytes
// compressed together in data, in page order), which equal the base, and
// (neither) which are zero.
type chunk struct {
	stored, base uint16
	data         []byte
}

// Encoder compresses snapshots. It is safe for concurrent use.
type Encoder struct {
	codec Codec
	zenc  *zstd.Encoder
}

// NewEncoder returns an encoder for codec.
func NewEncoder(codec Codec) (*Encoder, error) {
	e := &Encoder{codec: codec}
	switch codec {
	case Raw, S2:
	case Zstd:
		z, err := zstd.NewWriter(nil, zstd.WithEncoderLevel(zstd.SpeedFastest),
			zstd.WithEncoderConcurrency(1), zstd.WithZeroFrames(true))
		if err != nil {
			return nil, err
		}
		e.zenc = z
	default:
		return nil, fmt.Errorf("snapshot: unknown codec %d", codec)
	}
	return e, nil
}

// Encode appends the encoding of h and mem to dst. mem is read, never kept,
// so it may be a view of a live instance's memory (the instance must not run
// meanwhile). len(mem) must be a multiple of ChunkSize. Chunks equal to the
// same bytes of base (the module's initial memory, or nil) are not stored.
func (e *Encoder) Encode(dst []byte, h *Header, mem, base []byte) ([]byte, error) {
	if len(mem)%ChunkSize != 0 || uint64(len(mem)) > maxMemory {
		return nil, fmt.Errorf("snapshot: memory of %d bytes is not a whole number of pages", len(mem))
	}
	start := len(dst)
	dst = append(dst, magic[:]...)
	dst = append(dst, byte(e.codec))
	dst = appendBytes(dst, []byte(h.ModuleHash))
	dst = binary.LittleEndian.AppendUint32(dst, h.ABI)
	dst = binary.LittleEndian.AppendUint64(dst, uint64(h.Nanotime))
	dst = binary.LittleEndian.AppendUint64(dst, uint64(h.WallUnixNano))
	dst = binary.LittleEndian.AppendUint32(dst, uint32(len(h.Globals)))
	for _, g := range h.Globals {
		dst = binary.LittleEndian.AppendUint64(dst, g)
	}
	dst = appendBytes(dst, h.RoomState)
	dst = binary.LittleEndian.AppendUint32(dst, uint32(len(mem)/ChunkSize))

	// The chunk table holds, per chunk, the stored length and the stored
	// and base page masks; it is filled in as the chunks are compressed
	// behind it.
	nchunks := len(mem) / ChunkSize
	table := len(dst)
	dst = append(dst, make([]byte, 8*nchunks)...)
	var scratch []byte
	for i := 0; i < nchunks; i++ {
		var stored, same uint16
		scratch = scratch[:0]
		whole := mem[i*ChunkSize : (i+1)*ChunkSize]
		for p := 0; p < pagesPerChunk; p++ {
			off := i*ChunkSize + p*PageSize
			page := mem[off : off+PageSize]
			switch {
			case off+PageSize <= len(base) && bytes.Equal(page, base[off:off+PageSize]):
				same |= 1 << p
			case isZero(page):
			default:
				stored |= 1 << p
				scratch = append(scratch, page...)
			}
		}
		ent := dst[table+8*i:]
		binary.LittleEndian.PutUint16(ent[4:], stored)
		binary.LittleEndian.PutUint16(ent[6:], same)
		if stored == 0 {
			continue
		}
		src := scratch
		if stored == 0xFFFF {
			src = whole
		}
		before := len(dst)
		dst = e.compress(dst, src)
		binary.LittleEndian.PutUint32(dst[table+8*i:], uint32(len(dst)-before))
	}
	return binary.LittleEndian.AppendUint32(dst, crc32.Checksum(dst[start:], castagnoli)), nil
}

func (e *Encoder) compress(dst, chunk []byte) []byte {
	switch e.codec {
	case Zstd:
		return e.zenc.EncodeAll(chunk, dst)
	case S2:
		n := len(dst)
		dst = grow(dst, s2.MaxEncodedLen(len(chunk)))
		out := s2.Encode(dst[n:cap(dst)], chunk)
		return dst[:n+len(out)]
	default:
		return append(dst, chunk...)
	}
}

// Decode parses a snapshot. The result aliases b; b must not change while
// the result is in use.
func Decode(b []byte) (*Snapshot, error) {
	if len(b) < len(magic)+4 {
		return nil, ErrCorrupt
	}
	body, sum := b[:len(b)-4], binary.LittleEndian.Uint32(b[len(b)-4:])
	if crc32.Checksum(body, castagnoli) != sum {
		return nil, fmt.Errorf("%w: checksum mismatch", ErrCorrupt)
	}
	if [8]byte(body[:8]) != magic {
		return nil, fmt.Errorf("%w: not a wasmkeep snapshot (or an unknown format version)", ErrCorrupt)
	}
	d := decoder{b: body[8:]}
	s := &Snapshot{codec: Codec(d.u8())}
	if s.codec > S2 {
		return nil, fmt.Errorf("%w: unknown codec %d", ErrCorrupt, s.codec)
	}
	s.ModuleHash = string(d.bytes(maxHashLen))
	s.ABI = d.u32()
	s.Nanotime = int64(d.u64())
	s.WallUnixNano = int64(d.u64())
	n := d.u32()
	if n > maxGlobals || uint64(n)*8 > uint64(len(d.b)) {
		return nil, fmt.Errorf("%w: %d globals", ErrCorrupt, n)
	}
	s.Globals = make([]uint64, n)
	for i := range s.Globals {
		s.Globals[i] = d.u64()
	}
	s.RoomState = d.bytes(maxRoomState)
	nchunks := d.u32()
	if uint64(nchunks)*ChunkSize > maxMemory || uint64(nchunks)*8 > uint64(len(d.b)) {
		return nil, fmt.Errorf("%w: %d chunks", ErrCorrupt, nchunks)
	}
	s.MemorySize = nchunks * ChunkSize
	s.chunks = make([]chunk, nchunks)
	lens := make([]uint32, nchunks)
	for i := range s.chunks {
		lens[i] = d.u32()
		s.chunks[i].stored = d.u16()
		s.chunks[i].base = d.u16()
	}
	if d.bad {
		return nil, ErrCorrupt
	}
	for i, n := range lens {
		c := &s.chunks[i]
		if c.stored&c.base != 0 || (n == 0) != (c.stored == 0) {
			return nil, fmt.Errorf("%w: chunk %d has inconsistent masks", ErrCorrupt, i)
		}
		if uint64(n) > uint64(len(d.b)) {
			return nil, fmt.Errorf("%w: chunk %d past the end", ErrCorrupt, i)
		}
		c.data, d.b = d.b[:n:n], d.b[n:]
	}
	if len(d.b) != 0 {
		return nil, fmt.Errorf("%w: %d trailing bytes", ErrCorrupt, len(d.b))
	}
	return s, nil
}

// Pages reports how many 4 KiB pages the memory has, how many are stored,
// and how many are equal to the base image (the rest are zero).
func (s *Snapshot) Pages() (total, stored, base int) {
	for _, c := range s.chunks {
		stored += bits.OnesCount16(c.stored)
		base += bits.OnesCount16(c.base)
	}
	return len(s.chunks) * pagesPerChunk, stored, base
}

// ReadMemory inflates the memory into dst, which must be exactly
// MemorySize bytes and already hold the base image the snapshot was encoded
// against (a fresh instance's memory does): pages equal to the base are left
// as they are. Zero pages are cleared only where dirty(page) says dst's page
// may hold non-zero bytes (nil dirty: every zero page is cleared), so the
// pages of a fresh instance that are zero in both stay untouched.
func (s *Snapshot) ReadMemory(dst []byte, dirty func(page int) bool) error {
	if uint64(len(dst)) != uint64(s.MemorySize) {
		return fmt.Errorf("%w: have %d bytes, snapshot has %d", ErrMemorySize, len(dst), s.MemorySize)
	}
	var scratch *[ChunkSize]byte
	defer func() {
		if scratch != nil {
			scratchPool.Put(scratch)
		}
	}()
	for i := range s.chunks {
		c := &s.chunks[i]
		out := dst[i*ChunkSize : (i+1)*ChunkSize : (i+1)*ChunkSize]
		for p := 0; p < pagesPerChunk; p++ {
			if (c.stored|c.base)&(1<<p) == 0 && (dirty == nil || dirty(i*pagesPerChunk+p)) {
				clear(out[p*PageSize : (p+1)*PageSize])
			}
		}
		if c.stored == 0 {
			continue
		}
		n := bits.OnesCount16(c.stored) * PageSize
		if c.stored == 0xFFFF {
			if err := s.inflate(out, c.data); err != nil {
				return fmt.Errorf("%w: chunk %d: %v", ErrCorrupt, i, err)
			}
			continue
		}
		if scratch == nil {
			scratch = scratchPool.Get().(*[ChunkSize]byte)
		}
		if err := s.inflate(scratch[:n:n], c.data); err != nil {
			return fmt.Errorf("%w: chunk %d: %v", ErrCorrupt, i, err)
		}
		src := scratch[:n]
		for p := 0; p < pagesPerChunk; p++ {
			if c.stored&(1<<p) != 0 {
				copy(out[p*PageSize:(p+1)*PageSize], src[:PageSize])
				src = src[PageSize:]
			}
		}
	}
	return nil
}

var scratchPool = sync.Pool{New: func() any { return new([ChunkSize]byte) }}

// inflate decompresses c into out, which it must fill exactly.
func (s *Snapshot) inflate(out, c []byte) error {
	var got []byte
	var err error
	switch s.codec {
	case Raw:
		if len(c) != len(out) {
			return errors.New("stored pages of the wrong size")
		}
		copy(out, c)
		return nil
	case Zstd:
		got, err = zstdDecoder().DecodeAll(c, out[:0])
	case S2:
		if n, e := s2.DecodedLen(c); e != nil || n != len(out) {
			return errors.New("stored pages of the wrong size")
		}
		got, err = s2.Decode(out, c)
	}
	if err != nil {
		return err
	}
	if len(got) != len(out) || &got[0] != &out[0] {
		return errors.New("stored pages of the wrong size")
	}
	return nil
}

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

var zstdDecoder = sync.OnceValue(func() *zstd.Decoder {
	// Decoding goes straight into the caller's buffer; a chunk never needs
	// more than ChunkSize, which bounds what a hostile frame can make it do.
	d, err := zstd.NewReader(nil, zstd.WithDecoderConcurrency(0),
		zstd.WithDecoderMaxMemory(ChunkSize), zstd.WithDecoderMaxWindow(ChunkSize))
	if err != nil {
		panic(err)
	}
	return d
})

func isZero(b []byte) bool {
	// Compare eight bytes at a time; the compiler keeps this loop tight.
	for len(b) >= 8 {
		if binary.LittleEndian.Uint64(b) != 0 {
			return false
		}
		b = b[8:]
	}
	for _, c := range b {
		if c != 0 {
			return false
		}
	}
	return true
}

// IsZero reports whether b holds only zeros. Exported for callers that
// build the dirty map of a fresh instance.
func IsZero(b []byte) bool { return isZero(b) }

func grow(b []byte, n int) []byte {
	if cap(b)-len(b) >= n {
		return b
	}
	nb := make([]byte, len(b), len(b)+n+len(b)/4)
	copy(nb, b)
	return nb
}

func appendBytes(dst, b []byte) []byte {
	dst = binary.LittleEndian.AppendUint32(dst, uint32(len(b)))
	return append(dst, b...)
}

type decoder struct {
	b   []byte
	bad bool
}

func (d *decoder) u8() uint8 {
	if d.bad || len(d.b) < 1 {
		d.bad = true
		return 0
	}
	v := d.b[0]
	d.b = d.b[1:]
	return v
}

func (d *decoder) u16() uint16 {
	if d.bad || len(d.b) < 2 {
		d.bad = true
		return 0
	}
	v := binary.LittleEndian.Uint16(d.b)
	d.b = d.b[2:]
	return v
}

func (d *decoder) u32() uint32 {
	if d.bad || len(d.b) < 4 {
		d.bad = true
		return 0
	}
	v := binary.LittleEndian.Uint32(d.b)
	d.b = d.b[4:]
	return v
}

func (d *decoder) u64() uint64 {
	if d.bad || len(d.b) < 8 {
		d.bad = true
		return 0
	}
	v := binary.LittleEndian.Uint64(d.b)
	d.b = d.b[8:]
	return v
}

func (d *decoder) bytes(max uint32) []byte {
	n := d.u32()
	if d.bad || n > max || uint64(n) > uint64(len(d.b)) {
		d.bad = true
		return nil
	}
	v := d.b[:n:n]
	d.b = d.b[n:]
	return v
}

func crc32Sum(b []byte) uint32 { return crc32.Checksum(b, castagnoli) }
