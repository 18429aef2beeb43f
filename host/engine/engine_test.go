package engine

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/wasmkeep/wasmkeep/abi"
	"github.com/wasmkeep/wasmkeep/host/snapshot"
	"github.com/wasmkeep/wasmkeep/internal/limits"
	"github.com/wasmkeep/wasmkeep/internal/testwasm"
)

// fakeHost records what a guest asks of its room.
type fakeHost struct {
	sent  []string
	count int
}

func (h *fakeHost) SocketSend(id uint32, kind int, data []byte) abi.Status {
	h.sent = append(h.sent, string(data))
	return abi.Success
}
func (h *fakeHost) SocketClose(uint32, abi.CloseCode, string) abi.Status { return abi.Success }
func (h *fakeHost) SocketList(dst []uint32) []uint32                     { return append(dst, 1) }
func (h *fakeHost) Broadcast(int, []byte, uint32) int {
	h.count++
	return 1
}
func (h *fakeHost) RoomInfo() abi.RoomInfo { return abi.RoomInfo{Class: "c", Name: "n"} }
func (h *fakeHost) Log(int, string)        {}
func (h *fakeHost) ChannelPush(uint32, *abi.ChannelMessage) abi.Status {
	return abi.Success
}
func (h *fakeHost) ChannelBroadcast(uint32, *abi.ChannelMessage) int { return 0 }
func (h *fakeHost) ChannelClose(uint32, string) abi.Status           { return abi.Success }
func (h *fakeHost) PresenceTrack(uint32, *abi.Presence) abi.Status   { return abi.Success }
func (h *fakeHost) PresenceUntrack(uint32, *abi.Presence) abi.Status {
	return abi.Success
}

// newEngine starts an engine for a test. Unless cfg names a cache of its
// own, its compiles go through the compilation cache all test processes
// share (testwasm.CompileCacheDir): a node compiles through a cache too,
// and a fresh compile of a Go guest takes seconds under -race.
func newEngine(tb testing.TB, cfg Config) *Engine {
	tb.Helper()
	if cfg.CacheDir == "" && !cfg.Interpreter {
		cfg.CacheDir = testwasm.CompileCacheDir(tb)
	}
	cfg.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	e, err := New(context.Background(), cfg)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { e.Close(context.Background()) })
	return e
}

func compile(tb testing.TB, e *Engine, pkg string) *Class {
	tb.Helper()
	c, err := e.Compile(context.Background(), testwasm.Build(tb, pkg))
	if err != nil {
		tb.Fatal(err)
	}
	return c
}

var getRoot = abi.AppendRequest(nil, &abi.Request{Method: "GET", Path: "/"})
var postRoot = abi.AppendRequest(nil, &abi.Request{Method: "POST", Path: "/"})

func request(tb testing.TB, inst *Instance, payload []byte) string {
	tb.Helper()
	raw, err := inst.Request(payload)
	if err != nil {
		tb.Fatal(err)
	}
	resp, err := abi.DecodeResponse(raw)
	if err != nil {
		tb.Fatal(err)
	}
	return string(resp.Body)
}

func TestRestoreContinuesWhereCaptured(t *testing.T) {
	e := newEngine(t, Config{})
	c := compile(t, e, "./examples/counter")
	a := startRoom(t, c)
	for range 5 {
		request(t, a, postRoot)
	}
	snap, segs := takeSnapshot(t, a, []byte("state"))
	if string(snap.RoomState) != "state" || snap.ModuleHash != c.Hash {
		t.Fatalf("header: %+v", snap.Header)
	}
	b, err := c.Restore(context.Background(), snap, segs, &fakeHost{})
	if err != nil {
		t.Fatal(err)
	}
	if got := request(t, b, getRoot); got != "5" {
		t.Fatalf("restored count %q, want 5", got)
	}
	// The two instances are independent from here.
	request(t, a, postRoot)
	if got := request(t, b, postRoot); got != "6" {
		t.Fatalf("b after its own increment: %q", got)
	}
	if got := request(t, a, getRoot); got != "6" {
		t.Fatalf("a: %q", got)
	}
	if b.Nanotime() < snap.Nanotime {
		t.Fatalf("clock went back: %d < %d", b.Nanotime(), snap.Nanotime)
	}
}

