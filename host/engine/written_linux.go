//go:build linux

package engine

import (
	"errors"
	"os"
	"runtime"
	"sync"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/wasmkeep/wasmkeep/host/snapshot"
)

// Pages written since the last snapshot. Taking a snapshot compares each
// page of the room's memory with the one before by its hash, and hashing
// every page (a Go room has 640 or more) is most of what a commit of a
// durable room costs: 0.2 to 0.7 ms, where the pages one event writes are
// a dozen. Linux (6.7 and later) tracks the writes to a mapping itself:
// a userfaultfd registered for write protection in its asynchronous mode
// takes no fault to user space, it only clears a page's protection when
// the page is written; PAGEMAP_SCAN on /proc/self/pagemap then lists the
// pages whose protection is gone and protects them again, in one call. So
// a snapshot hashes only the pages written since the one before.
//
// Where the kernel cannot (older, or a mapping of a regular file: a
// room's memory image), a snapshot hashes every page, as before.

// Values of linux/userfaultfd.h and linux/fs.h (the same on amd64 and
// arm64).
const (
	uffdUserModeOnly        = 1
	uffdAPI                 = 0xaa
	uffdioAPI               = 0xc018aa3f
	uffdioRegister          = 0xc020aa00
	uffdioWriteProtect      = 0xc018aa06
	uffdFeatureWPUnpopulate = 1 << 13
	uffdFeatureWPAsync      = 1 << 15
	uffdioRegisterModeWP    = 1 << 1
	uffdioWriteProtectWP    = 1
	pagemapScan             = 0xc0606610
	pageIsWritten           = 1 << 1
	pmScanWPMatching        = 1 << 0
	pmScanCheckWPAsync      = 1 << 1
)

type uffdioAPIArg struct{ api, features, ioctls uint64 }

type uffdioRange struct{ start, len uint64 }

type uffdioRegisterArg struct {
	rng    uffdioRange
	mode   uint64
	ioctls uint64
}

type uffdioWriteProtectArg struct {
	rng  uffdioRange
	mode uint64
}

type pageRegion struct{ start, end, categories uint64 }

type pmScanArg struct {
	size, flags, start, end, walkEnd, vec, vecLen, maxPages   uint64
	categoryInvMask, categoryMask, categoryAnyofMask, retMask uint64
}

// writeTracker is the process's userfaultfd and pagemap file, shared by
// every tracked memory (no fault ever reaches the userfaultfd, so one
// does for all).
type writeTracker struct {
	uffd    int
	pagemap *os.File
}

// tracker is the process's writeTracker, or nil where the kernel cannot
// track writes (found out once, by trying it on a small mapping).
var tracker = sync.OnceValue(func() *writeTracker {
	if osPageSize != 4096 {
		return nil // snapshot pages are 4 KiB
	}
	fd, _, errno := unix.Syscall(unix.SYS_USERFAULTFD, unix.O_CLOEXEC|unix.O_NONBLOCK|uffdUserModeOnly, 0, 0)
	if errno != 0 {
		return nil
	}
	t := &writeTracker{uffd: int(fd)}
	api := uffdioAPIArg{api: uffdAPI, features: uffdFeatureWPAsync | uffdFeatureWPUnpopulate}
	if t.ioctl(t.uffd, uffdioAPI, unsafe.Pointer(&api)) != nil {
		unix.Close(t.uffd)
		return nil
	}
	f, err := os.Open("/proc/self/pagemap")
	if err != nil {
		unix.Close(t.uffd)
		return nil
	}
	t.pagemap = f
	if !t.selfTest() {
		unix.Close(t.uffd)
		f.Close()
		return nil
	}
	return t
})

func (t *writeTracker) ioctl(fd int, req uintptr, arg unsafe.Pointer) error {
	if _, _, errno := unix.Syscall(unix.SYS_IOCTL, uintptr(fd), req, uintptr(arg)); errno != 0 {
		return errno
	}
	return nil
}

// selfTest tracks a small mapping: a write to one page must be found, and
// found only once.
func (t *writeTracker) selfTest() bool {
	const pages = 4
	size := uintptr(pages * osPageSize)
	p, err := unix.MmapPtr(-1, 0, nil, size, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS)
	if err != nil {
		return false
	}
	defer unix.MunmapPtr(p, size)
	if t.register(p, size) != nil || t.protect(p, size) != nil {
		return false
	}
	*(*byte)(unsafe.Add(p, 2*osPageSize+7)) = 1
	var first, second []int
	if t.scan(p, pages, func(page int) { first = append(first, page) }) != nil ||
		t.scan(p, pages, func(page int) { second = append(second, page) }) != nil {
		return false
	}
	return len(first) == 1 && first[0] == 2 && len(second) == 0
}

