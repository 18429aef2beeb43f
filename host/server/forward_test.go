package server

import (
	"bufio"
	"bytes"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/VictoriaMetrics/metrics"

	"github.com/wasmkeep/wasmkeep/host/rooms"
	"github.com/wasmkeep/wasmkeep/internal/testenv"
)

// clusterServer is a Server with what checkPeer and forward use.
func clusterServer(node string, maxBody int64) *Server {
	c := &Cluster{Node: node, Secret: testSecret}
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	return &Server{cfg: Config{Cluster: c, MaxRequestBody: maxBody}.withDefaults(), log: log,
		fwd: newForwarder(c, nil, metrics.NewSet(), log)}
}

// forwarded is what node n1 sends to the owner for in: rewritten, written
// to the wire and read back as the owner's server reads it.
func forwarded(t *testing.T, s *Server, in *http.Request) *http.Request {
	t.Helper()
	pr := &httputil.ProxyRequest{In: in, Out: in.Clone(in.Context())}
	s.fwd.rewrite(pr, "10.0.0.2:8080", time.Now())
	pr.Out.RequestURI = ""
	var wire bytes.Buffer
	if err := pr.Out.Write(&wire); err != nil {
		t.Fatal(err)
	}
	got, err := http.ReadRequest(bufio.NewReader(&wire))
	if err != nil {
		t.Fatal(err)
	}
	got.RemoteAddr = "10.0.0.1:40000" // the forwarding node
	return got
}

// TestForwardedRequestChecks: what the forwarding node sends passes the
// owner's check and reaches the room as the client's (its Host, its
// address, its forwarding headers, no node-to-node header); anything
// spoiled, or sent to a node outside the cluster, is refused with 403.
func TestForwardedRequestChecks(t *testing.T) {
	a, b := clusterServer("n1", 1<<20), clusterServer("n2", 1<<20)
	client := func() *http.Request {
		r := httptest.NewRequest("POST", "http://app.example.com/actor/echo/x/p?q=1", strings.NewReader("hi"))
		r.RemoteAddr = "203.0.113.9:4711"
		r.Header.Set("X-Forwarded-For", "198.51.100.7")
		r.Header.Set("X-Test", "v")
		r.Header.Set(PeerClientHeader, "192.0.2.66:1") // smuggled: dropped by the forwarding node
		return r
	}
	rec := httptest.NewRecorder()
	got := b.checkPeer(rec, forwarded(t, a, client()))
	if got == nil {
		t.Fatalf("the owner refused a forwarded request: %d %s", rec.Code, rec.Body)
	}
	if forwardedBy(got) != "n1" || got.RemoteAddr != "203.0.113.9:4711" || got.Host != "app.example.com" {
		t.Errorf("forwarded by %q, from %q, Host %q", forwardedBy(got), got.RemoteAddr, got.Host)
	}
	if got.Header.Get("X-Forwarded-For") != "198.51.100.7" || got.Header.Get("X-Test") != "v" {
		t.Errorf("the client's headers changed: %v", got.Header)
	}
	if hasPeerHeaders(got.Header) {
		t.Errorf("a room would see node-to-node headers: %v", got.Header)
	}

	refused := func(name string, r *http.Request, srv *Server) {
		t.Helper()
		rec := httptest.NewRecorder()
		if srv.checkPeer(rec, r) != nil || rec.Code != http.StatusForbidden || !strings.Contains(rec.Body.String(), "refused: ") {
			t.Errorf("%s: not refused with 403 and a reason: %d %q", name, rec.Code, rec.Body)
		}
	}
	before := b.fwd.peerRefused.Get()
	r := forwarded(t, a, client())
	r.Header.Set(PeerClientHeader, "192.0.2.66:4711")
	refused("another client address", r, b)
	r = forwarded(t, a, client())
	r.Header.Set(PeerClientSigHeader, clientSignature(testSecret, "other", r.Header.Get(PeerClientHeader)))
	refused("a client signature of another request", r, b)
	r = forwarded(t, a, client())
	r.Header.Set(PeerClientHeader, "somewhere")
	r.Header.Set(PeerClientSigHeader, clientSignature(testSecret, r.Header.Get(PeerSigHeader), "somewhere"))
	refused("a signed client that is no address", r, b)
	r = forwarded(t, a, client())
	r.Header.Set(PeerSigHeader, strings.Repeat("0", 64))
	refused("a forged signature", r, b)
	r = client()
	r.Header.Set(PeerHeader, "n1")
	refused("an unsigned hop marker", r, b)
	refused("a lone client header", client(), b)
	if n := b.fwd.peerRefused.Get() - before; n != 6 {
		t.Errorf("wasmkeep_cluster_peer_refused_total counted %d refusals, want 6", n)
	}
	refused("a peer request to a node of no cluster", forwarded(t, a, client()), &Server{cfg: Config{}.withDefaults()})
	other := clusterServer("n2", 1<<20)
	other.cfg.Cluster.Secret = []byte("another cluster")
	refused("a request signed for another cluster", forwarded(t, a, client()), other)

	// A node-to-node call that is not a room's keeps its headers for its
	// handler, and may not carry a client address.
	call := httptest.NewRequest("GET", "http://10.0.0.2:8080/cluster/v1/status", nil)
	signPeer(call, testSecret, "n1", time.Now())
	if got := b.checkPeer(httptest.NewRecorder(), call); got == nil || forwardedBy(got) != "n1" || got.Header.Get(PeerSigHeader) == "" {
		t.Errorf("a signed node-to-node call: %v", got)
	}
	call.Header.Set(PeerClientHeader, "127.0.0.1:1")
	call.Header.Set(PeerClientSigHeader, clientSignature(testSecret, call.Header.Get(PeerSigHeader), "127.0.0.1:1"))
	refused("a client address on a node-to-node call", call, b)
	plain := client()
	plain.Header.Del(PeerClientHeader)
	if got := b.checkPeer(httptest.NewRecorder(), plain); got != plain {
		t.Error("a client's request without node-to-node headers was changed")
	}
}

