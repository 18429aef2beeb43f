package engine

import (
	"bytes"
	"context"
	"errors"
	"slices"
	"testing"

	roomimages "github.com/wasmkeep/wasmkeep/host/images"
	"github.com/wasmkeep/wasmkeep/host/snapshot"
)

// TestRestoreImage: a room restored by mapping its image (host/images)
// sees the memory it was saved with, copies nothing until the guest
// writes, never changes the file through its mapping, and can save its
// memory into the same file again; where memories cannot map files it
// fails with ErrNoImage.
func TestRestoreImage(t *testing.T) {
	forEachBackend(t, "./examples/counter", func(t *testing.T, b memoryBackend, c *Class) {
		cache, err := roomimages.New(roomimages.Config{Dir: t.TempDir(), MinBytes: 1})
		if err != nil {
			t.Fatal(err)
		}
		defer cache.Close()
		a := startRoom(t, c)
		defer a.Close()
		for range 5 {
			request(t, a, postRoot)
		}
		man, _ := takeSnapshot(t, a, nil)
		body := man.Encode()
		var saved []byte
		if err := a.ReadMemory(func(mem []byte) error {
			saved = bytes.Clone(mem)
			_, err := cache.Store("room", body, mem, nil, 0)
			return err
		}); err != nil {
			t.Fatal(err)
		}
		img, ok := cache.Lookup("room", body)
		if !ok {
			t.Fatal("the image just stored is not found")
		}
		r, err := c.RestoreImage(context.Background(), man, img.File, img.Pages, &fakeHost{})
		img.Close()
		if b == memoryHeap {
			if !errors.Is(err, ErrNoImage) {
				t.Fatalf("a memory on the heap mapped an image: %v", err)
			}
			return
		}
		if err != nil {
			t.Fatal(err)
		}
		defer r.Close()
		view, _ := r.mem.Read(0, r.mem.Size())
		if n := privatePages(t, view); n != 0 {
			t.Fatalf("%d pages copied by the restore, want none", n)
		}
		if !bytes.Equal(view, saved) {
			t.Fatal("the mapped memory differs from the one saved")
		}
		if want := snapshot.HashPages(saved); !slices.Equal(r.RestoredPages(), want) {
			t.Fatal("the restored page hashes are not the memory's")
		}
		if got := request(t, r, getRoot); got != "5" {
			t.Fatalf("restored count %q, want 5", got)
		}
		for range 3 {
			request(t, r, postRoot)
		}
		private := privatePages(t, view)
		t.Logf("%d pages, %d the guest's own after four requests", len(view)/int(osPageSize), private)
		if private == 0 || private >= len(view)/int(osPageSize) {
			t.Fatalf("%d private pages of %d", private, len(view)/int(osPageSize))
		}
		// The file is still the saved memory.
		img, ok = cache.Lookup("room", body)
		if !ok {
			t.Fatal("the image went")
		}
		file := make([]byte, len(saved))
		if _, err := img.File.ReadAt(file, 0); err != nil {
			t.Fatal(err)
		}
		id := img.ID
		img.Close()
		if !bytes.Equal(file, saved) {
			t.Fatal("the guest's writes reached the file")
		}
		// Saved again by the instance that maps it: the same file,
		// written in place, and the instance still sees its own.
		man2, _ := takeSnapshot(t, r, nil)
		body2 := man2.Encode()
		before := bytes.Clone(view)
		var id2 uint64
		if err := r.ReadMemory(func(mem []byte) error {
			var err error
			id2, err = cache.Store("room", body2, mem, nil, id)
			return err
		}); err != nil {
			t.Fatal(err)
		}
		if id2 != id {
			t.Fatalf("saved into image %d, want the mapped %d in place", id2, id)
		}
		if !bytes.Equal(view, before) {
			t.Fatal("writing the file changed the memory that maps it")
		}
		if got := request(t, r, getRoot); got != "8" {
			t.Fatalf("after its save: %q", got)
		}
		if _, ok := cache.Lookup("room", body); ok {
			t.Fatal("the old manifest still finds the image")
		}
		img, ok = cache.Lookup("room", body2)
		if !ok {
			t.Fatal("the saved image is not found")
		}
		r2, err := c.RestoreImage(context.Background(), man2, img.File, img.Pages, &fakeHost{})
		img.Close()
		if err != nil {
			t.Fatal(err)
		}
		defer r2.Close()
		if got := request(t, r2, getRoot); got != "8" {
			t.Fatalf("restored from the image saved in place: %q", got)
		}
		// The memory grows past the file.
		view2, _ := r2.mem.Read(0, r2.mem.Size())
		size := len(view2)
		if _, ok := r2.mem.Grow(1); !ok {
			t.Fatal("grow")
		}
		grown, _ := r2.mem.Read(0, r2.mem.Size())
		if !snapshot.IsZero(grown[size:]) {
			t.Fatal("the grown memory is not zero")
		}
		grown[len(grown)-1] = 7
		if got := request(t, r2, postRoot); got != "9" {
			t.Fatalf("after growing: %q", got)
		}
		// A snapshot of the wrong size is refused before anything maps.
		if _, err := c.RestoreImage(context.Background(), man2, img.File, img.Pages[1:], &fakeHost{}); err == nil {
			t.Fatal("restored with too few page hashes")
		}
	})
}
