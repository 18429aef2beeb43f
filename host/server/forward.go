package server

import (
	"bufio"
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log"
	"log/slog"
	"net"
	"net/http"
	"net/http/httputil"
	"net/netip"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/VictoriaMetrics/metrics"

	"github.com/wasmkeep/wasmkeep/host/rooms"
	"github.com/wasmkeep/wasmkeep/host/socket"
)

// Routing in a cluster (docs/cluster.md, "Routing"). A request for a room
// another node runs is forwarded to that node, and a WebSocket upgrade is
// relayed there (httputil.ReverseProxy relays a 101 answer: the socket
// then lives on the owner, this node only copies bytes). The forwarded
// request keeps the client's Host, so the signature (peer.go) covers it
// and the owner sees the request as the client sent it; it carries the
// address of the client as this node saw it in PeerClientHeader, bound to
// the request's signature by PeerClientSigHeader, and the client's own
// forwarding headers unchanged: the owner counts its per-address limits
// (sockets, bodies) under the address this node would have.
//
// A request that arrives signed by a peer carries the hop marker and is
// never forwarded again: a room that moved meanwhile is answered 503
// with Retry-After, so two nodes never bounce a request between them.
//
// The Origin of an upgrade is checked on both sides, against the same
// Host: by the forwarding node before it forwards (a refused page costs
// the owner nothing), and by the owner, whose --allowed-origins decide for
// the sockets its rooms take. A cluster gives all its nodes the same list.

// Headers of a forwarded room request, besides those of peer.go.
const (
	// PeerClientHeader is the client's address (ip:port) as the
	// forwarding node saw it: its TCP peer.
	PeerClientHeader = "Wasmkeep-Peer-Client"
	// PeerClientSigHeader is hex HMAC-SHA256, under the cluster secret,
	// of the request's PeerSigHeader and PeerClientHeader: an address
	// cannot be changed, nor moved to another signed request.
	PeerClientSigHeader = "Wasmkeep-Peer-Client-Sig"
)

// peerHeaderPrefix starts every node-to-node header. A client's request
// with any header so named is refused, and a forwarded one has them
// stripped before they are set: a client cannot smuggle one through.
const peerHeaderPrefix = "Wasmkeep-Peer"

// movedHeader marks the 503 of a forwarded request for a room its owner
// no longer runs, so that the forwarding node counts it as bounced.
const movedHeader = "X-Wasmkeep-Room-Moved"

// Bounds of forwarding.
const (
	// DefaultForwardDialTimeout bounds connecting to the owner: nodes
	// share a private network, where a connection takes milliseconds; one
	// that takes longer is to a node that is gone.
	DefaultForwardDialTimeout = 2 * time.Second
	// DefaultForwardHeaderTimeout bounds the wait for the owner's answer
	// headers. It is above what a room takes under its own bounds (a
	// wake's wait for a place, 5 s, then an event's CPU time, 10 s); past
	// it the client gets 504.
	DefaultForwardHeaderTimeout = 30 * time.Second
	// DefaultMaxRelays caps the sockets a node without a socket hub
	// relays (a node has one: its MaxSockets caps them).
	DefaultMaxRelays = socket.DefaultMaxSockets
	// maxIdlePerPeer keeps warm connections to each owner, so that a
	// forwarded request rarely pays a connection.
	maxIdlePerPeer = 64
	// maxForwardedHeaderBytes bounds the owner's answer headers, as the
	// node's own listener bounds a client's request headers.
	maxForwardedHeaderBytes = 64 << 10
	// maxClientAddr bounds PeerClientHeader: "[v6%zone]:port" fits.
	maxClientAddr = 64
)

// Labels of the cluster metrics.
var (
	forwardKinds    = []string{"http", "websocket"}
	forwardOutcomes = []string{"ok", "unreachable", "error", "bounced", "gone"}
)

// forwarder is what a cluster member's Server needs to forward and relay.
type forwarder struct {
	cluster   *Cluster
	transport *http.Transport
	maxRelays int64
	linger    time.Duration // see relayConn
	proxyLog  *log.Logger   // what the proxy logs itself (copy errors)
	relays    atomic.Int64  // relayed sockets open now (and upgrades on their way)

	forwards    map[string]*metrics.Counter // by kind + "/" + outcome
	seconds     map[string]*metrics.Histogram
	peerRefused *metrics.Counter
}

