// Package server is a node's HTTP surface: rooms at /actor/<class>/<name>
// (requests and WebSocket upgrades), the admin API under /admin, /metrics,
// /healthz, /readyz and pprof, and in a cluster the node-to-node calls under
// /cluster/v1/ (cluster_admin.go). It turns HTTP into room events and room results back
// into HTTP; the work itself happens in the rooms, classes and socket
// packages.
package server

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/pprof"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/VictoriaMetrics/metrics"

	"github.com/wasmkeep/wasmkeep/abi"
	"github.com/wasmkeep/wasmkeep/host/classes"
	"github.com/wasmkeep/wasmkeep/host/engine"
	"github.com/wasmkeep/wasmkeep/host/fronts"
	"github.com/wasmkeep/wasmkeep/host/rooms"
	"github.com/wasmkeep/wasmkeep/host/secrets"
	"github.com/wasmkeep/wasmkeep/host/socket"
	"github.com/wasmkeep/wasmkeep/host/store"
)

// Config holds the HTTP surface's settings; a zero field means its Default*
// constant (internal/limits has the convention).
type Config struct {
	// AdminToken, if set, lets clients off loopback use the admin API with
	// "Authorization: Bearer <token>". Without it the admin API answers
	// loopback clients only.
	AdminToken string
	// AdminAddrs are the addresses the admin API is served on, as
	// configured and as bound (the node fills them in): their hosts are
	// names a request's Host header may give (none: loopback only).
	AdminAddrs []string
	// AdminHosts are further names (or addresses) clients reach the admin
	// API by, such as the node's DNS name or a proxy's.
	AdminHosts []string
	// SeparateAdmin takes the admin API, the dashboard, /metrics and pprof
	// off ServeHTTP (the rooms' listener) and serves them from
	// AdminHandler, for a listener of their own.
	SeparateAdmin bool
	// MaxRequestBody caps a request body sent to a room (default
	// DefaultMaxRequestBody).
	MaxRequestBody int64
	// BodyTimeout is the time a request body has to arrive whole, from the
	// end of its headers (default DefaultBodyTimeout); see body.go.
	BodyTimeout time.Duration
	// UploadMinRate is the rate, in bytes a second, an admin upload's body
	// must keep after its first BodyTimeout (default DefaultUploadMinRate).
	UploadMinRate int
	// MaxBodiesPerIP caps the request bodies one client address may be
	// sending at once (default DefaultMaxBodiesPerIP).
	MaxBodiesPerIP int
	// AllowedOrigins are the origins, besides the node's own, whose pages
	// may open WebSockets to rooms (see origins.go; ValidOrigins checks
	// them). AnyOrigin allows all.
	AllowedOrigins []string
	// MaxRoomName caps a room name in bytes (DefaultMaxRoomName).
	MaxRoomName int
	// Cluster, if set, makes the node a member of a cluster (cluster.go).
	Cluster *Cluster
	// BuildErrors, if set, are the build errors of a dev loop (`wasmkeep
	// dev`), shown on the pages of the rooms of their class (dev.go).
	BuildErrors *BuildErrors
	// Fronts, if set, serve the requests under the fronts' path prefixes
	// (fronts.go); without them such a request is answered 404.
	Fronts *fronts.Fronts
	// Secrets, if set, are the app's secrets, which the admin API puts,
	// lists, removes and rotates (secrets.go). SecretsProblem, if set, is
	// nil while the node can open them; else rooms and fronts are answered
	// 503 with its reason, and /readyz says it.
	Secrets        *secrets.Store
	SecretsProblem func() error
	Logger         *slog.Logger
}