func TestRestoreRefusesOtherModule(t *testing.T) {
	e := newEngine(t, Config{})
	counter := compile(t, e, "./examples/counter")
	echo := compile(t, e, "./testdata/guests/echo")
	a, _ := counter.Start(context.Background(), &fakeHost{})
	snap, segs := takeSnapshot(t, a, nil)
	if _, err := echo.Restore(context.Background(), snap, segs, &fakeHost{}); err == nil {
		t.Fatal("restored a counter snapshot into the echo module")
	}
}

var testEncoder = func() *snapshot.Encoder {
	enc, err := snapshot.NewEncoder(snapshot.Zstd, snapshot.Options{})
	if err != nil {
		panic(err)
	}
	return enc
}()

// takeSnapshot snapshots inst as a room's first snapshot and returns the
// startRoom starts a fresh instance of c with a fake host.
func startRoom(tb testing.TB, c *Class) *Instance {
	tb.Helper()
	inst, err := c.Start(context.Background(), &fakeHost{})
	if err != nil {
		tb.Fatal(err)
	}
	return inst
}

// manifest and segments as a wake would read them back.
func takeSnapshot(tb testing.TB, inst *Instance, roomState []byte) (*snapshot.Manifest, map[string]*snapshot.Segment) {
	tb.Helper()
	d, err := inst.Snapshot(testEncoder, nil, nil, roomState, 1, "", false)
	if err != nil {
		tb.Fatal(err)
	}
	m, err := snapshot.DecodeManifest(d.Manifest.Encode())
	if err != nil {
		tb.Fatal(err)
	}
	segs := map[string]*snapshot.Segment{}
	if d.Segment != nil {
		seg, err := snapshot.DecodeSegment(d.Segment)
		if err != nil {
			tb.Fatal(err)
		}
		segs[d.SegmentID] = seg
	}
	return m, segs
}

func TestTrapKillsInstance(t *testing.T) {
	for _, tc := range []struct {
		path    string
		timeout time.Duration
		want    error
	}{
		{"/trap", time.Minute, ErrTrap},
		{"/loop", 300 * time.Millisecond, ErrTimeout},
		// Growing to the limit takes a few hundred milliseconds (more
		// under -race), which a minute's limit leaves to the memory limit.
		{"/grow", time.Minute, ErrMemoryLimit},
	} {
		e := newEngine(t, Config{EventTimeout: tc.timeout, MaxMemoryPages: 512})
		c := compile(t, e, "./testdata/guests/hostile")
		inst := startRoom(t, c)
		_, err := inst.Request(abi.AppendRequest(nil, &abi.Request{Method: "POST", Path: tc.path}))
		if !errors.Is(err, tc.want) {
			t.Fatalf("%s: %v, want %v", tc.path, err, tc.want)
		}
		if !inst.Dead() {
			t.Fatalf("%s: instance still usable after %v", tc.path, err)
		}
		if _, err := inst.Request(getRoot); !errors.Is(err, ErrClosed) {
			t.Fatalf("%s: call after crash: %v", tc.path, err)
		}
	}
}

func TestCompileRefusals(t *testing.T) {
	e := newEngine(t, Config{})
	for pkg, want := range map[string]string{
		"./testdata/guests/badimport": "env.nonexistent",
		"./testdata/guests/abiv2":     "ABI v2",
		"./testdata/guests/noabi":     "no wasmkeep ABI version",
	} {
		_, err := e.Compile(context.Background(), testwasm.Build(t, pkg))
		var me *ModuleError
		if !errors.As(err, &me) || !strings.Contains(me.Error(), want) {
			t.Errorf("%s: %v, want a module error mentioning %q", pkg, err, want)
		}
	}
	// The uploader reads the reason, without the rewriter's package.
	if _, err := e.Compile(context.Background(), []byte("\x00asm\x01\x00\x00\x00")); !errors.Is(err, ErrInvalidModule) || strings.Contains(err.Error(), "wasmrw:") {
		t.Errorf("empty module: %v", err)
	}
}

