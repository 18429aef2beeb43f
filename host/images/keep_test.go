package images

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"testing"
)

// openIn makes a cache in dir, as a node's next start does.
func openIn(t *testing.T, dir string, cfg Config) *Cache {
	t.Helper()
	cfg.Dir = dir
	if cfg.MinBytes == 0 {
		cfg.MinBytes = page
	}
	c, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	return c
}

// names lists what the directory holds besides the lock file.
func names(t *testing.T, dir string) []string {
	t.Helper()
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var ns []string
	for _, d := range ents {
		if d.Name() != lockName {
			ns = append(ns, d.Name())
		}
	}
	return ns
}

func wantImage(t *testing.T, c *Cache, key, manifest string, mem []byte) *Image {
	t.Helper()
	im, ok := c.Lookup(key, []byte(manifest))
	if !ok {
		t.Fatalf("no image of %s for %q", key, manifest)
	}
	if !bytes.Equal(contents(t, im), mem) {
		t.Fatalf("%s's image is not its memory", key)
	}
	return im
}

// TestPersistAcrossRestart: the images a clean stop keeps are the next
// cache's, most recent first under its bounds, with no index left once it
// picked them up; the next save of a memory restored from one writes into
// the same file.
func TestPersistAcrossRestart(t *testing.T) {
	dir := t.TempDir()
	c := openIn(t, dir, Config{})
	mems := map[string][]byte{"a": memory(16, 1), "b": memory(24, 2), "c": memory(8, 3)}
	for _, k := range []string{"a", "b", "c"} {
		if _, err := c.Store(k, []byte("m "+k), mems[k], nil, 0); err != nil {
			t.Fatal(err)
		}
	}
	wantImage(t, c, "a", "m a", mems["a"]).Close() // a is the most recent now
	if n, err := c.Persist(context.Background()); n != 3 || err != nil {
		t.Fatalf("persist: %d %v", n, err)
	}
	if got := names(t, dir); len(got) != 4 || !slices.Contains(got, indexName) {
		t.Fatalf("after persist the directory holds %q, want three images and the index", got)
	}

	c2 := openIn(t, dir, Config{})
	if n, err := c2.Kept(); n != 3 || err != nil {
		t.Fatalf("kept %d: %v", n, err)
	}
	if got := names(t, dir); len(got) != 3 || slices.Contains(got, indexName) {
		t.Fatalf("after the start the directory holds %q, want the three images, no index", got)
	}
	if _, ok := c2.Lookup("b", []byte("m a")); ok {
		t.Fatal("found for another manifest")
	}
	im := wantImage(t, c2, "b", "m b", mems["b"])
	im.Close()
	wantImage(t, c2, "c", "m c", mems["c"]).Close()
	mems["b"][2*page] ^= 1
	written := c2.Stats().BytesWritten
	if id, err := c2.Store("b", []byte("m b2"), mems["b"], nil, im.ID); err != nil || id != im.ID {
		t.Fatalf("in place after the start: %d %v, want %d", id, err, im.ID)
	}
	if got := c2.Stats().BytesWritten - written; got != page+24*8 {
		t.Fatalf("wrote %d bytes in place, want a page and the hashes", got)
	}
	if id, _ := c2.Store("d", []byte("m d"), memory(8, 4), nil, 0); id <= im.ID {
		t.Fatalf("a new image got id %d, not past the kept ones'", id)
	}
	// A stop then a start under bounds that hold two: the two most
	// recent (d, then b) stay.
	if n, err := c2.Persist(context.Background()); n != 4 || err != nil {
		t.Fatalf("second persist: %d %v", n, err)
	}
	c3 := openIn(t, dir, Config{MaxFiles: 2})
	if n, err := c3.Kept(); n != 2 || err != nil {
		t.Fatalf("kept %d under MaxFiles 2: %v", n, err)
	}
	wantImage(t, c3, "b", "m b2", mems["b"]).Close()
	if _, ok := c3.Lookup("a", []byte("m a")); ok {
		t.Fatal("the least recent image outlived the bound")
	}
	if got := names(t, dir); len(got) != 2 {
		t.Fatalf("the start left %q, want the two images it kept", got)
	}
}

