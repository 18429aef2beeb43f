package node

import (
	"context"
	"fmt"
	"testing"

	"github.com/wasmkeep/wasmkeep/abi"
	"github.com/wasmkeep/wasmkeep/host/engine"
	"github.com/wasmkeep/wasmkeep/internal/testwasm"
)

// BenchmarkAssemblyScriptHandoff measures an upgrade's two guest calls at
// the engine, for the chat with 100 messages of history, in Go and in
// AssemblyScript and across them: the old version's wasmkeep_on_upgrade,
// and a fresh instance of the new one started from its state
// (Class.Start + wasmkeep_on_start_from). No store or node is involved.
// The old instance is refilled every 64 upgrades (outside the timer), so
// that the garbage the upgrade calls leave does not pile up.
//
//	go test -run '^$' -bench AssemblyScriptHandoff -benchtime 1000x ./host/node/
func BenchmarkAssemblyScriptHandoff(b *testing.B) {
	ctx := context.Background()
	chats := map[string][2]func(testing.TB) []byte{
		"go": {func(tb testing.TB) []byte { return testwasm.Build(tb, "./examples/chat") },
			func(tb testing.TB) []byte { return testwasm.Build(tb, "./testdata/guests/chatv2") }},
		"as": {func(tb testing.TB) []byte { return testwasm.AssemblyScript(tb, asChat) },
			func(tb testing.TB) []byte { return testwasm.AssemblyScript(tb, asChatV2) }},
	}
	e, err := engine.New(ctx, engine.Config{})
	if err != nil {
		b.Fatal(err)
	}
	defer e.Close(ctx)
	for _, pair := range [][2]string{{"go", "go"}, {"as", "as"}, {"as", "go"}, {"go", "as"}} {
		v1, err := e.Compile(ctx, chats[pair[0]][0](b))
		if err != nil {
			b.Fatal(err)
		}
		v2, err := e.Compile(ctx, chats[pair[1]][1](b))
		if err != nil {
			b.Fatal(err)
		}
		b.Run(pair[0]+"-to-"+pair[1], func(b *testing.B) {
			var old *engine.Instance
			fill := func() {
				if old != nil {
					old.Close()
				}
				if old, err = v1.Start(ctx, nil); err != nil {
					b.Fatal(err)
				}
				for i := range 100 {
					if err := old.SocketMessage(1, abi.MessageText, fmt.Appendf(nil, "message number %d from a chat user", i)); err != nil {
						b.Fatal(err)
					}
				}
			}
			defer func() { old.Close() }()
			var size int
			b.ResetTimer()
			for i := range b.N {
				if i%64 == 0 {
					b.StopTimer()
					fill()
					b.StartTimer()
				}
				state, err := old.Upgrade()
				if err != nil {
					b.Fatal(err)
				}
				next, err := v2.Start(ctx, nil)
				if err != nil {
					b.Fatal(err)
				}
				if err := next.StartFrom(v1.Hash, state); err != nil {
					b.Fatal(err)
				}
				next.Close()
				size = len(state)
			}
			b.ReportMetric(float64(size), "state-bytes")
		})
	}
}
