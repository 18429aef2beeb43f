package socket

import (
	"bytes"
	"context"
	"errors"
	"net"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gobwas/ws"
	"github.com/wasmkeep/wasmkeep/abi"
	"github.com/wasmkeep/wasmkeep/internal/clock"
	"github.com/wasmkeep/wasmkeep/internal/limits"
	"github.com/wasmkeep/wasmkeep/internal/wstest"
)

func TestEchoTextAndBinary(t *testing.T) {
	rec := newRecorder(t, true)
	s := newServer(t, Config{}, rec)
	c := dial(t, s.url)

	c.write(ws.OpText, true, []byte("héllo"))
	if op, p := c.readMsg(); op != ws.OpText || string(p) != "héllo" {
		t.Fatalf("echo: %v %q", op, p)
	}
	bin := []byte{0, 1, 2, 0xff}
	c.write(ws.OpBinary, true, bin)
	if op, p := c.readMsg(); op != ws.OpBinary || !bytes.Equal(p, bin) {
		t.Fatalf("echo: %v %x", op, p)
	}
	c.write(ws.OpText, true, nil)
	if op, p := c.readMsg(); op != ws.OpText || len(p) != 0 {
		t.Fatalf("empty echo: %v %q", op, p)
	}
	// A message large enough to cross the read buffer and the growth step.
	big := bytes.Repeat([]byte("0123456789abcdef"), 20000) // 320 KB
	c.write(ws.OpBinary, true, big)
	if op, p := c.readMsg(); op != ws.OpBinary || !bytes.Equal(p, big) {
		t.Fatalf("big echo: %v, %d bytes", op, len(p))
	}
	e := rec.nextMsg(t)
	if e.kind != abi.MessageText || string(e.data) != "héllo" {
		t.Fatalf("handler got %d %q", e.kind, e.data)
	}
	if got := s.hub.m.messagesIn.Get(); got != 4 {
		t.Errorf("messages in %d, want 4", got)
	}
	eventually(t, "messages out counted", func() bool { return s.hub.m.messagesOut.Get() == 4 })
	if s.hub.m.bytesIn.Get() < uint64(len(big)) || s.hub.m.bytesOut.Get() < uint64(len(big)) {
		t.Errorf("bytes in %d out %d", s.hub.m.bytesIn.Get(), s.hub.m.bytesOut.Get())
	}
}

func TestMessagesInOrder(t *testing.T) {
	rec := newRecorder(t, true)
	// Budget for the whole burst: this test is about order, not eviction.
	s := newServer(t, Config{OutboundFrames: 4096}, rec)
	c := dial(t, s.url)
	const n = 500
	go func() {
		for i := range n {
			c.write(ws.OpBinary, true, []byte{byte(i), byte(i >> 8)})
		}
	}()
	for i := range n {
		_, p := c.readMsg()
		if int(p[0])|int(p[1])<<8 != i {
			t.Fatalf("message %d arrived as %d", i, int(p[0])|int(p[1])<<8)
		}
	}
}