// newForwarder makes the forwarder of a cluster member and registers its
// metrics on set. hub, if not nil, gives the cap on relayed sockets.
// logger takes what the proxy logs.
func newForwarder(c *Cluster, hub *socket.Hub, set *metrics.Set, logger *slog.Logger) *forwarder {
	f := &forwarder{cluster: c, maxRelays: DefaultMaxRelays, linger: socket.DefaultCloseTimeout,
		proxyLog: slog.NewLogLogger(logger.Handler(), slog.LevelWarn),
		forwards: map[string]*metrics.Counter{}, seconds: map[string]*metrics.Histogram{}}
	if hub != nil {
		// Relayed sockets cost this node what its own do (a connection, a
		// goroutine pair instead of a room): the same cap bounds them.
		f.maxRelays = int64(hub.Config().MaxSockets)
		// As long as the node's own sockets give a client to close.
		f.linger = hub.Config().CloseTimeout
	}
	f.transport = &http.Transport{
		Proxy:                  nil, // node to node, never through HTTP_PROXY
		DialContext:            (&net.Dialer{Timeout: DefaultForwardDialTimeout, KeepAlive: 15 * time.Second}).DialContext,
		ResponseHeaderTimeout:  DefaultForwardHeaderTimeout,
		MaxIdleConnsPerHost:    maxIdlePerPeer,
		IdleConnTimeout:        idleConnTimeout,
		MaxResponseHeaderBytes: maxForwardedHeaderBytes,
		// The bytes the room answered, as it answered them.
		DisableCompression: true,
	}
	for _, kind := range forwardKinds {
		for _, outcome := range forwardOutcomes {
			f.forwards[kind+"/"+outcome] = set.NewCounter(fmt.Sprintf(`wasmkeep_cluster_forwards_total{kind=%q,outcome=%q}`, kind, outcome))
		}
		f.seconds[kind] = set.NewHistogram(fmt.Sprintf(`wasmkeep_cluster_forward_seconds{kind=%q}`, kind))
	}
	f.peerRefused = set.NewCounter("wasmkeep_cluster_peer_refused_total")
	set.NewGauge("wasmkeep_cluster_relayed_sockets", func() float64 { return float64(f.relays.Load()) })
	return f
}

// idleConnTimeout closes a warm connection to an owner unused this long,
// below the owner's own idle timeout for kept-alive connections (two
// minutes), so that it is this side that closes it.
const idleConnTimeout = 90 * time.Second

// peerKey is the context key of the verified hop marker: the name of the
// node that forwarded the request.
type peerKey struct{}

// forwardedBy is the node that forwarded r to this one, "" for a client's
// request.
func forwardedBy(r *http.Request) string {
	node, _ := r.Context().Value(peerKey{}).(string)
	return node
}

// isPeerHeader reports whether a canonical header name is a node-to-node
// one.
func isPeerHeader(name string) bool { return strings.HasPrefix(name, peerHeaderPrefix) }

// hasPeerHeaders reports whether h carries any node-to-node header: those
// fromPeer looks at, and any other of their prefix.
func hasPeerHeaders(h http.Header) bool {
	for name := range h {
		if isPeerHeader(name) {
			return true
		}
	}
	return false
}

// clientSignature binds a client address to the signature of the request
// that carries it.
func clientSignature(secret []byte, sig, client string) string {
	mac := hmac.New(sha256.New, secret)
	mac.Write([]byte(PeerClientHeader + "\x00" + sig + "\x00" + client))
	return hex.EncodeToString(mac.Sum(nil))
}

// checkPeer runs before anything else is done with a request (its body
// slot is counted under the client address it decides). A request without
// node-to-node headers passes as it is. One with any of them passes only
// if it is a verified peer's: it is then marked with the sending node
// (forwardedBy) and, for a room, given the client's address it carries as
// its RemoteAddr and stripped of those headers, so that the room and the
// per-address limits see the request as the client sent it. Anything else
// is answered 403 with the reason, and nil returned.
func (s *Server) checkPeer(w http.ResponseWriter, r *http.Request) *http.Request {
	if !hasPeerHeaders(r.Header) {
		return r
	}
	var secret []byte
	if s.cfg.Cluster != nil {
		secret = s.cfg.Cluster.Secret
	}
	node, why := verifyPeer(r, secret, time.Now())
	var client netip.AddrPort
	if why == "" {
		client, why = peerClient(r, secret)
	}
	if why != "" {
		if s.fwd != nil {
			s.fwd.peerRefused.Inc()
		}
		textError(w, http.StatusForbidden, "refused: "+why)
		return nil
	}
	r = r.WithContext(context.WithValue(r.Context(), peerKey{}, node))
	if !strings.HasPrefix(r.URL.Path, "/actor/") {
		return r // a node-to-node call: its handler may check the headers again
	}
	if client.IsValid() {
		r.RemoteAddr = client.String()
	}
	r.Header = r.Header.Clone()
	for name := range r.Header {
		if isPeerHeader(name) {
			delete(r.Header, name)
		}
	}
	return r
}

