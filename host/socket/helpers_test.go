package socket

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/VictoriaMetrics/metrics"
	"github.com/gobwas/ws"

	"github.com/wasmkeep/wasmkeep/abi"
)

// waitTimeout bounds every wait of the tests; conditions are polled or
// waited on, never slept on blindly.
const waitTimeout = 10 * time.Second

type msgEvent struct {
	conn *Conn
	kind int
	data []byte
}

type closeEvent struct {
	conn   *Conn
	code   abi.CloseCode
	reason string
}

// recorder is a Handler that records events, optionally echoes messages,
// and checks that OnClose comes exactly once and last.
type recorder struct {
	t      testing.TB
	echo   bool
	block  func(data []byte) // called first in OnMessage, may block
	msgs   chan msgEvent
	closes chan closeEvent

	mu     sync.Mutex
	closed map[uint64]int
}

func newRecorder(t testing.TB, echo bool) *recorder {
	return &recorder{
		t:      t,
		echo:   echo,
		msgs:   make(chan msgEvent, 1024),
		closes: make(chan closeEvent, 1024),
		closed: make(map[uint64]int),
	}
}

func (r *recorder) OnMessage(c *Conn, kind int, data []byte) {
	r.mu.Lock()
	n := r.closed[c.ID()]
	r.mu.Unlock()
	if n != 0 {
		r.t.Errorf("conn %d: OnMessage after OnClose", c.ID())
	}
	if r.block != nil {
		r.block(data)
	}
	if r.echo {
		_ = c.Send(kind, data)
	}
	select {
	case r.msgs <- msgEvent{c, kind, data}:
	default:
	}
}

func (r *recorder) OnClose(c *Conn, code abi.CloseCode, reason string) {
	r.mu.Lock()
	r.closed[c.ID()]++
	n := r.closed[c.ID()]
	r.mu.Unlock()
	if n != 1 {
		r.t.Errorf("conn %d: OnClose called %d times", c.ID(), n)
	}
	r.closes <- closeEvent{c, code, reason}
}

// nextClose waits for the next OnClose.
func (r *recorder) nextClose(t testing.TB) closeEvent {
	t.Helper()
	select {
	case e := <-r.closes:
		return e
	case <-time.After(waitTimeout):
		t.Fatalf("no OnClose within %v", waitTimeout)
		return closeEvent{}
	}
}

// nextMsg waits for the next OnMessage.
func (r *recorder) nextMsg(t testing.TB) msgEvent {
	t.Helper()
	select {
	case e := <-r.msgs:
		return e
	case <-time.After(waitTimeout):
		t.Fatalf("no OnMessage within %v", waitTimeout)
		return msgEvent{}
	}
}

type testServer struct {
	hub   *Hub
	set   *metrics.Set
	srv   *httptest.Server
	url   string
	conns chan *Conn

	mu      sync.Mutex
	started []*Conn
}

// newServer serves upgrades on a loopback httptest server. Every accepted
// Conn is started with h and sent on conns. At cleanup every socket is
// closed and, if h is a recorder, each started Conn must have had exactly
// one OnClose.
func newServer(t testing.TB, cfg Config, h Handler) *testServer {
	t.Helper()
	return newServerOn(t, nil, cfg, h)
}

// newServerOn is newServer on a listener of the caller's (nil: a loopback
// one of httptest's).
func newServerOn(t testing.TB, ln net.Listener, cfg Config, h Handler) *testServer {
	t.Helper()
	s := &testServer{
		set:   metrics.NewSet(),
		conns: make(chan *Conn, 1024),
	}
	s.hub = NewHub(cfg, s.set)
	s.srv = httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		c, err := s.hub.Upgrade(w, r, nil)
		if err != nil {
			return
		}
		s.mu.Lock()
		s.started = append(s.started, c)
		s.mu.Unlock()
		c.Start(h)
		select {
		case s.conns <- c:
		default:
		}
	}))
	if ln != nil {
		s.srv.Listener.Close()
		s.srv.Listener = ln
	}
	s.srv.Start()
	s.url = "ws://" + s.srv.Listener.Addr().String() + "/"
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
		defer cancel()
		if err := s.hub.CloseAll(ctx, 1001, "test over"); err != nil {
			t.Errorf("CloseAll at cleanup: %v", err)
		}
		s.hub.Close()
		s.srv.Close()
		rec, ok := h.(*recorder)
		if !ok {
			return
		}
		s.mu.Lock()
		defer s.mu.Unlock()
		rec.mu.Lock()
		defer rec.mu.Unlock()
		for _, c := range s.started {
			if n := rec.closed[c.ID()]; n != 1 {
				t.Errorf("conn %d: %d OnClose calls, want 1", c.ID(), n)
			}
		}
	})
	return s
}

// metric reads one sample of the hub's metrics by its full name (with
// labels), or -1 if the hub has no such metric.
func (s *testServer) metric(t testing.TB, name string) float64 {
	t.Helper()
	var b bytes.Buffer
	s.set.WritePrometheus(&b)
	for _, line := range strings.Split(b.String(), "\n") {
		if v, ok := strings.CutPrefix(line, name+" "); ok {
			f, err := strconv.ParseFloat(v, 64)
			if err != nil {
				t.Fatalf("metric %s: %q", name, v)
			}
			return f
		}
	}
	return -1
}

