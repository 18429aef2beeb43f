package loadgen

import (
	"bufio"
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/gobwas/ws"
	"github.com/gobwas/ws/wsutil"

	"github.com/wasmkeep/wasmkeep/internal/limits"
)

func plainServer(t *testing.T, mode Mode) *PlainServer {
	t.Helper()
	s, err := ListenPlain("127.0.0.1:0", mode)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// small is a run of about a second.
func small(target string, mode Mode) Config {
	return Config{
		Target: target, Prefix: "t-", Sockets: 20, Rooms: 4, Mode: mode,
		Inflight: 8, Size: 64, Warmup: 100 * time.Millisecond, Duration: 700 * time.Millisecond,
		Drain: 5 * time.Second, DialConcurrency: 8,
	}
}

func run(t *testing.T, cfg Config) *Result {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	res, err := Run(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("%s: sent %d, delivered %d (%.0f/s), p50 %.3f ms, p99 %.3f ms, max %.3f ms",
		cfg.Mode, res.Sent, res.Delivered, res.DeliveredPerSec, res.Latency.P50, res.Latency.P99, res.Latency.Max)
	return res
}

// checkClean fails unless the run had no errors, losses, reorderings or
// foreign messages, and delivered with sane latencies.
func checkClean(t *testing.T, res *Result) {
	t.Helper()
	if res.Errors != 0 || res.Lost != 0 || res.Reordered != 0 || res.Other != 0 {
		t.Fatalf("errors %d %q, lost %d, reordered %d, other %d; want none", res.Errors, res.ErrorSamples, res.Lost, res.Reordered, res.Other)
	}
	if res.Delivered == 0 || res.Sent == 0 {
		t.Fatalf("sent %d, delivered %d", res.Sent, res.Delivered)
	}
	l := res.Latency
	if !(0 < l.P50 && l.P50 <= l.P90 && l.P90 <= l.P99 && l.P99 <= l.P999 && l.P999 <= l.Max) {
		t.Fatalf("latency quantiles out of order: %+v", l)
	}
}

func TestEchoPlain(t *testing.T) {
	t.Parallel()
	s := plainServer(t, Echo)
	cfg := small("ws://"+s.Addr()+"/actor/echo", Echo)
	res := run(t, cfg)
	checkClean(t, res)
	// What was sent in the measured period came back in it, but for the
	// windows in flight at either end.
	if d := res.Sent - res.Delivered; d > int64(cfg.Sockets*cfg.Inflight) || -d > int64(cfg.Sockets*cfg.Inflight) {
		t.Fatalf("sent %d, delivered %d: more apart than the windows (%d)", res.Sent, res.Delivered, cfg.Sockets*cfg.Inflight)
	}
}

func TestBroadcastPlain(t *testing.T) {
	t.Parallel()
	s := plainServer(t, Broadcast)
	cfg := small("ws://"+s.Addr()+"/actor/chat", Broadcast)
	cfg.Sockets, cfg.Rooms = 30, 2 // 15 a room
	res := run(t, cfg)
	checkClean(t, res)
	// Every message goes to the 15 sockets of its room.
	window := int64(cfg.Rooms * cfg.Inflight)
	if lo, hi := (res.Sent-window)*15, (res.Sent+window)*15; res.Delivered < lo || res.Delivered > hi {
		t.Fatalf("sent %d, delivered %d: want 15 deliveries each (%d–%d)", res.Sent, res.Delivered, lo, hi)
	}
}

// TestRate: paced senders send rate·duration messages in the measured
// period, give or take one per sender (where the period cuts each one's
// schedule), never more; fewer only if the machine cannot keep up, which
// two thousand messages a second on loopback should not be. No warmup: a
// sender late at the end of a warmup catches up in the measured period,
// which would count messages due before it.
func TestRate(t *testing.T) {
	t.Parallel()
	s := plainServer(t, Echo)
	cfg := small("ws://"+s.Addr()+"/x", Echo)
	cfg.Sockets, cfg.Rooms, cfg.Rate, cfg.Inflight = 10, 10, 2000, 64
	cfg.Warmup, cfg.Duration = limits.Off, time.Second
	res := run(t, cfg)
	checkClean(t, res)
	want := int64(cfg.Rate) * int64(cfg.Duration/time.Millisecond) / 1000
	if res.Sent > want+int64(cfg.Sockets) {
		t.Fatalf("sent %d in %v at %d/s: more than %d + %d", res.Sent, cfg.Duration, cfg.Rate, want, cfg.Sockets)
	}
	if res.Sent < want*8/10 {
		t.Fatalf("sent %d in %v at %d/s: less than 80%% of %d", res.Sent, cfg.Duration, cfg.Rate, want)
	}
}

func TestRefused(t *testing.T) {
	t.Parallel()
	// Nothing listens.
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	_, err = Run(context.Background(), small("ws://"+addr+"/actor/echo", Echo))
	if err == nil || !strings.Contains(err.Error(), "nothing listens there") || !strings.Contains(err.Error(), "opened 0 of 20 sockets") {
		t.Fatalf("no server: %v", err)
	}

	// An HTTP server that refuses the upgrade: its status and message.
	h := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Error(w, "no class named nope", http.StatusNotFound)
	}))
	defer h.Close()
	_, err = Run(context.Background(), small(strings.Replace(h.URL, "http://", "ws://", 1)+"/actor/nope", Echo))
	if err == nil || !strings.Contains(err.Error(), "HTTP 404 (no class named nope)") || !strings.Contains(err.Error(), "class uploaded") {
		t.Fatalf("refused upgrade: %v", err)
	}
}

