//go:build linux

package engine

import (
	"testing"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/wasmkeep/wasmkeep/host/snapshot"
)

// TestRestorePrefaults: the engine has restores fault their stored pages
// in ahead of writing them, and its prefault makes exactly the pages it
// is given resident.
func TestRestorePrefaults(t *testing.T) {
	f := snapshot.SetPrefault(nil)
	defer func() { snapshot.SetPrefault(f) }()
	if f == nil {
		t.Fatal("the engine sets no prefault for restores")
	}
	ps := int(osPageSize)
	b, err := unix.Mmap(-1, 0, 16*ps, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Munmap(b)
	f(b[4*ps : 12*ps])
	resident := make([]byte, 16)
	if _, _, errno := unix.Syscall(unix.SYS_MINCORE, uintptr(unsafe.Pointer(&b[0])), uintptr(len(b)), uintptr(unsafe.Pointer(&resident[0]))); errno != 0 {
		t.Fatal(errno)
	}
	for p, v := range resident {
		if want := p >= 4 && p < 12; (v&1 != 0) != want {
			t.Fatalf("page %d resident %v, want %v (pages 4 to 11 prefaulted); the kernel refused the advice: %v", p, v&1 != 0, want, populateUnsupported.Load())
		}
	}
}
