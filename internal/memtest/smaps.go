package memtest

import (
	"bufio"
	"bytes"
	"os"
	"runtime"
	"strconv"
	"sync"
	"testing"
	"time"
)

// Resident is what the kernel and the Go runtime say of the process's
// memory at one moment, read without collecting garbage or returning
// memory to the OS first (unlike Take): what the process holds on its own.
type Resident struct {
	// From /proc/self/smaps_rollup, in bytes. Pss counts a page shared
	// with other mappings (a class image, the binary) once among them;
	// PssShmem is the memfd class images' part, PssFile the binary's and
	// other files'.
	RSS, Pss, PssAnon, PssFile, PssShmem uint64
	// Mappings counts the lines of /proc/self/maps.
	Mappings int
	// From runtime.MemStats: HeapAlloc (live and not yet collected),
	// HeapInuse, HeapIdle and HeapReleased (the part of HeapIdle returned
	// to the OS), StackInuse, and Sys (all the runtime has mapped).
	HeapAlloc, HeapInuse, HeapIdle, HeapReleased, StackInuse, Sys uint64
	// RuntimeSys is what the runtime has mapped for its own structures
	// (spans, garbage-collector metadata, profiling buckets, the rest).
	RuntimeSys uint64
	NumGC      uint32
}

// PssMemory is the process's own memory, shared pages divided among their
// mappings: Pss without the pages of files (the binary, which a child
// process of the same binary shares, halving them).
func (r Resident) PssMemory() uint64 { return r.PssAnon + r.PssShmem }

// ReadResident samples the process's memory as it stands.
func ReadResident(tb testing.TB) Resident {
	tb.Helper()
	var r Resident
	b, err := os.ReadFile("/proc/self/smaps_rollup")
	if err != nil {
		tb.Fatal(err)
	}
	fields := map[string]*uint64{"Rss:": &r.RSS, "Pss:": &r.Pss, "Pss_Anon:": &r.PssAnon, "Pss_File:": &r.PssFile, "Pss_Shmem:": &r.PssShmem}
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		f := bytes.Fields(sc.Bytes())
		if len(f) < 2 {
			continue
		}
		if p := fields[string(f[0])]; p != nil {
			kb, err := strconv.ParseUint(string(f[1]), 10, 64)
			if err != nil {
				tb.Fatalf("smaps_rollup: %q", sc.Text())
			}
			*p = kb << 10
		}
	}
	maps, err := os.ReadFile("/proc/self/maps")
	if err != nil {
		tb.Fatal(err)
	}
	r.Mappings = bytes.Count(maps, []byte{'\n'})
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	r.HeapAlloc, r.HeapInuse, r.HeapIdle, r.HeapReleased = ms.HeapAlloc, ms.HeapInuse, ms.HeapIdle, ms.HeapReleased
	r.StackInuse, r.Sys, r.NumGC = ms.StackInuse, ms.Sys, ms.NumGC
	r.RuntimeSys = ms.MSpanSys + ms.MCacheSys + ms.BuckHashSys + ms.GCSys + ms.OtherSys
	return r
}

// Settled is ReadResident after two collections and debug.FreeOSMemory
// (as Take): the floor the process's memory can fall to, and its live heap.
func Settled(tb testing.TB) Resident {
	tb.Helper()
	Take(tb)
	return ReadResident(tb)
}

// PeakPss samples the process's PssMemory every interval until stop is
// first called, which returns the largest sample (later calls, the same):
// the peak that VmHWM (PeakRSS) cannot give where pages are shared, since
// RSS counts a page once per mapping (a class image mapped by 800 rooms,
// 800 times).
func PeakPss(interval time.Duration) (stop func() uint64) {
	var peak uint64
	quit, done := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(done)
		t := time.NewTicker(interval)
		defer t.Stop()
		for {
			if b, err := os.ReadFile("/proc/self/smaps_rollup"); err == nil {
				peak = max(peak, rollupField(b, "Pss_Anon:")+rollupField(b, "Pss_Shmem:"))
			}
			select {
			case <-quit:
				return
			case <-t.C:
			}
		}
	}()
	return sync.OnceValue(func() uint64 {
		close(quit)
		<-done
		return peak
	})
}

// rollupField is a field of smaps_rollup in bytes, or 0.
func rollupField(b []byte, name string) uint64 {
	i := bytes.Index(b, []byte("\n"+name))
	if i < 0 {
		return 0
	}
	f := bytes.Fields(b[i+1+len(name):])
	if len(f) == 0 {
		return 0
	}
	kb, _ := strconv.ParseUint(string(f[0]), 10, 64)
	return kb << 10
}
