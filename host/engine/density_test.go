//go:build linux && !race

package engine

import (
	"bufio"
	"bytes"
	"context"
	"os"
	"runtime"
	"runtime/debug"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/wasmkeep/wasmkeep/internal/limits"
	"github.com/wasmkeep/wasmkeep/internal/testwasm"
)

// memSample is the process's memory at one moment, after garbage
// collection and with freed heap memory returned to the OS.
type memSample struct {
	pss, rss, private uint64 // from /proc/self/smaps_rollup
	heap              uint64 // Go heap in use
	available         uint64 // MemAvailable from /proc/meminfo
}

func takeMemSample(tb testing.TB) memSample {
	tb.Helper()
	runtime.GC()
	runtime.GC()
	debug.FreeOSMemory()
	var s memSample
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	s.heap = ms.HeapInuse
	fields := func(path string, f func(key string, kb uint64)) {
		b, err := os.ReadFile(path)
		if err != nil {
			tb.Fatal(err)
		}
		sc := bufio.NewScanner(bytes.NewReader(b))
		for sc.Scan() {
			key, rest, ok := strings.Cut(sc.Text(), ":")
			if !ok {
				continue
			}
			v, err := strconv.ParseUint(strings.TrimSuffix(strings.TrimSpace(rest), " kB"), 10, 64)
			if err == nil {
				f(key, v<<10)
			}
		}
	}
	fields("/proc/self/smaps_rollup", func(key string, v uint64) {
		switch key {
		case "Pss":
			s.pss = v
		case "Rss":
			s.rss = v
		case "Private_Clean", "Private_Dirty":
			s.private += v
		}
	})
	fields("/proc/meminfo", func(key string, v uint64) {
		if key == "MemAvailable" {
			s.available = v
		}
	})
	return s
}

// densityRooms is how many rooms TestDensity keeps resident per case
// (WASMKEEP_DENSITY_ROOMS overrides it).
func densityRooms(tb testing.TB) int {
	if s := os.Getenv("WASMKEEP_DENSITY_ROOMS"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n <= 0 {
			tb.Fatalf("WASMKEEP_DENSITY_ROOMS=%q", s)
		}
		return n
	}
	return 1000
}

// TestDensity measures how much memory a resident counter room costs, for
// each memory backend, in the states a resident room is found in:
//
//   - started: a cold start (start function and _initialize) and one POST;
//   - started, trimmed: the same after trimMemory, which Start does not
//     call yet;
//   - restored: a wake from a snapshot of the first room, and one GET;
//   - restored, snapshotted: the same after a snapshot (a checkpoint or a
//     per-event durable class), which reads the whole memory;
//   - restored, snapshotted, trimmed: the same after trimMemory, which
//     Snapshot does not call yet.
//
// Each phase's rooms stay resident while the next phase is measured from a
// new sample, except that restored rooms replace the started ones. The
// cost of a room is the growth of the process's memory divided by the
// number of rooms. The figure is the process's proportional set size (Pss,
// from /proc/self/smaps_rollup) after two garbage collections and
// debug.FreeOSMemory: it counts the Go heap, the memory mapped outside it
// (guest memories, compiled code) and page-cache pages the process maps,
// and it counts a page mapped several times (a class's copy-on-write
// initial memory shared by its rooms) once in total, where RSS would count
// it once per mapping. The cgroup's memory.current would be as honest but
// is not available everywhere (the CI machine has cgroup v1 and the
// process is not in a cgroup it can read), and MemAvailable moves with
// everything else on the machine; its delta is logged as a cross-check.
// Collecting garbage first flatters the heap backend: a process at
// GOGC=100 may hold up to twice its live heap, and a fresh process's heap
// has untouched pages that a long-running one has long dirtied.
//
// Run it with (WASMKEEP_DENSITY_ROOMS=n changes the 1,000 rooms):
//
//	go test -run TestDensity -count 1 -v ./host/engine/
func TestDensity(t *testing.T) {
	if testing.Short() {
		t.Skip("starts thousands of rooms")
	}
	n := densityRooms(t)
	wasm := testwasm.Build(t, "./examples/counter")
	for b := range numMemoryBackends {
		t.Run(b.String(), func(t *testing.T) {
			setMemoryBackend(t, b)
			ctx := context.Background()
			// No pool: rooms instantiate on the test's goroutine and the
			// pool's instances do not blur the before/after samples.
			e := newEngine(t, Config{PoolSize: limits.Off})
			c, err := e.Compile(ctx, wasm)
			if err != nil {
				t.Fatal(err)
			}
			d := newDensityRun(t, "", n)
			trim := func(i int) *Instance {
				d.rooms[i].trimMemory()
				return d.rooms[i]
			}

			d.phase("started", func(i int) *Instance {
				inst := startRoom(t, c)
				if got := request(t, inst, postRoot); got != "1" {
					t.Fatalf("room %d answered %q", i, got)
				}
				return inst
			})
			d.phase("started, trimmed", trim)
			man, segs := takeSnapshot(t, d.rooms[0], nil)
			d.closeAll()
			d.phase("restored", func(i int) *Instance {
				inst, err := c.Restore(ctx, man, segs, &fakeHost{})
				if err != nil {
					t.Fatal(err)
				}
				if got := request(t, inst, getRoot); got != "1" {
					t.Fatalf("restored room %d answered %q", i, got)
				}
				return inst
			})
			d.phase("restored, snapshotted", func(i int) *Instance {
				if _, err := d.rooms[i].Snapshot(testEncoder, nil, nil, nil, 1, "", false); err != nil {
					t.Fatal(err)
				}
				return d.rooms[i]
			})
			d.phase("restored, snapshotted, trimmed", trim)
		})
	}
}

