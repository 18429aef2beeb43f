package node

import (
	"bufio"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/gobwas/ws"

	"github.com/wasmkeep/wasmkeep/abi"
	"github.com/wasmkeep/wasmkeep/host/socket"
	"github.com/wasmkeep/wasmkeep/internal/limits"
	"github.com/wasmkeep/wasmkeep/internal/testwasm"
	"github.com/wasmkeep/wasmkeep/internal/wstest"
)

// The admission, limit and hostile-input tests of the socket layer, end to
// end: real TCP clients against a node whose rooms run the echo guest.
// Clients bind distinct loopback addresses (127.0.0.x) where a test needs
// several client addresses.

// rawClient is a WebSocket client that can send crafted bytes.
type rawClient struct {
	t    *testing.T
	conn net.Conn
	r    io.Reader
}

type dialOpts struct {
	local string // local loopback address to dial from; default 127.0.0.1
}

// dialResult is an upgrade's outcome: a client, or the refusal's status.
type dialResult struct {
	c          *rawClient
	status     int
	retryAfter string
}

func wsDial(t *testing.T, url string, o dialOpts) dialResult {
	t.Helper()
	if o.local == "" {
		o.local = "127.0.0.1"
	}
	var res dialResult
	d := ws.Dialer{
		Timeout: 10 * time.Second,
		NetDial: func(ctx context.Context, network, addr string) (net.Conn, error) {
			nd := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(o.local)}}
			return nd.DialContext(ctx, network, addr)
		},
		OnStatusError: func(_ int, _ []byte, resp io.Reader) {
			if r, err := http.ReadResponse(bufio.NewReader(resp), nil); err == nil {
				res.retryAfter = r.Header.Get("Retry-After")
			}
		},
	}
	conn, br, _, err := d.Dial(context.Background(), strings.Replace(url, "http://", "ws://", 1))
	var se ws.StatusError
	if errors.As(err, &se) {
		res.status = int(se)
		return res
	}
	if err != nil {
		t.Fatalf("dial %s from %s: %v", url, o.local, err)
	}
	t.Cleanup(func() { conn.Close() })
	res.status = http.StatusSwitchingProtocols
	res.c = &rawClient{t: t, conn: conn, r: conn}
	if br != nil {
		res.c.r = io.MultiReader(br, conn)
	}
	return res
}

// openEcho dials and fails unless the upgrade is accepted; it reads the echo
// guest's greeting.
func openEcho(t *testing.T, url string, o dialOpts) *rawClient {
	t.Helper()
	res := wsDial(t, url, o)
	if res.c == nil {
		t.Fatalf("dial %s from %s: HTTP %d", url, o.local, res.status)
	}
	if got, err := res.c.next(10 * time.Second); err != nil || !strings.HasPrefix(got, "open ") {
		t.Fatalf("greeting: %q %v", got, err)
	}
	return res.c
}

// dialRefused dials and fails unless the upgrade is refused with status.
func dialRefused(t *testing.T, url string, o dialOpts, status int) dialResult {
	t.Helper()
	res := wsDial(t, url, o)
	if res.status != status {
		t.Fatalf("dial %s from %s: HTTP %d, want %d", url, o.local, res.status, status)
	}
	return res
}

func (c *rawClient) writeRaw(b []byte) {
	c.t.Helper()
	_ = c.conn.SetWriteDeadline(time.Now().Add(10 * time.Second))
	if _, err := c.conn.Write(b); err != nil {
		c.t.Fatalf("write: %v", err)
	}
}

func (c *rawClient) send(text string) {
	c.writeRaw(wstest.MaskedFrame(0x80|0x1, uint64(len(text)), []byte(text)))
}

// frame reads one frame within d.
func (c *rawClient) frame(d time.Duration) (ws.Header, []byte, error) {
	_ = c.conn.SetReadDeadline(time.Now().Add(d))
	h, err := ws.ReadHeader(c.r)
	if err != nil {
		return h, nil, err
	}
	p := make([]byte, h.Length)
	_, err = io.ReadFull(c.r, p)
	return h, p, err
}

// next returns the next text or binary message within d; a close frame is
// an error.
func (c *rawClient) next(d time.Duration) (string, error) {
	for {
		h, p, err := c.frame(d)
		if err != nil {
			return "", err
		}
		switch h.OpCode {
		case ws.OpText, ws.OpBinary:
			return string(p), nil
		case ws.OpClose:
			code, reason := ws.ParseCloseFrameData(p)
			return "", fmt.Errorf("closed by the server: %d %q", code, reason)
		}
	}
}

