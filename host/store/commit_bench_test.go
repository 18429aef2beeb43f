//go:build unix

package store_test

import (
	"fmt"
	"strconv"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/wasmkeep/wasmkeep/host/store"
)

// BenchmarkCommit is a room's commit on the directory store, by what it
// writes: a delta of the pages an event wrote (9.5 KiB, a Go counter's in
// S2) or a record of an event's input (200 bytes, what a log of inputs
// would write), with its manifest (300 bytes), by 4 writers at once (four
// rooms) sharing the flushes. cpu-µs/op is the process's CPU time (user
// and system) a commit, which is what bounds a node's commits a second.
func BenchmarkCommit(b *testing.B) {
	for _, be := range []struct {
		name string
		o    store.DirOptions
	}{{"files", store.DirOptions{}}, {"journal", store.DirOptions{Journal: true}}} {
		for _, size := range []int{200, 9700} {
			b.Run(fmt.Sprintf("%s/%dB", be.name, size), func(b *testing.B) {
				bk := openDir(b, b.TempDir(), be.o)
				body := make([]byte, size)
				for i := range body {
					body[i] = byte(i * 7)
				}
				manifest := make([]byte, 300)
				var rooms atomic.Int64
				var seq atomic.Int64
				before := cpuTime()
				b.SetParallelism(2) // 4 writers on 2 cores
				b.RunParallel(func(pb *testing.PB) {
					room := fmt.Sprintf("rooms/c/r%d/", rooms.Add(1))
					etag, prev := "", ""
					for pb.Next() {
						seg := store.Object{Key: room + "seg/" + strconv.FormatInt(seq.Add(1), 10), Body: body}
						cond := store.IfNoneMatch()
						if etag != "" {
							cond = store.IfMatch(etag)
						}
						var err error
						if etag, err = store.PutCommit(b.Context(), bk, []store.Object{seg}, room+"manifest", manifest, cond); err != nil {
							b.Error(err)
							return
						}
						if prev != "" { // the collector's part: the segment superseded
							if err := bk.Delete(b.Context(), prev, ""); err != nil {
								b.Error(err)
								return
							}
						}
						prev = seg.Key
					}
				})
				b.ReportMetric(float64((cpuTime()-before).Microseconds())/float64(b.N), "cpu-µs/op")
			})
		}
	}
}

// cpuTime is the process's CPU time so far, user and system.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
