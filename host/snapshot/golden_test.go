package snapshot

import (
	"bytes"
	"flag"
	"os"
	"path/filepath"
	"slices"
	"testing"
)

var update = flag.Bool("update", false, "rewrite the golden files of testdata/format from the current encoders")

// The golden files pin the stored formats: a room hibernated by one
// binary must wake on the next (docs/operations.md promises it). Each
// golden snapshot is a base snapshot and a delta after it, of a memory
// that mixes zero, base, compressible and random pages, with every codec.
// TestGoldenFormats decodes the committed files and restores their memory;
// for the Raw codec, whose bytes depend on this package alone, it also
// checks that encoding the same state still gives the same bytes. A change
// of format is a deliberate step: a new magic or version that the decoder
// still reads old files under, and new golden files beside the old ones
// (go test -run TestGoldenFormats -update writes them for the current
// encoders; never overwrite a released version's files).

// goldenStates are the two snapshots of the golden files: the memory and
// header of a base snapshot and of the delta after it.
func goldenStates() (base []byte, mems [2][]byte, headers [2]Header) {
	page := func(mem []byte, i int) []byte { return mem[i*PageSize : (i+1)*PageSize] }
	base = make([]byte, 2*ChunkSize) // the module's initial memory
	for i := range base[:ChunkSize] {
		base[i] = byte(i / 64)
	}
	first := append(bytes.Clone(base), make([]byte, ChunkSize)...) // grown by a chunk
	copy(page(first, 2), bytes.Repeat([]byte("heap"), PageSize/4)) // differs from base
	clear(page(first, 5))                                          // zero where base is not
	for i, p := range []int{17, 20, 33} {                          // sparse pages
		for j := 0; j < PageSize; j += 64 {
			page(first, p)[j] = byte(i*31 + j/64)
		}
	}
	second := bytes.Clone(first)
	page(second, 20)[100] ^= 0xff // one page changed
	copy(page(second, 40), bytes.Repeat([]byte{7}, PageSize))
	h := Header{ModuleHash: "sha256:0123456789abcdef", ABI: 1, Globals: []uint64{0, 1, 1 << 40, ^uint64(0)},
		Nanotime: 5_000_000_000, WallUnixNano: 1_764_590_400_000_000_000, RoomState: []byte{2, 1, 0, 0, 0}}
	h2 := h
	h2.Globals = []uint64{3, 1, 1 << 40, ^uint64(0)}
	h2.Nanotime, h2.WallUnixNano = 6_500_000_000, 1_764_590_460_000_000_000
	return base, [2][]byte{first, second}, [2]Header{h, h2}
}

func goldenPath(codec Codec, name string) string {
	return filepath.Join("testdata", "format", "v1-"+codec.String()+"-"+name)
}

func TestGoldenFormats(t *testing.T) {
	base, mems, headers := goldenStates()
	for _, codec := range []Codec{Raw, Zstd, S2} {
		t.Run(codec.String(), func(t *testing.T) {
			if *update {
				writeGolden(t, codec, base, mems, headers)
			}
			segs := map[string]*Segment{}
			for i, name := range []string{"base", "delta"} {
				man, err := DecodeManifest(readGolden(t, codec, name+".manifest"))
				if err != nil {
					t.Fatalf("%s manifest: %v", name, err)
				}
				seg, err := DecodeSegment(readGolden(t, codec, name+".segment"))
				if err != nil {
					t.Fatalf("%s segment: %v", name, err)
				}
				segs[SegmentID(7, uint64(i+1))] = seg
				h := headers[i]
				if man.ModuleHash != h.ModuleHash || man.ABI != h.ABI || !slices.Equal(man.Globals, h.Globals) ||
					man.Nanotime != h.Nanotime || man.WallUnixNano != h.WallUnixNano || !bytes.Equal(man.RoomState, h.RoomState) ||
					man.Generation != 7 || man.Seq != uint64(i+1) || man.Codec != codec {
					t.Fatalf("%s manifest decodes to %+v", name, man.Header)
				}
				dst := make([]byte, man.MemorySize())
				copy(dst, base)
				if _, err := man.Restore(dst, segs, nil, nil); err != nil {
					t.Fatalf("%s: restore: %v", name, err)
				}
				if !bytes.Equal(dst, mems[i]) {
					t.Fatalf("%s: restored memory differs from the state it was taken of", name)
				}
			}
			if codec != Raw {
				return // compressors may change their output from one release to the next
			}
			got := encodeGolden(t, codec, base, mems, headers)
			for name, b := range got {
				if !bytes.Equal(b, readGolden(t, codec, name)) {
					t.Errorf("encoding %s no longer gives the bytes of %s: the format changed (see the comment above this test)", name, goldenPath(codec, name))
				}
			}
		})
	}
}

// encodeGolden takes the two golden snapshots with codec, by file name.
func encodeGolden(t *testing.T, codec Codec, base []byte, mems [2][]byte, headers [2]Header) map[string][]byte {
	t.Helper()
	enc, err := NewEncoder(codec, Options{})
	if err != nil {
		t.Fatal(err)
	}
	out := map[string][]byte{}
	var prev *Manifest
	var prevPages []uint64
	for i, name := range []string{"base", "delta"} {
		d, err := enc.Snapshot(prev, &Capture{Header: headers[i], Memory: mems[i], Base: base, Generation: 7,
			SegmentID: SegmentID(7, uint64(i+1)), PrevPages: prevPages}, false)
		if err != nil {
			t.Fatal(err)
		}
		if d.Segment == nil || (i == 1 && d.Compacted) {
			t.Fatalf("%s: the golden states must give a segment each, the second a delta", name)
		}
		out[name+".manifest"], out[name+".segment"] = d.Manifest.Encode(), d.Segment
		prev, prevPages = d.Manifest, d.PageHashes
	}
	return out
}

func writeGolden(t *testing.T, codec Codec, base []byte, mems [2][]byte, headers [2]Header) {
	t.Helper()
	for name, b := range encodeGolden(t, codec, base, mems, headers) {
		if err := os.MkdirAll(filepath.Dir(goldenPath(codec, name)), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(goldenPath(codec, name), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

func readGolden(t *testing.T, codec Codec, name string) []byte {
	t.Helper()
	b, err := os.ReadFile(goldenPath(codec, name))
	if err != nil {
		t.Fatalf("golden file: %v (go test -run TestGoldenFormats -update writes it)", err)
	}
	return b
}
