package snapshot

import (
	"bytes"
	"errors"
	"math/rand/v2"
	"slices"
	"testing"
	"time"
)

// testMemory builds a memory image that looks like a guest heap: chunk
// p%4 == 0 zero, 1 compressible, 2 sparse, 3 random.
func testMemory(chunks int, seed uint64) []byte {
	r := rand.New(rand.NewPCG(seed, 1))
	mem := make([]byte, chunks*ChunkSize)
	for p := 0; p < chunks; p++ {
		chunk := mem[p*ChunkSize : (p+1)*ChunkSize]
		switch p % 4 {
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

func testHeader() Header {
	return Header{
		ModuleHash:   "sha256:abc",
		ABI:          1,
		Globals:      []uint64{1, 2, 1 << 63, 0},
		Nanotime:     123456789,
		WallUnixNano: 987654321,
		RoomState:    []byte("room state"),
	}
}

// store plays the bucket: it keeps segments by id and checks each delta's
// invariants as it goes.
type store struct {
	t    *testing.T
	segs map[string][]byte
}

func (s *store) apply(d *Delta) *Manifest {
	s.t.Helper()
	if d.Segment != nil {
		if _, dup := s.segs[d.SegmentID]; dup {
			s.t.Fatalf("segment %s written twice", d.SegmentID)
		}
		s.segs[d.SegmentID] = d.Segment
	}
	// The manifest travels as bytes.
	m, err := DecodeManifest(d.Manifest.Encode())
	if err != nil {
		s.t.Fatal(err)
	}
	for _, g := range d.Garbage {
		if slices.Contains(m.SegmentIDs(), g) {
			s.t.Fatalf("garbage %s still referenced", g)
		}
		delete(s.segs, g)
	}
	return m
}

func (s *store) restore(m *Manifest, base []byte) []byte {
	s.t.Helper()
	segs := map[string]*Segment{}
	for id, b := range s.segs {
		seg, err := DecodeSegment(b)
		if err != nil {
			s.t.Fatal(err)
		}
		segs[id] = seg
	}
	dst := make([]byte, m.MemorySize())
	copy(dst, base) // a fresh instance holds the base image
	hashes, err := m.Restore(dst, segs, nil, nil)
	if err != nil {
		s.t.Fatal(err)
	}
	if !slices.Equal(hashes, HashPages(dst)) {
		s.t.Fatal("Restore's page hashes differ from the restored memory's")
	}
	return dst
}

func TestRoundTrip(t *testing.T) {
	for _, codec := range []Codec{Raw, Zstd, S2} {
		t.Run(codec.String(), func(t *testing.T) {
			enc, err := NewEncoder(codec, Options{})
			if err != nil {
				t.Fatal(err)
			}
			mem := testMemory(9, 7)
			st := &store{t: t, segs: map[string][]byte{}}
			d, err := enc.Snapshot(nil, &Capture{Header: testHeader(), Memory: mem, Generation: 5}, false)
			if err != nil {
				t.Fatal(err)
			}
			m := st.apply(d)
			h := testHeader()
			if m.ModuleHash != h.ModuleHash || m.ABI != h.ABI || m.Nanotime != h.Nanotime ||
				m.WallUnixNano != h.WallUnixNano || !bytes.Equal(m.RoomState, h.RoomState) ||
				!slices.Equal(m.Globals, h.Globals) || m.Generation != 5 || m.Seq != 1 {
				t.Fatalf("header mismatch: %+v", m)
			}
			total, stored, _ := m.Pages()
			if total != 9*16 || stored != 6*16 {
				t.Fatalf("pages total=%d stored=%d, want %d and %d", total, stored, 9*16, 6*16)
			}
			if got := st.restore(m, nil); !bytes.Equal(got, mem) {
				t.Fatal("memory differs after round trip")
			}
		})
	}
}

func TestDeltaWritesOnlyChangedChunks(t *testing.T) {
	enc, _ := NewEncoder(Zstd, Options{})
	st := &store{t: t, segs: map[string][]byte{}}
	base := testMemory(8, 1)
	mem := bytes.Clone(base)
	mem[5*ChunkSize+3] ^= 0xFF // one page differs from the base
	d, _ := enc.Snapshot(nil, &Capture{Header: testHeader(), Memory: mem, Base: base, Generation: 1}, false)
	m1 := st.apply(d)
	if _, stored, _ := m1.Pages(); stored != 1 {
		t.Fatalf("first snapshot stores %d pages, want 1", stored)
	}

	// Change one page of chunk 2 and grow by one chunk: 1 + 16 pages
	// changed, of which 2 are stored (the grown chunk's others are zero).
	mem = append(mem, make([]byte, ChunkSize)...)
	mem[2*ChunkSize+PageSize] ^= 1
	copy(mem[8*ChunkSize:], "new chunk")
	d, _ = enc.Snapshot(m1, &Capture{Header: testHeader(), Memory: mem, Base: base, Generation: 1, PrevPages: d.PageHashes}, false)
	if d.Changed != 17 || d.Compacted || len(d.Garbage) != 0 {
		t.Fatalf("delta: changed=%d compacted=%v garbage=%v", d.Changed, d.Compacted, d.Garbage)
	}
	seg, _ := DecodeSegment(d.Segment)
	m2 := st.apply(d)
	if len(m2.Segments) != 2 || m2.Seq != 2 {
		t.Fatalf("manifest 2: %d segments, seq %d", len(m2.Segments), m2.Seq)
	}
	// The new segment holds just the 2 changed stored pages; chunk 5's
	// page stayed where the first snapshot put it.
	if seg.Size() > 2*PageSize || len(m2.Chunks[2].Parts) != 1 ||
		len(m2.Chunks[5].Parts) != 1 || m2.Segments[m2.Chunks[5].Parts[0].Seg].ID != m1.Segments[0].ID {
		t.Fatalf("delta segment %d bytes, chunk 2 parts %+v, chunk 5 parts %+v", seg.Size(), m2.Chunks[2].Parts, m2.Chunks[5].Parts)
	}
	if got := st.restore(m2, base); !bytes.Equal(got, mem) {
		t.Fatal("memory differs after delta")
	}
	pages := d.PageHashes

	// Without the previous page hashes (say, after a wake that did not
	// keep them), changed pages are found per chunk: more is written, the
	// result is the same.
	mem[3*ChunkSize] ^= 1
	dNoPages, _ := enc.Snapshot(m2, &Capture{Header: testHeader(), Memory: mem, Base: base, Generation: 1}, false)
	if dNoPages.Changed < 16*9 {
		t.Fatalf("without page hashes only %d pages counted as changed", dNoPages.Changed)
	}
	mem[3*ChunkSize] ^= 1

	// Nothing changed: no segment, same references.
	d, _ = enc.Snapshot(m2, &Capture{Header: testHeader(), Memory: mem, Base: base, Generation: 2, PrevPages: pages}, false)
	if d.Segment != nil || d.Changed != 0 {
		t.Fatalf("unchanged memory wrote a segment (changed=%d)", d.Changed)
	}
	m3 := st.apply(d)
	if got := st.restore(m3, base); !bytes.Equal(got, mem) {
		t.Fatal("memory differs after an empty delta")
	}
}

func TestCompaction(t *testing.T) {
	enc, _ := NewEncoder(S2, Options{MaxChain: 3})
	st := &store{t: t, segs: map[string][]byte{}}
	mem := testMemory(4, 3)
	var m *Manifest
	var pages []uint64
	compactions := 0
	for round := range 12 {
		// Rewrite chunk round%4 each time: old blobs go dead.
		r := rand.New(rand.NewPCG(uint64(round), 9))
		chunk := mem[(round%4)*ChunkSize : (round%4+1)*ChunkSize]
		for i := range 64 {
			chunk[r.IntN(len(chunk))] = byte(i + 1)
		}
		d, err := enc.Snapshot(m, &Capture{Header: testHeader(), Memory: mem, Generation: uint64(round), PrevPages: pages}, false)
		if err != nil {
			t.Fatal(err)
		}
		if d.Compacted {
			compactions++
		}
		m, pages = st.apply(d), d.PageHashes
		if len(m.Segments) > 3 {
			t.Fatalf("round %d: chain of %d segments past the bound", round, len(m.Segments))
		}
		live, total := m.Bytes()
		if total-live > live {
			t.Fatalf("round %d: %d dead bytes for %d live", round, total-live, live)
		}
		if len(st.segs) != len(m.Segments) {
			t.Fatalf("round %d: %d segments kept, manifest references %d", round, len(st.segs), len(m.Segments))
		}
		if got := st.restore(m, nil); !bytes.Equal(got, mem) {
			t.Fatalf("round %d: memory differs", round)
		}
		for i := range m.Chunks {
			if len(m.Chunks[i].Parts) > maxParts {
				t.Fatalf("round %d: chunk %d in %d parts", round, i, len(m.Chunks[i].Parts))
			}
		}
	}
	if compactions < 2 {
		t.Fatalf("only %d compactions in 12 rounds with a chain bound of 3", compactions)
	}
}

// TestFoldingKeepsTheFullSnapshot: a room that keeps writing the same few
// pages reaches the chain bound with little dead; the deltas are folded
// into one segment beside the full snapshot, which is never written again.
func TestFoldingKeepsTheFullSnapshot(t *testing.T) {
	enc, _ := NewEncoder(S2, Options{MaxChain: 3})
	st := &store{t: t, segs: map[string][]byte{}}
	mem := testMemory(16, 7)
	r := rand.New(rand.NewPCG(3, 4))
	for i := range mem { // incompressible, so the full snapshot is large
		mem[i] = byte(r.Uint32())
	}
	var m *Manifest
	var pages []uint64
	var full string
	folds := 0
	for round := range 20 {
		if round > 0 { // the hot pages: one of six in chunks 5 and 6 each time
			page := 5*pagesPerChunk + round%6*5
			mem[page*PageSize+round] = byte(round)
		}
		d, err := enc.Snapshot(m, &Capture{Header: testHeader(), Memory: mem, Generation: 1, PrevPages: pages}, false)
		if err != nil {
			t.Fatal(err)
		}
		switch {
		case round == 0:
			full = d.SegmentID
		case d.Compacted:
			t.Fatalf("round %d: a full snapshot again", round)
		case len(d.Segment) > 8*PageSize:
			t.Fatalf("round %d: a segment of %d bytes for a few pages", round, len(d.Segment))
		}
		if d.Folded {
			folds++
		}
		m, pages = st.apply(d), d.PageHashes
		if !slices.Contains(m.SegmentIDs(), full) || len(m.Segments) > 3 {
			t.Fatalf("round %d: segments %v, want the full one and at most two more", round, m.SegmentIDs())
		}
		if got := st.restore(m, nil); !bytes.Equal(got, mem) {
			t.Fatalf("round %d: memory differs", round)
		}
	}
	if folds < 4 {
		t.Fatalf("%d folds in 19 deltas with a chain bound of 3", folds)
	}
}

func TestModuleChangeStartsOver(t *testing.T) {
	enc, _ := NewEncoder(Zstd, Options{})
	st := &store{t: t, segs: map[string][]byte{}}
	mem := testMemory(4, 3)
	d, _ := enc.Snapshot(nil, &Capture{Header: testHeader(), Memory: mem, Generation: 1}, false)
	m := st.apply(d)
	h := testHeader()
	h.ModuleHash = "sha256:other"
	d, _ = enc.Snapshot(m, &Capture{Header: h, Memory: mem, Generation: 2}, false)
	if !d.Compacted || len(d.Garbage) != 1 {
		t.Fatalf("a new module reused old segments: %+v", d)
	}
}

func TestRestoreSkipsCleanZeroPages(t *testing.T) {
	enc, _ := NewEncoder(S2, Options{})
	mem := testMemory(4, 1)
	d, _ := enc.Snapshot(nil, &Capture{Header: testHeader(), Memory: mem}, false)
	seg, _ := DecodeSegment(d.Segment)
	dst := bytes.Repeat([]byte{0xAA}, len(mem))
	_, err := d.Manifest.Restore(dst, map[string]*Segment{d.SegmentID: seg}, func(page int) bool { return page == 1 }, nil)
	if err != nil {
		t.Fatal(err)
	}
	// Chunk 0 is zero; its page 1 is declared dirty and cleared, the
	// others are clean and left untouched.
	if dst[0] != 0xAA || dst[PageSize] != 0 || dst[2*PageSize] != 0xAA {
		t.Fatalf("zero pages: %x %x %x", dst[0], dst[PageSize], dst[2*PageSize])
	}
	if !bytes.Equal(dst[ChunkSize:], mem[ChunkSize:]) {
		t.Fatal("stored chunks differ")
	}
}

func TestRestoreErrors(t *testing.T) {
	enc, _ := NewEncoder(Zstd, Options{})
	mem := testMemory(4, 1)
	d, _ := enc.Snapshot(nil, &Capture{Header: testHeader(), Memory: mem}, false)
	seg, _ := DecodeSegment(d.Segment)
	if _, err := d.Manifest.Restore(make([]byte, ChunkSize), map[string]*Segment{d.SegmentID: seg}, nil, nil); !errors.Is(err, ErrMemorySize) {
		t.Errorf("wrong size: %v", err)
	}
	if _, err := d.Manifest.Restore(make([]byte, len(mem)), nil, nil, nil); !errors.Is(err, ErrMissingSegment) {
		t.Errorf("missing segment: %v", err)
	}
}

func TestDecodeDetectsDamage(t *testing.T) {
	enc, _ := NewEncoder(Zstd, Options{})
	d, _ := enc.Snapshot(nil, &Capture{Header: testHeader(), Memory: testMemory(4, 3)}, false)
	man := d.Manifest.Encode()
	for _, obj := range []struct {
		name   string
		b      []byte
		decode func([]byte) error
	}{
		{"manifest", man, func(b []byte) error { _, err := DecodeManifest(b); return err }},
		{"segment", d.Segment, func(b []byte) error { _, err := DecodeSegment(b); return err }},
	} {
		for _, i := range []int{0, 8, 9, len(obj.b) / 2, len(obj.b) - 5, len(obj.b) - 1} {
			c := bytes.Clone(obj.b)
			c[i] ^= 0x40
			if err := obj.decode(c); !errors.Is(err, ErrCorrupt) {
				t.Errorf("%s flipped at %d: %v", obj.name, i, err)
			}
		}
		for _, n := range []int{0, 3, 11, len(obj.b) - 1} {
			if err := obj.decode(obj.b[:n]); !errors.Is(err, ErrCorrupt) {
				t.Errorf("%s truncated to %d: %v", obj.name, n, err)
			}
		}
	}
}

func TestSegmentIDs(t *testing.T) {
	id := SegmentID(0x1234, 7)
	if gen, ok := SegmentGeneration(id); !ok || gen != 0x1234 {
		t.Fatalf("%s: %d %v", id, gen, ok)
	}
	for _, bad := range []string{"", "../x", "00000000000012340-1", "ABC", "x"} {
		if _, ok := SegmentGeneration(bad); ok {
			t.Errorf("%q accepted", bad)
		}
	}
}

func FuzzDecodeManifest(f *testing.F) {
	enc, _ := NewEncoder(Zstd, Options{})
	d, _ := enc.Snapshot(nil, &Capture{Header: testHeader(), Memory: testMemory(3, 5)}, false)
	f.Add(d.Manifest.Encode())
	f.Add(manifestMagic[:])
	f.Fuzz(func(t *testing.T, b []byte) {
		if m, err := DecodeManifest(b); err == nil {
			// A decoded manifest re-encodes to the same bytes.
			if !bytes.Equal(m.Encode(), b) {
				t.Fatal("decode/encode is not the identity")
			}
		}
	})
}

// FuzzDecodeManifestFields reaches the field decoding behind the checksum
// by sealing each mutated body with a valid CRC, then restores what
// decodes against a real segment.
func FuzzDecodeManifestFields(f *testing.F) {
	enc, _ := NewEncoder(Zstd, Options{})
	d, _ := enc.Snapshot(nil, &Capture{Header: testHeader(), Memory: testMemory(3, 5)}, false)
	man := d.Manifest.Encode()
	f.Add(man[:len(man)-4])
	seg, _ := DecodeSegment(d.Segment)
	f.Fuzz(func(t *testing.T, body []byte) {
		m, err := DecodeManifest(appendChecksum(bytes.Clone(body), 0))
		if err != nil || m.MemorySize() > 64*ChunkSize {
			return
		}
		_, _ = m.Restore(make([]byte, m.MemorySize()), map[string]*Segment{d.SegmentID: seg}, nil, nil)
	})
}

func FuzzDecodeSegment(f *testing.F) {
	enc, _ := NewEncoder(S2, Options{})
	d, _ := enc.Snapshot(nil, &Capture{Header: testHeader(), Memory: testMemory(3, 5)}, false)
	f.Add(d.Segment[:len(d.Segment)-4])
	f.Fuzz(func(t *testing.T, body []byte) {
		seg, err := DecodeSegment(appendChecksum(bytes.Clone(body), 0))
		if err != nil {
			return
		}
		// Restore the original manifest against the mutated segment:
		// errors are fine, panics and overruns are not.
		_, _ = d.Manifest.Restore(make([]byte, d.Manifest.MemorySize()), map[string]*Segment{d.SegmentID: seg}, nil, nil)
	})
}

func BenchmarkSnapshot(b *testing.B) {
	mem := testMemory(56, 9)
	for _, codec := range []Codec{Zstd, S2} {
		enc, _ := NewEncoder(codec, Options{})
		b.Run("full/"+codec.String(), func(b *testing.B) {
			var size int
			b.SetBytes(int64(len(mem)))
			for b.Loop() {
				d, _ := enc.Snapshot(nil, &Capture{Header: testHeader(), Memory: mem}, false)
				size = len(d.Segment)
			}
			b.ReportMetric(float64(size), "segment-bytes")
		})
		first, _ := enc.Snapshot(nil, &Capture{Header: testHeader(), Memory: mem}, false)
		b.Run("delta-1-chunk/"+codec.String(), func(b *testing.B) {
			mem2 := bytes.Clone(mem)
			mem2[7*ChunkSize] ^= 1
			var size int
			b.SetBytes(int64(len(mem)))
			for b.Loop() {
				d, _ := enc.Snapshot(first.Manifest, &Capture{Header: testHeader(), Memory: mem2}, false)
				size = len(d.Segment)
			}
			b.ReportMetric(float64(size), "segment-bytes")
		})
	}
}

func BenchmarkRestore(b *testing.B) {
	mem := testMemory(56, 9)
	dst := make([]byte, len(mem))
	for _, codec := range []Codec{Raw, Zstd, S2} {
		enc, _ := NewEncoder(codec, Options{})
		d, _ := enc.Snapshot(nil, &Capture{Header: testHeader(), Memory: mem}, false)
		seg, _ := DecodeSegment(d.Segment)
		segs := map[string]*Segment{d.SegmentID: seg}
		b.Run(codec.String(), func(b *testing.B) {
			b.SetBytes(int64(len(mem)))
			for b.Loop() {
				if _, err := d.Manifest.Restore(dst, segs, nil, nil); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// TestRandomDeltas snapshots a memory through hundreds of random changes
// (bytes written, pages zeroed, pages put back to the base, growth) and
// checks after each that restoring gives the memory back exactly, that
// chunks stay within their part bound, and that the store keeps only what
// the manifest references.
func TestRandomDeltas(t *testing.T) {
	seed := uint64(time.Now().UnixNano())
	t.Logf("seed %d", seed)
	r := rand.New(rand.NewPCG(seed, 3))
	for _, codec := range []Codec{Zstd, S2} {
		enc, _ := NewEncoder(codec, Options{MaxChain: 5})
		st := &store{t: t, segs: map[string][]byte{}}
		base := testMemory(6, 4)
		mem := bytes.Clone(base)
		var m *Manifest
		var pages []uint64
		for round := range 300 {
			for range 1 + r.IntN(6) {
				page := r.IntN(len(mem) / PageSize)
				off := page * PageSize
				switch r.IntN(5) {
				case 0:
					clear(mem[off : off+PageSize])
				case 1:
					if off+PageSize <= len(base) {
						copy(mem[off:off+PageSize], base[off:off+PageSize])
					}
				default:
					for range 1 + r.IntN(32) {
						mem[off+r.IntN(PageSize)] = byte(r.Uint32())
					}
				}
			}
			if r.IntN(50) == 0 {
				mem = append(mem, make([]byte, ChunkSize)...)
			}
			d, err := enc.Snapshot(m, &Capture{Header: testHeader(), Memory: mem, Base: base, Generation: uint64(round / 40), PrevPages: pages}, r.IntN(60) == 0)
			if err != nil {
				t.Fatal(err)
			}
			m, pages = st.apply(d), d.PageHashes
			if got := st.restore(m, base); !bytes.Equal(got, mem) {
				t.Fatalf("%s round %d (seed %d): memory differs", codec, round, seed)
			}
			if len(st.segs) != len(m.Segments) {
				t.Fatalf("%s round %d: %d segments kept, %d referenced", codec, round, len(st.segs), len(m.Segments))
			}
		}
	}
}

func TestRun(t *testing.T) {
	for _, c := range []struct {
		mask  uint16
		first int
		ok    bool
	}{
		{0, 0, false}, {1, 0, true}, {0xFFFF, 0, true}, {0x00F0, 4, true}, {0x8000, 15, true},
		{0x0101, 0, false}, {0xF0F0, 4, false}, {0x7FFE, 1, true},
	} {
		first, ok := run(c.mask)
		if ok != c.ok || (ok && first != c.first) {
			t.Errorf("run(%#04x) = %d, %v; want %d, %v", c.mask, first, ok, c.first, c.ok)
		}
	}
}