// TestForwardFailures: how forward answers what goes wrong on the way.
func TestForwardFailures(t *testing.T) {
	s := clusterServer("n1", 100)
	req := func(body io.Reader) *http.Request {
		r := httptest.NewRequest("POST", "http://app.example.com/actor/echo/x", body)
		r.RemoteAddr = "203.0.113.9:4711"
		return r
	}
	var reached atomic.Int64
	owner := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		reached.Add(1)
		if _, err := io.ReadAll(r.Body); err != nil {
			return
		}
		if r.URL.Query().Get("moved") != "" {
			w.Header().Set(movedHeader, "1")
			w.WriteHeader(http.StatusServiceUnavailable)
			return
		}
		w.Header().Set("X-Owner", "n2")
		w.WriteHeader(http.StatusCreated)
		io.WriteString(w, "from n2")
	}))
	defer owner.Close()
	ownerRoute := rooms.Route{Kind: rooms.RouteElsewhere, Node: "n2", Address: owner.Listener.Addr().String()}
	count := func(outcome string) uint64 { return s.fwd.forwards["http/"+outcome].Get() }

	rec := httptest.NewRecorder()
	if s.forward(rec, req(strings.NewReader("hello")), ownerRoute) || rec.Code != http.StatusCreated ||
		rec.Body.String() != "from n2" || rec.Header().Get("X-Owner") != "n2" || count("ok") != 1 {
		t.Fatalf("a forward: %d %q %v, ok %d", rec.Code, rec.Body, rec.Header(), count("ok"))
	}

	// Refused connections: unreachable, and nothing answered yet.
	rec = httptest.NewRecorder()
	dead := rooms.Route{Kind: rooms.RouteElsewhere, Node: "n3", Address: testenv.FreeAddr(t)}
	if !s.forward(rec, req(strings.NewReader("hello")), dead) || rec.Body.Len() != 0 || len(rec.Header()) != 0 || count("unreachable") != 1 {
		t.Fatalf("an owner refusing connections: unreachable not reported, or answered %d %q", rec.Code, rec.Body)
	}

	// Over the body limit: 413, the owner never asked when the length is
	// known, and cut off when it is not.
	rec = httptest.NewRecorder()
	s.forward(rec, req(bytes.NewReader(make([]byte, 101))), ownerRoute)
	if rec.Code != http.StatusRequestEntityTooLarge || reached.Load() != 1 {
		t.Fatalf("a body over the limit: %d %q, the owner reached %d times", rec.Code, rec.Body, reached.Load())
	}
	rec = httptest.NewRecorder()
	chunked := req(io.MultiReader(strings.NewReader(strings.Repeat("x", 60)), strings.NewReader(strings.Repeat("y", 60))))
	chunked.ContentLength = -1
	if s.forward(rec, chunked, ownerRoute); rec.Code != http.StatusRequestEntityTooLarge {
		t.Fatalf("a body of unknown length over the limit: %d %q", rec.Code, rec.Body)
	}

	// The owner says the room moved: relayed, counted as bounced.
	rec = httptest.NewRecorder()
	moved := req(nil)
	moved.URL.RawQuery = "moved=1"
	if s.forward(rec, moved, ownerRoute); rec.Code != http.StatusServiceUnavailable || count("bounced") != 1 {
		t.Fatalf("a bounce: %d, counted %d", rec.Code, count("bounced"))
	}

	// An owner that takes the connection and never answers: 504 after
	// the header timeout.
	silent, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer silent.Close()
	go func() {
		for {
			c, err := silent.Accept()
			if err != nil {
				return
			}
			defer c.Close()
		}
	}()
	s.fwd.transport.ResponseHeaderTimeout = 100 * time.Millisecond
	rec = httptest.NewRecorder()
	errorsBefore := count("error")
	if s.forward(rec, req(nil), rooms.Route{Kind: rooms.RouteElsewhere, Node: "n4", Address: silent.Addr().String()}); rec.Code != http.StatusGatewayTimeout || count("error") != errorsBefore+1 {
		t.Fatalf("a silent owner: %d %q, errors %d", rec.Code, rec.Body, count("error"))
	}
	var timed uint64
	s.fwd.seconds["http"].VisitNonZeroBuckets(func(_ string, n uint64) { timed += n })
	if timed != count("ok")+count("bounced") {
		t.Errorf("wasmkeep_cluster_forward_seconds timed %d forwards, want the %d answered", timed, count("ok")+count("bounced"))
	}
}