func (c Config) withDefaults() Config {
	if c.MaxRequestBody <= 0 {
		c.MaxRequestBody = DefaultMaxRequestBody
	}
	if c.BodyTimeout <= 0 {
		c.BodyTimeout = DefaultBodyTimeout
	}
	if c.UploadMinRate <= 0 {
		c.UploadMinRate = DefaultUploadMinRate
	}
	if c.MaxBodiesPerIP <= 0 {
		c.MaxBodiesPerIP = DefaultMaxBodiesPerIP
	}
	if c.MaxRoomName <= 0 {
		c.MaxRoomName = DefaultMaxRoomName
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	return c
}

// DefaultMaxRoomName is the longest name a room's store keys can hold
// once it is escaped.
const DefaultMaxRoomName = store.MaxNameLen

// Server is the node's HTTP surface: ServeHTTP serves its listener, and
// AdminHandler its admin listener when Config.SeparateAdmin gives it one.
type Server struct {
	cfg     Config
	classes *classes.Registry
	rooms   *rooms.Manager
	hub     *socket.Hub
	metrics *metrics.Set
	mux     *http.ServeMux
	// adminMux serves the admin listener with Config.SeparateAdmin; nil
	// when mux serves the admin API.
	adminMux *http.ServeMux
	log      *slog.Logger

	requests map[string]*metrics.Counter
	guardian adminGuard
	bodies   *bodySlots
	bodyMet  bodyMetrics
	origins  origins
	// originRefused counts upgrades refused for their Origin.
	originRefused *metrics.Counter
	// fwd forwards and relays to other nodes: nil without Config.Cluster.
	fwd *forwarder

	// The dashboard (dashboard.go).
	started   time.Time
	series    *series
	closeOnce sync.Once
	sweeps    sync.WaitGroup // the version sweeper (versions.go)
}

// New builds the handler. set holds the node's metrics; /metrics writes it
// along with the Go runtime's.
func New(cfg Config, reg *classes.Registry, mgr *rooms.Manager, hub *socket.Hub, set *metrics.Set) *Server {
	cfg = cfg.withDefaults()
	s := &Server{cfg: cfg, classes: reg, rooms: mgr, hub: hub, metrics: set, mux: http.NewServeMux(), log: cfg.Logger,
		requests: map[string]*metrics.Counter{}, guardian: newAdminGuard(cfg), bodies: newBodySlots(cfg.MaxBodiesPerIP),
		started: time.Now(), series: newSeries(int(seriesWindow / seriesInterval))}
	for _, code := range []string{"2xx", "3xx", "4xx", "5xx"} {
		s.requests[code] = set.NewCounter(`wasmkeep_http_requests_total{code="` + code + `"}`)
	}
	s.bodyMet = bodyMetrics{
		timeouts: set.NewCounter("wasmkeep_http_body_timeouts_total"),
		refused:  set.NewCounter("wasmkeep_http_bodies_refused_total"),
	}
	set.NewGauge("wasmkeep_http_bodies_receiving", func() float64 { return float64(s.bodies.receiving.Load()) })
	s.origins, s.originRefused = newOrigins(cfg.AllowedOrigins), set.NewCounter("wasmkeep_http_origin_refused_total")
	if cfg.Cluster != nil {
		s.fwd = newForwarder(cfg.Cluster, hub, set, cfg.Logger)
	}
	s.mux.HandleFunc("/actor/{class}/{name}", s.actor)
	s.mux.HandleFunc("/actor/{class}/{name}/{rest...}", s.actor)
	s.mux.HandleFunc("GET /healthz", healthz)
	s.mux.HandleFunc("GET /readyz", s.readyz)
	// GET / exactly is the landing page, on loopback only (landing.go).
	// Every other path none of the node's routes takes is a front's, if
	// one holds it, or a bare 404 (fronts.go): a more specific pattern
	// always wins, so no front's path shadows the node's.
	s.mux.HandleFunc("GET /{$}", s.landing)
	s.mux.HandleFunc("/", s.front)
	admin := s.mux
	if cfg.SeparateAdmin {
		s.adminMux = http.NewServeMux()
		admin = s.adminMux
		elsewhere := func(w http.ResponseWriter, _ *http.Request) {
			textError(w, http.StatusNotFound, "not found: this node serves its admin API, /metrics and pprof on its --admin-listen address")
		}
		for _, p := range []string{"/admin", "/admin/", "/metrics", "/debug/pprof/"} {
			s.mux.HandleFunc(p, elsewhere)
		}
		admin.HandleFunc("GET /healthz", healthz)
		admin.HandleFunc("GET /readyz", s.readyz)
		admin.HandleFunc("/", func(w http.ResponseWriter, _ *http.Request) {
			textError(w, http.StatusNotFound, "not found: this is the node's admin listener (/admin/, /metrics, /debug/pprof/); rooms are on its --listen address")
		})
	}
	s.adminRoutes(admin)
	s.clusterRoutes(admin)
	s.series.stop, s.series.done = make(chan struct{}), make(chan struct{})
	go s.sampler()
	s.sweeps.Add(1)
	go s.versionSweeper()
	return s
}

// adminRoutes adds the admin API, /metrics and pprof to mux.
func (s *Server) adminRoutes(mux *http.ServeMux) {
	mux.Handle("GET /metrics", s.admin(http.HandlerFunc(s.writeMetrics)))
	mux.Handle("GET /admin/classes", s.admin(http.HandlerFunc(s.listClasses)))
	mux.Handle("GET /admin/classes/{name}", s.admin(http.HandlerFunc(s.getClass)))
	mux.Handle("PUT /admin/classes/{name}", s.admin(http.HandlerFunc(s.putClass)))
	mux.Handle("DELETE /admin/classes/{name}", s.admin(http.HandlerFunc(s.deleteClass)))
	mux.Handle("GET /admin/rooms", s.admin(http.HandlerFunc(s.listRooms)))
	mux.Handle("POST /admin/rooms/{class}/{name}/hibernate", s.admin(http.HandlerFunc(s.hibernateRoom)))
	mux.Handle("POST /admin/rooms/{class}/{name}/pin", s.admin(s.pinRoom(true)))
	mux.Handle("POST /admin/rooms/{class}/{name}/unpin", s.admin(s.pinRoom(false)))
	mux.Handle("GET /admin/rooms/{class}/{name}", s.admin(http.HandlerFunc(s.inspectRoom)))
	mux.Handle("DELETE /admin/rooms/{class}/{name}", s.admin(http.HandlerFunc(s.deleteRoom)))
	// An export checkpoints a running room: a POST, as everything that has
	// an effect.
	mux.Handle("POST /admin/rooms/{class}/{name}/export", s.admin(http.HandlerFunc(s.exportRoom)))
	mux.Handle("POST /admin/rooms/import", s.admin(http.HandlerFunc(s.importRoom)))
	s.versionRoutes(mux)
	if s.cfg.Secrets != nil {
		s.secretRoutes(mux)
	}
	s.dashboardRoutes(mux)
	mux.Handle("/debug/pprof/", s.admin(http.HandlerFunc(pprof.Index)))
	mux.Handle("/debug/pprof/profile", s.admin(http.HandlerFunc(pprof.Profile)))
	mux.Handle("/debug/pprof/trace", s.admin(http.HandlerFunc(pprof.Trace)))
}

// healthz is liveness: the process serves HTTP. It says nothing of
// whether the node should be sent traffic (readyz does): a node that
// joins, drains or stops is alive, and restarting it would not help.
func healthz(w http.ResponseWriter, _ *http.Request) {
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	io.WriteString(w, "ok\n")
}

// readyz is readiness, for load balancers and readiness probes: "ok"
// while the node can take traffic, else 503 and why not. A single node is
// ready while it serves, until a stop begins (it then hibernates its rooms
// and refuses new work); a cluster member also needs a valid lease (a node
// that has not joined yet can run no room) and must not be draining.
func (s *Server) readyz(w http.ResponseWriter, _ *http.Request) {
	if err := s.ready(); err != nil {
		textError(w, http.StatusServiceUnavailable, "not ready: "+err.Error())
		return
	}
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	io.WriteString(w, "ok\n")
}

// ready is nil while the node can take traffic, else why not (readyz).
func (s *Server) ready() error {
	// First: a stopping cluster member still holds a valid lease while it
	// hibernates its rooms.
	if s.rooms.Stopping() {
		return errors.New("stopping")
	}
	if s.cfg.SecretsProblem != nil {
		if err := s.cfg.SecretsProblem(); err != nil {
			return err
		}
	}
	if s.cfg.Cluster != nil {
		return s.cfg.Cluster.Member.Ready()
	}
	return nil
}

// ServeHTTP serves the node's listener: rooms, /healthz, /readyz, and
// the admin API unless Config.SeparateAdmin gives it a listener of its
// own.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	s.serve(s.mux, w, r)
}