// expectClose reads until the server's close frame, which must carry code,
// and then until the server closes TCP.
func (c *rawClient) expectClose(code abi.CloseCode) {
	c.t.Helper()
	for {
		h, p, err := c.frame(10 * time.Second)
		if err != nil {
			c.t.Fatalf("waiting for close %d: %v", code, err)
		}
		if h.OpCode != ws.OpClose {
			continue
		}
		if got, reason := ws.ParseCloseFrameData(p); abi.CloseCode(got) != code {
			c.t.Fatalf("closed with %d %q, want %d", got, reason, code)
		}
		break
	}
	c.expectEOF()
}

// expectEOF reads (and drops) until the server closes the connection.
func (c *rawClient) expectEOF() {
	c.t.Helper()
	_ = c.conn.SetReadDeadline(time.Now().Add(10 * time.Second))
	buf := make([]byte, 64<<10)
	total := 0
	for {
		k, err := c.r.Read(buf)
		total += k
		if err == nil {
			continue
		}
		var ne net.Error
		if errors.As(err, &ne) && ne.Timeout() {
			c.t.Fatalf("the server did not close the connection (%d bytes read)", total)
		}
		return
	}
}

// TestSocketLimits runs the admission, limit and hostile-input cases, each
// on its own node with the echo guest, through the compilation cache every
// test process shares (a cache of its own compiled the guest afresh every
// run: 7 s under -race).
func TestSocketLimits(t *testing.T) {
	cache := testwasm.CompileCacheDir(t)
	for _, tc := range []struct {
		name string
		run  func(*testing.T, string)
	}{
		{"UpgradeAdmission", testUpgradeAdmission},
		{"UpgradeAttemptRate", testUpgradeAttemptRate},
		{"SlowlorisUpgrade", testSlowlorisUpgrade},
		{"OversizeFrameHeader", testOversizeFrameHeader},
		{"MalformedFrames", testMalformedFrames},
		{"SlowReaderEvictedFromBroadcasts", testSlowReaderEvictedFromBroadcasts},
		{"MessageFloodDropped", testMessageFloodDropped},
		{"MessageFloodWhileReading", testMessageFloodWhileReading},
		{"NonReaderEvicted", testNonReaderEvicted},
	} {
		t.Run(tc.name, func(t *testing.T) { tc.run(t, cache) })
	}
}

// limitsNode starts a node with cfg, the shared compilation cache and the
// echo guest as class "echo".
func limitsNode(t *testing.T, cache string, cfg Config) *Node {
	t.Helper()
	cfg.Engine.CacheDir = cache
	n := startNode(t, cfg)
	putClass(t, n, "echo", "./testdata/guests/echo")
	return n
}

// roomSockets returns the echo room's open socket ids as it lists them.
func roomSockets(t *testing.T, n *Node, room string) string {
	t.Helper()
	return expect(t, 200, "GET", n.URL()+"/actor/echo/"+room+"/sockets", nil)
}

func hasRoom(t *testing.T, n *Node, class, name string) bool {
	t.Helper()
	_, ok := roomRowOf(t, n, class, name)
	return ok
}