// percentiles reports p50 and p99 of durations as benchmark metrics.
func percentiles(b *testing.B, ds []time.Duration) {
	sort.Slice(ds, func(i, j int) bool { return ds[i] < ds[j] })
	if len(ds) == 0 {
		return
	}
	b.ReportMetric(float64(ds[len(ds)/2].Microseconds()), "p50-µs")
	b.ReportMetric(float64(ds[len(ds)*99/100].Microseconds()), "p99-µs")
}

// medianNs reports the median of durations in nanoseconds, which a shared
// machine's stalls move less than the mean.
func medianNs(b *testing.B, ds []time.Duration) {
	if len(ds) == 0 {
		return
	}
	slices.Sort(ds)
	b.ReportMetric(float64(ds[len(ds)/2].Nanoseconds()), "p50-ns")
}

// BenchmarkRestore measures an engine-level wake of a counter: decode the
// snapshot, take a blank instance, load memory and globals, run one event.
func BenchmarkRestore(b *testing.B) {
	for _, pool := range []int{limits.Off, DefaultPoolSize} {
		b.Run("pool="+strconv.Itoa(max(pool, 0)), func(b *testing.B) {
			e := newEngine(b, Config{PoolSize: pool})
			c := compile(b, e, "./examples/counter")
			benchRestore(b, c, pool)
		})
	}
}

// BenchmarkEvent measures the cost of delivering one event to a resident
// room: a socket message to the echo guest (which sends it back through a
// host call), and an HTTP request to the counter; with the event time limit
// enforced (the default: the engine's interrupt check), enforced by
// wazero's checks (WazeroInterrupt), and without it.
func BenchmarkEvent(b *testing.B) {
	for _, mode := range []struct {
		name string
		cfg  Config
	}{
		{"limit=on", Config{}},
		{"limit=on-wazero", Config{WazeroInterrupt: true}},
		{"limit=off", Config{EventTimeout: limits.Off}},
	} {
		name := mode.name
		e := newEngine(b, mode.cfg)
		b.Run(name+"/socket-message", func(b *testing.B) {
			c := compile(b, e, "./testdata/guests/echo")
			h := &fakeHost{}
			inst, _ := c.Start(context.Background(), h)
			msg := []byte("hello, room")
			ds := make([]time.Duration, 0, b.N)
			for b.Loop() {
				start := time.Now()
				if err := inst.SocketMessage(1, abi.MessageText, msg); err != nil {
					b.Fatal(err)
				}
				ds = append(ds, time.Since(start))
				h.sent = h.sent[:0]
			}
			medianNs(b, ds)
		})
		b.Run(name+"/request", func(b *testing.B) {
			c := compile(b, e, "./examples/counter")
			inst, _ := c.Start(context.Background(), &fakeHost{})
			ds := make([]time.Duration, 0, b.N)
			for b.Loop() {
				start := time.Now()
				if _, err := inst.Request(getRoot); err != nil {
					b.Fatal(err)
				}
				ds = append(ds, time.Since(start))
			}
			medianNs(b, ds)
		})
	}
}

// BenchmarkCompile measures validating, rewriting and compiling the counter
// (a 2.2 MB Go module): with the compiler, with the compiler and a warm
// compilation cache (a node restart), and with the interpreter.
func BenchmarkCompile(b *testing.B) {
	wasm := testwasm.Build(b, "./examples/counter")
	cache := b.TempDir()
	for _, c := range []struct {
		name string
		cfg  Config
	}{
		{"compiler", Config{PoolSize: limits.Off}},
		{"compiler-cached", Config{PoolSize: limits.Off, CacheDir: cache}},
		{"interpreter", Config{PoolSize: limits.Off, Interpreter: true}},
	} {
		b.Run(c.name, func(b *testing.B) {
			if c.cfg.CacheDir != "" {
				// Warm the cache once, as the first start of a node does.
				e := newEngine(b, c.cfg)
				if _, err := e.Compile(context.Background(), wasm); err != nil {
					b.Fatal(err)
				}
			}
			for b.Loop() {
				// A fresh engine each time: wazero also caches compiled
				// modules per runtime in memory.
				e, err := New(context.Background(), c.cfg)
				if err != nil {
					b.Fatal(err)
				}
				if _, err := e.Compile(context.Background(), wasm); err != nil {
					b.Fatal(err)
				}
				e.Close(context.Background())
			}
		})
	}
}

