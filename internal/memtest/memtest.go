// Package memtest measures a test process's memory, for the tests that
// report what an idle socket costs.
package memtest

import (
	"os"
	"runtime"
	"runtime/debug"
	"strconv"
	"strings"
	"syscall"
	"testing"
)

// RaiseFileLimit raises RLIMIT_NOFILE to its hard limit and returns it.
func RaiseFileLimit(tb testing.TB) uint64 {
	tb.Helper()
	var lim syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil {
		tb.Fatal(err)
	}
	lim.Cur = lim.Max
	if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil {
		tb.Fatal(err)
	}
	return lim.Cur
}

// Sample is the process's memory at one moment.
type Sample struct {
	Heap, Stack, RSS uint64 // heap in use, goroutine stacks, resident set
}

// Take collects garbage twice (the second cycle shrinks stacks and frees
// what the first found), returns freed memory to the OS, and samples.
func Take(tb testing.TB) Sample {
	tb.Helper()
	runtime.GC()
	runtime.GC()
	debug.FreeOSMemory()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	b, err := os.ReadFile("/proc/self/statm")
	if err != nil {
		tb.Fatal(err)
	}
	pages, _ := strconv.ParseUint(strings.Fields(string(b))[1], 10, 64)
	return Sample{ms.HeapInuse, ms.StackInuse, pages * uint64(os.Getpagesize())}
}

// Per divides the growth from before to after among n things.
func Per(after, before Sample, n int) (heap, stack, rss float64) {
	d := func(a, b uint64) float64 { return (float64(a) - float64(b)) / float64(n) }
	return d(after.Heap, before.Heap), d(after.Stack, before.Stack), d(after.RSS, before.RSS)
}
