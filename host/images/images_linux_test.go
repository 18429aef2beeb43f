package images

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/wasmkeep/wasmkeep/internal/memtest"
)

func TestMemoryFS(t *testing.T) {
	if !memoryFS(0x01021994) || memoryFS(0xEF53) {
		t.Fatal("tmpfs is memory-backed, ext4 is not")
	}
}

// TestRefusesMemoryBacked: where /dev/shm is a tmpfs (as on most Linux
// machines), a cache there is refused.
func TestRefusesMemoryBacked(t *testing.T) {
	if mem, err := memoryBacked("/dev/shm"); err != nil || !mem {
		if _, err := New(Config{Dir: t.TempDir()}); err != nil {
			t.Fatalf("a cache on the test's own directory: %v", err)
		}
		return
	}
	dir, err := os.MkdirTemp("/dev/shm", "images-test-")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(dir)
	if _, err := New(Config{Dir: dir}); !errors.Is(err, ErrMemoryBacked) {
		t.Fatalf("a cache on tmpfs: %v, want ErrMemoryBacked", err)
	}
}

// TestIdleImagesHoldNoFiles: an image holds an open file only while an
// Image of it is open or a Store writes it, however many are kept.
func TestIdleImagesHoldNoFiles(t *testing.T) {
	before := memtest.OpenFiles(t)
	c := openIn(t, t.TempDir(), Config{})
	mems := make([][]byte, 40)
	for i := range mems {
		mems[i] = memory(4, uint64(i))
		if _, err := c.Store(fmt.Sprint(i), []byte("m"), mems[i], nil, 0); err != nil {
			t.Fatal(err)
		}
	}
	if got := memtest.OpenFiles(t) - before; got != 1 { // the lock file
		t.Fatalf("%d files open with 40 images kept, want the lock's alone", got)
	}
	im := wantImage(t, c, "7", "m", mems[7])
	if got := memtest.OpenFiles(t) - before; got != 2 {
		t.Fatalf("%d files open with an Image open, want 2", got)
	}
	mems[7][0] ^= 1
	if _, err := c.Store("7", []byte("m2"), mems[7], nil, im.ID); err != nil {
		t.Fatal(err)
	}
	im.Close()
	if got := memtest.OpenFiles(t) - before; got != 1 {
		t.Fatalf("%d files open once the Image closed, want 1", got)
	}
	wantImage(t, c, "7", "m2", mems[7]).Close()
}

// TestImageNamesAreNotFollowed: an image whose name was replaced by a
// symbolic link is a miss, and the link's target is neither read nor
// written; a probe a crash left in New is cleared by the next start.
func TestImageNamesAreNotFollowed(t *testing.T) {
	dir := t.TempDir()
	c := openIn(t, dir, Config{})
	mem := memory(4, 1)
	if _, err := c.Store("a", []byte("m"), mem, nil, 0); err != nil {
		t.Fatal(err)
	}
	// The target is the image itself, moved: followed, it would be found.
	name := fileName(dir, c.by["a"].id)
	target := filepath.Join(t.TempDir(), "target")
	if err := os.Rename(name, target); err != nil {
		t.Fatal(err)
	}
	image, _ := os.ReadFile(target)
	if err := os.Symlink(target, name); err != nil {
		t.Fatal(err)
	}
	if _, ok := c.Lookup("a", []byte("m")); ok {
		t.Fatal("an image through a symbolic link was found")
	}
	if _, err := c.Store("b", []byte("m"), memory(4, 2), nil, 0); err != nil {
		t.Fatal(err)
	}
	c.Close()
	if got, _ := os.ReadFile(target); !bytes.Equal(got, image) {
		t.Fatal("the link's target changed")
	}
	os.WriteFile(filepath.Join(dir, probePrefix+"123"), nil, 0o600)
	openIn(t, dir, Config{})
	if got := names(t, dir); len(got) != 0 {
		t.Fatalf("the start left %q", got)
	}
}