// AdminHandler serves the admin listener of a Server with
// Config.SeparateAdmin: the admin API, the dashboard, /metrics, pprof,
// /healthz and /readyz. Without SeparateAdmin it is nil: ServeHTTP serves
// the admin API.
func (s *Server) AdminHandler() http.Handler {
	if s.adminMux == nil {
		return nil
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { s.serve(s.adminMux, w, r) })
}

func (s *Server) serve(mux *http.ServeMux, w http.ResponseWriter, r *http.Request) {
	sw := &statusWriter{ResponseWriter: w}
	defer func() {
		if sw.status >= 200 && sw.status < 600 {
			s.requests[strconv.Itoa(sw.status/100)+"xx"].Inc()
		}
	}()
	// Node-to-node headers first: a forwarded request's body counts
	// under its client's address (forward.go).
	if r = s.checkPeer(sw, r); r == nil {
		return
	}
	if forwardedBy(r) == "" {
		// Only a front's hand-over makes these (fronts.go).
		stripFrontHeaders(r.Header)
	}
	// An upgrade's connection is the socket layer's, deadlines included.
	if r.ContentLength != 0 && !isUpgrade(r) {
		body := s.receive(sw, r)
		if body == nil {
			return
		}
		defer body.end()
		r.Body = body
	}
	mux.ServeHTTP(sw, r)
}

