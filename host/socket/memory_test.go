//go:build linux

package socket

import (
	"bufio"
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"runtime"
	rtmetrics "runtime/metrics"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/VictoriaMetrics/metrics"
	"github.com/wasmkeep/wasmkeep/abi"
	"github.com/wasmkeep/wasmkeep/internal/memtest"
	"github.com/wasmkeep/wasmkeep/internal/wstest"
)

// The memory test runs its clients in a child process (this test binary,
// whose TestMain runs idleClients when envClientAddr is set) so that only
// the server side is measured.
const (
	envClientAddr = "WASMKEEP_SOCKET_TEST_CLIENT_ADDR"
	envClientN    = "WASMKEEP_SOCKET_TEST_CLIENT_N"
)

// startingStack is the runtime's current initial goroutine stack size, which
// it adapts to the average stack use it sees at each GC: it stays at 2 KiB
// only while idle readers use little stack.
func startingStack() uint64 {
	m := []rtmetrics.Sample{{Name: "/gc/stack/starting-size:bytes"}}
	rtmetrics.Read(m)
	return m[0].Value.Uint64()
}

// countingHandler counts messages and closes; it does nothing else.
type countingHandler struct {
	messages atomic.Int64
	closes   atomic.Int64
}

func (h *countingHandler) OnMessage(*Conn, int, []byte)         { h.messages.Add(1) }
func (h *countingHandler) OnClose(*Conn, abi.CloseCode, string) { h.closes.Add(1) }

// TestIdleSocketMemory measures the server-side memory of 10,000 idle
// sockets: right after the handshake, and again after each socket has
// received and sent one message (so read buffers, writer and delivery
// goroutines have come and gone).
//
// It measures both read modes, one after the other: ReadGoroutine (a
// goroutine per socket, blocked in a read) and ReadEpoll (idle sockets in
// the hub's epoll instance, no goroutine). $WASMKEEP_IDLE_SOCKETS sets the
// count (`just bench` measures 50,000 too).
//
// Under -race it opens 2,000 sockets, since the race detector caps a process
// at 8,128 live goroutines, and its bounds are looser (the detector's larger
// frames grow the readers' stacks): it then checks that nothing leaks, and
// its figures are not those of docs/PERFORMANCE.md.
func TestIdleSocketMemory(t *testing.T) {
	if testing.Short() {
		t.Skip("opens 10,000 sockets; not in -short")
	}
	for _, mode := range []ReadMode{ReadEpoll, ReadGoroutine} {
		t.Run(mode.String(), func(t *testing.T) { idleSocketMemory(t, mode) })
	}
}

