// Package snapshot is the stored form of a hibernated room: a small,
// mutable manifest that says how to rebuild the room, and immutable
// segments that hold its memory.
//
// Memory is cut into 64 KiB chunks of sixteen 4 KiB pages. The manifest
// keeps, per chunk, a 64-bit hash of its content and where its bytes live:
// a page that is all zeros, or that still equals the module's initial
// memory (its data segments, mostly), is only a bit in the chunk's masks;
// the chunk's other pages are compressed together into a blob of some
// segment. A hibernation hashes every chunk and writes a new segment with
// only the chunks whose hash changed since the previous manifest (a delta),
// then a new manifest that points the changed chunks at it and keeps the
// others where they were. When the chain of segments a manifest references
// grows past a bound, or holds more dead bytes than live ones, the next
// hibernation writes a full segment instead (compaction), and older
// segments become garbage.
//
// A restore starts from a fresh instance, whose memory already holds the
// initial image, and writes only the stored pages (and clears zero pages
// where the fresh memory is not zero): its work follows what the room
// changed, not the size of its memory. Manifests and segments end with a
// CRC-32C, so a torn or altered object is an error, never a room that wakes
// with garbage in its heap.
//
// The package does pure work on byte slices: no I/O, no wazero.
package snapshot

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"runtime"
	"sync"

	"github.com/klauspost/compress/s2"
	"github.com/klauspost/compress/zstd"
)

// ChunkSize is the unit of change detection and of segment blobs: the
// wasm page size.
const ChunkSize = 64 << 10

// PageSize is the granularity at which a chunk's pages are told apart as
// zero, unchanged from the base, or stored.
const PageSize = 4 << 10

const pagesPerChunk = ChunkSize / PageSize

// Codec names how blobs are compressed.
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
	// ErrCorrupt means the bytes are not a whole manifest or segment of
	// this format: truncated, altered, or something else entirely.
	ErrCorrupt = errors.New("snapshot: corrupt")
	// ErrMissingSegment means a manifest names a segment that was not given.
	ErrMissingSegment = errors.New("snapshot: missing segment")
	// ErrMemorySize means the destination given to Restore does not have
	// the snapshot's memory size.
	ErrMemorySize = errors.New("snapshot: memory size mismatch")
)

// Limits a decoder enforces before allocating.
const (
	maxGlobals   = 1 << 16
	maxRoomState = 64 << 20
	maxString    = 1024
	maxSegments  = 1 << 16
	maxMemory    = 4 << 30 // the wasm32 address space
)

// Header is what a manifest says about the room besides its memory.
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

// Encoder compresses blobs. It is safe for concurrent use.
type Encoder struct {
	codec    Codec
	zenc     *zstd.Encoder
	maxChain int
}

// Options tune an Encoder; a zero field means its Default* constant.
type Options struct {
	// MaxChain bounds how many segments a manifest may reference; a
	// hibernation that would pass it compacts instead (DefaultMaxChain).
	MaxChain int
}

// DefaultMaxChain keeps a wake's reads to a few segments while most
// hibernations still write only their delta.
const DefaultMaxChain = 8

func (o Options) withDefaults() Options {
	if o.MaxChain <= 0 {
		o.MaxChain = DefaultMaxChain
	}
	return o
}

// NewEncoder returns an encoder for codec.
func NewEncoder(codec Codec, opts Options) (*Encoder, error) {
	opts = opts.withDefaults()
	e := &Encoder{codec: codec, maxChain: opts.MaxChain}
	switch codec {
	case Raw, S2:
	case Zstd:
		// One encoder state per processor: rooms' snapshots are taken
		// on their own workers at once (every commit of a durable room),
		// and with one state they wait for each other.
		z, err := zstd.NewWriter(nil, zstd.WithEncoderLevel(zstd.SpeedFastest),
			zstd.WithEncoderConcurrency(runtime.GOMAXPROCS(0)), zstd.WithZeroFrames(true))
		if err != nil {
			return nil, err
		}
		e.zenc = z
	default:
		return nil, fmt.Errorf("snapshot: unknown codec %d", codec)
	}
	return e, nil
}

// Codec is the encoder's codec.
func (e *Encoder) Codec() Codec { return e.codec }

