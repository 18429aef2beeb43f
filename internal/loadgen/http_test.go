package loadgen

import (
	"context"
	"io"
	"math"
	"net"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/wasmkeep/wasmkeep/internal/limits"
)

// countingServer answers every request 200 "ok" but every fifth one, 500
// "boom"; it counts the requests and the connections by path and remote
// address.
type countingServer struct {
	*httptest.Server
	requests atomic.Int64
	fails    atomic.Int64
	mu       sync.Mutex
	paths    map[string]int
	bodies   map[string]int
	conns    atomic.Int64
}

func newCountingServer(t *testing.T) *countingServer {
	s := &countingServer{paths: map[string]int{}, bodies: map[string]int{}}
	s.Server = httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		s.mu.Lock()
		s.paths[r.Method+" "+r.URL.Path]++
		s.bodies[string(b)]++
		s.mu.Unlock()
		if s.requests.Add(1)%5 == 0 {
			s.fails.Add(1)
			http.Error(w, "boom", http.StatusInternalServerError)
			return
		}
		io.WriteString(w, "ok")
	}))
	s.Config.ConnState = func(_ net.Conn, st http.ConnState) {
		if st == http.StateNew {
			s.conns.Add(1)
		}
	}
	s.Start()
	t.Cleanup(s.Close)
	return s
}

func runHTTP(t *testing.T, cfg HTTPConfig) *HTTPResult {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	res, err := RunHTTP(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("%s %s: %d requests (%.0f/s), p50 %.3f ms, p99 %.3f ms, errors %d %v, connections %d",
		cfg.Method, cfg.URL, res.Requests, res.RequestsPerSec, res.Latency.P50, res.Latency.P99, res.Errors, res.ErrorsByStatus, res.Connections)
	return res
}

// TestHTTPCounts: clients send requests back to back on one connection
// each; those answered 200 in the measured period are counted, with their
// latencies, and every 500 is an error of its status.
func TestHTTPCounts(t *testing.T) {
	t.Parallel()
	s := newCountingServer(t)
	cfg := HTTPConfig{
		URL: s.URL + "/actor/caller/{room}/count", Prefix: "r", Rooms: 4, Clients: 8,
		Method: "POST", Body: "hello",
		Warmup: 100 * time.Millisecond, Duration: 700 * time.Millisecond, Drain: 5 * time.Second,
	}
	res := runHTTP(t, cfg)

	// Every request the server took was answered 200 or 500, and the run
	// counted each 500 as an error of that status, and nothing else.
	if res.Errors != s.fails.Load() || res.ErrorsByStatus["500"] != s.fails.Load() || len(res.ErrorsByStatus) != 1 {
		t.Fatalf("errors %d %v; the server failed %d requests", res.Errors, res.ErrorsByStatus, s.fails.Load())
	}
	if res.Errors == 0 || len(res.ErrorSamples) == 0 || !strings.Contains(res.ErrorSamples[0], "HTTP 500 (boom)") {
		t.Fatalf("errors %d, samples %q: want the 500s with their body", res.Errors, res.ErrorSamples)
	}
	// The measured period counted the 200s of its 0.7 s: at most the
	// server's, at least a good part of what it answered 200.
	ok := s.requests.Load() - s.fails.Load()
	if res.Requests <= 0 || res.Requests > ok {
		t.Fatalf("counted %d requests; the server answered %d with 200", res.Requests, ok)
	}
	if res.RequestsPerSec != math.Round(float64(res.Requests)/0.7) {
		t.Fatalf("%d requests in 0.7 s: %v a second", res.Requests, res.RequestsPerSec)
	}
	l := res.Latency
	if !(0 < l.P50 && l.P50 <= l.P99 && l.P99 <= l.Max) {
		t.Fatalf("latency quantiles out of order: %+v", l)
	}
	// One keep-alive connection a client.
	if res.Connections != int64(cfg.Clients) || s.conns.Load() != int64(cfg.Clients) {
		t.Fatalf("%d connections opened (the server saw %d), want one a client: %d", res.Connections, s.conns.Load(), cfg.Clients)
	}
	if res.Unanswered != 0 {
		t.Fatalf("%d requests unanswered", res.Unanswered)
	}
	// The clients went to rooms r0 … r3, with the method and body given.
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.paths) != 4 || s.paths["POST /actor/caller/r3/count"] == 0 {
		t.Fatalf("paths requested: %v; want POST to rooms r0 to r3", s.paths)
	}
	if len(s.bodies) != 1 || s.bodies["hello"] == 0 {
		t.Fatalf("bodies sent: %v", s.bodies)
	}
	if res.Rooms != 4 || res.Prefix != "r" || res.Method != "POST" || res.Body != 5 || res.Clients != 8 {
		t.Fatalf("the result describes another run: %+v", res)
	}
}