// testUpgradeAdmission: the per-address socket limit and the node's cap
// answer 429 with Retry-After before the handshake and before any room
// work, and a closed socket frees its slot.
func testUpgradeAdmission(t *testing.T, cache string) {
	n := limitsNode(t, cache, Config{Sockets: socket.Config{MaxSockets: 3, MaxSocketsPerIP: 2, CloseTimeout: 200 * time.Millisecond}})
	url := n.URL() + "/actor/echo/a"
	a := openEcho(t, url, dialOpts{})
	openEcho(t, url, dialOpts{})
	opens := metric(t, n, `wasmkeep_room_events_total{kind="socket_open"}`)

	// A third socket from 127.0.0.1, to a room that does not exist yet.
	res := dialRefused(t, n.URL()+"/actor/echo/never", dialOpts{}, http.StatusTooManyRequests)
	if res.retryAfter != "5" {
		t.Errorf("Retry-After %q, want 5", res.retryAfter)
	}
	if got := metric(t, n, `wasmkeep_socket_upgrades_rejected_total{reason="ip_concurrent"}`); got != 1 {
		t.Errorf("ip_concurrent rejections %v", got)
	}
	// Another address still gets in, up to the node's cap.
	openEcho(t, url, dialOpts{local: "127.0.0.2"})
	dialRefused(t, n.URL()+"/actor/echo/never", dialOpts{local: "127.0.0.3"}, http.StatusTooManyRequests)
	if got := metric(t, n, `wasmkeep_socket_upgrades_rejected_total{reason="cap"}`); got != 1 {
		t.Errorf("cap rejections %v", got)
	}
	// No refused attempt did anything for a room.
	if hasRoom(t, n, "echo", "never") {
		t.Error("a refused upgrade created its room")
	}
	if got := metric(t, n, `wasmkeep_room_events_total{kind="socket_open"}`); got != opens+1 {
		t.Errorf("socket_open events went from %v to %v, want one more (127.0.0.2's)", opens, got)
	}
	if got := metric(t, n, "wasmkeep_socket_tracked_addresses"); got != 2 {
		t.Errorf("tracked addresses %v, want 2", got)
	}

	// A socket that closes frees its slot, for its address and the node.
	a.writeRaw(wstest.MaskedFrame(0x80|0x8, 2, binary.BigEndian.AppendUint16(nil, 1000)))
	a.expectClose(1000)
	waitFor(t, "the closed socket's slot", func() bool { return n.Hub.Count() == 2 })
	openEcho(t, url, dialOpts{})
	if got := metric(t, n, `wasmkeep_socket_upgrades_rejected_total{reason="ip_concurrent"}`); got != 1 {
		t.Errorf("ip_concurrent rejections %v after the slot freed", got)
	}
}

// testUpgradeAttemptRate: past its burst an address is refused with 429 and
// a Retry-After that says when the next attempt passes; other addresses are
// not affected.
func testUpgradeAttemptRate(t *testing.T, cache string) {
	n := limitsNode(t, cache, Config{Sockets: socket.Config{UpgradeRatePerIP: 1, UpgradeBurstPerIP: 3}})
	url := n.URL() + "/actor/echo/r"
	for range 3 {
		c := openEcho(t, url, dialOpts{})
		c.conn.Close()
	}
	res := dialRefused(t, url, dialOpts{}, http.StatusTooManyRequests)
	if res.retryAfter != "1" {
		t.Errorf("Retry-After %q, want 1", res.retryAfter)
	}
	dialRefused(t, url, dialOpts{}, http.StatusTooManyRequests)
	if got := metric(t, n, `wasmkeep_socket_upgrades_rejected_total{reason="ip_rate"}`); got != 2 {
		t.Errorf("ip_rate rejections %v, want 2", got)
	}
	openEcho(t, url, dialOpts{local: "127.0.0.2"})
}

// testSlowlorisUpgrade: a client that trickles its upgrade request, a byte
// every 100 ms, is cut at the handshake timeout, and holds no socket slot
// meanwhile (the node's only slot goes to a real client).
func testSlowlorisUpgrade(t *testing.T, cache string) {
	const timeout = 500 * time.Millisecond
	n := limitsNode(t, cache, Config{Sockets: socket.Config{HandshakeTimeout: timeout, MaxSockets: 1}})

	slow, err := net.Dial("tcp", n.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer slow.Close()
	start := time.Now()
	if _, err := io.WriteString(slow, "GET /actor/echo/slow HTTP/1.1\r\nHost: x\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"); err != nil {
		t.Fatal(err)
	}
	stop := make(chan struct{})
	trickled := make(chan int)
	go func() {
		sent := 0
		defer func() { trickled <- sent }()
		tick := time.NewTicker(100 * time.Millisecond)
		defer tick.Stop()
		header := "X-Slow: " + strings.Repeat("a", 1000)
		for {
			select {
			case <-stop:
				return
			case <-tick.C:
			}
			if _, err := slow.Write([]byte{header[sent%len(header)]}); err != nil {
				return
			}
			sent++
		}
	}()

	// Meanwhile a real client takes the node's only socket slot.
	c := openEcho(t, n.URL()+"/actor/echo/real", dialOpts{})

	// The node closes the trickling connection (without an answer).
	_ = slow.SetReadDeadline(time.Now().Add(10 * time.Second))
	got, err := io.ReadAll(slow)
	cut := time.Since(start)
	close(stop)
	sent := <-trickled
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		t.Fatalf("the trickling client was not cut in 10 s (%d bytes trickled)", sent)
	}
	if cut < timeout-50*time.Millisecond || cut > timeout+5*time.Second {
		t.Errorf("cut after %v, want about %v", cut, timeout)
	}
	if len(got) != 0 && !strings.HasPrefix(string(got), "HTTP/1.1 4") {
		t.Errorf("answered %q", got)
	}
	t.Logf("slowloris cut after %v, %d header bytes trickled", cut.Round(time.Millisecond), sent)
	if hasRoom(t, n, "echo", "slow") {
		t.Error("the trickling request reached its room")
	}
	// The real client was not disturbed.
	c.send("still here")
	if msg, err := c.next(10 * time.Second); err != nil || msg != "still here" {
		t.Fatalf("real client: %q %v", msg, err)
	}
	if n.Hub.Count() != 1 {
		t.Errorf("%d sockets open, want 1", n.Hub.Count())
	}
}