func TestFramesBehindHandshake(t *testing.T) {
	// A client that sends its first frame in the same packet as the
	// upgrade request: net/http buffers it, the socket must not lose it.
	rec := newRecorder(t, true)
	s := newServer(t, Config{}, rec)
	conn, err := net.Dial("tcp", s.srv.Listener.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	req := "GET / HTTP/1.1\r\nHost: x\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n" +
		"Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n"
	msg := wstest.MaskedFrame(0x80|opText, 5, []byte("early"))
	if _, err := conn.Write(append([]byte(req), msg...)); err != nil {
		t.Fatal(err)
	}
	e := rec.nextMsg(t)
	if string(e.data) != "early" {
		t.Fatalf("got %q", e.data)
	}
}

func TestFragmentedMessage(t *testing.T) {
	rec := newRecorder(t, true)
	s := newServer(t, Config{}, rec)
	c := dial(t, s.url)

	c.write(ws.OpText, false, []byte("frag"))
	c.write(ws.OpPing, true, []byte("mid")) // control frame between fragments
	if p := c.readUntil(ws.OpPong); string(p) != "mid" {
		t.Fatalf("pong payload %q", p)
	}
	c.write(ws.OpContinuation, false, []byte("men"))
	c.write(ws.OpContinuation, true, []byte("ted ✓"))
	if op, p := c.readMsg(); op != ws.OpText || string(p) != "fragmented ✓" {
		t.Fatalf("reassembled %v %q", op, p)
	}
	// A code point split across fragments is fine.
	r := []byte("✓")
	c.write(ws.OpText, false, r[:1])
	c.write(ws.OpContinuation, true, r[1:])
	if _, p := c.readMsg(); string(p) != "✓" {
		t.Fatalf("split rune %q", p)
	}
}

func TestPingAnsweredWhileHandlerBlocked(t *testing.T) {
	rec := newRecorder(t, false)
	release := make(chan struct{})
	entered := make(chan struct{}, 1)
	rec.block = func([]byte) {
		select {
		case entered <- struct{}{}:
		default:
		}
		<-release
	}
	s := newServer(t, Config{}, rec)
	c := dial(t, s.url)

	c.write(ws.OpText, true, []byte("wake the room"))
	waitFor(t, entered, "handler entered") // the handler is now blocked
	for i := range 3 {
		payload := []byte{'p', byte('0' + i)}
		c.write(ws.OpPing, true, payload)
		if p := c.readUntil(ws.OpPong); !bytes.Equal(p, payload) {
			t.Fatalf("pong %q, want %q", p, payload)
		}
	}
	// Messages sent meanwhile are queued, delivered in order once the
	// handler returns.
	c.write(ws.OpText, true, []byte("second"))
	close(release)
	if e := rec.nextMsg(t); string(e.data) != "wake the room" {
		t.Fatalf("first delivered %q", e.data)
	}
	if e := rec.nextMsg(t); string(e.data) != "second" {
		t.Fatalf("second delivered %q", e.data)
	}
	_ = s
}

func TestServerPingAndDeadClient(t *testing.T) {
	rec := newRecorder(t, false)
	const interval = 100 * time.Millisecond
	s := newServer(t, Config{PingInterval: interval}, rec)

	// A client that answers pings stays open across many intervals.
	alive := dial(t, s.url)
	aliveConn := s.conn(t)
	pings := make(chan struct{}, 100)
	data := make(chan []byte, 1)
	go func() {
		for {
			h, p, err := alive.readFrame()
			if err != nil {
				return
			}
			switch h.OpCode {
			case ws.OpPing:
				alive.write(ws.OpPong, true, p)
				select {
				case pings <- struct{}{}:
				default:
				}
			case ws.OpText:
				data <- p
				return
			}
		}
	}()
	for range 4 {
		waitFor(t, pings, "ping answered by the live client")
	}
	// A client that reads but never answers is closed as dead.
	dead := dial(t, s.url)
	deadConn := s.conn(t)
	if p := dead.readUntil(ws.OpPing); len(p) != 0 {
		t.Fatalf("ping payload %q", p)
	}
	start := time.Now()
	e := rec.nextClose(t)
	if e.conn != deadConn || e.code != 1006 {
		t.Fatalf("close of conn %d code %d, want conn %d code 1006", e.conn.ID(), e.code, deadConn.ID())
	}
	if waited := time.Since(start); waited > 8*interval {
		t.Errorf("dead client closed after %v, want about %v", waited, 2*interval)
	}
	dead.expectEOF()
	if got := s.hub.m.evictDead.Get(); got != 1 {
		t.Errorf("dead evictions %d, want 1", got)
	}
	if s.hub.m.pingsSent.Get() < 5 {
		t.Errorf("pings sent %d", s.hub.m.pingsSent.Get())
	}
	// The answering client survived all that time.
	if err := aliveConn.Send(abi.MessageText, []byte("still here")); err != nil {
		t.Fatalf("send to live client: %v", err)
	}
	select {
	case p := <-data:
		if string(p) != "still here" {
			t.Fatalf("got %q", p)
		}
	case <-time.After(waitTimeout):
		t.Fatal("live client got nothing")
	}
}

// silentClose is an OnClose seen by a silenceClock.
type silentClose struct {
	conn   *Conn
	code   abi.CloseCode
	silent time.Duration // since the last frame read from the socket
}

// silenceClock is a Handler that reports, at each OnClose, how long the
// socket had been silent, on the hub's clock.
type silenceClock chan silentClose

func (silenceClock) OnMessage(*Conn, int, []byte) {}

func (h silenceClock) OnClose(c *Conn, code abi.CloseCode, _ string) {
	h <- silentClose{c, code, time.Duration(c.hub.now() - c.lastSeen.Load())}
}

// TestDeadSocketDroppedOnTime: a socket from which nothing arrives is
// dropped as soon as it has been silent for more than two ping intervals,
// at the ping loop's next tick (an interval/16), whatever the phase of its
// silence against its own pings. On a manual clock, with the default
// interval, the drop comes exactly two intervals and a tick after the last
// frame; its last frame comes half an interval after its shard's ping, so a
// check made only with each socket's ping would drop it two and a half
// intervals after that frame.
func TestDeadSocketDroppedOnTime(t *testing.T) {
	for _, mode := range []ReadMode{ReadEpoll, ReadGoroutine} {
		t.Run(mode.String(), func(t *testing.T) {
			t.Parallel()
			const interval = DefaultPingInterval
			clk := clock.NewManual(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
			closes := make(silenceClock, 64)
			s := newServer(t, Config{PingInterval: interval, Reader: mode, Clock: clk}, closes)
			tick := s.hub.pingTick()
			ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
			defer cancel()
			if err := clk.WaitTimers(ctx, 1); err != nil {
				t.Fatal("the ping loop armed no ticker:", err)
			}
			// step moves the clock a tick on and waits until the ping loop
			// has handled it, so that no tick is skipped.
			step := func() {
				t.Helper()
				turns := s.hub.pingTurns.Load()
				clk.Advance(tick)
				eventually(t, "the ping loop's turn", func() bool { return s.hub.pingTurns.Load() > turns })
			}
			a := dial(t, s.url)
			sa := s.conn(t)
			// The loop pings shard k%16 at its turn k (from 0); a socket's
			// shard is its id%16.
			for range sa.ID()%shardCount + 1 {
				step()
			}
			for range shardCount / 2 {
				step()
			}
			a.write(ws.OpText, true, []byte("last words"))
			last := clk.Now()
			eventually(t, "the last frame read", func() bool { return sa.lastSeen.Load() == last })
			for {
				sa.mu.Lock()
				closing := sa.closing
				sa.mu.Unlock()
				if closing {
					// Dropped at the turn just taken. OnClose, which a
					// goroutine of its own delivers, reads the clock, so
					// the clock waits for it: a further step before it
					// came (on a loaded machine) made the drop look a
					// tick late.
					e := waitFor(t, closes, "the dead socket's OnClose")
					if e.conn != sa || e.code != abi.CloseAbnormal {
						t.Fatalf("close of socket %d with %d, want %d with %d", e.conn.ID(), e.code, sa.ID(), abi.CloseAbnormal)
					}
					if want := 2*interval + tick; e.silent != want {
						t.Fatalf("dropped after %v of silence, want %v (two intervals and a tick)", e.silent, want)
					}
					return
				}
				if silent := time.Duration(clk.Now() - last); silent > 3*interval {
					t.Fatalf("not dropped after %v of silence", silent)
				}
				step()
			}
		})
	}
}

func TestFrameOverLimitClosedFromHeader(t *testing.T) {
	rec := newRecorder(t, false)
	s := newServer(t, Config{}, rec)
	c := dial(t, s.url)
	// A header claiming 1 GiB, then nothing: the server must not wait for
	// (or allocate) the payload.
	c.writeRaw(wstest.MaskedFrame(0x80|opBinary, 1<<30, nil)[:14])
	start := time.Now()
	c.expectClose(abi.CloseTooBig)
	if d := time.Since(start); d > 2*time.Second {
		t.Errorf("closed after %v", d)
	}
	if e := rec.nextClose(t); e.code != abi.CloseTooBig {
		t.Fatalf("OnClose code %d", e.code)
	}
	if got := s.hub.m.evictTooBig.Get(); got != 1 {
		t.Errorf("too_big evictions %d", got)
	}
}

func TestFragmentsOverLimit(t *testing.T) {
	rec := newRecorder(t, false)
	s := newServer(t, Config{MaxMessage: 1000}, rec)
	c := dial(t, s.url)
	c.write(ws.OpBinary, true, make([]byte, 1000)) // exactly at the limit: fine
	rec.nextMsg(t)
	c.write(ws.OpBinary, false, make([]byte, 600))
	c.write(ws.OpContinuation, false, make([]byte, 600))
	c.expectClose(abi.CloseTooBig)
	if e := rec.nextClose(t); e.code != abi.CloseTooBig {
		t.Fatalf("OnClose code %d", e.code)
	}
	_ = s
}

func TestProtocolErrors(t *testing.T) {
	cases := []struct {
		name  string
		frame []byte
		first []byte // sent before frame
		code  abi.CloseCode
	}{
		{
			name:  "unmasked",
			frame: []byte{0x80 | opText, 2, 'h', 'i'},
			code:  abi.CloseProtocolError,
		},
		{
			name:  "reserved bit",
			frame: wstest.MaskedFrame(0x80|0x40|opText, 2, []byte("hi")),
			code:  abi.CloseProtocolError,
		},
		{
			name:  "reserved data opcode",
			frame: wstest.MaskedFrame(0x80|0x3, 2, []byte("hi")),
			code:  abi.CloseProtocolError,
		},
		{
			name:  "reserved control opcode",
			frame: wstest.MaskedFrame(0x80|0xb, 0, nil),
			code:  abi.CloseProtocolError,
		},
		{
			name:  "continuation without start",
			frame: wstest.MaskedFrame(0x80|opContinuation, 2, []byte("hi")),
			code:  abi.CloseProtocolError,
		},
		{
			name:  "new message inside fragmented one",
			first: wstest.MaskedFrame(opText, 2, []byte("hi")),
			frame: wstest.MaskedFrame(0x80|opText, 2, []byte("hi")),
			code:  abi.CloseProtocolError,
		},
		{
			name:  "control frame over 125 bytes",
			frame: wstest.MaskedFrame(0x80|opPing, 126, make([]byte, 126)),
			code:  abi.CloseProtocolError,
		},
		{
			name:  "fragmented control frame",
			frame: wstest.MaskedFrame(opPing, 1, []byte("x")),
			code:  abi.CloseProtocolError,
		},
		{
			name:  "length with the top bit set",
			frame: append([]byte{0x80 | opBinary, 0x80 | 127, 0x80, 0, 0, 0, 0, 0, 0, 1}, 1, 2, 3, 4),
			code:  abi.CloseProtocolError,
		},
		{
			name:  "invalid UTF-8 text",
			frame: wstest.MaskedFrame(0x80|opText, 3, []byte{'a', 0xff, 'b'}),
			code:  abi.CloseInvalidData,
		},
		{
			name:  "invalid UTF-8 across fragments",
			first: wstest.MaskedFrame(opText, 1, []byte{0xe2}),
			frame: wstest.MaskedFrame(0x80|opContinuation, 1, []byte{'a'}),
			code:  abi.CloseInvalidData,
		},
		{
			name:  "close with one byte",
			frame: wstest.MaskedFrame(0x80|opClose, 1, []byte{3}),
			code:  abi.CloseProtocolError,
		},
		{
			name:  "close with reserved code 1005",
			frame: wstest.MaskedFrame(0x80|opClose, 2, closeBody(1005, "")),
			code:  abi.CloseProtocolError,
		},
		{
			name:  "close with code 999",
			frame: wstest.MaskedFrame(0x80|opClose, 2, closeBody(999, "")),
			code:  abi.CloseProtocolError,
		},
		{
			name:  "close with code 5000",
			frame: wstest.MaskedFrame(0x80|opClose, 2, closeBody(5000, "")),
			code:  abi.CloseProtocolError,
		},
		{
			name:  "close with invalid UTF-8 reason",
			frame: wstest.MaskedFrame(0x80|opClose, 4, append(closeBody(1000, ""), 0xc3, 0x28)),
			code:  abi.CloseInvalidData,
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			rec := newRecorder(t, true)
			s := newServer(t, Config{}, rec)
			c := dial(t, s.url)
			if tc.first != nil {
				c.writeRaw(tc.first)
			}
			c.writeRaw(tc.frame)
			c.expectClose(tc.code)
			if e := rec.nextClose(t); e.code != tc.code {
				t.Fatalf("OnClose code %d, want %d", e.code, tc.code)
			}
			if got := s.hub.m.evictProtocol.Get(); got != 1 {
				t.Errorf("protocol evictions %d, want 1", got)
			}
		})
	}
}

func TestClientClose(t *testing.T) {
	rec := newRecorder(t, false)
	s := newServer(t, Config{}, rec)
	c := dial(t, s.url)
	c.write(ws.OpText, true, []byte("last words"))
	c.write(ws.OpClose, true, closeBody(4001, "bye ✓"))
	// The echo carries the client's code; then the server closes TCP.
	c.expectClose(4001)
	// The message sent before the close is delivered first.
	if e := rec.nextMsg(t); string(e.data) != "last words" {
		t.Fatalf("message %q", e.data)
	}
	e := rec.nextClose(t)
	if e.code != 4001 || e.reason != "bye ✓" {
		t.Fatalf("OnClose %d %q", e.code, e.reason)
	}
	eventually(t, "hub empty", func() bool { return s.hub.Count() == 0 })

	// A close frame without a code is reported as 1005 and echoed empty.
	c2 := dial(t, s.url)
	c2.write(ws.OpClose, true, nil)
	p := c2.readUntil(ws.OpClose)
	if len(p) != 0 {
		t.Fatalf("echo payload %x", p)
	}
	c2.expectEOF()
	if e := rec.nextClose(t); e.code != 1005 {
		t.Fatalf("OnClose code %d, want 1005", e.code)
	}
}

func TestClientDrop(t *testing.T) {
	rec := newRecorder(t, false)
	s := newServer(t, Config{}, rec)
	c := dial(t, s.url)
	sc := s.conn(t)
	c.conn.Close()
	e := rec.nextClose(t)
	if e.conn != sc || e.code != 1006 {
		t.Fatalf("OnClose %d for conn %d", e.code, e.conn.ID())
	}
	if err := sc.Send(abi.MessageText, []byte("x")); !errors.Is(err, ErrClosed) {
		t.Fatalf("send after close: %v", err)
	}
}

func TestServerClose(t *testing.T) {
	rec := newRecorder(t, false)
	s := newServer(t, Config{CloseTimeout: 200 * time.Millisecond}, rec)

	// A client that answers the close frame.
	c := dial(t, s.url)
	sc := s.conn(t)
	if err := sc.Send(abi.MessageText, []byte("queued first")); err != nil {
		t.Fatal(err)
	}
	sc.Close(4000, "go away")
	sc.Close(4999, "ignored: second close")
	if err := sc.Send(abi.MessageText, []byte("too late")); !errors.Is(err, ErrClosed) {
		t.Fatalf("send after Close: %v", err)
	}
	if _, p := c.readMsg(); string(p) != "queued first" {
		t.Fatalf("got %q", p)
	}
	p := c.readUntil(ws.OpClose)
	if code, reason := ws.ParseCloseFrameData(p); code != 4000 || reason != "go away" {
		t.Fatalf("close frame %d %q", code, reason)
	}
	c.write(ws.OpText, true, []byte("dropped after close"))
	c.write(ws.OpClose, true, closeBody(4000, ""))
	c.expectEOF()
	if e := rec.nextClose(t); e.code != 4000 || e.reason != "go away" {
		t.Fatalf("OnClose %d %q", e.code, e.reason)
	}
	select {
	case m := <-rec.msgs:
		t.Fatalf("message after Close delivered: %q", m.data)
	default:
	}

	// A client that never answers: TCP is closed after CloseTimeout.
	c2 := dial(t, s.url)
	sc2 := s.conn(t)
	start := time.Now()
	sc2.Close(abi.CloseServiceRestart, strings.Repeat("é", 100)) // reason cut to 123 bytes
	p = c2.readUntil(ws.OpClose)
	code, reason := ws.ParseCloseFrameData(p)
	if abi.CloseCode(code) != abi.CloseServiceRestart || len(reason) > abi.MaxCloseReason || !strings.HasPrefix(reason, "éé") {
		t.Fatalf("close frame %d %q (%d bytes)", code, reason, len(reason))
	}
	c2.expectEOF()
	if d := time.Since(start); d < 150*time.Millisecond || d > 5*time.Second {
		t.Errorf("unanswered close took %v, want about 200ms", d)
	}
	if e := rec.nextClose(t); e.code != abi.CloseServiceRestart {
		t.Fatalf("OnClose %d", e.code)
	}
}

func TestCloseBeforeStart(t *testing.T) {
	set := newRecorder(t, false)
	hub := NewHub(Config{CloseTimeout: 100 * time.Millisecond}, nil)
	defer hub.Close()
	srv := http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		c, err := hub.Upgrade(w, r, nil)
		if err != nil {
			return
		}
		c.Close(4003, "refused")
		c.Start(set)
	})}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go srv.Serve(ln)
	defer srv.Close()
	c := dial(t, "ws://"+ln.Addr().String()+"/")
	p := c.readUntil(ws.OpClose)
	if code, _ := ws.ParseCloseFrameData(p); code != 4003 {
		t.Fatalf("code %d", code)
	}
	c.expectEOF()
	if e := set.nextClose(t); e.code != 4003 {
		t.Fatalf("OnClose %d", e.code)
	}
	eventually(t, "hub empty", func() bool { return hub.Count() == 0 })
}

