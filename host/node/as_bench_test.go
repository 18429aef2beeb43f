package node

import (
	"bytes"
	"context"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/wasmkeep/wasmkeep/abi"
	"github.com/wasmkeep/wasmkeep/host/classes"
	"github.com/wasmkeep/wasmkeep/host/rooms"
	"github.com/wasmkeep/wasmkeep/internal/testwasm"
	"github.com/wasmkeep/wasmkeep/internal/wstest"
)

// BenchmarkChatWake compares the Go chat (examples/chat) with the
// AssemblyScript one (guest-sdk/assemblyscript/examples/chat) on a node
// with the local directory store: what a request to a hibernated chat room
// with 100 messages of history waits for (read the snapshot, restore,
// serve the page), as BenchmarkWake measures for the counter, and what
// hibernating it writes (segments and manifest), first in full, then after
// one more message.
//
//	go test -run '^$' -bench ChatWake -benchtime 1000x -count 2 ./host/node/
func BenchmarkChatWake(b *testing.B) {
	for _, c := range []struct {
		name string
		wasm func(testing.TB) []byte
	}{
		{"go", func(tb testing.TB) []byte { return buildGuest(tb, "./examples/chat") }},
		{"as", func(tb testing.TB) []byte { return testwasm.AssemblyScript(tb, "examples/chat/index.ts") }},
	} {
		b.Run(c.name, func(b *testing.B) {
			ctx := context.Background()
			n := startNode(b, Config{Logger: quietLogger()})
			wasm := c.wasm(b)
			if _, err := n.Classes.Put(ctx, "chat", wasm, classes.Options{}); err != nil {
				b.Fatal(err)
			}
			key := rooms.Key{Class: "chat", Name: "bench"}
			ws := wstest.Dial(b, n.URL()+"/actor/chat/bench")
			say := func(i int) {
				msg := fmt.Sprintf("message number %d from a chat user", i)
				ws.Send(msg)
				if got := ws.ReadText(); got != msg {
					b.Fatalf("echo: %q", got)
				}
			}
			for i := range 100 {
				say(i)
			}
			written := func() float64 { return benchMetric(b, n, "wasmkeep_snapshot_bytes_written_total") }
			w0 := written()
			if err := n.Rooms.Hibernate(ctx, key); err != nil {
				b.Fatal(err)
			}
			w1 := written()
			say(100)
			if err := n.Rooms.Hibernate(ctx, key); err != nil {
				b.Fatal(err)
			}
			w2 := written()

			get := abi.AppendRequest(nil, &abi.Request{Method: "GET", Path: "/"})
			var ds []time.Duration
			for b.Loop() {
				b.StopTimer()
				if err := n.Rooms.Hibernate(ctx, key); err != nil {
					b.Fatal(err)
				}
				time.Sleep(5 * time.Millisecond) // the pool refills, as between spaced wakes
				b.StartTimer()
				start := time.Now()
				resp, err := n.Rooms.Request(ctx, key, get)
				if err != nil || resp.Status != http.StatusOK {
					b.Fatalf("wake: %v %v", resp, err)
				}
				ds = append(ds, time.Since(start))
			}
			reportPercentiles(b, ds)
			b.ReportMetric(float64(len(wasm)), "module-bytes")
			b.ReportMetric(w1-w0, "full-bytes")
			b.ReportMetric(w2-w1, "delta-1-bytes")
		})
	}
}

// benchMetric reads a metric without labels, as metric does for tests.
func benchMetric(b *testing.B, n *Node, name string) float64 {
	b.Helper()
	var buf bytes.Buffer
	n.Metrics.WritePrometheus(&buf)
	for _, line := range strings.Split(buf.String(), "\n") {
		if v, ok := strings.CutPrefix(line, name+" "); ok {
			f, err := strconv.ParseFloat(v, 64)
			if err != nil {
				b.Fatalf("metric %s: %q", name, v)
			}
			return f
		}
	}
	b.Fatalf("no metric %s", name)
	return 0
}