// testOversizeFrameHeader: a header claiming a 1 GiB frame is answered
// with 1009 at once, without waiting for (or buffering) the payload.
func testOversizeFrameHeader(t *testing.T, cache string) {
	n := limitsNode(t, cache, Config{})
	c := openEcho(t, n.URL()+"/actor/echo/big", dialOpts{})
	start := time.Now()
	c.writeRaw(wstest.MaskedFrame(0x80|0x2, 1<<30, nil)) // the header alone
	c.expectClose(abi.CloseTooBig)
	if d := time.Since(start); d > 2*time.Second {
		t.Errorf("closed after %v", d)
	}
	if got := metric(t, n, `wasmkeep_socket_evictions_total{reason="too_big"}`); got != 1 {
		t.Errorf("too_big evictions %v", got)
	}
	waitFor(t, "the room to see the close", func() bool { return roomSockets(t, n, "big") == "" })
}

// testMalformedFrames: each protocol violation closes the socket with 1002
// (1007 for invalid UTF-8), counted, and the room sees the socket go.
func testMalformedFrames(t *testing.T, cache string) {
	n := limitsNode(t, cache, Config{})
	cases := []struct {
		name  string
		frame []byte
		code  abi.CloseCode
	}{
		{"unmasked", []byte{0x80 | 0x1, 2, 'h', 'i'}, abi.CloseProtocolError},
		{"reserved opcode", wstest.MaskedFrame(0x80|0x3, 2, []byte("hi")), abi.CloseProtocolError},
		{"reserved bits", wstest.MaskedFrame(0x80|0x40|0x1, 2, []byte("hi")), abi.CloseProtocolError},
		{"fragmented control frame", wstest.MaskedFrame(0x9, 1, []byte("x")), abi.CloseProtocolError},
		{"control frame over 125 bytes", wstest.MaskedFrame(0x80|0x9, 126, make([]byte, 126)), abi.CloseProtocolError},
		{"length with the top bit set", append([]byte{0x80 | 0x2, 0x80 | 127, 0x80, 0, 0, 0, 0, 0, 0, 1}, 1, 2, 3, 4), abi.CloseProtocolError},
		{"invalid UTF-8", wstest.MaskedFrame(0x80|0x1, 3, []byte{'a', 0xff, 'b'}), 1007},
	}
	for i, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			room := fmt.Sprintf("bad%d", i)
			before := metric(t, n, `wasmkeep_socket_evictions_total{reason="protocol"}`)
			c := openEcho(t, n.URL()+"/actor/echo/"+room, dialOpts{})
			c.writeRaw(tc.frame)
			c.expectClose(tc.code)
			if got := metric(t, n, `wasmkeep_socket_evictions_total{reason="protocol"}`); got != before+1 {
				t.Errorf("protocol evictions went from %v to %v", before, got)
			}
			waitFor(t, "the room to see the close", func() bool { return roomSockets(t, n, room) == "" })
		})
	}
}

