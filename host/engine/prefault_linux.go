//go:build linux

package engine

import (
	"errors"
	"sync/atomic"

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

// populateUnsupported is set once the kernel has refused the advice
// (EINVAL: before 5.14, or pages larger than a snapshot's, which a run
// need not fill), so that it is asked once, not once per run.
var populateUnsupported atomic.Bool

// populateWrite only makes pages present: any failure is harmless, the
// pages fault in as they are written.
func populateWrite(b []byte) {
	if populateUnsupported.Load() {
		return
	}
	if err := unix.Madvise(b, unix.MADV_POPULATE_WRITE); errors.Is(err, unix.EINVAL) {
		populateUnsupported.Store(true)
	}
}