func idleSocketMemory(t *testing.T, mode ReadMode) {
	sockets, idleBound, activeStackBound := 10000, 4096.0, 2600.0
	if raceEnabled {
		sockets, idleBound, activeStackBound = 2000, 16384, 16384
	}
	n := memtest.IdleSockets(t, sockets)
	if limit := memtest.RaiseFileLimit(t, uint64(n)+2000); limit < uint64(n)+2000 {
		n = int(limit) - 2000
		t.Logf("RLIMIT_NOFILE %d: measuring %d sockets", limit, n)
	}
	hub := NewHub(Config{PingInterval: time.Hour, MaxSockets: n, Reader: mode}, metrics.NewSet())
	if hub.cfg.Reader != mode {
		t.Fatalf("hub reads with %v, want %v", hub.cfg.Reader, mode)
	}
	defer hub.Close()
	h := &countingHandler{}
	var started atomic.Int64
	var mu sync.Mutex
	var conns []*Conn
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		c, err := hub.Upgrade(w, r, nil)
		if err != nil {
			return
		}
		mu.Lock()
		conns = append(conns, c)
		mu.Unlock()
		c.Start(h)
		started.Add(1)
	}))
	defer srv.Close()
	baseGoroutines := runtime.NumGoroutine()
	before := memtest.Take(t)

	cmd := exec.Command(os.Args[0]) // its TestMain runs idleClients
	cmd.Env = append(os.Environ(), envClientAddr+"="+srv.Listener.Addr().String(), envClientN+"="+strconv.Itoa(n))
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() {
		stdin.Close()
		cmd.Wait()
	}()
	lines := bufio.NewScanner(stdout)
	expect := func(want string) {
		t.Helper()
		for lines.Scan() {
			if lines.Text() == want {
				return
			}
		}
		t.Fatalf("client process ended before %q: %v", want, lines.Err())
	}
	expect("ready")
	eventually(t, "all sockets started", func() bool { return started.Load() == int64(n) })
	// Handshake goroutines of net/http are gone: one reader per socket, or
	// none with epoll.
	perSocket := 1
	if mode == ReadEpoll {
		perSocket = 0
	}
	settled := func() bool { return runtime.NumGoroutine() <= baseGoroutines+perSocket*n+5 }
	eventually(t, "goroutines settled", settled)
	idle := memtest.Take(t)
	hi, si, ri := memtest.Per(idle, before, n)

	t.Logf("%d idle sockets read with %v, server side, per socket (goroutine starting stack now %d B):", n, mode, startingStack())
	t.Logf("  after handshake:       heap %.0f B + stack %.0f B = %.0f B; RSS %.0f B", hi, si, hi+si, ri)
	if hi+si > idleBound {
		t.Errorf("an idle socket costs %.0f B of heap and stack, over %.0f B", hi+si, idleBound)
	}

	// One message each way, then idle again; twice. The first round leaves
	// the runtime's free goroutine structs from the peak (a writer and a
	// delivery goroutine per socket at once), which are kept for reuse; the
	// second round shows that nothing accumulates per socket.
	p, err := hub.Prepare(abi.MessageText, []byte("hello from the server"))
	if err != nil {
		t.Fatal(err)
	}
	for round := 1; round <= 2; round++ {
		mu.Lock()
		for _, c := range conns {
			if err := c.SendPrepared(p); err != nil {
				t.Fatal(err)
			}
		}
		mu.Unlock()
		fmt.Fprintln(stdin, "send")
		expect("sent")
		eventually(t, "messages delivered", func() bool { return h.messages.Load() == int64(round*n) })
		eventually(t, "queues drained", func() bool {
			mu.Lock()
			defer mu.Unlock()
			for _, c := range conns {
				c.mu.Lock()
				busy := c.writing || c.dispatching || c.outFrames > 0
				c.mu.Unlock()
				if busy {
					return false
				}
			}
			return true
		})
		eventually(t, "goroutines settled", settled)
		after := memtest.Take(t)
		ha, sa, ra := memtest.Per(after, before, n)
		t.Logf("  after message round %d: heap %.0f B + stack %.0f B = %.0f B; RSS %.0f B (starting stack %d B)",
			round, ha, sa, ha+sa, ra, startingStack())
		if sa > activeStackBound {
			t.Errorf("idle reader stacks grew after activity: %.0f B per socket", sa)
		}
	}

	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := hub.CloseAll(ctx, abi.CloseServiceRestart, ""); err != nil {
		t.Fatal(err)
	}
}

// TestMain runs the test binary as TestIdleSocketMemory's client process
// when it is asked to.
func TestMain(m *testing.M) {
	if addr := os.Getenv(envClientAddr); addr != "" {
		n, _ := strconv.Atoi(os.Getenv(envClientN))
		os.Exit(idleClients(addr, n))
	}
	os.Exit(m.Run())
}

// idleClients is the client side of TestIdleSocketMemory: it opens n
// sockets to addr, says "ready", sends one message on each whenever its
// standard input says "send" (answering "sent"), and holds them until its
// standard input ends. It returns the process's exit code.
func idleClients(addr string, n int) int {
	if _, err := memtest.RaiseFileLimitTo(uint64(n) + 1000); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	url := "ws://" + addr + "/"
	conns := make([]*wstest.Client, n)
	var next atomic.Int64
	var wg sync.WaitGroup
	for range 32 {
		wg.Go(func() {
			for {
				i := int(next.Add(1)) - 1
				if i >= n {
					return
				}
				c, err := wstest.DialWith(url, nil, memtest.LoopbackDialer(i))
				if err != nil {
					fmt.Fprintf(os.Stderr, "dial %d: %v\n", i, err)
					os.Exit(2)
				}
				conns[i] = c
			}
		})
	}
	wg.Wait()
	fmt.Println("ready")
	in := bufio.NewScanner(os.Stdin)
	for in.Scan() {
		if in.Text() == "send" {
			for i, c := range conns {
				if err := c.SendErr("hello from the client"); err != nil {
					fmt.Fprintf(os.Stderr, "send %d: %v\n", i, err)
					return 2
				}
			}
			fmt.Println("sent")
		}
	}
	// Without this the clients are garbage once the scan starts, and a
	// collection closes their sockets (net.Conn finalizers) while the
	// server is being measured.
	runtime.KeepAlive(conns)
	return 0
}
