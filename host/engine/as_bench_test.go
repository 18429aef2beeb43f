package engine

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/wasmkeep/wasmkeep/abi"
	"github.com/wasmkeep/wasmkeep/internal/testwasm"
)

// chatClass is one build of the chat protocol for the footprint
// comparisons: the Go example, and the AssemblyScript one with the SDK's
// default (minimal) runtime and with the incremental one.
type chatClass struct {
	name string
	wasm func(testing.TB) []byte
}

var chatClasses = []chatClass{
	{"go", func(tb testing.TB) []byte { return testwasm.Build(tb, "./examples/chat") }},
	{"as", func(tb testing.TB) []byte { return testwasm.AssemblyScript(tb, "examples/chat/index.ts") }},
	{"as-incremental", func(tb testing.TB) []byte {
		return testwasm.AssemblyScript(tb, "examples/chat/index.ts", "--runtime", "incremental")
	}},
}

// chatSay delivers chat message i to socket 1 of inst.
func chatSay(tb testing.TB, inst *Instance, i int) {
	tb.Helper()
	if err := inst.SocketMessage(1, abi.MessageText, fmt.Appendf(nil, "message number %d from a chat user", i)); err != nil {
		tb.Fatal(err)
	}
}

// BenchmarkChatFootprint compares the Go and AssemblyScript chat rooms at
// the engine: a socket message to a resident room with 100 messages of
// history (the message is stored and broadcast through a host call), and a
// wake (decode the snapshot, restore, serve the page). It reports the
// module's size and the room's linear memory after 100 and 1,000 messages.
//
//	go test -run '^$' -bench ChatFootprint -benchtime 3000x ./host/engine/
func BenchmarkChatFootprint(b *testing.B) {
	ctx := context.Background()
	for _, cc := range chatClasses {
		wasm := cc.wasm(b)
		e := newEngine(b, Config{})
		c, err := e.Compile(ctx, wasm)
		if err != nil {
			b.Fatal(err)
		}
		b.Run(cc.name+"/message", func(b *testing.B) {
			inst := startRoom(b, c)
			defer inst.Close()
			for i := range 100 {
				chatSay(b, inst, i)
			}
			mem100 := inst.MemorySize()
			for i := range 900 {
				chatSay(b, inst, 100+i)
			}
			mem1000 := inst.MemorySize()
			i := 0
			for b.Loop() {
				chatSay(b, inst, i)
				i++
			}
			b.ReportMetric(float64(len(wasm)), "module-bytes")
			b.ReportMetric(float64(mem100), "memory-100-bytes")
			b.ReportMetric(float64(mem1000), "memory-1000-bytes")
		})
		b.Run(cc.name+"/wake", func(b *testing.B) {
			a := startRoom(b, c)
			for i := range 100 {
				chatSay(b, a, i)
			}
			man, segs := takeSnapshot(b, a, nil)
			a.Close()
			var ds []time.Duration
			for b.Loop() {
				start := time.Now()
				inst, err := c.Restore(ctx, man, segs, &fakeHost{})
				if err != nil {
					b.Fatal(err)
				}
				if _, err := inst.Request(getRoot); err != nil {
					b.Fatal(err)
				}
				ds = append(ds, time.Since(start))
				inst.Close()
				waitPoolFull(c)
			}
			percentiles(b, ds)
		})
	}
}