// densityRun holds the n rooms of one measurement and measures what each
// phase of steps costs a room.
type densityRun struct {
	t     *testing.T
	label string // before each phase's name in the log
	rooms []*Instance
	base  memSample
}

func newDensityRun(t *testing.T, label string, n int) *densityRun {
	d := &densityRun{t: t, label: label, rooms: make([]*Instance, n)}
	t.Cleanup(d.closeAll)
	return d
}

// closeAll closes every room.
func (d *densityRun) closeAll() {
	for i, r := range d.rooms {
		if r != nil {
			r.Close()
		}
		d.rooms[i] = nil
	}
}

// phase runs step on every room and reports what a room costs since the
// last phase that started with no rooms.
func (d *densityRun) phase(what string, step func(i int) *Instance) {
	d.t.Helper()
	if d.rooms[0] == nil {
		d.base = takeMemSample(d.t)
	}
	ds := make([]time.Duration, len(d.rooms))
	for i := range d.rooms {
		t0 := time.Now()
		d.rooms[i] = step(i)
		ds[i] = time.Since(t0)
	}
	reportDensity(d.t, d.label+what, len(d.rooms), d.base, takeMemSample(d.t), ds)
}

// reportDensity logs the memory one room added from before to after, and
// the p50 and p99 of the step each room went through last.
func reportDensity(t *testing.T, what string, n int, before, after memSample, ds []time.Duration) {
	t.Helper()
	per := func(a, b uint64) float64 { return (float64(a) - float64(b)) / float64(n) }
	const mib = 1 << 20
	pss := per(after.pss, before.pss)
	slices.Sort(ds)
	t.Logf("%s, %s: %d rooms: Pss %.3f MiB/room = %.0f rooms/GiB (RSS %.2f, private %.2f, Go heap %.2f, MemAvailable %.2f MiB/room); step p50 %v p99 %v",
		memoryBackend(memoryBackendSetting.Load()), what, n, pss/mib, (1<<30)/pss, per(after.rss, before.rss)/mib,
		per(after.private, before.private)/mib, per(after.heap, before.heap)/mib,
		-per(after.available, before.available)/mib,
		ds[len(ds)/2].Round(time.Microsecond), ds[len(ds)*99/100].Round(time.Microsecond))
}

// BenchmarkMemoryBackends compares the memory backends on the paths their
// cost shows in: instantiating a blank instance (and closing it), a cold
// start (instantiate, start and initialize, one POST), and an engine-level
// wake as in BenchmarkRestore, with and without the blank-instance pool.
//
//	go test -run '^$' -bench MemoryBackends -benchtime 2000x ./host/engine/
func BenchmarkMemoryBackends(b *testing.B) {
	ctx := context.Background()
	for be := range numMemoryBackends {
		b.Run(be.String()+"/instantiate", func(b *testing.B) {
			setMemoryBackend(b, be)
			c := compile(b, newEngine(b, Config{PoolSize: limits.Off}), "./examples/counter")
			var ds []time.Duration
			for b.Loop() {
				t0 := time.Now()
				inst, err := c.instantiate(ctx)
				if err != nil {
					b.Fatal(err)
				}
				ds = append(ds, time.Since(t0))
				inst.Close()
			}
			percentiles(b, ds)
		})
		b.Run(be.String()+"/start", func(b *testing.B) {
			setMemoryBackend(b, be)
			c := compile(b, newEngine(b, Config{PoolSize: limits.Off}), "./examples/counter")
			var ds []time.Duration
			for b.Loop() {
				t0 := time.Now()
				inst := startRoom(b, c)
				request(b, inst, postRoot)
				ds = append(ds, time.Since(t0))
				inst.Close()
			}
			percentiles(b, ds)
		})
		for _, pool := range []int{limits.Off, DefaultPoolSize} {
			b.Run(be.String()+"/restore/pool="+strconv.Itoa(max(pool, 0)), func(b *testing.B) {
				setMemoryBackend(b, be)
				c := compile(b, newEngine(b, Config{PoolSize: pool}), "./examples/counter")
				benchRestore(b, c, pool)
			})
		}
	}
}