// TestCancel: a run ends soon after its context does.
func TestCancel(t *testing.T) {
	t.Parallel()
	s := plainServer(t, Echo)
	cfg := small("ws://"+s.Addr()+"/x", Echo)
	cfg.Duration = time.Minute
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	start := time.Now()
	_, err := Run(ctx, cfg)
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Run = %v, want the context's error", err)
	}
	if d := time.Since(start); d > 20*time.Second {
		t.Fatalf("Run took %v after a cancel", d)
	}
}

func TestValidate(t *testing.T) {
	good := small("ws://127.0.0.1:1/x", Echo)
	if err := good.Validate(); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		change func(*Config)
		want   string
	}{
		{func(c *Config) { c.Target = "http://x" }, "--target"},
		{func(c *Config) { c.Sockets = MaxSockets + 1 }, "--sockets"},
		{func(c *Config) { c.Rooms = 21 }, "--rooms"},
		{func(c *Config) { c.Mode = "fanout" }, "--mode"},
		{func(c *Config) { c.Inflight = MaxInflight + 1 }, "--inflight"},
		{func(c *Config) { c.Size = 39 }, "--size"},
		{func(c *Config) { c.Duration = MaxDuration + 1 }, "--duration"},
		{func(c *Config) { c.Warmup = MaxDuration + 1 }, "--warmup"},
		{func(c *Config) { c.Drain = 2 * time.Hour }, "--drain"},
		{func(c *Config) { c.TargetPID = -1 }, "--target-pid"},
	} {
		cfg := good
		c.change(&cfg)
		if err := cfg.Validate(); err == nil || !strings.HasPrefix(err.Error(), c.want+" ") {
			t.Errorf("%s: Validate() = %v", c.want, err)
		}
	}
}

// TestDefaults: a zero field is its default, so Config{} is a valid run,
// and the defaults never make a run Validate refuses (fewer sockets than
// the default rooms spread them over fewer rooms).
func TestDefaults(t *testing.T) {
	var zero Config
	if err := zero.Validate(); err != nil {
		t.Errorf("Config{}: %v", err)
	}
	d := zero.withDefaults()
	if d.Sockets != DefaultSockets || d.Rooms != DefaultRooms || d.Warmup != DefaultWarmup || d.Rate != limits.Off || d.Target != DefaultTarget {
		t.Errorf("Config{} with defaults: %+v", d)
	}
	few := Config{Sockets: 3}
	if err := few.Validate(); err != nil {
		t.Errorf("Config{Sockets: 3}: %v", err)
	}
	if r := few.withDefaults().Rooms; r != 3 {
		t.Errorf("Config{Sockets: 3} spreads over %d rooms, want 3", r)
	}
	off := Config{Warmup: limits.Off, Drain: limits.Off}.withDefaults()
	if !limits.IsOff(off.Warmup) || !limits.IsOff(off.Drain) {
		t.Errorf("Warmup and Drain limits.Off with defaults: %v, %v", off.Warmup, off.Drain)
	}
}

// client is a raw client of the plain server, for its protocol checks.
type client struct {
	t    *testing.T
	conn net.Conn
	r    *bufio.Reader
}