// TestCrashKeepsNothing: images of a node that did not stop cleanly,
// whether it made them or picked them up at its start, or whose stop was
// cut off before the index was written, are never read.
func TestCrashKeepsNothing(t *testing.T) {
	dir := t.TempDir()
	started := func(what string) *Cache {
		t.Helper()
		c := openIn(t, dir, Config{})
		if n, err := c.Kept(); n != 0 || err != nil {
			t.Fatalf("after %s: kept %d (%v)", what, n, err)
		}
		if got := names(t, dir); len(got) != 0 {
			t.Fatalf("after %s the start left %q", what, got)
		}
		return c
	}
	c := openIn(t, dir, Config{})
	c.Store("a", []byte("m"), memory(8, 1), nil, 0)
	c.hold.Close() // a crash: the lock goes, nothing else is done
	c = started("a crash")
	c.Store("a", []byte("m"), memory(8, 1), nil, 0)
	if n, err := c.Persist(context.Background()); n != 1 || err != nil {
		t.Fatal(n, err)
	}
	c = openIn(t, dir, Config{})
	if n, _ := c.Kept(); n != 1 {
		t.Fatal("kept none after a clean stop")
	}
	c.hold.Close() // a crash of a node that picked up an image
	c = started("a crash after picking up images")
	// A stop cut off after syncing the files, in the middle of writing
	// the index.
	c.Store("a", []byte("m"), memory(8, 1), nil, 0)
	os.WriteFile(filepath.Join(dir, indexTemp), []byte(indexMagic), 0o600)
	c.hold.Close()
	started("a stop cut off")
}

// TestDamagedIndexOrFile: an index that fails its checksum keeps nothing;
// a file whose length is not its index's is left out, the others kept.
func TestDamagedIndexOrFile(t *testing.T) {
	dir := t.TempDir()
	persist := func() {
		c := openIn(t, dir, Config{})
		c.Store("a", []byte("m"), memory(8, 1), nil, 0)
		c.Store("b", []byte("m"), memory(8, 2), nil, 0)
		if n, err := c.Persist(context.Background()); n != 2 || err != nil {
			t.Fatalf("persist: %d %v", n, err)
		}
	}
	persist()
	index := filepath.Join(dir, indexName)
	b, _ := os.ReadFile(index)
	b[len(indexMagic)+3] ^= 1
	os.WriteFile(index, b, 0o600)
	c := openIn(t, dir, Config{})
	if n, err := c.Kept(); n != 0 || !errors.Is(err, errIndex) {
		t.Fatalf("a damaged index: kept %d (%v)", n, err)
	}
	c.Close()

	persist()
	ents, _ := os.ReadDir(dir)
	for _, d := range ents {
		if filepath.Ext(d.Name()) == fileExt {
			os.Truncate(filepath.Join(dir, d.Name()), page) // cut short
			break
		}
	}
	c = openIn(t, dir, Config{})
	if n, err := c.Kept(); n != 1 || err == nil {
		t.Fatalf("one file cut short: kept %d (%v), want one and the error", n, err)
	}
	if got := names(t, dir); len(got) != 1 {
		t.Fatalf("the start left %q, want the image it kept", got)
	}
}

// TestSharedDirectory: a second cache is refused a directory another
// holds, which goes on serving its images; once the first is closed the
// directory is free.
func TestSharedDirectory(t *testing.T) {
	dir := t.TempDir()
	a := openIn(t, dir, Config{})
	mem := memory(8, 2)
	a.Store("y", []byte("m"), mem, nil, 0)
	if b, err := New(Config{Dir: dir, MinBytes: page}); !errors.Is(err, ErrShared) {
		if b != nil {
			b.Close()
		}
		t.Fatalf("second cache: %v, want ErrShared", err)
	}
	wantImage(t, a, "y", "m", mem).Close()
	if n, err := a.Persist(context.Background()); n != 1 || err != nil {
		t.Fatalf("first cache's persist: %d %v", n, err)
	}
	if n, _ := openIn(t, dir, Config{}).Kept(); n != 1 {
		t.Fatalf("kept %d, want the first cache's one", n)
	}
}