// TestSlowReaderEvicted: a client that does not read, sent more and more
// from elsewhere (its own reader stopping does not slow that), is evicted
// at its queue's hard cap; a Send never waits for it, and another socket
// goes on echoing promptly throughout.
func TestSlowReaderEvicted(t *testing.T) {
	rec := newRecorder(t, true)
	// The other socket echoes as fast as it can: no message rate.
	s := newServer(t, Config{OutboundBytes: 256 << 10, MessageRate: limits.Off}, rec)

	slow := dial(t, s.url) // never reads
	slowConn := s.conn(t)
	fast := dial(t, s.url)
	s.conn(t)

	// Measure the other socket's echo latency during the whole flood.
	var maxRTT, echoes atomic.Int64
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			default:
			}
			t0 := time.Now()
			fast.write(ws.OpText, true, []byte("tick"))
			fast.readMsg()
			if d := int64(time.Since(t0)); d > maxRTT.Load() {
				maxRTT.Store(d)
			}
			echoes.Add(1)
		}
	})

	chunk := make([]byte, 32<<10)
	var slowest time.Duration
	var err error
	sent := 0
	for ; sent < 100000; sent++ {
		t0 := time.Now()
		err = slowConn.Send(abi.MessageBinary, chunk)
		slowest = max(slowest, time.Since(t0))
		if err != nil {
			break
		}
		// Pace the sender like a room would: give the writer up to 2 ms to
		// drain, so that the eviction comes from the client not reading
		// (full kernel buffers), not from a burst.
		for i := 0; i < 20 && queued(slowConn) > 0; i++ {
			time.Sleep(100 * time.Microsecond)
		}
	}
	if !errors.Is(err, ErrSlowReader) {
		t.Fatalf("after %d sends: %v, want ErrSlowReader", sent, err)
	}
	if slowest > 50*time.Millisecond {
		t.Errorf("a Send blocked for %v", slowest)
	}
	if err := slowConn.Send(abi.MessageBinary, chunk); !errors.Is(err, ErrClosed) {
		t.Errorf("send after eviction: %v", err)
	}
	e := rec.nextClose(t)
	if e.conn != slowConn || e.code != abi.CloseSlowReader {
		t.Fatalf("OnClose %d for conn %d", e.code, e.conn.ID())
	}
	close(stop)
	wg.Wait()
	if got := s.hub.m.evictQueueLimit.Get(); got != 1 {
		t.Errorf("queue_limit evictions %d", got)
	}
	if d := time.Duration(maxRTT.Load()); d > 500*time.Millisecond {
		t.Errorf("other socket's echo took up to %v during the flood", d)
	}
	if echoes.Load() == 0 {
		t.Error("the other socket did not echo during the flood")
	}
	t.Logf("evicted after %d sends of %d bytes; slowest Send %v; other socket: %d echoes, max %v",
		sent, len(chunk), slowest, echoes.Load(), time.Duration(maxRTT.Load()))
	// The slow client sees the connection end (the close frame may or may
	// not fit in its full window).
	slow.conn.SetReadDeadline(time.Now().Add(waitTimeout))
	buf := make([]byte, 1<<20)
	for {
		if _, err := slow.conn.Read(buf); err != nil {
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				t.Fatal("slow client's connection not closed")
			}
			break
		}
	}
}

