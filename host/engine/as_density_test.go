//go:build linux && !race

package engine

import (
	"context"
	"testing"

	"github.com/wasmkeep/wasmkeep/internal/limits"
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
			e := newEngine(t, Config{PoolSize: limits.Off})
			c, err := e.Compile(ctx, wasm)
			if err != nil {
				t.Fatal(err)
			}
			d := newDensityRun(t, cc.name+" chat, ", n)
			d.phase("started, 100 messages", func(i int) *Instance {
				inst := startRoom(t, c)
				for m := range 100 {
					chatSay(t, inst, m)
				}
				return inst
			})
			man, segs := takeSnapshot(t, d.rooms[0], nil)
			d.closeAll()
			d.phase("restored, page served", func(i int) *Instance {
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