// peerClient reads and checks the client address of a verified peer's
// request: none, or an IP address and port signed with the request.
func peerClient(r *http.Request, secret []byte) (netip.AddrPort, string) {
	client, sig := r.Header.Get(PeerClientHeader), r.Header.Get(PeerClientSigHeader)
	if client == "" && sig == "" {
		return netip.AddrPort{}, ""
	}
	if !strings.HasPrefix(r.URL.Path, "/actor/") {
		return netip.AddrPort{}, PeerClientHeader + " is for forwarded room requests only"
	}
	want := clientSignature(secret, r.Header.Get(PeerSigHeader), client)
	if !hmac.Equal([]byte(want), []byte(sig)) {
		return netip.AddrPort{}, PeerClientSigHeader + " does not match the request and its " + PeerClientHeader
	}
	ap, err := netip.ParseAddrPort(client)
	if len(client) > maxClientAddr || err != nil {
		return netip.AddrPort{}, PeerClientHeader + " is not an IP address and port"
	}
	return ap, ""
}

// routeCluster answers a request for a room in a cluster as the member
// decides (Dispatch): it serves it here, forwards it to the room's node,
// or refuses it with 503 and Retry-After. It reports whether the room is
// here, for the caller to serve; otherwise the request is answered.
func (s *Server) routeCluster(w http.ResponseWriter, r *http.Request, key rooms.Key) bool {
	ctx := r.Context()
	d := s.cfg.Cluster.Member.Dispatch(ctx, key, forwardedBy(r) != "", func(_ context.Context, node, address string) bool {
		return s.forward(w, r, rooms.Route{Kind: rooms.RouteElsewhere, Node: node, Address: address})
	})
	switch {
	case d.Serve:
		return true
	case d.Answered:
	case d.Err != nil:
		s.unroutable(ctx, w, d.Err)
	default:
		if d.Moved {
			// The forwarding node's view was older than this one's: its
			// next request finds the room where it is now.
			w.Header().Set(movedHeader, "1")
		}
		retryLater(w, d.Refused)
	}
	return false
}

// unroutable answers a request whose room's place could not be found.
func (s *Server) unroutable(ctx context.Context, w http.ResponseWriter, err error) {
	if ctx.Err() != nil {
		s.roomError(w, ctx.Err())
		return
	}
	retryLater(w, "cannot tell where the room runs: "+err.Error())
}

// retryLater answers 503 with Retry-After.
func retryLater(w http.ResponseWriter, msg string) {
	w.Header().Set("Retry-After", "1")
	textError(w, http.StatusServiceUnavailable, msg)
}

// forward sends r to the node of route and relays its answer, or, for an
// upgrade, the socket. It reports whether the node could not be reached
// at all (nothing was sent to it, nor written to w): the caller routes
// again.
func (s *Server) forward(w http.ResponseWriter, r *http.Request, route rooms.Route) (unreachable bool) {
	f := s.fwd
	ctx, cancel := context.WithCancel(r.Context())
	defer cancel()
	a := &attempt{f: f, node: route.Node, kind: "http", log: s.log, cancel: cancel}
	if isUpgrade(r) {
		a.kind = "websocket"
		if f.relays.Add(1) > f.maxRelays {
			f.relays.Add(-1)
			w.Header().Set("Retry-After", "5")
			textError(w, http.StatusTooManyRequests, fmt.Sprintf("this node relays as many sockets to other nodes as it may (%d); retry later", f.maxRelays))
			return false
		}
		defer f.relays.Add(-1) // the proxy returns when the socket ends
	}
	if r.ContentLength > s.cfg.MaxRequestBody {
		textError(w, http.StatusRequestEntityTooLarge, fmt.Sprintf("request body over the limit of %d bytes", s.cfg.MaxRequestBody))
		return false
	}
	in := r.WithContext(ctx)
	if r.Body != nil && r.Body != http.NoBody {
		a.body = &countedBody{r: http.MaxBytesReader(w, r.Body, s.cfg.MaxRequestBody)}
		in.Body = a.body
	}
	rw := &relayWriter{ResponseWriter: w, linger: f.linger}
	proxy := &httputil.ReverseProxy{
		Rewrite: func(pr *httputil.ProxyRequest) {
			f.rewrite(pr, route.Address, time.Now())
		},
		Transport:    a,
		ErrorHandler: func(w http.ResponseWriter, _ *http.Request, err error) { a.failed(w, rw, err, s.cfg.MaxRequestBody) },
		ErrorLog:     f.proxyLog,
	}
	proxy.ServeHTTP(rw, in)
	return a.unreachable
}