func dialPlain(t *testing.T, s *PlainServer, path string) *client {
	t.Helper()
	conn, br, _, err := ws.Dial(context.Background(), "ws://"+s.Addr()+path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	if br == nil {
		br = bufio.NewReader(conn)
	}
	_ = conn.SetDeadline(time.Now().Add(10 * time.Second))
	return &client{t: t, conn: conn, r: br}
}

func (c *client) send(op ws.OpCode, p []byte) {
	c.t.Helper()
	if err := wsutil.WriteClientMessage(c.conn, op, p); err != nil {
		c.t.Fatal(err)
	}
}

func (c *client) frame() ws.Frame {
	c.t.Helper()
	h, err := ws.ReadHeader(c.r)
	if err != nil {
		c.t.Fatal(err)
	}
	if h.Length > 1<<16 {
		c.t.Fatalf("a frame of %d bytes", h.Length)
	}
	f := ws.Frame{Header: h, Payload: make([]byte, h.Length)}
	if _, err := io.ReadFull(c.r, f.Payload); err != nil {
		c.t.Fatal(err)
	}
	return f
}

func (c *client) expectClose(code ws.StatusCode) {
	c.t.Helper()
	f := c.frame()
	if got, _ := ws.ParseCloseFrameData(f.Payload); f.Header.OpCode != ws.OpClose || got != code {
		c.t.Fatalf("got %v %q, want a close with %d", f.Header.OpCode, f.Payload, code)
	}
}

func TestPlainEchoProtocol(t *testing.T) {
	t.Parallel()
	s := plainServer(t, Echo)
	c := dialPlain(t, s, "/any/path?q=1")
	c.send(ws.OpText, []byte("hello"))
	c.send(ws.OpBinary, []byte{0, 1, 2})
	c.send(ws.OpPing, []byte("p"))
	for _, want := range []ws.Frame{ws.NewTextFrame([]byte("hello")), ws.NewBinaryFrame([]byte{0, 1, 2}), ws.NewPongFrame([]byte("p"))} {
		if f := c.frame(); f.Header.OpCode != want.Header.OpCode || string(f.Payload) != string(want.Payload) || f.Header.Masked {
			t.Fatalf("got %v %q (masked %v), want %v %q unmasked", f.Header.OpCode, f.Payload, f.Header.Masked, want.Header.OpCode, want.Payload)
		}
	}
	c.send(ws.OpClose, ws.NewCloseFrameBody(ws.StatusNormalClosure, "bye"))
	c.expectClose(ws.StatusNormalClosure)

	// Rules: invalid UTF-8, unmasked frames.
	c = dialPlain(t, s, "/")
	c.send(ws.OpText, []byte{0xff, 0xfe})
	c.expectClose(ws.StatusInvalidFramePayloadData)
	c = dialPlain(t, s, "/")
	if err := ws.WriteFrame(c.conn, ws.NewTextFrame([]byte("unmasked"))); err != nil {
		t.Fatal(err)
	}
	c.expectClose(ws.StatusProtocolError)
}

func TestPlainBroadcastRooms(t *testing.T) {
	t.Parallel()
	s := plainServer(t, Broadcast)
	a, b := dialPlain(t, s, "/room/1"), dialPlain(t, s, "/room/1?x=y")
	other := dialPlain(t, s, "/room/2")
	// Each socket joined its room before its handshake was answered.
	b.send(ws.OpText, []byte("hi"))
	for _, c := range []*client{a, b} {
		if f := c.frame(); f.Header.OpCode != ws.OpText || string(f.Payload) != "hi" {
			t.Fatalf("got %v %q, want text hi", f.Header.OpCode, f.Payload)
		}
	}
	other.send(ws.OpText, []byte("alone"))
	if f := other.frame(); string(f.Payload) != "alone" {
		t.Fatalf("room 2 got %q", f.Payload)
	}
	// Room 1 did not get room 2's message: its next message is the next
	// one sent to it.
	a.send(ws.OpText, []byte("next"))
	if f := b.frame(); string(f.Payload) != "next" {
		t.Fatalf("room 1 got %q, want next", f.Payload)
	}
}

// TestLostCountsFromTheFirstDelivery: an echo server that drops a socket's
// 1st-3rd and 30th-35th messages. The first three come before the socket
// received anything of its stream, which a socket still joining its room
// misses without a fault of the server's; the other six are lost.
func TestLostCountsFromTheFirstDelivery(t *testing.T) {
	t.Parallel()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		conn, _, _, err := ws.UpgradeHTTP(r, w)
		if err != nil {
			return
		}
		defer conn.Close()
		for n := 1; ; n++ {
			msg, op, err := wsutil.ReadClientData(conn)
			if err != nil {
				return
			}
			if n <= 3 || (n >= 30 && n <= 35) {
				continue
			}
			if err := wsutil.WriteServerMessage(conn, op, msg); err != nil {
				return
			}
		}
	}))
	t.Cleanup(srv.Close)
	cfg := small("ws://"+strings.TrimPrefix(srv.URL, "http://")+"/actor/echo", Echo)
	// The nine messages dropped keep their places in the window; sixteen
	// leave it open, and it never drains.
	cfg.Inflight, cfg.Drain = 16, 300*time.Millisecond
	res := run(t, cfg)
	if want := int64(6 * cfg.Sockets); res.Lost != want {
		t.Fatalf("lost %d, want %d (six of each of %d sockets)", res.Lost, want, cfg.Sockets)
	}
	if res.Delivered == 0 || res.Sent == 0 {
		t.Fatalf("sent %d, delivered %d in the measured period", res.Sent, res.Delivered)
	}
}