// testSlowReaderEvictedFromBroadcasts: a client that never reads while its
// room broadcasts (which its reader stopping cannot slow) is evicted with
// 4008 and counted: at once at its queue's hard cap; after the slow-reader
// timeout, not sooner, when the broadcasts only keep its queue at the
// budget; or by the write timeout with a budget it never reaches. Another
// socket of the same room keeps receiving every broadcast promptly
// throughout.
func testSlowReaderEvictedFromBroadcasts(t *testing.T, cache string) {
	const budget, slow = 256 << 10, time.Second
	cases := []struct {
		name   string
		cfg    socket.Config
		reason string
		topUp  bool // broadcast only while the queues hold less than the budget and two broadcasts
	}{
		{"hard cap", socket.Config{OutboundBytes: budget, SlowTimeout: time.Hour}, "queue_limit", false},
		{"slow timeout", socket.Config{OutboundBytes: budget, SlowTimeout: slow, WriteTimeout: time.Hour}, "slow_reader", true},
		{"write timeout", socket.Config{WriteTimeout: 300 * time.Millisecond, OutboundBytes: 64 << 20, OutboundFrames: 1 << 20}, "write_timeout", false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			n := limitsNode(t, cache, Config{Sockets: tc.cfg})
			url := n.URL() + "/actor/echo/bc"
			slowClient := wsDial(t, url, dialOpts{}).c // never reads
			fast := openEcho(t, url, dialOpts{})
			evictions := `wasmkeep_socket_evictions_total{reason="` + tc.reason + `"}`

			body := []byte(strings.Repeat("x", 32<<10))
			var slowest time.Duration
			sent := 0
			// The last time the queues were seen to hold less than the
			// budget: the slow socket's stall clock cannot have started
			// before it (the queue reaches its budget after, or came down
			// under it by the client taking bytes, which restarts the
			// clock). Takes that leave the queue at its budget are not
			// seen here (the other socket's last broadcast may still be
			// counted in the sum, so a smaller sum proves nothing), which
			// only ever makes the check weaker. The queue is read before
			// the evictions, so that the queue dropped by the eviction
			// itself is never taken for the client taking something.
			last := time.Now()
			for {
				if tc.topUp {
					read := time.Now()
					q := metric(t, n, "wasmkeep_socket_outbound_queued_bytes")
					if metric(t, n, evictions) != 0 {
						break
					}
					if q < budget {
						last = read
					}
					// The other socket's queue holds a broadcast at most:
					// above this the slow one is at its budget.
					if q >= budget+2*float64(len(body)) {
						time.Sleep(5 * time.Millisecond) // polling the queues
						continue
					}
				} else if metric(t, n, evictions) != 0 {
					break
				}
				if sent == 5000 {
					t.Fatalf("no eviction after %d broadcasts of %d bytes", sent, len(body))
				}
				t0 := time.Now()
				expect(t, 200, "POST", url+"/broadcast", body)
				msg, err := fast.next(10 * time.Second)
				if err != nil || len(msg) != len(body) {
					t.Fatalf("broadcast %d to the other socket: %d bytes, %v", sent, len(msg), err)
				}
				slowest = max(slowest, time.Since(t0))
				sent++
			}
			waited := time.Since(last)
			if tc.topUp && waited < slow*3/4 {
				t.Errorf("evicted %v after the queues were last under the budget, want %v", waited, slow)
			}
			t.Logf("evicted after %d broadcasts of %d bytes, %v after the queues were last under the budget; slowest broadcast to the other socket %v",
				sent, len(body), waited, slowest)
			if slowest > time.Second {
				t.Errorf("a broadcast took %v to reach the other socket", slowest)
			}
			if got := metric(t, n, evictions); got != 1 {
				t.Errorf("%s evictions %v", tc.reason, got)
			}
			// The slow client's connection ends (its close frame may not
			// fit in its full window); the room learns of it; the other
			// socket goes on.
			slowClient.expectEOF()
			waitFor(t, "the room to drop the slow socket", func() bool { return !strings.Contains(roomSockets(t, n, "bc"), ",") })
			if got := expect(t, 200, "POST", url+"/broadcast", []byte("after")); got != "1" {
				t.Errorf("broadcast after the eviction reached %s sockets", got)
			}
			if msg, err := fast.next(10 * time.Second); err != nil || msg != "after" {
				t.Fatalf("other socket after the eviction: %q %v", msg, err)
			}
		})
	}
}

