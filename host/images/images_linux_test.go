package images

import (
	"errors"
	"os"
	"testing"
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
