// Package memtest measures a test process's memory, for the tests that
// report what an idle socket costs.
package memtest

import (
	"net"
	"os"
	"runtime"
	"runtime/debug"
	"strconv"
	"strings"
	"testing"
)

// RaiseFileLimit raises RLIMIT_NOFILE so that the process can hold want
// descriptors, past the hard limit where the process may (root), else to
// the hard limit, and returns the limit it got.
func RaiseFileLimit(tb testing.TB, want uint64) uint64 {
	tb.Helper()
	got, err := RaiseFileLimitTo(want)
	if err != nil {
		tb.Fatal(err)
	}
	return got
}

// perSource is how many client sockets tests open from one loopback
// address: the ephemeral port range (32768–60999 by default) bounds the
// connections from one address to one server address.
const perSource = 20000

// LoopbackDialer returns the dialer the i-th of many client sockets should
// use: from 127.0.0.1, then .2 every 20,000 sockets (all of 127/8 is
// loopback on Linux), with its port chosen at connect rather than at bind
// (see dialControl), so that tests running at once do not take each
// other's ports.
func LoopbackDialer(i int) *net.Dialer {
	return &net.Dialer{
		LocalAddr: &net.TCPAddr{IP: net.IPv4(127, 0, 0, byte(1+i/perSource))},
		Control:   dialControl,
	}
}

// IdleSockets is how many sockets the idle-socket memory tests open:
// $WASMKEEP_IDLE_SOCKETS, or def (the bench recipe measures 50,000).
func IdleSockets(tb testing.TB, def int) int {
	tb.Helper()
	v := os.Getenv("WASMKEEP_IDLE_SOCKETS")
	if v == "" {
		return def
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 1 || n > 200000 {
		tb.Fatalf("WASMKEEP_IDLE_SOCKETS=%q: want a count from 1 to 200000", v)
	}
	return n
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

// ResetPeakRSS makes the kernel forget the process's peak resident set
// (VmHWM), so that PeakRSS reports the peak of what follows.
func ResetPeakRSS(tb testing.TB) {
	tb.Helper()
	if err := os.WriteFile("/proc/self/clear_refs", []byte("5"), 0); err != nil {
		tb.Fatalf("resetting the peak RSS: %v", err)
	}
}

// PeakRSS is the process's peak resident set in bytes (VmHWM) since it
// started or since ResetPeakRSS.
func PeakRSS(tb testing.TB) uint64 {
	tb.Helper()
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		tb.Fatal(err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "VmHWM:"); ok {
			kb, err := strconv.ParseUint(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
			if err != nil {
				tb.Fatalf("VmHWM: %q", v)
			}
			return kb << 10
		}
	}
	tb.Fatal("no VmHWM in /proc/self/status")
	return 0
}

// OpenFiles is how many files the process has open (/proc/self/fd).
func OpenFiles(tb testing.TB) int {
	tb.Helper()
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		tb.Fatal(err)
	}
	return len(ents)
}