// testMessageFloodDropped: messages past a socket's rate are dropped and
// counted, not delivered to the room; the socket stays open and delivery
// resumes as the bucket refills.
func testMessageFloodDropped(t *testing.T, cache string) {
	n := limitsNode(t, cache, Config{Sockets: socket.Config{MessageRate: 50, MessageBurst: 10}})
	c := openEcho(t, n.URL()+"/actor/echo/flood", dialOpts{})
	in0 := metric(t, n, "wasmkeep_socket_messages_in_total")
	drop0 := metric(t, n, `wasmkeep_socket_messages_dropped_total{reason="rate"}`)
	const flood = 300
	var b []byte
	for i := range flood {
		m := fmt.Sprint("m", i)
		b = append(b, wstest.MaskedFrame(0x80|0x1, uint64(len(m)), []byte(m))...)
	}
	c.writeRaw(b)
	waitFor(t, "the flood read", func() bool { return metric(t, n, "wasmkeep_socket_messages_in_total") == in0+flood })
	dropped := int(metric(t, n, `wasmkeep_socket_messages_dropped_total{reason="rate"}`) - drop0)
	delivered := flood - dropped
	if delivered < 10 || delivered > 30 {
		t.Fatalf("%d of %d messages delivered, want the burst of 10 and a few", delivered, flood)
	}
	for i := range delivered {
		msg, err := c.next(10 * time.Second)
		if err != nil {
			t.Fatalf("echo %d of %d: %v", i, delivered, err)
		}
		if want := fmt.Sprint("m", i); i < 10 && msg != want {
			t.Fatalf("echo %d: %q, want %q", i, msg, want)
		}
	}
	// Nothing else comes back, and delivery resumes: send until an echo
	// arrives (a token every 20 ms).
	deadline := time.Now().Add(10 * time.Second)
	for {
		if time.Now().After(deadline) {
			t.Fatal("no message delivered after the flood")
		}
		c.send("again")
		msg, err := c.next(50 * time.Millisecond)
		var ne net.Error
		if errors.As(err, &ne) && ne.Timeout() {
			continue
		}
		if err != nil || msg != "again" {
			t.Fatalf("after the flood: %q %v", msg, err)
		}
		break
	}
	if ids := roomSockets(t, n, "flood"); ids == "" {
		t.Fatal("the room lost the socket")
	}
	t.Logf("%d of %d delivered, %d dropped", delivered, flood, dropped)
}

// testMessageFloodWhileReading: a client that floods its room past the
// message rate, with a burst allowance larger than its outbound budget,
// and reads what comes back, is not evicted: the excess is dropped and
// counted, and every message delivered is answered, in order.
func testMessageFloodWhileReading(t *testing.T, cache string) {
	const rate, burst, flood = 200, 600, 3000
	n := limitsNode(t, cache, Config{Sockets: socket.Config{MessageRate: rate, MessageBurst: burst}})
	c := openEcho(t, n.URL()+"/actor/echo/flood2", dialOpts{})
	in0 := metric(t, n, "wasmkeep_socket_messages_in_total")
	drop0 := metric(t, n, `wasmkeep_socket_messages_dropped_total{reason="rate"}`)
	var b []byte
	for i := range flood {
		m := fmt.Sprint("m", i)
		b = append(b, wstest.MaskedFrame(0x80|0x1, uint64(len(m)), []byte(m))...)
	}
	written := make(chan error, 1)
	go func() {
		_ = c.conn.SetWriteDeadline(time.Now().Add(20 * time.Second))
		_, err := c.conn.Write(b)
		written <- err
	}()
	// Read while the node reads the flood, until it has read all of it and
	// every message it delivered has come back.
	last, got := -1, 0
	for {
		delivered := -1
		if metric(t, n, "wasmkeep_socket_messages_in_total") == in0+flood {
			delivered = flood - int(metric(t, n, `wasmkeep_socket_messages_dropped_total{reason="rate"}`)-drop0)
		}
		if got == delivered {
			break
		}
		msg, err := c.next(100 * time.Millisecond)
		var ne net.Error
		if errors.As(err, &ne) && ne.Timeout() {
			continue // the node is still reading the flood
		}
		if err != nil {
			t.Fatalf("after %d echoes: %v", got, err)
		}
		var i int
		if _, err := fmt.Sscanf(msg, "m%d", &i); err != nil || i <= last {
			t.Fatalf("echo %d: %q after m%d", got, msg, last)
		}
		last = i
		got++
	}
	if err := <-written; err != nil {
		t.Fatalf("the flood's write: %v", err)
	}
	dropped := flood - got
	if got < burst || dropped == 0 {
		t.Fatalf("%d of %d messages delivered, want the burst of %d and more, and some dropped", got, flood, burst)
	}
	for _, reason := range []string{"slow_reader", "queue_limit", "write_timeout"} {
		if v := metric(t, n, `wasmkeep_socket_evictions_total{reason="`+reason+`"}`); v != 0 {
			t.Errorf("%v %s evictions", v, reason)
		}
	}
	c.send("still here")
	if msg, err := c.next(10 * time.Second); err != nil || msg != "still here" {
		t.Fatalf("after the flood: %q %v", msg, err)
	}
	t.Logf("%d of %d delivered and answered, %d dropped; the reader paused %v times",
		got, flood, dropped, metric(t, n, "wasmkeep_socket_read_pauses_total"))
}

