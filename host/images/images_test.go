package images

import (
	"bytes"
	"math/rand/v2"
	"os"
	"slices"
	"testing"

	"github.com/wasmkeep/wasmkeep/host/snapshot"
)

const page = snapshot.PageSize

func newCache(t *testing.T, cfg Config) *Cache {
	t.Helper()
	return openIn(t, t.TempDir(), cfg)
}

// memory makes n pages, every other one zero.
func memory(n int, seed uint64) []byte {
	r := rand.New(rand.NewPCG(seed, 1))
	mem := make([]byte, n*page)
	for p := 0; p < n; p += 2 {
		for i := p * page; i < (p+1)*page; i += 8 {
			mem[i] = byte(r.Uint32())
		}
	}
	return mem
}

// contents reads an image's memory and checks its hashes.
func contents(t *testing.T, im *Image) []byte {
	t.Helper()
	b := make([]byte, len(im.Pages)*page)
	if _, err := im.File.ReadAt(b, 0); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(im.Pages, snapshot.HashPages(b)) {
		t.Fatal("an image's page hashes are not its memory's")
	}
	return b
}

func TestStoreAndLookup(t *testing.T) {
	c := newCache(t, Config{})
	mem := memory(32, 1)
	id, err := c.Store("a", []byte("manifest 1"), mem, nil, 0)
	if err != nil || id == 0 {
		t.Fatalf("store: %d %v", id, err)
	}
	if s := c.Stats(); s.Files != 1 || s.Bytes != int64(len(mem)) || s.BytesWritten != int64(len(mem))/2+32*8 {
		t.Fatalf("stats %+v: want one file, zero pages left unwritten", s)
	}
	if _, ok := c.Lookup("a", []byte("manifest 2")); ok {
		t.Fatal("found for another manifest")
	}
	if _, ok := c.Lookup("b", []byte("manifest 1")); ok {
		t.Fatal("found for another room")
	}
	im, ok := c.Lookup("a", []byte("manifest 1"))
	if !ok || im.ID != id {
		t.Fatalf("lookup: %v %+v", ok, im)
	}
	defer im.Close()
	if !bytes.Equal(contents(t, im), mem) {
		t.Fatal("the image is not the memory stored")
	}
	if s := c.Stats(); s.Hits != 1 || s.Misses != 2 {
		t.Fatalf("stats %+v", s)
	}
}

// TestStoreInPlace: the instance that maps an image saves into it, writing
// only the pages that changed (and, when the memory grew, its new pages);
// any other memory gets a new file, and the old one stays readable to
// whoever has it open.
func TestStoreInPlace(t *testing.T) {
	c := newCache(t, Config{})
	mem := memory(32, 2)
	id, _ := c.Store("a", []byte("m1"), mem, nil, 0)
	old, ok := c.Lookup("a", []byte("m1"))
	if !ok {
		t.Fatal("lookup")
	}
	defer old.Close()
	written := c.Stats().BytesWritten
	mem[3*page] ^= 1 // a stored page
	mem[5*page] = 9  // a zero page
	id2, err := c.Store("a", []byte("m2"), mem, nil, id)
	if err != nil || id2 != id {
		t.Fatalf("in place: %d %v, want %d", id2, err, id)
	}
	if got := c.Stats().BytesWritten - written; got != 2*page+32*8 {
		t.Fatalf("wrote %d bytes in place, want two pages and the hashes", got)
	}
	im, ok := c.Lookup("a", []byte("m2"))
	if !ok || !bytes.Equal(contents(t, im), mem) {
		t.Fatal("the image saved in place is not the memory")
	}
	im.Close()
	// Grown by 8 pages, in place.
	grown := append(bytes.Clone(mem), memory(8, 3)...)
	if id3, err := c.Store("a", []byte("m3"), grown, nil, id); err != nil || id3 != id {
		t.Fatalf("grown in place: %d %v", id3, err)
	}
	im, ok = c.Lookup("a", []byte("m3"))
	if !ok || !bytes.Equal(contents(t, im), grown) {
		t.Fatal("the grown image is not the memory")
	}
	im.Close()
	if s := c.Stats(); s.Bytes != int64(len(grown)) {
		t.Fatalf("counted %d bytes, want %d", s.Bytes, len(grown))
	}
	// Another memory (not from this image): a new file.
	other := memory(40, 4)
	id4, err := c.Store("a", []byte("m4"), other, nil, 0)
	if err != nil || id4 == id {
		t.Fatalf("new file: %d %v", id4, err)
	}
	if _, ok := c.Lookup("a", []byte("m3")); ok {
		t.Fatal("the replaced image is still found")
	}
	im, ok = c.Lookup("a", []byte("m4"))
	if !ok || !bytes.Equal(contents(t, im), other) {
		t.Fatal("the new image is not the memory")
	}
	im.Close()
	// The first Image, open all along, reads the file it had, which
	// in-place saves changed; it is no longer the cache's.
	b := make([]byte, len(grown))
	if _, err := old.File.ReadAt(b, 0); err != nil || !bytes.Equal(b, grown) {
		t.Fatalf("an open image lost its file: %v", err)
	}
	if id5, _ := c.Store("a", []byte("m5"), other, nil, id); id5 == id {
		t.Fatal("saved in place into a file the cache dropped")
	}
}

