package node

import (
	"context"
	"fmt"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/wasmkeep/wasmkeep/abi"
	"github.com/wasmkeep/wasmkeep/host/rooms"
	"github.com/wasmkeep/wasmkeep/internal/wstest"
)

// nodeGoroutines returns the stacks of the goroutines that a part of the
// node started (created by a host package, not by a test).
func nodeGoroutines() []string {
	buf := make([]byte, 1<<20)
	for {
		n := runtime.Stack(buf, true)
		if n < len(buf) {
			buf = buf[:n]
			break
		}
		buf = make([]byte, 2*len(buf))
	}
	var out []string
	for _, g := range strings.Split(string(buf), "\n\n") {
		i := strings.Index(g, "\ncreated by ")
		if i < 0 {
			continue
		}
		creator := g[i+len("\ncreated by "):]
		// A goroutine whose function has returned and that is only
		// leaving (its first frame runtime.goexit1: a server's Serve
		// goroutine right after it handed Stop its result) runs nothing.
		if _, top, _ := strings.Cut(g, "\n"); strings.HasPrefix(top, "runtime.goexit1(") {
			continue
		}
		if strings.HasPrefix(creator, "github.com/wasmkeep/wasmkeep/host/") && !strings.Contains(creator, ".Test") {
			out = append(out, g)
		}
	}
	return out
}

// TestNothingRunsAfterStop: once Stop returns, no goroutine a part of the
// node started is left (the manager's sweeps and collector, room workers,
// the socket hub's loops, the engine's watchdog and pool fillers, the
// dashboard's sampler), after a node that ran rooms, sockets, hibernations
// and a deletion.
func TestNothingRunsAfterStop(t *testing.T) {
	if g := nodeGoroutines(); len(g) > 0 {
		t.Fatalf("goroutines of an earlier node still run:\n%s", strings.Join(g, "\n\n"))
	}
	n := startNode(t, Config{Rooms: rooms.Config{IdleTimeout: 50 * time.Millisecond}})
	putClass(t, n, "chat", "./examples/chat")
	putClass(t, n, "counter", "./examples/counter")
	for i := range 5 {
		expect(t, 200, "POST", fmt.Sprintf("%s/actor/counter/c%d", n.URL(), i), nil)
	}
	c := wstest.Dial(t, n.URL()+"/actor/chat/lobby")
	c.Send("hi")
	if got := c.ReadText(); got != "hi" {
		t.Fatalf("chat: %q", got)
	}
	waitFor(t, "the idle rooms to hibernate", func() bool { return n.Rooms.Counts().Resident == 0 })
	expect(t, 204, "DELETE", n.URL()+"/admin/rooms/counter/c0", nil)
	if err := n.Rooms.Delete(context.Background(), rooms.Key{Class: "counter", Name: "c1"}); err != nil {
		t.Fatal(err)
	}
	closed := answerClose(t, c, abi.CloseServiceRestart)
	stop(t, n)
	closed()
	// A goroutine that Stop waited for may still be returning when Stop
	// does (it signals done in a deferred call, then exits): one still
	// there a second later is a leak.
	g := nodeGoroutines()
	for deadline := time.Now().Add(time.Second); len(g) > 0 && time.Now().Before(deadline); g = nodeGoroutines() {
		time.Sleep(10 * time.Millisecond)
	}
	if len(g) > 0 {
		t.Fatalf("%d goroutines of the node still run a second after Stop returned:\n%s", len(g), strings.Join(g, "\n\n"))
	}
}