// rewrite makes the request to send to the owner at address: the
// client's, with its Host, path and headers, less hop-by-hop ones (the
// proxy drops those) and any node-to-node one, plus the client's
// forwarding headers as they came (the proxy drops those; the owner reads
// X-Forwarded-For as this node would), signed as this node's, with the
// client's address.
func (f *forwarder) rewrite(pr *httputil.ProxyRequest, address string, now time.Time) {
	out, in := pr.Out, pr.In
	out.URL.Scheme, out.URL.Host = "http", address
	out.Host = in.Host
	if out.Host == "" {
		out.Host = address // what the transport sends, and so what the owner checks
	}
	for name := range out.Header {
		if isPeerHeader(name) {
			delete(out.Header, name)
		}
	}
	for _, name := range forwardingHeaders {
		if v, ok := in.Header[name]; ok {
			out.Header[name] = v
		}
	}
	secret := f.cluster.Secret
	signPeer(out, secret, f.cluster.Node, now)
	if ap, err := netip.ParseAddrPort(in.RemoteAddr); err == nil {
		client := ap.String()
		out.Header.Set(PeerClientHeader, client)
		out.Header.Set(PeerClientSigHeader, clientSignature(secret, out.Header.Get(PeerSigHeader), client))
	}
}

// attempt is one forward: the proxy's transport (it times and counts the
// exchange) and its error handler.
type attempt struct {
	f    *forwarder
	node string
	kind string
	body *countedBody // nil without a body
	log  *slog.Logger

	// cancel ends the forward (the request's context), for a node found
	// gone while it was answering.
	cancel context.CancelFunc

	// Set by RoundTrip, which the proxy calls on the handler's goroutine.
	unreachable bool
	// gone: the owner's lease turned fenced or released in this node's
	// view while the forward waited for its answer.
	gone atomic.Bool
}

// goneCheck is how often a forward waiting for its answer asks this
// node's view (no request) whether the owner was fenced meanwhile: a
// paused owner still accepts connections, and would hold the request
// until the header timeout.
const goneCheck = 250 * time.Millisecond

// watchOwner gives the forward up once the owner's lease is fenced or
// released in this node's view; it returns when done is closed.
func (a *attempt) watchOwner(done <-chan struct{}) {
	m := a.f.cluster.Member
	if m == nil {
		return
	}
	t := time.NewTicker(goneCheck)
	defer t.Stop()
	for {
		select {
		case <-done:
			return
		case <-t.C:
			if m.Gone(a.node) {
				a.gone.Store(true)
				a.cancel()
				return
			}
		}
	}
}

// RoundTrip sends the request to the owner, and counts and times it.
func (a *attempt) RoundTrip(req *http.Request) (*http.Response, error) {
	start := time.Now()
	done := make(chan struct{})
	go a.watchOwner(done)
	res, err := a.f.transport.RoundTrip(req)
	close(done)
	if err != nil && a.gone.Load() {
		a.f.forwards[a.kind+"/gone"].Inc()
		return nil, err
	}
	if err != nil {
		var op *net.OpError
		// Only a connection that never was means the node is gone: once
		// anything was sent, or the client gave up, it is this request's
		// failure. The body is then unread and can go elsewhere.
		if errors.As(err, &op) && op.Op == "dial" && req.Context().Err() == nil && a.body.read() == 0 {
			a.unreachable = true
			a.f.forwards[a.kind+"/unreachable"].Inc()
		} else {
			a.f.forwards[a.kind+"/error"].Inc()
		}
		return nil, err
	}
	a.f.seconds[a.kind].UpdateDuration(start)
	outcome := "ok"
	if res.StatusCode == http.StatusServiceUnavailable && res.Header.Get(movedHeader) != "" {
		outcome = "bounced"
	}
	a.f.forwards[a.kind+"/"+outcome].Inc()
	return res, nil
}