// queued returns the frames a socket has queued and not yet written.
func queued(c *Conn) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.outFrames
}

func TestWriteTimeout(t *testing.T) {
	rec := newRecorder(t, false)
	s := newServer(t, Config{
		WriteTimeout:   100 * time.Millisecond,
		OutboundBytes:  64 << 20,
		OutboundFrames: 1 << 20,
	}, rec)
	dial(t, s.url) // never reads
	sc := s.conn(t)
	big := make([]byte, 1<<20)
	for i := 0; i < 60; i++ {
		if err := sc.Send(abi.MessageBinary, big); err != nil {
			break
		}
	}
	e := rec.nextClose(t)
	if e.code != abi.CloseSlowReader {
		t.Fatalf("OnClose %d", e.code)
	}
	if got := s.hub.m.evictWriteTimeout.Get(); got != 1 {
		t.Errorf("write_timeout evictions %d", got)
	}
}

func TestSendErrors(t *testing.T) {
	rec := newRecorder(t, false)
	s := newServer(t, Config{OutboundBytes: 1000}, rec)
	dial(t, s.url)
	sc := s.conn(t)
	if err := sc.Send(3, nil); !errors.Is(err, ErrBadKind) {
		t.Errorf("bad kind: %v", err)
	}
	if err := sc.Send(abi.MessageText, []byte{0xff}); !errors.Is(err, ErrInvalidUTF8) {
		t.Errorf("bad text: %v", err)
	}
	if err := sc.Send(abi.MessageBinary, make([]byte, 2000)); !errors.Is(err, ErrTooLarge) {
		t.Errorf("too large: %v", err)
	}
	if err := sc.SendChecked(3, nil); !errors.Is(err, ErrBadKind) {
		t.Errorf("checked, bad kind: %v", err)
	}
	if err := sc.SendChecked(abi.MessageText, make([]byte, 997)); !errors.Is(err, ErrTooLarge) {
		t.Errorf("checked, a chunked frame too large: %v", err) // 1,001 bytes with its header
	}
	if _, err := s.hub.Prepare(abi.MessageText, []byte{0xc0}); !errors.Is(err, ErrInvalidUTF8) {
		t.Errorf("prepare bad text: %v", err)
	}
	if err := sc.Send(abi.MessageBinary, []byte("ok")); err != nil {
		t.Errorf("socket should still be open: %v", err)
	}
}