// statusWriter remembers the status for the request counter. It passes
// Hijack through, which WebSocket upgrades need.
type statusWriter struct {
	http.ResponseWriter
	status int
}

func (w *statusWriter) WriteHeader(code int) {
	if w.status == 0 {
		w.status = code
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *statusWriter) Write(b []byte) (int, error) {
	if w.status == 0 {
		w.status = http.StatusOK
	}
	return w.ResponseWriter.Write(b)
}

func (w *statusWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

func (s *Server) writeMetrics(w http.ResponseWriter, _ *http.Request) {
	w.Header().Set("Content-Type", "text/plain; version=0.0.4")
	s.metrics.WritePrometheus(w)
	metrics.WriteProcessMetrics(w)
}

// roomKey reads and checks the class and room name of a room URL.
func (s *Server) roomKey(r *http.Request) (rooms.Key, string, error) {
	key, err := s.checkRoom(r.PathValue("class"), r.PathValue("name"))
	if err != nil {
		return rooms.Key{}, "", err
	}
	// The path below the room, as the client escaped it.
	below := "/"
	segs := strings.SplitN(r.URL.EscapedPath(), "/", 5) // "", "actor", class, name, rest
	if len(segs) == 5 {
		below += segs[4]
	}
	return key, below, nil
}

// checkRoom checks a room's class and name, from a URL or a JSON body.
func (s *Server) checkRoom(class, name string) (rooms.Key, error) {
	if err := rooms.CheckKey(class, name, s.cfg.MaxRoomName); err != nil {
		return rooms.Key{}, err
	}
	return rooms.Key{Class: class, Name: name}, nil
}

func (s *Server) actor(w http.ResponseWriter, r *http.Request) {
	key, below, err := s.roomKey(r)
	if err != nil {
		textError(w, http.StatusBadRequest, err.Error())
		return
	}
	if s.refusedOrigin(w, r) {
		return
	}
	// Where the room runs comes first: another node's room costs this one
	// no class lookup, no compile and no socket slot.
	if !s.routeHere(w, r, key) {
		return
	}
	if s.secretsProblem(w) {
		return
	}
	if s.isFront(w, r, key.Class) {
		return
	}
	class, err := s.classes.Current(r.Context(), key.Class)
	if err != nil {
		if msg := s.cfg.BuildErrors.Get(key.Class); msg != "" && errors.Is(err, classes.ErrUnknownClass) && !isUpgrade(r) {
			buildErrorPage(w, key.Class, msg)
			return
		}
		s.roomError(w, err)
		return
	}
	if isUpgrade(r) {
		if below == channelPath {
			s.upgradeChannels(w, r, key, below, class)
			return
		}
		s.upgrade(w, r, key, below, class)
		return
	}
	if !class.Handles(engine.EventRequest) {
		textError(w, http.StatusNotFound, "this class does not handle HTTP requests")
		return
	}
	req, ok := s.guestRequest(w, r, below, headersOf(r.Header, r.Host))
	if !ok {
		return
	}
	resp, err := s.rooms.Request(r.Context(), key, abi.AppendRequest(nil, req))
	if err != nil {
		s.roomError(w, err)
		return
	}
	if msg := s.cfg.BuildErrors.Get(key.Class); msg != "" {
		resp = withBuildError(resp, msg)
	}
	writeResponse(w, resp)
}

// refusedOrigin answers 403 to an upgrade from a page of an origin the
// node does not open its WebSockets to (origins.go), and reports whether
// it did.
func (s *Server) refusedOrigin(w http.ResponseWriter, r *http.Request) bool {
	if !isUpgrade(r) || s.origins.allow(r) {
		return false
	}
	s.originRefused.Inc()
	textError(w, http.StatusForbidden, "WebSockets to this node are not open to pages of the origin "+r.Header.Get("Origin")+" (--allowed-origins)")
	return true
}

// guestRequest reads r's body (at most MaxRequestBody) and makes the
// request a guest gets, with path and headers; it answers r itself, and
// reports false, for a body it cannot read or too many header lines.
func (s *Server) guestRequest(w http.ResponseWriter, r *http.Request, path string, headers []abi.Header) (*abi.Request, bool) {
	body, status, err := readBody(w, r, s.cfg.MaxRequestBody)
	switch status {
	case 0:
	case http.StatusRequestEntityTooLarge:
		textError(w, status, fmt.Sprintf("request body over the limit of %d bytes", s.cfg.MaxRequestBody))
		return nil, false
	default:
		textError(w, status, "reading the request body: "+err.Error())
		return nil, false
	}
	if len(headers) > abi.MaxHeaderCount {
		textError(w, http.StatusRequestHeaderFieldsTooLarge, fmt.Sprintf("more than %d header lines", abi.MaxHeaderCount))
		return nil, false
	}
	return &abi.Request{Method: r.Method, Path: path, Query: r.URL.RawQuery, Headers: headers, Body: body}, true
}

// routeHere asks the placement where the room runs and answers the
// request itself unless it is here. In a cluster, routeCluster forwards
// it to the room's node, or waits for a room whose node stopped
// answering (forward.go). A node of no cluster answers 503: while nobody
// may run the room yet, and, for a room another node runs, naming that
// node in X-Wasmkeep-Node.
func (s *Server) routeHere(w http.ResponseWriter, r *http.Request, key rooms.Key) bool {
	if s.fwd != nil && s.cfg.Cluster.Member != nil {
		return s.routeCluster(w, r, key)
	}
	route, err := s.rooms.Route(r.Context(), key)
	switch {
	case err != nil:
		s.unroutable(r.Context(), w, err)
	case route.Kind == rooms.RouteHere:
		return true
	case route.Kind == rooms.RouteWait:
		w.Header().Set("Retry-After", "1")
		textError(w, http.StatusServiceUnavailable, "the room's node stopped answering; the room is free to run elsewhere soon")
	default:
		w.Header().Set("X-Wasmkeep-Node", route.Node)
		w.Header().Set("Retry-After", "1")
		textError(w, http.StatusServiceUnavailable, fmt.Sprintf("the room runs on node %s (%s); this node does not forward to it", route.Node, route.Address))
	}
	return false
}

// roomError maps an event's failure to an HTTP answer.
func (s *Server) roomError(w http.ResponseWriter, err error) {
	var crash *rooms.CrashError
	switch {
	case errors.Is(err, classes.ErrUnknownClass):
		textError(w, http.StatusNotFound, err.Error())
	case errors.Is(err, rooms.ErrNotDurable) && store.IsOutOfSpace(err):
		// The event was undone: nothing about the request was wrong.
		textError(w, http.StatusInsufficientStorage, err.Error())
	case errors.Is(err, rooms.ErrNotDurable):
		w.Header().Set("Retry-After", "5")
		textError(w, http.StatusServiceUnavailable, err.Error())
	case errors.As(err, &crash), errors.Is(err, rooms.ErrNoResponse):
		textError(w, http.StatusInternalServerError, err.Error())
	case errors.Is(err, rooms.ErrOverloaded), errors.Is(err, rooms.ErrNodeFull):
		w.Header().Set("Retry-After", "1")
		textError(w, http.StatusServiceUnavailable, err.Error())
	case errors.Is(err, rooms.ErrElsewhere):
		// The room was taken between routing and waking: a retry is
		// routed to it.
		w.Header().Set("Retry-After", "1")
		textError(w, http.StatusServiceUnavailable, err.Error())
	case errors.Is(err, rooms.ErrStopping):
		w.Header().Set("Retry-After", "5")
		textError(w, http.StatusServiceUnavailable, err.Error())
	case errors.Is(err, rooms.ErrUnavailable):
		textError(w, http.StatusServiceUnavailable, err.Error())
	case errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		textError(w, http.StatusServiceUnavailable, "request cancelled")
	default:
		s.log.Error("room request failed", "err", err)
		textError(w, http.StatusInternalServerError, err.Error())
	}
}

// hopByHop are headers that describe one connection, not the message; a
// room neither sees nor sets them.
var hopByHop = map[string]bool{
	"Connection": true, "Keep-Alive": true, "Proxy-Connection": true, "Te": true, "Trailer": true,
	"Transfer-Encoding": true, "Upgrade": true, "Content-Length": true,
}

func headersOf(h http.Header, host string) []abi.Header {
	out := make([]abi.Header, 0, len(h)+1)
	out = append(out, abi.Header{Name: "Host", Value: host})
	for name, values := range h {
		if hopByHop[name] {
			continue
		}
		for _, v := range values {
			out = append(out, abi.Header{Name: name, Value: v})
		}
	}
	return out
}

func writeResponse(w http.ResponseWriter, resp *abi.Response) {
	status := resp.Status
	if status < 200 || status > 599 {
		textError(w, http.StatusBadGateway, fmt.Sprintf("the room answered with an invalid status %d", status))
		return
	}
	h := w.Header()
	for _, hd := range resp.Headers {
		name := http.CanonicalHeaderKey(hd.Name)
		if hopByHop[name] || !validHeader(hd.Name, hd.Value) {
			continue
		}
		h.Add(name, hd.Value)
	}
	h.Set("Content-Length", strconv.Itoa(len(resp.Body)))
	w.WriteHeader(status)
	_, _ = w.Write(resp.Body)
}

// validHeader drops header lines a guest could use to split a response.
func validHeader(name, value string) bool {
	if name == "" || strings.ContainsAny(name, " \t\r\n:") {
		return false
	}
	return !strings.ContainsAny(value, "\r\n\x00")
}

func textError(w http.ResponseWriter, status int, msg string) {
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(status)
	io.WriteString(w, forClient(msg)+"\n")
}

func jsonError(w http.ResponseWriter, status int, msg string) {
	writeJSON(w, status, map[string]string{"error": forClient(msg)})
}

// forClient is an error's message as a client reads it: without the
// package prefix the sentinel errors of the room and class layers begin
// with ("rooms: no such room"), which tells a log's reader where an error
// came from and a client nothing.
func forClient(msg string) string {
	if pkg, rest, ok := strings.Cut(msg, ": "); ok && clientPrefixes[pkg] {
		return rest
	}
	return msg
}

// clientPrefixes are the packages whose errors a response carries.
var clientPrefixes = map[string]bool{"rooms": true, "classes": true, "engine": true, "cluster": true, "fronts": true}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	_ = enc.Encode(v)
}
