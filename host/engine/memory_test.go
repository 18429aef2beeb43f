package engine

import (
	"bytes"
	"context"
	"errors"
	"strconv"
	"testing"
	"time"

	"github.com/wasmkeep/wasmkeep/abi"
	"github.com/wasmkeep/wasmkeep/host/snapshot"
	"github.com/wasmkeep/wasmkeep/internal/limits"
	"github.com/wasmkeep/wasmkeep/internal/testwasm"
)

// setMemoryBackend makes new instances use b until the test ends.
func setMemoryBackend(tb testing.TB, b memoryBackend) {
	old := memoryBackendSetting.Swap(int32(b))
	tb.Cleanup(func() { memoryBackendSetting.Store(old) })
}

// blankMemory returns a copy of a fresh instance's memory.
func blankMemory(t *testing.T, c *Class) []byte {
	t.Helper()
	inst, err := c.instantiate(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	defer inst.Close()
	view, _ := inst.mem.Read(0, inst.mem.Size())
	return bytes.Clone(view)
}

// TestMemoryBackends runs a counter on every memory backend: each gives a
// fresh instance the same memory (data segments included, which the
// allocator writes since the rewriter lifts them out of the module), and
// snapshots move between backends.
func TestMemoryBackends(t *testing.T) {
	wasm := testwasm.Build(t, "./examples/counter")
	ctx := context.Background()
	var want []byte
	var man *snapshot.Manifest
	var segs map[string]*snapshot.Segment
	for b := range numMemoryBackends {
		t.Run(b.String(), func(t *testing.T) {
			setMemoryBackend(t, b)
			e := newEngine(t, Config{PoolSize: limits.Off})
			c, err := e.Compile(ctx, wasm)
			if err != nil {
				t.Fatal(err)
			}
			if len(c.info.Data) == 0 {
				t.Fatal("the rewriter lifted no data segments out of the counter")
			}
			blank := blankMemory(t, c)
			if !bytes.Equal(blank, c.initial) {
				t.Fatal("a fresh instance's memory differs from the class's initial memory")
			}
			if want == nil {
				want = blank
			} else if !bytes.Equal(blank, want) {
				t.Fatalf("fresh memory differs from the %s backend's", memoryHeap)
			}

			// Restore the previous backend's snapshot, if any, then count.
			var inst *Instance
			wantCount := 1
			if man != nil {
				if inst, err = c.Restore(ctx, man, segs, &fakeHost{}); err != nil {
					t.Fatal(err)
				}
				wantCount = int(b) + 1
			} else if inst, err = c.Start(ctx, &fakeHost{}); err != nil {
				t.Fatal(err)
			}
			defer inst.Close()
			if got := request(t, inst, postRoot); got != strconv.Itoa(wantCount) {
				t.Fatalf("count %s, want %d", got, wantCount)
			}
			man, segs = takeSnapshot(t, inst, nil)
			// Writing to one instance leaves the next fresh one alone
			// (the image is copy-on-write).
			if !bytes.Equal(blankMemory(t, c), want) {
				t.Fatal("a fresh instance sees another instance's writes")
			}
		})
	}
}

// TestMemoryLimitEveryBackend: a guest that grows past MaxMemoryPages fails
// to grow (and aborts), on every backend; the host carries on.
func TestMemoryLimitEveryBackend(t *testing.T) {
	wasm := testwasm.Build(t, "./testdata/guests/hostile")
	for b := range numMemoryBackends {
		t.Run(b.String(), func(t *testing.T) {
			setMemoryBackend(t, b)
			e := newEngine(t, Config{EventTimeout: time.Minute, MaxMemoryPages: 512, PoolSize: limits.Off})
			c, err := e.Compile(context.Background(), wasm)
			if err != nil {
				t.Fatal(err)
			}
			inst := startRoom(t, c)
			_, err = inst.Request(abi.AppendRequest(nil, &abi.Request{Method: "POST", Path: "/grow"}))
			if !errors.Is(err, ErrMemoryLimit) || !inst.Dead() {
				t.Fatalf("/grow: %v (dead %v), want %v", err, inst.Dead(), ErrMemoryLimit)
			}
			inst.Close()
			// The class still works.
			inst, err = c.Start(context.Background(), &fakeHost{})
			if err != nil {
				t.Fatal(err)
			}
			defer inst.Close()
			if _, err := inst.Request(getRoot); err != nil {
				t.Fatal(err)
			}
		})
	}
}