func TestPreparedFanOut(t *testing.T) {
	rec := newRecorder(t, false)
	s := newServer(t, Config{}, rec)
	var clients []*client
	var conns []*Conn
	for range 5 {
		clients = append(clients, dial(t, s.url))
		conns = append(conns, s.conn(t))
	}
	p, err := s.hub.Prepare(abi.MessageText, []byte("to everyone"))
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range conns {
		if err := c.SendPrepared(p); err != nil {
			t.Fatal(err)
		}
	}
	for _, c := range clients {
		if op, got := c.readMsg(); op != ws.OpText || string(got) != "to everyone" {
			t.Fatalf("got %v %q", op, got)
		}
	}
}

func TestCloseAll(t *testing.T) {
	rec := newRecorder(t, false)
	s := newServer(t, Config{CloseTimeout: 300 * time.Millisecond}, rec)
	const n = 20
	var clients []*client
	for range n {
		clients = append(clients, dial(t, s.url))
		s.conn(t)
	}
	// Half the clients answer the close frame, half stay silent.
	var wg sync.WaitGroup
	for i, c := range clients {
		wg.Go(func() {
			p := c.readUntil(ws.OpClose)
			if code, _ := ws.ParseCloseFrameData(p); abi.CloseCode(code) != abi.CloseServiceRestart {
				t.Errorf("client %d: close code %d", i, code)
			}
			if i%2 == 0 {
				c.write(ws.OpClose, true, p)
			}
			c.expectEOF()
		})
	}
	ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	defer cancel()
	if err := s.hub.CloseAll(ctx, abi.CloseServiceRestart, "restart"); err != nil {
		t.Fatal(err)
	}
	if s.hub.Count() != 0 {
		t.Fatalf("count %d after CloseAll", s.hub.Count())
	}
	wg.Wait()
	for range n {
		if e := rec.nextClose(t); e.code != abi.CloseServiceRestart {
			t.Fatalf("OnClose %d", e.code)
		}
	}
}

