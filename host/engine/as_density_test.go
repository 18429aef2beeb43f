//go:build linux && !race

package engine

import (
	"context"
	"testing"
	"time"
)

// TestChatDensity measures, with TestDensity's method (the growth of the
// process's Pss over n resident rooms, default memory backend), what a
// resident chat room costs in Go and in AssemblyScript:
//
//   - started: a cold start and 100 messages of history;
//   - restored: a wake from a snapshot of the first room, and one request
//     for the page.
//
// Run it with (WASMKEEP_DENSITY_ROOMS=n changes the 1,000 rooms):
//
//	go test -run TestChatDensity -count 1 -v ./host/engine/
func TestChatDensity(t *testing.T) {
	if testing.Short() {
		t.Skip("starts thousands of rooms")
	}
	n := densityRooms(t)
	for _, cc := range chatClasses[:2] {
		t.Run(cc.name, func(t *testing.T) {
			ctx := context.Background()
			wasm := cc.wasm(t)
			e := newEngine(t, Config{PoolSize: -1})
			c, err := e.Compile(ctx, wasm)
			if err != nil {
				t.Fatal(err)
			}
			rooms := make([]*Instance, n)
			closeAll := func() {
				for i, r := range rooms {
					if r != nil {
						r.Close()
					}
					rooms[i] = nil
				}
			}
			defer closeAll()
			phase := func(what string, step func(i int) *Instance) {
				t.Helper()
				base := takeMemSample(t)
				ds := make([]time.Duration, n)
				for i := range rooms {
					t0 := time.Now()
					rooms[i] = step(i)
					ds[i] = time.Since(t0)
				}
				reportDensity(t, cc.name+" chat, "+what, n, base, takeMemSample(t), ds)
			}
			phase("started, 100 messages", func(i int) *Instance {
				inst, err := c.Start(ctx, &fakeHost{})
				if err != nil {
					t.Fatal(err)
				}
				for m := range 100 {
					chatSay(t, inst, m)
				}
				return inst
			})
			man, segs := takeSnapshot(t, rooms[0], nil)
			closeAll()
			phase("restored, page served", func(i int) *Instance {
				inst, err := c.Restore(ctx, man, segs, &fakeHost{})
				if err != nil {
					t.Fatal(err)
				}
				if _, err := inst.Request(getRoot); err != nil {
					t.Fatal(err)
				}
				return inst
			})
		})
	}
}