// testNonReaderEvicted: a client that sends to its room and never reads
// the answers is not read any more once its queue is at the budget (its
// writes wait in TCP), and is evicted with 4008 (slow_reader) once it has
// taken nothing for the slow-reader timeout, not sooner; another socket of
// the room keeps its answers coming promptly throughout. With both
// readers.
func testNonReaderEvicted(t *testing.T, cache string) {
	const slow = time.Second
	for _, mode := range []socket.ReadMode{socket.ReadEpoll, socket.ReadGoroutine} {
		t.Run(mode.String(), func(t *testing.T) {
			// No message rate: the other socket's ticks go at round-trip
			// speed, which on a quiet machine passes the default 1,000 a
			// second, and a tick dropped by the bucket would never be
			// echoed (the test waited for it until its timeout).
			n := limitsNode(t, cache, Config{Sockets: socket.Config{Reader: mode, SlowTimeout: slow, MessageRate: limits.Off}})
			url := n.URL() + "/actor/echo/deaf"
			deaf := openEcho(t, url, dialOpts{})
			other := openEcho(t, url, dialOpts{})
			pauses := metric(t, n, "wasmkeep_socket_read_pauses_total")
			evictions := `wasmkeep_socket_evictions_total{reason="slow_reader"}`

			// Small messages: what the room has taken into its mailbox
			// before the reader stops is answered anyway (and waits in the
			// mailbox ahead of the other socket's).
			msg := strings.Repeat("x", 1<<10)
			frame := wstest.MaskedFrame(0x80|0x1, uint64(len(msg)), []byte(msg))
			stopped := make(chan error, 1)
			go func() {
				_ = deaf.conn.SetWriteDeadline(time.Now().Add(30 * time.Second))
				for {
					if _, err := deaf.conn.Write(frame); err != nil {
						stopped <- err
						return
					}
				}
			}()
			var slowest time.Duration
			echo := func(i int) {
				t0 := time.Now()
				other.send(fmt.Sprint("tick", i))
				if got, err := other.next(10 * time.Second); err != nil || got != fmt.Sprint("tick", i) {
					t.Fatalf("the other socket's echo %d: %q %v", i, got, err)
				}
				slowest = max(slowest, time.Since(t0))
			}
			i := 0
			for ; metric(t, n, "wasmkeep_socket_read_pauses_total") == pauses; i++ {
				if i == 10000 {
					t.Fatal("the socket of a client that does not read is still read")
				}
				echo(i)
			}
			paused := time.Now()
			for ; metric(t, n, evictions) == 0; i++ {
				if time.Since(paused) > 10*slow {
					t.Fatalf("no eviction %v after the socket stopped being read", time.Since(paused))
				}
				echo(i)
			}
			// The timeout runs from the last bytes the kernel took, which
			// may be after the reader stopped (the room answers what it had
			// taken); host/socket's tests time it on small buffers.
			waited := time.Since(paused)
			if waited < slow*3/4 {
				t.Errorf("evicted %v after the socket stopped being read, before the %v timeout", waited, slow)
			}
			if err := <-stopped; err == nil {
				t.Error("the client's writes went on")
			}
			deaf.expectEOF()
			if slowest > time.Second {
				t.Errorf("the other socket's echo took up to %v", slowest)
			}
			echo(i)
			t.Logf("evicted %v after the socket stopped being read (slow timeout %v); the other socket's slowest echo %v", waited, slow, slowest)
		})
	}
}