// BenchmarkInterpreter measures a restore and an event on wazero's
// interpreter, to compare with the compiler's figures above.
func BenchmarkInterpreter(b *testing.B) {
	e := newEngine(b, Config{Interpreter: true})
	c := compile(b, e, "./testdata/guests/echo")
	b.Run("restore", func(b *testing.B) {
		a, _ := c.Start(context.Background(), &fakeHost{})
		var ds []time.Duration
		for b.Loop() {
			start := time.Now()
			snap, segs := takeSnapshot(b, a, nil)
			inst, err := c.Restore(context.Background(), snap, segs, &fakeHost{})
			if err != nil {
				b.Fatal(err)
			}
			ds = append(ds, time.Since(start))
			inst.Close()
			waitPoolFull(c)
		}
		percentiles(b, ds)
	})
	b.Run("socket-message", func(b *testing.B) {
		h := &fakeHost{}
		inst, _ := c.Start(context.Background(), h)
		msg := []byte("hello, room")
		for b.Loop() {
			if err := inst.SocketMessage(1, abi.MessageText, msg); err != nil {
				b.Fatal(err)
			}
			h.sent = h.sent[:0]
		}
	})
}

// BenchmarkSnapshot measures a room's first (full) snapshot and a delta
// after one more event, for a counter and a chat room with 100 messages of
// history, with each codec.
func BenchmarkSnapshot(b *testing.B) {
	e := newEngine(b, Config{})
	for _, codec := range []snapshot.Codec{snapshot.Zstd, snapshot.S2} {
		enc, _ := snapshot.NewEncoder(codec, snapshot.Options{})
		for _, room := range []struct {
			name  string
			pkg   string
			event func(*Instance, int) error
		}{
			{"counter", "./examples/counter", func(inst *Instance, _ int) error { _, err := inst.Request(postRoot); return err }},
			{"chat", "./examples/chat", func(inst *Instance, i int) error {
				return inst.SocketMessage(1, abi.MessageText, []byte(strings.Repeat("x", 40)+strconv.Itoa(i)))
			}},
		} {
			c := compile(b, e, room.pkg)
			inst, _ := c.Start(context.Background(), &fakeHost{})
			for i := range 100 {
				if err := room.event(inst, i); err != nil {
					b.Fatal(err)
				}
			}
			first, err := inst.Snapshot(enc, nil, nil, nil, 1, "", false)
			if err != nil {
				b.Fatal(err)
			}
			b.Run(room.name+"/full/"+codec.String(), func(b *testing.B) {
				for b.Loop() {
					_, _ = inst.Snapshot(enc, nil, nil, nil, 1, "", false)
				}
				b.ReportMetric(float64(len(first.Segment)), "segment-bytes")
				b.ReportMetric(float64(inst.MemorySize()), "memory-bytes")
			})
			if err := room.event(inst, 100); err != nil {
				b.Fatal(err)
			}
			b.Run(room.name+"/delta-1-event/"+codec.String(), func(b *testing.B) {
				var d *snapshot.Delta
				for b.Loop() {
					d, _ = inst.Snapshot(enc, first.Manifest, first.PageHashes, nil, 1, "", false)
				}
				b.ReportMetric(float64(len(d.Segment)), "segment-bytes")
				b.ReportMetric(float64(d.Changed), "pages-changed")
			})
			// A durable room's commits: one event, then a snapshot
			// after the one before (the pages written since are what
			// it hashes, where the kernel tracks writes).
			b.Run(room.name+"/commit-each-event/"+codec.String(), func(b *testing.B) {
				d, err := inst.Snapshot(enc, nil, nil, nil, 1, "", false)
				if err != nil {
					b.Fatal(err)
				}
				i := 101
				for b.Loop() {
					b.StopTimer()
					if err := room.event(inst, i); err != nil {
						b.Fatal(err)
					}
					i++
					b.StartTimer()
					d, _ = inst.Snapshot(enc, d.Manifest, d.PageHashes, nil, 1, "", false)
				}
				b.ReportMetric(float64(len(d.Segment)), "segment-bytes")
				b.ReportMetric(float64(d.Changed), "pages-changed")
			})
		}
	}
}

