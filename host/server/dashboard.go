package server

import (
	"bytes"
	"crypto/sha256"
	_ "embed"
	"encoding/base64"
	"net/http"
	"runtime"
	"runtime/debug"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/wasmkeep/wasmkeep/host/rooms"
)

// The dashboard: one page at /admin/ (HTML with its CSS and script inline,
// nothing loaded from elsewhere) that polls three admin endpoints:
//
//	GET /admin/overview   node facts, room and socket counts, totals, classes
//	GET /admin/rooms      every room with its facts
//	GET /admin/series     per-second samples of the node's counters, for
//	                      the last seriesWindow (?since=<unix ms> for the
//	                      newer ones only)
//	GET /admin/cluster    in a cluster (Overview.ClusterNode set): every
//	                      node's lease, drain, holds and pending releases
//	                      (cluster_admin.go), for the Cluster panel, polled
//	                      on its own since it waits for the peers
//
// The page and its endpoints follow the admin rules. A browser cannot send
// a bearer token, so on GET requests the admin API also takes the token as
// the password of HTTP Basic authentication (any user name); the page
// asks the browser to prompt for it. Other methods still need the bearer
// token: a browser attaches Basic credentials to requests other sites make
// it send, and those must not change anything.

//go:embed dashboard/index.html
var dashboardHTML []byte

// dashboardCSP lets the page run its own inline script and style and talk
// to this node, and nothing else.
var dashboardCSP = func() string {
	hash := func(open, close string) string {
		_, rest, ok := bytes.Cut(dashboardHTML, []byte(open))
		body, _, ok2 := bytes.Cut(rest, []byte(close))
		if !ok || !ok2 {
			panic("server: the dashboard has no " + open + " element")
		}
		sum := sha256.Sum256(body)
		return "'sha256-" + base64.StdEncoding.EncodeToString(sum[:]) + "'"
	}
	return "default-src 'none'; script-src " + hash("<script>", "</script>") +
		"; style-src " + hash("<style>", "</style>") +
		"; connect-src 'self'; img-src data:; base-uri 'none'; form-action 'none'; frame-ancestors 'none'"
}()

// Samples of the charts.
const (
	seriesInterval = time.Second
	seriesWindow   = 10 * time.Minute
)

func (s *Server) dashboardRoutes(mux *http.ServeMux) {
	mux.Handle("GET /admin/{$}", s.adminPage(http.HandlerFunc(s.dashboard)))
	redirect := http.RedirectHandler("/admin/", http.StatusFound)
	mux.Handle("GET /admin", redirect)
	mux.Handle("GET /admin/dashboard", redirect)
	mux.Handle("GET /admin/overview", s.admin(http.HandlerFunc(s.overview)))
	mux.Handle("GET /admin/series", s.admin(http.HandlerFunc(s.getSeries)))
}

func (s *Server) dashboard(w http.ResponseWriter, _ *http.Request) {
	h := w.Header()
	h.Set("Content-Type", "text/html; charset=utf-8")
	h.Set("Content-Security-Policy", dashboardCSP)
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("Referrer-Policy", "no-referrer")
	h.Set("Cache-Control", "no-cache")
	h.Set("Content-Length", strconv.Itoa(len(dashboardHTML)))
	_, _ = w.Write(dashboardHTML)
}

// Overview is the answer of GET /admin/overview.
type Overview struct {
	Version     string         `json:"version"`
	GoVersion   string         `json:"go_version"`
	Started     time.Time      `json:"started"`
	Now         time.Time      `json:"now"`
	Uptime      float64        `json:"uptime_seconds"`
	IdleTimeout float64        `json:"idle_timeout_seconds"`
	MaxResident int            `json:"max_resident"`
	MaxSockets  int            `json:"max_sockets"`
	Rooms       RoomCounts     `json:"rooms"`
	Sockets     int            `json:"sockets_open"`
	Totals      rooms.Totals   `json:"totals"`
	Classes     []ClassListing `json:"classes"`
	// Fronts are every front, with its instances on this node.
	Fronts []FrontListing `json:"fronts"`
	// Upgrades is the latest upgrade job (upload --upgrade now) of each
	// class that had one on this node.
	Upgrades []rooms.UpgradeJob `json:"upgrades"`
	// ClusterNode is the node's name in its cluster; empty (and left out)
	// without one, and the dashboard then shows no Cluster panel.
	ClusterNode string `json:"cluster_node,omitempty"`
}

// RoomCounts are the node's room gauges.
type RoomCounts struct {
	Resident              int `json:"resident"`
	Hibernated            int `json:"hibernated"`
	HibernatedWithSockets int `json:"hibernated_with_sockets"`
	Known                 int `json:"known"`
	Stored                int `json:"stored"`
}

