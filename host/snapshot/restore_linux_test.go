//go:build linux

package snapshot

import (
	"fmt"
	"math/rand/v2"
	"runtime"
	"syscall"
	"testing"
	"time"
)

// chatLikeMemory is 40 chunks (2.5 MiB, a Go chat room's memory) of which
// stored pages hold text and pointers the way a Go heap does after a few
// hundred requests (compressing some 90 to 1, like the chat's), the rest
// zero.
func chatLikeMemory(stored int) []byte {
	mem := make([]byte, 40*ChunkSize)
	r := rand.New(rand.NewPCG(1, 2))
	text := []byte("<div class=msg>message number 17 from a chat user</div>\n<script>const ws = new WebSocket(url)</script>\n")
	for _, page := range r.Perm(len(mem) / PageSize)[:stored] {
		b := mem[page*PageSize : (page+1)*PageSize]
		for off := 0; off < len(b); off += len(text) {
			copy(b[off:], text)
		}
		for range 8 {
			b[r.IntN(len(b))] = byte(r.Uint32())
		}
	}
	return mem
}

// BenchmarkRestoreMapped restores a chat-like memory (340 stored pages, as
// a Go chat's after many wakes) into a fresh private mapping each time, as
// a wake does into a blank instance: the page faults of writing it are in
// the figure. prefault: the stored pages are faulted in with
// MADV_POPULATE_WRITE first.
//
//	go test -run '^$' -bench RestoreMapped -count 3 ./host/snapshot/
func BenchmarkRestoreMapped(b *testing.B) {
	mem := chatLikeMemory(340)
	for _, codec := range []Codec{Zstd, S2} {
		enc, _ := NewEncoder(codec, Options{})
		d, _ := enc.Snapshot(nil, &Capture{Header: testHeader(), Memory: mem}, false)
		seg, _ := DecodeSegment(d.Segment)
		segs := map[string]*Segment{d.SegmentID: seg}
		for _, pre := range []bool{false, true} {
			{
				b.Run(fmt.Sprintf("%s/prefault=%v", codec, pre), func(b *testing.B) {
					defer setPrefault(b, pre)()
					// CPU time of this thread, which a machine shared
					// with other work inflates less than wall time.
					runtime.LockOSThread()
					defer runtime.UnlockOSThread()
					var cpu time.Duration
					for b.Loop() {
						b.StopTimer()
						dst, err := syscall.Mmap(-1, 0, len(mem), syscall.PROT_READ|syscall.PROT_WRITE, syscall.MAP_PRIVATE|syscall.MAP_ANON)
						if err != nil {
							b.Fatal(err)
						}
						b.StartTimer()
						c0 := threadCPU()
						if _, err := d.Manifest.Restore(dst, segs, func(int) bool { return false }, nil); err != nil {
							b.Fatal(err)
						}
						cpu += threadCPU() - c0
						b.StopTimer()
						_ = syscall.Munmap(dst)
						b.StartTimer()
					}
					b.ReportMetric(float64(cpu.Microseconds())/float64(b.N), "cpu-µs/op")
					b.ReportMetric(float64(len(d.Segment)), "segment-bytes")
				})
			}
		}
	}
}

// setPrefault sets the restore's prefault for a benchmark, and returns
// what puts it back.
func setPrefault(b *testing.B, pre bool) func() {
	old := SetPrefault(nil)
	if pre {
		SetPrefault(func(p []byte) {
			if err := madvise(p, 0x17); err != nil { // MADV_POPULATE_WRITE
				b.Fatal(err)
			}
		})
	}
	return func() { SetPrefault(old) }
}

// threadCPU is the calling thread's CPU time, user and system.
func threadCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(1, &ru); err != nil { // RUSAGE_THREAD
		panic(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

func madvise(b []byte, advice int) error {
	_, _, e := syscall.Syscall(syscall.SYS_MADVISE, uintptr(unsafePointer(b)), uintptr(len(b)), uintptr(advice))
	if e != 0 {
		return e
	}
	return nil
}