// TestIndexRoundTrip: an index reads back as written, and every shorter
// or altered form of it is refused.
func TestIndexRoundTrip(t *testing.T) {
	recs := []record{{key: "rooms/chat/a/", id: 7, size: 3 * page}, {key: "", id: 9, size: page}}
	recs[0].tag[0], recs[1].tag[31] = 1, 2
	b := encodeIndex(recs)
	got, err := decodeIndex(b)
	if err != nil || !slices.Equal(got, recs) {
		t.Fatalf("round trip: %+v %v", got, err)
	}
	for n := range len(b) {
		if _, err := decodeIndex(b[:n]); err == nil {
			t.Fatalf("accepted the first %d of %d bytes", n, len(b))
		}
	}
	twice := encodeIndex([]record{recs[0], recs[0]})
	if _, err := decodeIndex(twice); err == nil {
		t.Fatal("accepted an id twice")
	}
}

// FuzzDecodeIndex: no input makes decodeIndex panic or return a record
// that encodes to anything but a valid index.
func FuzzDecodeIndex(f *testing.F) {
	f.Add(encodeIndex([]record{{key: "k", id: 1, size: page}}))
	f.Add([]byte(indexMagic))
	f.Fuzz(func(t *testing.T, b []byte) {
		recs, err := decodeIndex(b)
		if err != nil {
			return
		}
		if again, err := decodeIndex(encodeIndex(recs)); err != nil || !slices.Equal(again, recs) {
			t.Fatalf("re-encoded: %v", err)
		}
	})
}

// TestPersistStopsAtItsDeadline: past the stop's deadline no image is
// synced or kept, and the next start leaves none.
func TestPersistStopsAtItsDeadline(t *testing.T) {
	dir := t.TempDir()
	c := openIn(t, dir, Config{})
	c.Store("a", []byte("m"), memory(8, 1), nil, 0)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if n, err := c.Persist(ctx); n != 0 || err != nil {
		t.Fatalf("persist past the deadline: %d %v", n, err)
	}
	if got := names(t, dir); len(got) != 2 || !slices.Contains(got, indexName) {
		t.Fatalf("the directory holds %q, want an empty index and the image", got)
	}
	if n, _ := openIn(t, dir, Config{}).Kept(); n != 0 {
		t.Fatalf("kept %d", n)
	}
	if got := names(t, dir); len(got) != 0 {
		t.Fatalf("the start left %q", got)
	}
}

// TestClear: a node that keeps no images removes what an earlier run kept,
// leaves a directory another cache holds alone, and is content with none.
func TestClear(t *testing.T) {
	dir := t.TempDir()
	c := openIn(t, dir, Config{})
	c.Store("a", []byte("m"), memory(8, 1), nil, 0)
	if err := Clear(dir); !errors.Is(err, ErrShared) {
		t.Fatalf("clearing a held directory: %v, want ErrShared", err)
	}
	if got := names(t, dir); len(got) != 1 {
		t.Fatalf("clearing a held directory left %q, want its image", got)
	}
	if n, err := c.Persist(context.Background()); n != 1 || err != nil {
		t.Fatal(n, err)
	}
	if err := Clear(dir); err != nil {
		t.Fatal(err)
	}
	if got := names(t, dir); len(got) != 0 {
		t.Fatalf("after Clear the directory holds %q", got)
	}
	if err := Clear(filepath.Join(dir, "none")); err != nil {
		t.Fatalf("clearing a directory that does not exist: %v", err)
	}
}
