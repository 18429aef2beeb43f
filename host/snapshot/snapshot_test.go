package snapshot

import (
	"bytes"
	"errors"
	"math/rand/v2"
	"testing"
)

// testMemory builds a memory image that looks like a guest heap: some zero
// chunks, some compressible, some random.
func testMemory(pages int, seed uint64) []byte {
	r := rand.New(rand.NewPCG(seed, 1))
	mem := make([]byte, pages*ChunkSize)
	for p := 0; p < pages; p++ {
		chunk := mem[p*ChunkSize : (p+1)*ChunkSize]
		switch p % 4 {
		case 0: // zero
		case 1:
			for i := range chunk {
				chunk[i] = byte(i / 64)
			}
		case 2:
			for i := 0; i < len(chunk); i += 8 {
				chunk[i] = byte(r.Uint32())
			}
		case 3:
			for i := range chunk {
				chunk[i] = byte(r.Uint32())
			}
		}
	}
	return mem
}

func testHeader() *Header {
	return &Header{
		ModuleHash:   "sha256:abc",
		ABI:          1,
		Globals:      []uint64{1, 2, 1 << 63, 0},
		Nanotime:     123456789,
		WallUnixNano: 987654321,
		RoomState:    []byte("room state"),
	}
}

func TestRoundTrip(t *testing.T) {
	for _, codec := range []Codec{Raw, Zstd, S2} {
		t.Run(codec.String(), func(t *testing.T) {
			enc, err := NewEncoder(codec)
			if err != nil {
				t.Fatal(err)
			}
			mem := testMemory(9, 7)
			h := testHeader()
			b, err := enc.Encode(nil, h, mem, nil)
			if err != nil {
				t.Fatal(err)
			}
			s, err := Decode(b)
			if err != nil {
				t.Fatal(err)
			}
			if s.ModuleHash != h.ModuleHash || s.ABI != h.ABI || s.Nanotime != h.Nanotime ||
				s.WallUnixNano != h.WallUnixNano || !bytes.Equal(s.RoomState, h.RoomState) {
				t.Fatalf("header mismatch: %+v", s.Header)
			}
			if len(s.Globals) != len(h.Globals) {
				t.Fatalf("globals: %v", s.Globals)
			}
			for i := range h.Globals {
				if s.Globals[i] != h.Globals[i] {
					t.Fatalf("global %d: %d != %d", i, s.Globals[i], h.Globals[i])
				}
			}
			// testMemory: chunks 0, 4, 8 are zero; 1, 5 compressible;
			// 2, 6 sparse; 3, 7 random: every page of those is stored.
			total, stored, _ := s.Pages()
			if total != 9*16 || stored != 6*16 {
				t.Fatalf("pages total=%d stored=%d, want %d and %d", total, stored, 9*16, 6*16)
			}
			// Restore into garbage: zero chunks must be cleared when dirty.
			dst := bytes.Repeat([]byte{0xAA}, len(mem))
			if err := s.ReadMemory(dst, nil); err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(dst, mem) {
				t.Fatal("memory differs after round trip")
			}
		})
	}
}

func TestReadMemorySkipsCleanChunks(t *testing.T) {
	enc, _ := NewEncoder(S2)
	mem := testMemory(4, 1)
	b, _ := enc.Encode(nil, testHeader(), mem, nil)
	s, err := Decode(b)
	if err != nil {
		t.Fatal(err)
	}
	dst := bytes.Repeat([]byte{0xAA}, len(mem))
	if err := s.ReadMemory(dst, func(page int) bool { return page == 1 }); err != nil {
		t.Fatal(err)
	}
	// Chunk 0 is zero in the snapshot; its page 1 is declared dirty and
	// cleared, the others are clean and left untouched.
	if dst[0] != 0xAA || dst[PageSize] != 0 || dst[2*PageSize] != 0xAA {
		t.Fatalf("zero pages: %x %x %x", dst[0], dst[PageSize], dst[2*PageSize])
	}
	if !bytes.Equal(dst[ChunkSize:], mem[ChunkSize:]) {
		t.Fatal("stored chunks differ")
	}
}

func TestBaseChunksAreNotStored(t *testing.T) {
	enc, _ := NewEncoder(Zstd)
	base := testMemory(6, 2)
	mem := bytes.Clone(base)
	mem = append(mem, make([]byte, 2*ChunkSize)...) // grown, zero
	mem[3*ChunkSize+17] ^= 1                        // one page changed
	clear(mem[5*ChunkSize+PageSize : 5*ChunkSize+2*PageSize])
	copy(mem[7*ChunkSize:], "grown and written")
	b, err := enc.Encode(nil, testHeader(), mem, base)
	if err != nil {
		t.Fatal(err)
	}
	s, err := Decode(b)
	if err != nil {
		t.Fatal(err)
	}
	total, stored, same := s.Pages()
	// Stored: the changed page of chunk 3 and the written page of chunk 7.
	// Zero: the cleared page of chunk 5 and chunks 6–7's other pages. The
	// rest equals the base (zero pages of the base count as base).
	if total != 8*16 || stored != 2 || same != 6*16-2 {
		t.Fatalf("total=%d stored=%d base=%d", total, stored, same)
	}
	dst := append(bytes.Clone(base), make([]byte, 2*ChunkSize)...)
	if err := s.ReadMemory(dst, nil); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(dst, mem) {
		t.Fatal("restored memory differs")
	}
}

