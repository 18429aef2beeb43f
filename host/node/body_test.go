package node

import (
	"bufio"
	"bytes"
	"fmt"
	"net"
	"net/http"
	"testing"
	"time"

	"github.com/wasmkeep/wasmkeep/host/server"
)

// slowClient sends an HTTP request over raw TCP from a given local
// address: its headers at once, then its body at the pace a test gives.
type slowClient struct {
	conn    net.Conn
	start   time.Time
	answers chan slowAnswer
	stop    chan struct{}
}

// slowAnswer is the node's answer to a slow client, and when it came.
type slowAnswer struct {
	status int
	after  time.Duration
	err    error
}

// sendSlowly starts a request to addr from local: head is its request
// line and headers (Host, the admin header and Content-Length added),
// body its body, sent chunk bytes every interval. The client stops
// sending once the node answers or closes.
func sendSlowly(t *testing.T, addr, local, head string, body []byte, chunk int, interval time.Duration) *slowClient {
	t.Helper()
	d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(local)}, Timeout: 10 * time.Second}
	conn, err := d.Dial("tcp", addr)
	if err != nil {
		t.Fatalf("dial %s from %s: %v", addr, local, err)
	}
	t.Cleanup(func() { conn.Close() })
	c := &slowClient{conn: conn, start: time.Now(), answers: make(chan slowAnswer, 1), stop: make(chan struct{})}
	req := fmt.Sprintf("%s\r\nHost: %s\r\n%s: 1\r\nContent-Length: %d\r\n\r\n", head, addr, server.AdminHeader, len(body))
	if _, err := conn.Write([]byte(req)); err != nil {
		t.Fatalf("write: %v", err)
	}
	go func() {
		tick := time.NewTicker(interval)
		defer tick.Stop()
		for len(body) > 0 {
			k := min(chunk, len(body))
			if _, err := conn.Write(body[:k]); err != nil {
				return
			}
			body = body[k:]
			select {
			case <-c.stop:
				return
			case <-tick.C:
			}
		}
	}()
	go func() {
		_ = conn.SetReadDeadline(time.Now().Add(time.Minute))
		resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
		a := slowAnswer{after: time.Since(c.start), err: err}
		if err == nil {
			a.status = resp.StatusCode
			resp.Body.Close()
		}
		close(c.stop)
		c.answers <- a
	}()
	return c
}

// answer waits for the node's answer, at most within.
func (c *slowClient) answer(t *testing.T, within time.Duration) slowAnswer {
	t.Helper()
	select {
	case a := <-c.answers:
		if a.err != nil {
			t.Fatalf("reading the answer: %v (after %v)", a.err, a.after)
		}
		return a
	case <-time.After(within):
		t.Fatalf("no answer within %v", within)
		return slowAnswer{}
	}
}