func (s *Server) overview(w http.ResponseWriter, r *http.Request) {
	recs, ok := s.classRecords(w, r)
	if !ok {
		return
	}
	c := s.rooms.Counts()
	now := time.Now()
	var node string
	if s.cfg.Cluster != nil {
		node = s.cfg.Cluster.Node
	}
	writeJSON(w, http.StatusOK, Overview{
		Version:     version(),
		GoVersion:   runtime.Version(),
		Started:     s.started.UTC().Round(time.Millisecond),
		Now:         now.UTC().Round(time.Millisecond),
		Uptime:      float64(now.Sub(s.started).Milliseconds()) / 1000,
		IdleTimeout: s.rooms.IdleTimeout().Seconds(),
		MaxResident: s.rooms.MaxResident(),
		MaxSockets:  s.hub.Config().MaxSockets,
		Rooms: RoomCounts{Resident: c.Resident, Hibernated: c.Hibernated, HibernatedWithSockets: c.HibernatedWithSockets,
			Known: c.Known, Stored: c.Stored},
		Sockets:     s.hub.Count(),
		Totals:      s.rooms.Totals(),
		Classes:     s.classListings(r.Context(), recs),
		Fronts:      s.frontListings(r.Context()),
		Upgrades:    s.rooms.UpgradeJobs(),
		ClusterNode: node,
	})
}

// version is the module's version and VCS revision, as the build recorded
// them.
var version = sync.OnceValue(func() string {
	info, ok := debug.ReadBuildInfo()
	if !ok {
		return "unknown"
	}
	v := info.Main.Version
	if v == "" || v == "(devel)" {
		v = "devel"
	}
	var rev string
	var dirty bool
	for _, st := range info.Settings {
		switch st.Key {
		case "vcs.revision":
			rev = st.Value
		case "vcs.modified":
			dirty = st.Value == "true"
		}
	}
	if rev != "" && !strings.Contains(v, rev[:min(len(rev), 12)]) {
		v += " " + rev[:min(len(rev), 12)]
		if dirty {
			v += "+dirty"
		}
	}
	return v
})

// Sample is one point of GET /admin/series: the counters' increase over
// the interval that ends at T, and the gauges at T.
type Sample struct {
	T            int64  `json:"t"` // unix milliseconds
	Wakes        uint64 `json:"wakes"`
	ColdStarts   uint64 `json:"cold_starts"`
	Hibernations uint64 `json:"hibernations"`
	Events       uint64 `json:"events"`
	Crashes      uint64 `json:"crashes"`
	Sockets      int    `json:"sockets"`
	Resident     int    `json:"resident"`
	Hibernated   int    `json:"hibernated"`
}

// Series is the answer of GET /admin/series.
type Series struct {
	IntervalMS    int64    `json:"interval_ms"`
	WindowSeconds int64    `json:"window_seconds"`
	Samples       []Sample `json:"samples"`
}

// series keeps the last samples in a ring.
type series struct {
	mu   sync.Mutex
	ring []Sample
	next int // where the next sample goes
	n    int // samples held

	prev rooms.Totals // the counters at the previous sample
	stop chan struct{}
	done chan struct{}
}

func newSeries(capacity int) *series {
	return &series{ring: make([]Sample, capacity)}
}

func (sr *series) add(x Sample) {
	sr.mu.Lock()
	defer sr.mu.Unlock()
	sr.ring[sr.next] = x
	sr.next = (sr.next + 1) % len(sr.ring)
	sr.n = min(sr.n+1, len(sr.ring))
}

// since returns the samples newer than t (unix ms), oldest first.
func (sr *series) since(t int64) []Sample {
	sr.mu.Lock()
	defer sr.mu.Unlock()
	out := make([]Sample, 0, sr.n)
	for i := range sr.n {
		x := sr.ring[(sr.next-sr.n+i+len(sr.ring))%len(sr.ring)]
		if x.T > t {
			out = append(out, x)
		}
	}
	return out
}

// sample records the node's counters now.
func (s *Server) sample(now time.Time) {
	t := s.rooms.Totals()
	c := s.rooms.Counts()
	p := s.series.prev
	s.series.prev = t
	s.series.add(Sample{
		T:            now.UnixMilli(),
		Wakes:        t.Wakes - p.Wakes,
		ColdStarts:   t.ColdStarts - p.ColdStarts,
		Hibernations: t.Hibernations - p.Hibernations,
		Events:       t.Events - p.Events,
		Crashes:      t.Crashes - p.Crashes,
		Sockets:      s.hub.Count(),
		Resident:     c.Resident,
		Hibernated:   c.Hibernated,
	})
}

// sampler takes a sample every seriesInterval until Close.
func (s *Server) sampler() {
	defer close(s.series.done)
	s.series.prev = s.rooms.Totals()
	t := time.NewTicker(seriesInterval)
	defer t.Stop()
	for {
		select {
		case <-s.series.stop:
			return
		case now := <-t.C:
			s.sample(now)
		}
	}
}

// Close stops the sampler of the dashboard's charts.
func (s *Server) Close() {
	s.closeOnce.Do(func() {
		close(s.series.stop)
		<-s.series.done
		s.sweeps.Wait()
	})
}

func (s *Server) getSeries(w http.ResponseWriter, r *http.Request) {
	var since int64
	if v := r.URL.Query().Get("since"); v != "" {
		var err error
		if since, err = strconv.ParseInt(v, 10, 64); err != nil {
			jsonError(w, http.StatusBadRequest, "since: unix milliseconds, not "+strconv.Quote(v))
			return
		}
	}
	writeJSON(w, http.StatusOK, Series{
		IntervalMS:    seriesInterval.Milliseconds(),
		WindowSeconds: int64(seriesWindow / time.Second),
		Samples:       s.series.since(since),
	})
}