func TestReadMemoryWrongSize(t *testing.T) {
	enc, _ := NewEncoder(Zstd)
	b, _ := enc.Encode(nil, testHeader(), testMemory(2, 1), nil)
	s, _ := Decode(b)
	if err := s.ReadMemory(make([]byte, ChunkSize), nil); !errors.Is(err, ErrMemorySize) {
		t.Fatalf("got %v, want ErrMemorySize", err)
	}
}

func TestEncodeRejectsPartialPage(t *testing.T) {
	enc, _ := NewEncoder(Raw)
	if _, err := enc.Encode(nil, testHeader(), make([]byte, 100), nil); err == nil {
		t.Fatal("encoded memory that is not whole pages")
	}
}

func TestDecodeDetectsEveryFlippedByte(t *testing.T) {
	enc, _ := NewEncoder(Zstd)
	b, _ := enc.Encode(nil, testHeader(), testMemory(2, 3), nil)
	for _, i := range []int{0, 8, 9, 20, len(b) / 2, len(b) - 5, len(b) - 1} {
		c := bytes.Clone(b)
		c[i] ^= 0x40
		if _, err := Decode(c); !errors.Is(err, ErrCorrupt) {
			t.Fatalf("flip at %d: got %v, want ErrCorrupt", i, err)
		}
	}
	for _, n := range []int{0, 3, 11, len(b) - 1} {
		if _, err := Decode(b[:n]); !errors.Is(err, ErrCorrupt) {
			t.Fatalf("truncated to %d: got %v", n, err)
		}
	}
}

func FuzzDecode(f *testing.F) {
	for _, codec := range []Codec{Raw, Zstd, S2} {
		enc, _ := NewEncoder(codec)
		b, _ := enc.Encode(nil, testHeader(), testMemory(2, 5), nil)
		f.Add(b)
	}
	f.Add([]byte("WKSNAP\x00\x02"))
	f.Fuzz(func(t *testing.T, b []byte) {
		s, err := Decode(b)
		if err != nil {
			return
		}
		if s.MemorySize > 64*ChunkSize {
			return
		}
		_ = s.ReadMemory(make([]byte, s.MemorySize), nil)
	})
}

// FuzzDecodeUnchecked exercises the parser behind the checksum: it fixes up
// the CRC of each mutated input so the fuzzer reaches the field decoding.
func FuzzDecodeUnchecked(f *testing.F) {
	enc, _ := NewEncoder(Zstd)
	b, _ := enc.Encode(nil, testHeader(), testMemory(2, 5), nil)
	f.Add(b[:len(b)-4])
	f.Fuzz(func(t *testing.T, body []byte) {
		s, err := Decode(withChecksum(body))
		if err != nil {
			return
		}
		if s.MemorySize > 64*ChunkSize {
			return
		}
		_ = s.ReadMemory(make([]byte, s.MemorySize), nil)
	})
}

func withChecksum(body []byte) []byte {
	out := bytes.Clone(body)
	sum := crc32Sum(out)
	return append(out, byte(sum), byte(sum>>8), byte(sum>>16), byte(sum>>24))
}

func BenchmarkEncode(b *testing.B) {
	mem := testMemory(56, 9)
	for _, codec := range []Codec{Raw, Zstd, S2} {
		enc, _ := NewEncoder(codec)
		b.Run(codec.String(), func(b *testing.B) {
			var buf []byte
			b.SetBytes(int64(len(mem)))
			for b.Loop() {
				buf, _ = enc.Encode(buf[:0], testHeader(), mem, nil)
			}
			b.ReportMetric(float64(len(buf)), "bytes/snapshot")
		})
	}
}

func BenchmarkDecode(b *testing.B) {
	mem := testMemory(56, 9)
	dst := make([]byte, len(mem))
	for _, codec := range []Codec{Raw, Zstd, S2} {
		enc, _ := NewEncoder(codec)
		buf, _ := enc.Encode(nil, testHeader(), mem, nil)
		b.Run(codec.String(), func(b *testing.B) {
			b.SetBytes(int64(len(mem)))
			for b.Loop() {
				s, err := Decode(buf)
				if err != nil {
					b.Fatal(err)
				}
				if err := s.ReadMemory(dst, nil); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