func (e *Encoder) compress(dst, src []byte) []byte {
	switch e.codec {
	case Zstd:
		return e.zenc.EncodeAll(src, dst)
	case S2:
		n := len(dst)
		dst = grow(dst, s2.MaxEncodedLen(len(src)))
		out := s2.Encode(dst[n:cap(dst)], src)
		return dst[:n+len(out)]
	default:
		return append(dst, src...)
	}
}

// inflate decompresses blob into out, which it must fill exactly.
func inflate(codec Codec, out, blob []byte) error {
	var got []byte
	var err error
	switch codec {
	case Raw:
		if len(blob) != len(out) {
			return errors.New("blob of the wrong size")
		}
		copy(out, blob)
		return nil
	case Zstd:
		got, err = zstdDecoder().DecodeAll(blob, out[:0])
	case S2:
		if n, e := s2.DecodedLen(blob); e != nil || n != len(out) {
			return errors.New("blob of the wrong size")
		}
		got, err = s2.Decode(out, blob)
	default:
		return fmt.Errorf("unknown codec %d", codec)
	}
	if err != nil {
		return err
	}
	if len(got) != len(out) || (len(out) > 0 && &got[0] != &out[0]) {
		return errors.New("blob of the wrong size")
	}
	return nil
}

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

func checksum(b []byte) uint32 { return crc32.Checksum(b, castagnoli) }

// appendChecksum seals an object: its CRC-32C from start to the end.
func appendChecksum(dst []byte, start int) []byte {
	return binary.LittleEndian.AppendUint32(dst, checksum(dst[start:]))
}

// verify checks an object's magic and checksum and returns its body.
func verify(b []byte, magic [8]byte, what string) ([]byte, error) {
	if len(b) < len(magic)+4 {
		return nil, fmt.Errorf("%w: %s too short", ErrCorrupt, what)
	}
	body, sum := b[:len(b)-4], binary.LittleEndian.Uint32(b[len(b)-4:])
	if checksum(body) != sum {
		return nil, fmt.Errorf("%w: %s checksum mismatch", ErrCorrupt, what)
	}
	if [8]byte(body[:8]) != magic {
		return nil, fmt.Errorf("%w: not a wasmkeep %s (or an unknown format version)", ErrCorrupt, what)
	}
	return body[8:], nil
}

var zstdDecoder = sync.OnceValue(func() *zstd.Decoder {
	// A blob never decodes to more than a chunk, which bounds what a
	// hostile frame can make the decoder allocate. The frames' own
	// checksums are not checked: DecodeSegment checked the CRC-32C of the
	// whole segment, and hashing every decoded byte again was a twentieth
	// of a wake's restore.
	d, err := zstd.NewReader(nil, zstd.WithDecoderConcurrency(0),
		zstd.WithDecoderMaxMemory(ChunkSize), zstd.WithDecoderMaxWindow(ChunkSize), zstd.IgnoreChecksum(true))
	if err != nil {
		panic(err)
	}
	return d
})

func isZero(b []byte) bool {
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

// decoder reads fields in order and remembers the first failure, so the
// object decoders read as straight lines and check once at the end.
type decoder struct {
	b   []byte
	bad bool
}

func (d *decoder) take(n int) []byte {
	if d.bad || len(d.b) < n {
		d.bad = true
		return make([]byte, n)
	}
	v := d.b[:n]
	d.b = d.b[n:]
	return v
}

func (d *decoder) u8() uint8   { return d.take(1)[0] }
func (d *decoder) u16() uint16 { return binary.LittleEndian.Uint16(d.take(2)) }
func (d *decoder) u32() uint32 { return binary.LittleEndian.Uint32(d.take(4)) }
func (d *decoder) u64() uint64 { return binary.LittleEndian.Uint64(d.take(8)) }

func (d *decoder) uvarint() uint64 {
	if d.bad {
		return 0
	}
	v, n := binary.Uvarint(d.b)
	// Only the shortest encoding is accepted, so that a manifest has one
	// encoding (decode then encode gives back the same bytes).
	if n <= 0 || n != len(binary.AppendUvarint(nil, v)) {
		d.bad = true
		return 0
	}
	d.b = d.b[n:]
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
