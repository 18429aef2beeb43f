//go:build linux

package node

import (
	"bufio"
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/wasmkeep/wasmkeep/host/socket"
	"github.com/wasmkeep/wasmkeep/internal/memtest"
	"github.com/wasmkeep/wasmkeep/internal/wstest"
)

// The clients of TestIdleSocketMemory run in a child process (this test
// binary, whose TestMain runs socketClients when envClientURLs is set), so
// that only the node is measured.
const (
	envClientURLs = "WASMKEEP_NODE_TEST_CLIENT_URLS"
	envClientN    = "WASMKEEP_NODE_TEST_CLIENT_N"
)

// TestIdleSocketMemory measures what an idle socket costs the node with its
// room hibernated: the socket layer's part and the room layer's (the
// room's record of the socket and its open event, kept to replay it after a
// rollback). 10,000 sockets over 100 chat rooms; the figure goes to
// docs/PERFORMANCE.md.
//
// Under -race it opens 2,000 sockets: the race detector caps a process at
// 8,128 live goroutines, which the goroutine reader's 10,000 would pass.
// Its memory is then not the figure of docs/PERFORMANCE.md.
func TestIdleSocketMemory(t *testing.T) {
	if testing.Short() {
		t.Skip("opens 10,000 sockets; not in -short")
	}
	for _, mode := range []socket.ReadMode{socket.ReadEpoll, socket.ReadGoroutine} {
		t.Run(mode.String(), func(t *testing.T) { idleSocketMemory(t, mode) })
	}
}

func idleSocketMemory(t *testing.T, mode socket.ReadMode) {
	const rooms_ = 100
	sockets := 10000
	if raceEnabled {
		sockets = 2000
	}
	n := memtest.IdleSockets(t, sockets)
	// Leave the node room for its other descriptors: near the limit,
	// accepts fail now and then with EMFILE.
	if limit := memtest.RaiseFileLimit(t, uint64(n)+2000); limit < uint64(n)+2000 {
		n = int(limit) - 2000
		t.Logf("RLIMIT_NOFILE %d: measuring %d sockets", limit, n)
	}
	node := startNode(t, Config{Sockets: socket.Config{PingInterval: time.Hour, MaxSockets: n + 10, Reader: mode}})
	putClass(t, node, "chat", "./examples/chat")
	var urls []string
	for i := range rooms_ {
		// Wake each room once so the class and pool are warm before the
		// baseline, then put them back to sleep.
		expect(t, 200, "GET", fmt.Sprintf("%s/actor/chat/r%d", node.URL(), i), nil)
		urls = append(urls, fmt.Sprintf("%s/actor/chat/r%d", node.URL(), i))
	}
	hibernateEach(t, node, "chat", rooms_, func(i int) string { return fmt.Sprint("r", i) })
	waitFor(t, "the store's journal written out", func() bool { return journalEmpty(t, node) })
	before := memtest.Take(t)

	leave := startSocketClients(t, urls, n)
	waitFor(t, "every socket open", func() bool { return node.Hub.Count() == n })
	waitFor(t, "every open event delivered", func() bool {
		return metric(t, node, `wasmkeep_room_events_total{kind="socket_open"}`) == float64(n)
	})
	hibernateEach(t, node, "chat", rooms_, func(i int) string { return fmt.Sprint("r", i) })
	if c := node.Rooms.Counts(); c.Resident != 0 || c.HibernatedWithSockets != rooms_ {
		t.Fatalf("rooms not all hibernated with sockets: %+v", c)
	}
	// What the rooms wrote sits in the store's journal, in memory, until
	// it is written out (at once when the node goes quiet): the figure is
	// the node's after that.
	waitFor(t, "the store's journal written out", func() bool { return journalEmpty(t, node) })
	after := memtest.Take(t)
	heap, stack, rss := memtest.Per(after, before, n)
	t.Logf("%d idle sockets read with %v over %d hibernated rooms, node side, per socket: heap %.0f B + stack %.0f B = %.0f B; RSS %.0f B",
		n, mode, rooms_, heap, stack, heap+stack, rss)
	// A loose bound, well above the measured figure, so a leak or a buffer
	// kept per idle socket shows up here. The race detector's larger
	// frames grow a reader goroutine's stack past 4 KiB (5.6-7.4 KB a
	// socket measured under -race, against 3.5 KB).
	bound := 8192.0
	if raceEnabled {
		bound = 16384
	}
	if heap+stack > bound {
		t.Errorf("an idle socket costs %.0f B of heap and stack, over %.0f B", heap+stack, bound)
	}

	// The clients leave, and the node stops only once every room has
	// woken for their closes: a stop while a room is still waking unmaps
	// the memory the wake restores into (a fault of the stop, not of what
	// this test measures).
	if err := leave(); err != nil {
		t.Fatalf("client process: %v", err)
	}
	waitFor(t, "every room woken for its sockets' closes", func() bool {
		return metric(t, node, `wasmkeep_room_events_total{kind="socket_close"}`) == float64(n) && node.Rooms.Counts().Resident == rooms_
	})
}

// socketClients is the client side of TestIdleSocketMemory, run by
// TestMain in a child process: it opens n sockets over urls, says "ready",
// and holds them until its standard input ends. It returns the process's
// exit code.
func socketClients(urls []string, n int) int {
	if _, err := memtest.RaiseFileLimitTo(uint64(n) + 1000); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	clients := make([]*wstest.Client, n)
	var next atomic.Int64
	var wg sync.WaitGroup
	for range 16 {
		wg.Go(func() {
			for {
				i := int(next.Add(1)) - 1
				if i >= n {
					return
				}
				c, err := wstest.DialWith(urls[i%len(urls)], nil, memtest.LoopbackDialer(i))
				if err != nil {
					fmt.Fprintf(os.Stderr, "dial %d: %v\n", i, err)
					os.Exit(2)
				}
				clients[i] = c
			}
		})
	}
	wg.Wait()
	fmt.Println("ready")
	bufio.NewScanner(os.Stdin).Scan() // hold the sockets until the parent is done
	// Without this the clients are garbage once the scan starts, and a
	// collection during it closes their sockets (net.Conn finalizers):
	// the node then saw most of its sockets go while it measured them.
	runtime.KeepAlive(clients)
	return 0
}

// startSocketClients runs n WebSocket clients spread over urls in a
// process of their own (this test binary: its TestMain runs
// socketClients), so that their memory is not the node's, and returns once
// they say every socket is open. leave closes them and waits for the
// process (the test's end does too).
func startSocketClients(t *testing.T, urls []string, n int) (leave func() error) {
	t.Helper()
	cmd := exec.Command(os.Args[0])
	cmd.Env = append(os.Environ(), envClientURLs+"="+strings.Join(urls, " "), envClientN+"="+strconv.Itoa(n))
	stdin, _ := cmd.StdinPipe()
	stdout, _ := cmd.StdoutPipe()
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	var once sync.Once
	var err error
	leave = func() error {
		once.Do(func() { stdin.Close(); err = cmd.Wait() })
		return err
	}
	t.Cleanup(func() { leave() })
	lines := bufio.NewScanner(stdout)
	for lines.Scan() && lines.Text() != "ready" {
	}
	return leave
}

// journalEmpty reports whether the node's store journal holds nothing:
// every change is in its object file, none in memory.
func journalEmpty(t *testing.T, n *Node) bool {
	t.Helper()
	return metric(t, n, "wasmkeep_store_journal_bytes") == 0 && metric(t, n, "wasmkeep_store_journal_pending") == 0
}