func TestCloseAllContextCuts(t *testing.T) {
	rec := newRecorder(t, false)
	block := make(chan struct{})
	rec.block = func([]byte) { <-block } // a room that never returns
	s := newServer(t, Config{CloseTimeout: time.Minute}, rec)
	c := dial(t, s.url)
	c.write(ws.OpText, true, []byte("stuck"))
	eventually(t, "message queued", func() bool { return s.hub.m.messagesIn.Get() == 1 })
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	if err := s.hub.CloseAll(ctx, abi.CloseServiceRestart, ""); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("CloseAll: %v", err)
	}
	c.readUntil(ws.OpClose)
	c.expectEOF() // cut although the client never answered and the room is stuck
	close(block)
	if e := rec.nextClose(t); e.code != abi.CloseServiceRestart {
		t.Fatalf("OnClose %d", e.code)
	}
}

func TestMaxSocketsCap(t *testing.T) {
	rec := newRecorder(t, false)
	s := newServer(t, Config{MaxSockets: 2, RetryAfter: 1500 * time.Millisecond}, rec)
	dial(t, s.url)
	dial(t, s.url)
	_, _, _, err := ws.Dial(context.Background(), s.url)
	var se ws.StatusError
	if !errors.As(err, &se) || int(se) != http.StatusTooManyRequests {
		t.Fatalf("third dial: %v, want HTTP 429", err)
	}
	resp, err := http.Get(s.srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusTooManyRequests || resp.Header.Get("Retry-After") != "2" {
		t.Fatalf("status %d, Retry-After %q", resp.StatusCode, resp.Header.Get("Retry-After"))
	}
	if got := s.hub.m.rejectCap.Get(); got != 2 {
		t.Errorf("cap rejections %d", got)
	}
	if s.hub.Count() != 2 {
		t.Errorf("count %d", s.hub.Count())
	}
}

func TestBadUpgradeRequest(t *testing.T) {
	rec := newRecorder(t, false)
	s := newServer(t, Config{}, rec)
	resp, err := http.Get(s.srv.URL) // no upgrade headers
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusBadRequest {
		t.Fatalf("status %d", resp.StatusCode)
	}
	// The answer is written before Upgrade returns and counts it.
	eventually(t, "rejection counted", func() bool { return s.hub.m.rejectBad.Get() == 1 })
	eventually(t, "slot released", func() bool { return s.hub.Count() == 0 })
}

func TestHubClosedRefusesUpgrades(t *testing.T) {
	rec := newRecorder(t, false)
	s := newServer(t, Config{}, rec)
	s.hub.Close()
	_, _, _, err := ws.Dial(context.Background(), s.url)
	var se ws.StatusError
	if !errors.As(err, &se) || int(se) != http.StatusServiceUnavailable {
		t.Fatalf("dial after Close: %v", err)
	}
}

func TestSubprotocol(t *testing.T) {
	hub := NewHub(Config{}, nil)
	defer hub.Close()
	rec := newRecorder(t, false)
	srv := http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		c, err := hub.Upgrade(w, r, &UpgradeOptions{Protocol: func(p string) bool { return p == "phoenix" }})
		if err != nil {
			return
		}
		if c.Protocol() != "phoenix" {
			t.Errorf("protocol %q", c.Protocol())
		}
		c.Start(rec)
	})}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go srv.Serve(ln)
	defer srv.Close()
	d := ws.Dialer{Protocols: []string{"phoenix", "base64url.bearer.phx.abc"}}
	conn, _, hs, err := d.Dial(context.Background(), "ws://"+ln.Addr().String()+"/")
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if hs.Protocol != "phoenix" {
		t.Fatalf("selected %q", hs.Protocol)
	}
}

