package engine

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"runtime"
	"testing"
	"time"

	"github.com/wasmkeep/wasmkeep/abi"
	"github.com/wasmkeep/wasmkeep/host/engine/wasmrw"
	"github.com/wasmkeep/wasmkeep/internal/testwasm"
)

// interruptModes are the ways the engine enforces the event time limit.
var interruptModes = []struct {
	name string
	cfg  Config
	own  bool // the class has the engine's interrupt global
}{
	{"own", Config{}, true},
	{"wazero", Config{WazeroInterrupt: true}, false},
}

// endsWithin runs f on a goroutine and fails tb unless it returns an error
// matching want within limit.
func endsWithin(tb testing.TB, what string, limit time.Duration, want error, f func() error) {
	tb.Helper()
	done := make(chan error, 1)
	go func() { done <- f() }()
	select {
	case err := <-done:
		if !errors.Is(err, want) {
			tb.Fatalf("%s: %v, want %v", what, err, want)
		}
	case <-time.After(limit):
		tb.Fatalf("%s still runs after %v", what, limit)
	}
}

// TestEventTimeoutEndsEveryOverrun: with the engine's interrupt global and
// with wazero's checks, the time limit ends a guest spinning in a loop
// (a request and a socket message) and one blocked in a host sleep, and the
// instance is dead after. Without the inserted check (or without wazero's)
// the loops would run forever.
func TestEventTimeoutEndsEveryOverrun(t *testing.T) {
	const timeout = 200 * time.Millisecond
	for _, m := range interruptModes {
		t.Run(m.name, func(t *testing.T) {
			cfg := m.cfg
			cfg.EventTimeout = timeout
			e := newEngine(t, cfg)
			c := compile(t, e, "./testdata/guests/hostile")
			if c.interrupt != m.own {
				t.Fatalf("class has the interrupt global: %v, want %v", c.interrupt, m.own)
			}
			for _, path := range []string{"/loop", "/sleep-forever"} {
				inst := startRoom(t, c)
				endsWithin(t, path, time.Minute, ErrTimeout, func() error {
					_, err := inst.Request(abi.AppendRequest(nil, &abi.Request{Method: "POST", Path: path}))
					return err
				})
				if !inst.Dead() {
					t.Fatalf("%s: the instance lives on", path)
				}
			}
			inst := startRoom(t, c)
			endsWithin(t, "socket loop", time.Minute, ErrTimeout, func() error {
				return inst.SocketMessage(1, abi.MessageText, []byte("loop"))
			})
			// A fresh instance of the class runs normally.
			inst = startRoom(t, c)
			if got := request(t, inst, postRoot); got != "1" {
				t.Fatalf("POST / after the overruns: %q", got)
			}
		})
	}
}

// TestEngineCloseEndsARunningCall: a garbage collection completes while a
// guest spins (the guest leaves machine code often enough for the Go
// runtime to stop it; without that, runtime.GC would hang the process), and
// closing the engine ends the call, long before its time limit.
func TestEngineCloseEndsARunningCall(t *testing.T) {
	for _, m := range interruptModes {
		t.Run(m.name, func(t *testing.T) {
			cfg := m.cfg
			cfg.EventTimeout = time.Hour
			cfg.CacheDir = testwasm.CompileCacheDir(t)
			cfg.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
			e, err := New(context.Background(), cfg) // closed by the test
			if err != nil {
				t.Fatal(err)
			}
			c := compile(t, e, "./testdata/guests/hostile")
			inst := startRoom(t, c)
			done := make(chan error, 1)
			go func() {
				_, err := inst.Request(abi.AppendRequest(nil, &abi.Request{Method: "POST", Path: "/loop"}))
				done <- err
			}()
			for inst.callStart.Load() == 0 {
				select {
				case err := <-done:
					t.Fatalf("the loop returned at once: %v", err)
				case <-time.After(time.Millisecond):
				}
			}
			runtime.GC()
			e.Close(context.Background())
			select {
			case err := <-done:
				if err == nil {
					t.Fatal("the loop returned no error")
				}
			case <-time.After(time.Minute):
				t.Fatal("the loop runs on after the engine closed")
			}
		})
	}
}

// TestSnapshotsCrossInterruptModes: a snapshot taken under one way of
// enforcing the limit restores under the other (the interrupt global is in
// no snapshot), and a timed-out room's snapshot restores as it was.
func TestSnapshotsCrossInterruptModes(t *testing.T) {
	wasm := testwasm.Build(t, "./examples/counter")
	classes := map[string]*Class{}
	for _, m := range interruptModes {
		c, err := newEngine(t, m.cfg).Compile(context.Background(), wasm)
		if err != nil {
			t.Fatal(err)
		}
		classes[m.name] = c
	}
	for from, a := range classes {
		for to, b := range classes {
			t.Run(from+"-to-"+to, func(t *testing.T) {
				inst, err := a.Start(context.Background(), &fakeHost{})
				if err != nil {
					t.Fatal(err)
				}
				for range 3 {
					request(t, inst, postRoot)
				}
				snap, segs := takeSnapshot(t, inst, nil)
				if len(snap.Globals) != len(a.globals) || len(a.globals) != len(b.globals) {
					t.Fatalf("%d globals in the snapshot, classes have %d and %d", len(snap.Globals), len(a.globals), len(b.globals))
				}
				r, err := b.Restore(context.Background(), snap, segs, &fakeHost{})
				if err != nil {
					t.Fatal(err)
				}
				if got := request(t, r, postRoot); got != "4" {
					t.Fatalf("restored counter answered %q, want 4", got)
				}
			})
		}
	}
}

// TestRefusedModuleFallsBackToWazeroChecks: a module AddInterrupt refuses
// runs on a runtime with wazero's checks, compiled into a cache of its
// own, and its loops are still ended by the time limit.
func TestRefusedModuleFallsBackToWazeroChecks(t *testing.T) {
	// Its own cache, so that the fallback runtime is seen to compile and
	// keep the module: the smallest module with a loop, whose compile
	// misses every cache in milliseconds (the hostile Go guest's took
	// 9 s under -race).
	t.Parallel()
	cache := t.TempDir()
	e := newEngine(t, Config{EventTimeout: 200 * time.Millisecond, CacheDir: cache})
	e.addInterrupt = func([]byte) ([]byte, error) { return nil, fmt.Errorf("test: %w", wasmrw.ErrUnsupported) }
	c, err := e.Compile(context.Background(), smallestGuest(true))
	if err != nil {
		t.Fatal(err)
	}
	if c.interrupt || c.rt != e.checked || e.checked == nil {
		t.Fatal("the refused module was not compiled on the runtime with wazero's checks")
	}
	if entries, err := os.ReadDir(filepath.Join(cache, checkedCacheDir)); err != nil || len(entries) == 0 {
		t.Fatalf("nothing in the checked runtime's cache (%v)", err)
	}
	inst := startRoom(t, c)
	endsWithin(t, "/loop", time.Minute, ErrTimeout, func() error {
		_, err := inst.Request(abi.AppendRequest(nil, &abi.Request{Method: "POST", Path: "/loop"}))
		return err
	})
}