// conn waits for the next accepted server-side Conn.
func (s *testServer) conn(t testing.TB) *Conn {
	t.Helper()
	select {
	case c := <-s.conns:
		return c
	case <-time.After(waitTimeout):
		t.Fatalf("no connection accepted within %v", waitTimeout)
		return nil
	}
}

// client is a test WebSocket client over real TCP.
type client struct {
	t    testing.TB
	conn net.Conn
	r    io.Reader
}

func dial(t testing.TB, url string) *client {
	t.Helper()
	return dialFrom(t, url, nil)
}

// dialFrom is dial through a dialer of the caller's (nil: the default).
func dialFrom(t testing.TB, url string, nd *net.Dialer) *client {
	t.Helper()
	d := ws.Dialer{}
	if nd != nil {
		d.NetDial = nd.DialContext
	}
	conn, br, _, err := d.Dial(context.Background(), url)
	if err != nil {
		t.Fatalf("dial %s: %v", url, err)
	}
	t.Cleanup(func() { conn.Close() })
	c := &client{t: t, conn: conn, r: conn}
	if br != nil {
		c.r = io.MultiReader(br, conn)
	}
	return c
}

// write sends a masked frame.
func (c *client) write(op ws.OpCode, fin bool, p []byte) {
	c.t.Helper()
	f := ws.MaskFrame(ws.NewFrame(op, fin, p))
	c.writeFrame(f)
}

func (c *client) writeFrame(f ws.Frame) {
	c.t.Helper()
	c.conn.SetWriteDeadline(time.Now().Add(waitTimeout))
	if err := ws.WriteFrame(c.conn, f); err != nil {
		c.t.Fatalf("client write: %v", err)
	}
}

func (c *client) writeRaw(b []byte) {
	c.t.Helper()
	c.conn.SetWriteDeadline(time.Now().Add(waitTimeout))
	if _, err := c.conn.Write(b); err != nil {
		c.t.Fatalf("client raw write: %v", err)
	}
}

// readFrame reads one frame from the server.
func (c *client) readFrame() (ws.Header, []byte, error) {
	c.conn.SetReadDeadline(time.Now().Add(waitTimeout))
	h, err := ws.ReadHeader(c.r)
	if err != nil {
		return h, nil, err
	}
	if h.Masked {
		return h, nil, errors.New("server frame is masked")
	}
	p := make([]byte, h.Length)
	_, err = io.ReadFull(c.r, p)
	return h, p, err
}

// readMsg reads the next data frame, skipping pings and pongs.
func (c *client) readMsg() (ws.OpCode, []byte) {
	c.t.Helper()
	for {
		h, p, err := c.readFrame()
		if err != nil {
			c.t.Fatalf("client read: %v", err)
		}
		switch h.OpCode {
		case ws.OpPing, ws.OpPong:
			continue
		case ws.OpClose:
			code, reason := ws.ParseCloseFrameData(p)
			c.t.Fatalf("unexpected close %d %q", code, reason)
		}
		if !h.Fin {
			c.t.Fatalf("server sent a fragment")
		}
		return h.OpCode, p
	}
}

// readUntil reads frames until one with op arrives and returns its payload.
func (c *client) readUntil(op ws.OpCode) []byte {
	c.t.Helper()
	for {
		h, p, err := c.readFrame()
		if err != nil {
			c.t.Fatalf("client read waiting for opcode %v: %v", op, err)
		}
		if h.OpCode == op {
			return p
		}
	}
}

// expectClose reads until the server's close frame, checks its code and that
// the server then closes TCP; it returns the reason.
func (c *client) expectClose(code abi.CloseCode) string {
	c.t.Helper()
	p := c.readUntil(ws.OpClose)
	got, reason := ws.ParseCloseFrameData(p)
	if abi.CloseCode(got) != code {
		c.t.Fatalf("close code %d (%q), want %d", got, reason, code)
	}
	c.expectEOF()
	return reason
}

// expectEOF checks that the server closes the connection.
func (c *client) expectEOF() {
	c.t.Helper()
	for {
		_, _, err := c.readFrame()
		if err == nil {
			continue
		}
		var ne net.Error
		if errors.As(err, &ne) && ne.Timeout() {
			c.t.Fatalf("server did not close TCP within %v", waitTimeout)
		}
		return
	}
}

// closeBody encodes a close frame payload.
func closeBody(code abi.CloseCode, reason string) []byte {
	b := binary.BigEndian.AppendUint16(nil, uint16(code))
	return append(b, reason...)
}

// waitFor receives from ch within waitTimeout.
func waitFor[T any](t testing.TB, ch <-chan T, what string) T {
	t.Helper()
	select {
	case v := <-ch:
		return v
	case <-time.After(waitTimeout):
		t.Fatalf("timed out waiting for %s", what)
		var zero T
		return zero
	}
}

// eventually polls cond until it holds.
func eventually(t testing.TB, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(waitTimeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(2 * time.Millisecond)
	}
}