// TestCloseRaces closes sockets from every side at once; run with -race.
// Each Conn must report exactly one close (checked by the recorder and at
// cleanup).
func TestCloseRaces(t *testing.T) {
	rec := newRecorder(t, true)
	s := newServer(t, Config{PingInterval: 20 * time.Millisecond, CloseTimeout: 50 * time.Millisecond, OutboundFrames: 8}, rec)
	const n = 40
	var wg sync.WaitGroup
	for i := range n {
		c := dial(t, s.url)
		sc := s.conn(t)
		wg.Go(func() {
			for range 5 {
				c.write(ws.OpText, true, []byte("x"))
			}
			switch i % 5 {
			case 0:
				c.write(ws.OpClose, true, closeBody(1000, ""))
				sc.Close(4000, "")
			case 1:
				c.conn.Close()
				sc.Close(4000, "")
			case 2:
				for range 50 {
					if sc.Send(abi.MessageText, []byte("flood")) != nil {
						break
					}
				}
				c.conn.Close()
			case 3:
				c.writeRaw([]byte{0x81, 1, 'x'}) // unmasked
				sc.Close(4000, "")
			case 4:
				// left to CloseAll
			}
		})
	}
	wg.Wait()
	ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	defer cancel()
	if err := s.hub.CloseAll(ctx, abi.CloseServiceRestart, ""); err != nil {
		t.Fatal(err)
	}
	if s.hub.Count() != 0 {
		t.Fatalf("count %d", s.hub.Count())
	}
}

