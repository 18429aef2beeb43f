//go:build linux

package engine

import (
	"errors"
	"sync/atomic"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/wasmkeep/wasmkeep/host/snapshot"
)

// A restore from the store writes every stored page of a fresh instance's
// memory once, and each first write is a page fault. MADV_POPULATE_WRITE
// (Linux 5.14) faults a run of pages in with one call. On a machine whose
// faults are cheap it gains little (about 5% of a Go chat room's store
// wake, inside the noise); in a virtual machine whose memory the host
// takes back as the guest frees it, where a fault cost 11 µs against 6
// µs populated, it took a quarter off that wake (docs/PERFORMANCE.md,
// "Go rooms collect their own garbage").
func init() { snapshot.SetPrefault(populateWrite) }

// populateUnsupported is set once a kernel has refused the advice, so that
// older kernels pay one failed call, not one per run.
var populateUnsupported atomic.Bool

func populateWrite(b []byte) {
	if len(b) == 0 || populateUnsupported.Load() {
		return
	}
	// Any failure is harmless (the pages fault in as they are written);
	// EINVAL is an old kernel, or a memory not aligned to pages (the Go
	// heap's fallback), so it is only remembered for the former.
	if err := unix.Madvise(b, unix.MADV_POPULATE_WRITE); errors.Is(err, unix.EINVAL) && alignedToPage(b) {
		populateUnsupported.Store(true)
	}
}

func alignedToPage(b []byte) bool {
	return uint64(uintptr(unsafe.Pointer(&b[0])))%osPageSize == 0 && uint64(len(b))%osPageSize == 0
}