// failed answers a forward that failed, unless the node was unreachable
// (the caller routes again) or the connection is no longer HTTP (the
// socket was relayed: a copy error ends it).
func (a *attempt) failed(w http.ResponseWriter, rw *relayWriter, err error, limit int64) {
	var tooBig *http.MaxBytesError
	var timeout net.Error
	bodyErr := a.body.err()
	switch {
	case a.unreachable:
	case a.gone.Load() && !rw.hijacked:
		// The owner was fenced: it applies nothing any more, so the
		// request can be sent again, to wherever the room goes.
		retryLater(w, "the room's node "+a.node+" was fenced while it held the request; retry")
	case rw.hijacked:
		a.log.Debug("relayed socket ended", "node", a.node, "err", err)
	case errors.As(bodyErr, &tooBig):
		textError(w, http.StatusRequestEntityTooLarge, fmt.Sprintf("request body over the limit of %d bytes", limit))
	case errors.Is(bodyErr, errBodyTimeout):
		w.Header().Set("Connection", "close")
		textError(w, http.StatusRequestTimeout, "reading the request body: "+bodyErr.Error())
	case bodyErr != nil:
		textError(w, http.StatusBadRequest, "reading the request body: "+bodyErr.Error())
	case errors.Is(err, context.Canceled):
		textError(w, http.StatusServiceUnavailable, "request cancelled")
	case errors.As(err, &timeout) && timeout.Timeout():
		a.log.Warn("forward timed out", "node", a.node, "err", err)
		textError(w, http.StatusGatewayTimeout, "the room's node "+a.node+" did not answer in time")
	default:
		a.log.Warn("forward failed", "node", a.node, "err", err)
		textError(w, http.StatusBadGateway, "forwarding to the room's node "+a.node+" failed")
	}
}

// countedBody is a forwarded request's body: it remembers how much of it
// was read and how reading it failed. The transport reads it on a
// goroutine of its own.
type countedBody struct {
	r    io.ReadCloser
	mu   sync.Mutex
	n    int64
	fail error
}

func (b *countedBody) Read(p []byte) (int, error) {
	k, err := b.r.Read(p)
	b.mu.Lock()
	b.n += int64(k)
	if err != nil && !errors.Is(err, io.EOF) {
		b.fail = err
	}
	b.mu.Unlock()
	return k, err
}

func (b *countedBody) Close() error { return b.r.Close() }

// read is the bytes read so far (0 for no body).
func (b *countedBody) read() int64 {
	if b == nil {
		return 0
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.n
}

// err is how reading the body failed (nil for no body).
func (b *countedBody) err() error {
	if b == nil {
		return nil
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.fail
}

// relayWriter notes whether the proxy took the connection over for a
// relayed socket (the error handler must not answer on it then), and
// hands it over as a relayConn.
type relayWriter struct {
	http.ResponseWriter
	linger   time.Duration
	hijacked bool
}

// Hijack implements http.Hijacker, which the proxy asks for through
// http.ResponseController.
func (w *relayWriter) Hijack() (net.Conn, *bufio.ReadWriter, error) {
	w.hijacked = true
	c, brw, err := http.NewResponseController(w.ResponseWriter).Hijack()
	if err != nil {
		return nil, nil, err
	}
	return relayConn{Conn: c, linger: w.linger}, brw, nil
}

// Unwrap gives http.ResponseController the writer underneath.
func (w *relayWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// relayConn is a relayed socket's client connection. When the owner's
// side ends, the proxy half-closes this one (CloseWrite) and waits for
// the client to close its side: a client that never does would hold the
// relay, and its slot, for ever. So the client then has linger to close.
type relayConn struct {
	net.Conn
	linger time.Duration
}

// CloseWrite ends what the client is sent and gives it linger to close.
func (c relayConn) CloseWrite() error {
	_ = c.Conn.SetReadDeadline(time.Now().Add(c.linger))
	if cw, ok := c.Conn.(interface{ CloseWrite() error }); ok {
		return cw.CloseWrite()
	}
	return c.Conn.Close()
}

// ReadFrom keeps the connection's own copy (splice on TCP) for what the
// owner sends.
func (c relayConn) ReadFrom(r io.Reader) (int64, error) {
	if rf, ok := c.Conn.(io.ReaderFrom); ok {
		return rf.ReadFrom(r)
	}
	return io.Copy(struct{ io.Writer }{c.Conn}, r)
}