// TestEvictPassesOverAnImageBeingWritten: another room's save that pushes
// the cache past its bounds while a room's image is being saved in place
// evicts an image other than that one, whose file the save needs.
func TestEvictPassesOverAnImageBeingWritten(t *testing.T) {
	c := newCache(t, Config{MaxFiles: 2, MinBytes: page})
	idA, _ := c.Store("a", []byte("m"), memory(8, 1), nil, 0)
	c.Store("b", []byte("m"), memory(8, 2), nil, 0)
	// What an in-place Store of a holds while it writes, after its
	// check under the lock (Store: inPlace).
	c.mu.Lock()
	a := c.by["a"]
	a.valid = false
	a.refs++
	c.mu.Unlock()
	if _, err := c.Store("c", []byte("m"), memory(8, 3), nil, 0); err != nil {
		t.Fatal(err)
	}
	if a.gone {
		t.Fatal("the image being written in place was evicted")
	}
	if _, err := os.Stat(fileName(c.cfg.Dir, idA)); err != nil {
		t.Fatalf("its file: %v", err)
	}
	if _, ok := c.Lookup("b", []byte("m")); ok {
		t.Fatal("b, the next least recent, stayed")
	}
	if s := c.Stats(); s.Files != 2 || s.Evictions != 1 {
		t.Fatalf("stats %+v: want a and c, b evicted", s)
	}
}

func TestBounds(t *testing.T) {
	c := newCache(t, Config{MaxBytes: 100 * page, MaxFiles: 3, MinBytes: 4 * page})
	if id, err := c.Store("small", []byte("m"), memory(2, 1), nil, 0); id != 0 || err != nil {
		t.Fatalf("a memory under MinBytes: %d %v", id, err)
	}
	if id, _ := c.Store("huge", []byte("m"), memory(101, 1), nil, 0); id != 0 {
		t.Fatal("kept a memory over MaxBytes")
	}
	for i, k := range []string{"a", "b", "c", "d"} {
		if _, err := c.Store(k, []byte("m"), memory(8, uint64(i)), nil, 0); err != nil {
			t.Fatal(err)
		}
	}
	if _, ok := c.Lookup("a", []byte("m")); ok {
		t.Fatal("the oldest of four stayed under MaxFiles 3")
	}
	im, _ := c.Lookup("b", []byte("m")) // b is now the most recent
	im.Close()
	if _, err := c.Store("e", []byte("m"), memory(80, 9), nil, 0); err != nil {
		t.Fatal(err)
	}
	s := c.Stats()
	if s.Bytes != 96*page || s.Files != 3 || s.Evictions != 2 {
		t.Fatalf("stats %+v: want e, b and d in 96 pages, a and c evicted", s)
	}
	for _, k := range []string{"b", "d", "e"} {
		im, ok := c.Lookup(k, []byte("m"))
		if !ok {
			t.Fatalf("%s went, not the least recently used", k)
		}
		im.Close()
	}
	// A memory that shrinks under MinBytes forgets the room's image.
	c.Store("b", []byte("m2"), memory(2, 1), nil, 0)
	if _, ok := c.Lookup("b", []byte("m")); ok {
		t.Fatal("kept an image of an older state")
	}
	if _, err := c.Store("x", []byte("m"), make([]byte, page+1), nil, 0); err == nil {
		t.Fatal("stored a memory of part of a page")
	}
}