// TestRequestBodyDeadlines: slow clients over raw TCP. A body that is not
// whole within --body-timeout is cut with 408; an admin upload may take
// longer as long as it keeps --upload-min-rate, and is cut with 408 below
// it; and one client address cannot have more than --max-bodies-per-ip
// bodies arriving at once (429 past them), while other addresses are
// served. The three cases wait out the timeout at the same time, each
// from client addresses of its own (one after the other they took three
// timeouts and a half, 14 s).
func TestRequestBodyDeadlines(t *testing.T) {
	t.Parallel()
	const timeout = 4 * time.Second
	const perIP = 20
	wasm := buildGuest(t, "./testdata/guests/echo")
	// An upload paced at twice the floor lasts about 1.5 timeouts.
	floor := int(float64(len(wasm)) / (3 * timeout.Seconds()))
	n := startNode(t, Config{Server: server.Config{BodyTimeout: timeout, UploadMinRate: floor, MaxBodiesPerIP: perIP}})
	putClass(t, n, "echo", "./testdata/guests/echo")
	room := "POST /actor/echo/slow HTTP/1.1"
	trickle := bytes.Repeat([]byte("x"), 100_000) // a byte every 100 ms: never whole in time
	late := timeout + 20*time.Second

	// A trickling room request (from 127.0.0.3) is cut at the deadline,
	// not before.
	lone := sendSlowly(t, n.Addr(), "127.0.0.3", room, trickle, 1, 100*time.Millisecond)

	// Admin uploads (from 127.0.0.4): a module paced at twice the floor
	// takes longer than the timeout and is taken; at a quarter of it, it
	// is cut; a trickling bundle too.
	step := 100 * time.Millisecond
	perStep := func(rate int) int { return max(rate/10, 1) }
	paced := sendSlowly(t, n.Addr(), "127.0.0.4", "PUT /admin/classes/paced HTTP/1.1", wasm, perStep(2*floor), step)
	slow := sendSlowly(t, n.Addr(), "127.0.0.4", "PUT /admin/classes/slow HTTP/1.1", wasm, perStep(floor/4), step)
	bundle := sendSlowly(t, n.Addr(), "127.0.0.4", "POST /admin/rooms/import HTTP/1.1", trickle, 1, step)
	const others = 4 // bodies arriving besides 127.0.0.1's

	// perIP trickling bodies from 127.0.0.1 hold all its slots; more from
	// it are refused at once; other addresses are served.
	held := make([]*slowClient, perIP)
	for i := range held {
		held[i] = sendSlowly(t, n.Addr(), "127.0.0.1", room, trickle, 1, 100*time.Millisecond)
	}
	waitFor(t, "the held bodies to be receiving", func() bool {
		return metric(t, n, "wasmkeep_http_bodies_receiving") == perIP+others
	})
	refused := make([]*slowClient, 180)
	for i := range refused {
		refused[i] = sendSlowly(t, n.Addr(), "127.0.0.1", room, trickle, 1, 100*time.Millisecond)
	}
	for i, c := range refused {
		if a := c.answer(t, late); a.status != http.StatusTooManyRequests || a.after >= timeout {
			t.Fatalf("body %d over the address's %d: %d after %v, want 429 at once", i, perIP, a.status, a.after)
		}
	}
	other := sendSlowly(t, n.Addr(), "127.0.0.2", room, []byte("hello"), 5, time.Millisecond)
	if a := other.answer(t, late); a.status != 200 {
		t.Fatalf("a request from another address: %d", a.status)
	}
	if a := lone.answer(t, late); a.status != 408 || a.after < timeout-100*time.Millisecond {
		t.Fatalf("a trickling body: %d after %v, want 408 after %v", a.status, a.after, timeout)
	}
	for i, c := range held {
		if a := c.answer(t, late); a.status != 408 || a.after < timeout-100*time.Millisecond {
			t.Fatalf("held body %d: %d after %v, want 408 after %v", i, a.status, a.after, timeout)
		}
	}

	if a := paced.answer(t, 3*late); a.status != http.StatusCreated || a.after < timeout {
		t.Errorf("an upload at twice --upload-min-rate: %d after %v, want 201 after more than %v", a.status, a.after, timeout)
	}
	// Below the floor: cut once (elapsed - timeout) * floor passes what
	// arrived, a third past the timeout at a quarter of the floor.
	for what, c := range map[string]*slowClient{"an upload at a quarter of --upload-min-rate": slow, "a trickling bundle": bundle} {
		if a := c.answer(t, 3*late); a.status != 408 || a.after < timeout {
			t.Errorf("%s: %d after %v, want 408 after more than %v", what, a.status, a.after, timeout)
		}
	}
	expect(t, 200, "GET", n.URL()+"/admin/classes/paced", nil)
	expect(t, 404, "GET", n.URL()+"/admin/classes/slow", nil)

	waitFor(t, "the slots to be given back", func() bool { return metric(t, n, "wasmkeep_http_bodies_receiving") == 0 })
	expect(t, 200, "POST", n.URL()+"/actor/echo/slow", []byte("hello"))
	if got := metric(t, n, "wasmkeep_http_bodies_refused_total"); got != 180 {
		t.Errorf("wasmkeep_http_bodies_refused_total %v, want 180", got)
	}
	// The held bodies, the lone one, the slow upload and the bundle.
	if got := metric(t, n, "wasmkeep_http_body_timeouts_total"); got != perIP+3 {
		t.Errorf("wasmkeep_http_body_timeouts_total %v, want %d", got, perIP+3)
	}
}