// register makes the writes to [base, base+size) trackable.
func (t *writeTracker) register(base unsafe.Pointer, size uintptr) error {
	arg := uffdioRegisterArg{rng: uffdioRange{uint64(uintptr(base)), uint64(size)}, mode: uffdioRegisterModeWP}
	return t.ioctl(t.uffd, uffdioRegister, unsafe.Pointer(&arg))
}

// protect forgets the writes to [base, base+size): from now on a write
// to one of its pages is found by scan.
func (t *writeTracker) protect(base unsafe.Pointer, size uintptr) error {
	if size == 0 {
		return nil
	}
	arg := uffdioWriteProtectArg{rng: uffdioRange{uint64(uintptr(base)), uint64(size)}, mode: uffdioWriteProtectWP}
	return t.ioctl(t.uffd, uffdioWriteProtect, unsafe.Pointer(&arg))
}

// scan calls fn with each of the first pages pages from base written
// since they were last protected or scanned, in order, and protects them
// again.
func (t *writeTracker) scan(base unsafe.Pointer, pages int, fn func(page int)) error {
	// On the heap: the kernel writes it through an address in arg, which
	// a stack that moves would leave stale.
	vec := make([]pageRegion, 64)
	start := uint64(uintptr(base))
	end := start + uint64(pages)*uint64(osPageSize)
	for start < end {
		arg := pmScanArg{
			size: uint64(unsafe.Sizeof(pmScanArg{})), flags: pmScanWPMatching | pmScanCheckWPAsync,
			start: start, end: end, vec: uint64(uintptr(unsafe.Pointer(&vec[0]))), vecLen: uint64(len(vec)),
			categoryMask: pageIsWritten, retMask: pageIsWritten,
		}
		n, _, errno := unix.Syscall(unix.SYS_IOCTL, t.pagemap.Fd(), pagemapScan, uintptr(unsafe.Pointer(&arg)))
		if errno != 0 {
			return errno
		}
		runtime.KeepAlive(vec)
		for _, r := range vec[:n] {
			for a := r.start; a < r.end; a += uint64(osPageSize) {
				fn(int((a - uint64(uintptr(base))) / uint64(osPageSize)))
			}
		}
		if arg.walkEnd <= start {
			return errors.New("engine: PAGEMAP_SCAN made no progress")
		}
		start = arg.walkEnd
	}
	return nil
}

// trackWrites starts tracking the writes to m's usable pages, forgetting
// those made so far. It reports false where they cannot be tracked.
func (m *mappedMemory) trackWrites() bool {
	t := tracker()
	if t == nil || m.base == nil || m.file {
		return false
	}
	if !m.registered {
		if t.register(m.base, m.reserved) != nil {
			return false
		}
		m.registered = true
	}
	if t.protect(m.base, m.usable) != nil {
		m.tracking = false
		return false
	}
	m.tracking = true
	return true
}

// written calls fn with each of the first pages pages of m written since
// trackWrites or the last written, and forgets them. It reports false if
// m's writes are not tracked (then fn was not called for every page
// written, and the caller must look at every page).
func (m *mappedMemory) written(pages int, fn func(page int)) bool {
	if !m.tracking || m.file || uintptr(pages)*uintptr(osPageSize) > m.usable {
		return false
	}
	if tracker().scan(m.base, pages, fn) != nil {
		m.tracking = false
		return false
	}
	return true
}

// grown protects the pages a grow made usable, from old to m.usable, so
// that writes to them are tracked too.
func (m *mappedMemory) grown(old uintptr) {
	if !m.tracking {
		return
	}
	if tracker().protect(unsafe.Add(m.base, old), m.usable-old) != nil {
		m.tracking = false
	}
}

// pagesSince returns the hashes of view's pages, hashing only those
// written since the snapshot whose hashes prevPages are, if the memory's
// writes have been tracked since that snapshot (prevPages is the very
// slice it returned); else nil, for the encoder to hash every page, and
// the tracking starts over from now. The instance must not be running.
func (i *Instance) pagesSince(view []byte, prevPages []uint64) []uint64 {
	m := mappedOf(view)
	if m == nil {
		return nil
	}
	n := len(view) / snapshot.PageSize
	if len(prevPages) > 0 && len(prevPages) <= n && len(i.trackedPages) == len(prevPages) &&
		unsafe.SliceData(prevPages) == unsafe.SliceData(i.trackedPages) {
		pages := make([]uint64, n)
		copy(pages, prevPages)
		hash := func(p int) {
			if p < n {
				pages[p] = snapshot.HashPage(view[p*snapshot.PageSize : (p+1)*snapshot.PageSize])
			}
		}
		if m.written(n, hash) {
			for p := len(prevPages); p < n; p++ {
				hash(p) // a grow added them since
			}
			return pages
		}
	}
	m.trackWrites()
	return nil
}