// BenchmarkDeltaBytes reports what a hibernation of a chat room writes
// after 1, 10 and 100 more messages since its previous snapshot (segment
// plus manifest), next to a full snapshot of the same state.
func BenchmarkDeltaBytes(b *testing.B) {
	e := newEngine(b, Config{})
	c := compile(b, e, "./examples/chat")
	for _, k := range []int{1, 10, 100} {
		b.Run(fmt.Sprintf("messages=%d", k), func(b *testing.B) {
			inst, _ := c.Start(context.Background(), &fakeHost{})
			say := func(i int) {
				if err := inst.SocketMessage(1, abi.MessageText, []byte(fmt.Sprintf("message number %d from a chat user", i))); err != nil {
					b.Fatal(err)
				}
			}
			for i := range 100 { // a room with some history
				say(i)
			}
			prev, err := inst.Snapshot(testEncoder, nil, nil, nil, 1, "", false)
			if err != nil {
				b.Fatal(err)
			}
			for i := range k {
				say(100 + i)
			}
			var delta, full *snapshot.Delta
			for b.Loop() {
				delta, _ = inst.Snapshot(testEncoder, prev.Manifest, prev.PageHashes, nil, 1, "", false)
			}
			full, _ = inst.Snapshot(testEncoder, nil, nil, nil, 1, "", false)
			size := func(d *snapshot.Delta) int { return len(d.Segment) + len(d.Manifest.Encode()) }
			b.ReportMetric(float64(size(delta)), "delta-bytes")
			b.ReportMetric(float64(size(full)), "full-bytes")
			b.ReportMetric(100*float64(size(delta))/float64(size(full)), "delta-%")
			b.ReportMetric(float64(delta.Changed), "pages-changed")
			b.ReportMetric(float64(len(delta.Manifest.Encode())), "manifest-bytes")
			b.ReportMetric(float64(len(delta.Manifest.Chunks)), "chunks")
		})
	}
}

// waitPoolFull waits until the class's pool of blank instances is full
// again, so that the next measured wake starts as a spaced one does.
func waitPoolFull(c *Class) {
	for len(c.pool) < cap(c.pool) {
		time.Sleep(100 * time.Microsecond)
	}
}

// benchRestore measures wakes of one counter room of class c: decode its
// snapshot, restore it (from the pool, if pool > 0), answer a GET; the
// pool is refilled between wakes, as it would be between spaced wakes.
func benchRestore(b *testing.B, c *Class, pool int) {
	ctx := context.Background()
	a, _ := c.Start(ctx, &fakeHost{})
	request(b, a, postRoot)
	d, _ := a.Snapshot(testEncoder, nil, nil, nil, 1, "", false)
	man := d.Manifest.Encode()
	var ds []time.Duration
	for b.Loop() {
		start := time.Now()
		snap, err := snapshot.DecodeManifest(man)
		if err != nil {
			b.Fatal(err)
		}
		seg, err := snapshot.DecodeSegment(d.Segment)
		if err != nil {
			b.Fatal(err)
		}
		inst, err := c.Restore(ctx, snap, map[string]*snapshot.Segment{d.SegmentID: seg}, &fakeHost{})
		if err != nil {
			b.Fatal(err)
		}
		if _, err := inst.Request(getRoot); err != nil {
			b.Fatal(err)
		}
		ds = append(ds, time.Since(start))
		inst.Close()
		if pool > 0 {
			waitPoolFull(c)
		}
	}
	percentiles(b, ds)
}

// TestCompileCacheFailureIsNotTheModules: a compilation cache that cannot
// be written (a full disk; here a file where its directory was) fails the
// compile with an error of the node's, not ErrInvalidModule: the upload is
// answered 507 or 503, not 400 "invalid module".
func TestCompileCacheFailureIsNotTheModules(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "cache")
	e := newEngine(t, Config{CacheDir: dir})
	if err := os.RemoveAll(dir); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(dir, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	_, err := e.Compile(context.Background(), testwasm.Build(t, "./examples/counter"))
	if err == nil {
		t.Fatal("compiled with a broken cache")
	}
	if errors.Is(err, ErrInvalidModule) {
		t.Fatalf("a cache failure blamed the module: %v", err)
	}
}

