package snapshot

import (
	"bytes"
	"testing"
	"unsafe"
)

// TestRestorePrefaultsStoredPages: the prefault is asked for exactly the
// runs of stored pages, before they are written, and the restore is the
// same with or without it.
func TestRestorePrefaultsStoredPages(t *testing.T) {
	mem := make([]byte, 2*ChunkSize)
	for _, p := range []int{0, 1, 2, 7, 15, 16, 20, 21} {
		mem[p*PageSize+5] = byte(p + 1)
	}
	enc, _ := NewEncoder(Zstd, Options{})
	d, err := enc.Snapshot(nil, &Capture{Header: testHeader(), Memory: mem}, false)
	if err != nil {
		t.Fatal(err)
	}
	seg, _ := DecodeSegment(d.Segment)
	dst := make([]byte, len(mem))
	var runs [][2]int // first page, pages
	old := SetPrefault(func(b []byte) {
		if !bytes.Equal(b, make([]byte, len(b))) {
			t.Error("a page was written before its prefault")
		}
		first := int(uintptr(unsafe.Pointer(unsafe.SliceData(b)))-uintptr(unsafe.Pointer(unsafe.SliceData(dst)))) / PageSize
		runs = append(runs, [2]int{first, len(b) / PageSize})
	})
	defer func() { SetPrefault(old) }()
	if _, err := d.Manifest.Restore(dst, map[string]*Segment{d.SegmentID: seg}, nil, nil); err != nil {
		t.Fatal(err)
	}
	want := [][2]int{{0, 3}, {7, 1}, {15, 2}, {20, 2}}
	if len(runs) != len(want) {
		t.Fatalf("prefaulted %v, want %v", runs, want)
	}
	for i := range want {
		if runs[i] != want[i] {
			t.Fatalf("prefaulted %v, want %v", runs, want)
		}
	}
	if !bytes.Equal(dst, mem) {
		t.Fatal("restored memory differs")
	}
}