func TestMetricNames(t *testing.T) {
	rec := newRecorder(t, false)
	s := newServer(t, Config{}, rec)
	dial(t, s.url)
	s.conn(t)
	var b bytes.Buffer
	s.set.WritePrometheus(&b)
	out := b.String()
	for _, name := range []string{
		"wasmkeep_sockets_open 1",
		"wasmkeep_socket_messages_in_total",
		"wasmkeep_socket_messages_out_total",
		"wasmkeep_socket_bytes_in_total",
		"wasmkeep_socket_bytes_out_total",
		"wasmkeep_socket_pings_sent_total",
		`wasmkeep_socket_evictions_total{reason="slow_reader"}`,
		`wasmkeep_socket_evictions_total{reason="write_timeout"}`,
		`wasmkeep_socket_evictions_total{reason="dead"}`,
		`wasmkeep_socket_evictions_total{reason="too_big"}`,
		`wasmkeep_socket_evictions_total{reason="protocol"}`,
		`wasmkeep_socket_upgrades_rejected_total{reason="cap"}`,
		`wasmkeep_socket_upgrades_rejected_total{reason="ip_rate"}`,
		`wasmkeep_socket_upgrades_rejected_total{reason="ip_concurrent"}`,
		`wasmkeep_socket_upgrades_rejected_total{reason="ip_table_full"}`,
		`wasmkeep_socket_upgrades_rejected_total{reason="bad_request"}`,
		`wasmkeep_socket_upgrades_rejected_total{reason="shutdown"}`,
		`wasmkeep_socket_messages_dropped_total{reason="rate"}`,
		"wasmkeep_socket_tracked_addresses 0",
		"wasmkeep_socket_outbound_queued_frames 0",
		"wasmkeep_socket_outbound_queued_bytes 0",
		"wasmkeep_socket_inbound_queued_messages 0",
	} {
		if !strings.Contains(out, name) {
			t.Errorf("metrics lack %s\n%s", name, out)
		}
	}
}

func TestInboundBackpressureIsNotDeath(t *testing.T) {
	rec := newRecorder(t, false)
	release := make(chan struct{})
	rec.block = func([]byte) { <-release }
	const interval = 50 * time.Millisecond
	s := newServer(t, Config{InboundMessages: 2, PingInterval: interval}, rec)
	c := dial(t, s.url)
	sc := s.conn(t)
	const n = 10
	for i := range n {
		c.write(ws.OpBinary, true, []byte{byte(i)})
	}
	// The handler holds the first message, two wait in the queue, and the
	// reader waits for room: it has read 4 of the 10.
	eventually(t, "reader waiting", func() bool {
		sc.mu.Lock()
		defer sc.mu.Unlock()
		return sc.readerWaiting
	})
	// Many ping intervals pass without a frame read from this client (it
	// does not even answer pings): not dead, since the wait is ours.
	p0 := s.hub.m.pingsSent.Get()
	eventually(t, "six ping intervals", func() bool { return s.hub.m.pingsSent.Get() >= p0+6 })
	if got := s.hub.m.evictDead.Get(); got != 0 {
		t.Fatalf("socket closed as dead while waiting for its handler")
	}
	close(release)
	for i := range n {
		if e := rec.nextMsg(t); len(e.data) != 1 || int(e.data[0]) != i {
			t.Fatalf("message %d: %v", i, e.data)
		}
	}
}