// smallestGuest is the smallest module the engine takes: a memory, the ABI
// version marker and an allocator that always answers 1024; with loop, a
// request handler that loops forever too. It compiles in milliseconds where
// a Go guest takes seconds under -race, for the tests that compile without
// the shared compilation cache on purpose.
func smallestGuest(loop bool) []byte {
	section := func(id byte, content ...byte) []byte {
		return append(append([]byte{id}, binary.AppendUvarint(nil, uint64(len(content)))...), content...)
	}
	export := func(name string, kind, index byte) []byte {
		return append(append([]byte{byte(len(name))}, name...), kind, index)
	}
	types := []byte{3, 0x60, 0, 0, 0x60, 1, 0x7f, 1, 0x7f, 0x60, 2, 0x7f, 0x7f, 0} // () -> (), (i32) -> i32, (i32, i32) -> ()
	funcs := []byte{2, 0, 1}                                                       // the marker, the allocator
	exports := []byte{3}
	exports = append(exports, export("memory", 0x02, 0)...)
	exports = append(exports, export(abi.VersionExport, 0x00, 0)...)
	exports = append(exports, export(abi.ExportAlloc, 0x00, 1)...)
	code := []byte{2,
		2, 0, 0x0b, // the marker: nothing
		5, 0, 0x41, 0x80, 0x08, 0x0b, // the allocator: i32.const 1024
	}
	if loop {
		funcs = append(funcs, 2)
		funcs[0]++
		exports = append(exports, export(abi.ExportOnRequest, 0x00, 2)...)
		exports[0]++
		code = append(code, 7, 0, 0x03, 0x40, 0x0c, 0x00, 0x0b, 0x0b) // loop br 0 end
		code[0]++
	}
	m := []byte("\x00asm\x01\x00\x00\x00")
	m = append(m, section(1, types...)...)
	m = append(m, section(3, funcs...)...)
	m = append(m, section(5, 1, 0, 1)...) // one page of memory
	m = append(m, section(7, exports...)...)
	m = append(m, section(10, code...)...)
	return m
}

// TestCompileCacheIsBounded: an engine's start trims the compilation
// cache to Config.CacheBytes, least recently used first, in every wazero
// version's directory (an upgrade's leftovers too), and keeps what was
// used in the last minutes; limits.Off keeps no cache at all. Its compiles
// miss every cache on purpose, so it compiles the smallest module the
// engine takes (two compiles of the Go counter took 15 s under -race).
func TestCompileCacheIsBounded(t *testing.T) {
	dir := t.TempDir()
	e := newEngine(t, Config{CacheDir: dir})
	if _, err := e.Compile(context.Background(), smallestGuest(false)); err != nil {
		t.Fatal(err)
	}
	compiled, err := filepath.Glob(filepath.Join(dir, "wazero-*", "*"))
	if err != nil || len(compiled) == 0 {
		t.Fatalf("the compile left no file in the cache (%v)", err)
	}
	month := time.Now().Add(-30 * 24 * time.Hour)
	var stale []string
	for _, sub := range []string{"wazero-v1.11.0-amd64-linux", filepath.Join(checkedCacheDir, "wazero-v1.12.0-amd64-linux")} {
		p := filepath.Join(dir, sub, "old")
		if err := os.MkdirAll(filepath.Dir(p), 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, make([]byte, 1<<20), 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.Chtimes(p, month, month); err != nil {
			t.Fatal(err)
		}
		stale = append(stale, p)
	}

	newEngine(t, Config{CacheDir: dir, CacheBytes: 1})
	for _, p := range stale {
		if _, err := os.Stat(p); !os.IsNotExist(err) {
			t.Errorf("%s, unused for a month, is still there past a bound of one byte (%v)", p, err)
		}
	}
	for _, p := range compiled {
		if _, err := os.Stat(p); err != nil {
			t.Errorf("the machine code compiled a moment ago went: %v", err)
		}
	}

	none := t.TempDir()
	off := newEngine(t, Config{CacheDir: none, CacheBytes: limits.Off})
	if _, err := off.Compile(context.Background(), smallestGuest(false)); err != nil {
		t.Fatal(err)
	}
	if entries, err := os.ReadDir(none); err != nil || len(entries) != 0 {
		t.Errorf("with CacheBytes off the engine kept a cache: %d entries (%v)", len(entries), err)
	}
}