// TestHTTPRate: paced, the clients send about the rate asked for.
func TestHTTPRate(t *testing.T) {
	t.Parallel()
	s := newCountingServer(t)
	res := runHTTP(t, HTTPConfig{URL: s.URL + "/", Clients: 4, Rate: 200, Warmup: 100 * time.Millisecond, Duration: time.Second})
	// 200 a second, a fifth of them 500s: 160 answered 200.
	if res.Requests < 120 || res.Requests > 170 {
		t.Fatalf("%d requests answered 200 in a second at 200 a second (a fifth fail)", res.Requests)
	}
	if res.Rooms != 0 || res.Prefix != "" {
		t.Fatalf("rooms %d %q without %s in the URL", res.Rooms, res.Prefix, RoomMark)
	}
}

// TestHTTPRefused: a first request with no answer, or answered 404, stops
// the run with the reason.
func TestHTTPRefused(t *testing.T) {
	t.Parallel()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	notFound := httptest.NewServer(http.NotFoundHandler())
	defer notFound.Close()
	for _, c := range []struct{ url, want string }{
		{"http://" + addr + "/", "nothing listens there"},
		{notFound.URL + "/actor/nope/x", "HTTP 404"},
	} {
		_, err := RunHTTP(context.Background(), HTTPConfig{URL: c.url, Clients: 3, Duration: time.Second})
		if err == nil || !strings.Contains(err.Error(), c.want) || !strings.Contains(err.Error(), "of 3 connections") {
			t.Errorf("%s: error %v, want one that says %q", c.url, err, c.want)
		}
	}
}

// TestHTTPUnanswered: requests still in flight at the end of the drain are
// abandoned and counted apart from the errors.
func TestHTTPUnanswered(t *testing.T) {
	t.Parallel()
	var n atomic.Int64
	release := make(chan struct{})
	s := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if n.Add(1) > 2 { // the first requests open the connections
			select {
			case <-release:
			case <-r.Context().Done():
			}
		}
	}))
	defer s.Close()
	defer close(release)
	res := runHTTP(t, HTTPConfig{URL: s.URL, Clients: 2, Warmup: limits.Off, Duration: 100 * time.Millisecond, Drain: 100 * time.Millisecond})
	if res.Unanswered != 2 || res.Errors != 0 || res.Requests != 0 {
		t.Fatalf("unanswered %d, errors %d, requests %d; want 2 unanswered and nothing else", res.Unanswered, res.Errors, res.Requests)
	}
}

func TestHTTPValidate(t *testing.T) {
	for _, c := range []struct {
		cfg  HTTPConfig
		want string
	}{
		{HTTPConfig{URL: "ws://127.0.0.1/"}, "--http"},
		{HTTPConfig{URL: "127.0.0.1:80/x"}, "--http"},
		{HTTPConfig{URL: "http://127.0.0.1/{room}", Clients: 5, Rooms: 1<<20 + 1}, "--rooms"},
		{HTTPConfig{URL: "http://127.0.0.1/", Method: "get"}, "--method"},
		{HTTPConfig{URL: "http://127.0.0.1/", TargetPID: -2}, "--target-pid"},
		{HTTPConfig{URL: "http://127.0.0.1/", Clients: MaxClients + 1}, "--clients"},
	} {
		if err := c.cfg.Validate(); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%+v: %v, want an error about %s", c.cfg, err, c.want)
		}
	}
	// Rooms are only checked against clients when the URL names them.
	ok := HTTPConfig{URL: "http://127.0.0.1/", Clients: 5, Rooms: 6}
	if err := ok.Validate(); err != nil {
		t.Errorf("%+v: %v", ok, err)
	}
	c := HTTPConfig{URL: "http://h/actor/c/{room}/count", Prefix: "p-", Clients: 3}
	c = c.withDefaults()
	if got := c.ClientURL(5); got != "http://h/actor/c/p-2/count" || c.Rooms != 3 || c.Method != "GET" {
		t.Errorf("client 5 of 3 rooms: %q (rooms %d, method %s)", got, c.Rooms, c.Method)
	}
	// More rooms than clients: each client takes its share in turn.
	c = HTTPConfig{URL: "http://h/{room}", Prefix: "r", Clients: 3, Rooms: 8}
	c = c.withDefaults()
	want := [][]string{{"http://h/r0", "http://h/r3", "http://h/r6"}, {"http://h/r1", "http://h/r4", "http://h/r7"}, {"http://h/r2", "http://h/r5"}}
	for i, w := range want {
		if got := c.ClientURLs(i); !slices.Equal(got, w) {
			t.Errorf("client %d of 3 over 8 rooms: %q, want %q", i, got, w)
		}
	}
}