// TestForwardToAFencedOwnerIsGivenUp: an owner that takes the connection
// and never answers (a paused process) holds a forward only until this
// node's view has its lease fenced; then the client is told to retry, long
// before the header timeout.
func TestForwardToAFencedOwnerIsGivenUp(t *testing.T) {
	s := clusterServer("n1", 100)
	m := &fakeMember{gone: map[string]bool{}}
	s.cfg.Cluster.Member, s.fwd.cluster.Member = m, m
	paused, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer paused.Close()
	accepted := make(chan net.Conn, 1)
	go func() {
		if c, err := paused.Accept(); err == nil {
			accepted <- c
		}
	}()
	go func() {
		c := <-accepted // the request reached the owner, which sits on it
		t.Cleanup(func() { c.Close() })
		m.mu.Lock()
		m.gone["n2"] = true
		m.mu.Unlock()
	}()
	rec := httptest.NewRecorder()
	start := time.Now()
	req := httptest.NewRequest("POST", "http://app.example.com/actor/counter/x", strings.NewReader("+1"))
	s.forward(rec, req, rooms.Route{Kind: rooms.RouteElsewhere, Node: "n2", Address: paused.Addr().String()})
	took := time.Since(start)
	if rec.Code != http.StatusServiceUnavailable || rec.Header().Get("Retry-After") == "" || !strings.Contains(rec.Body.String(), "fenced") {
		t.Fatalf("a forward to a fenced owner: %d %v %q", rec.Code, rec.Header(), rec.Body)
	}
	if got := s.fwd.forwards["http/gone"].Get(); got != 1 {
		t.Errorf("counted %d forwards as gone", got)
	}
	if took >= DefaultForwardHeaderTimeout/2 {
		t.Errorf("given up after %v", took)
	}
}
