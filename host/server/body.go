package server

import (
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/netip"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/VictoriaMetrics/metrics"
)

// Request bodies arrive after net/http has read the headers (bounded by
// the server's ReadHeaderTimeout), and nothing bounded them: a client
// trickling a byte now and then held its connection, and a goroutine, for
// as long as it liked. Now a body has BodyTimeout to arrive whole, or, for
// the admin uploads (a module, a room bundle: up to a GiB), BodyTimeout
// plus a second for every UploadMinRate bytes it has delivered; past that
// the read fails, and the request is answered 408 and its connection
// closed. The deadline is the connection's read deadline
// (http.ResponseController), set for the request's body only: net/http's
// ReadTimeout would also cut the reads of upgraded WebSockets, which the
// socket layer times itself. It also bounds what net/http reads of a body
// the handler left, which it drains before answering.
//
// While its body arrives a request holds one of MaxBodiesPerIP slots of
// its client address (the address the socket layer's per-address limits
// count it under), so that one address cannot hold thousands of trickling
// requests at once; past them a request is answered 429 before its body
// is read.

// Defaults of the body limits.
const (
	DefaultMaxRequestBody = 1 << 20
	DefaultBodyTimeout    = 10 * time.Second
	DefaultUploadMinRate  = 64 << 10
	DefaultMaxBodiesPerIP = 64
)

// errBodyTimeout is a request body that did not arrive within its
// deadline.
var errBodyTimeout = errors.New("the request body did not arrive in time")

// bodyMetrics count the bodies and their refusals.
type bodyMetrics struct {
	timeouts *metrics.Counter
	refused  *metrics.Counter
}

// bodySlots counts the bodies each client address is sending.
type bodySlots struct {
	perIP     int
	mu        sync.Mutex
	open      map[netip.Addr]int
	receiving atomic.Int64 // every body being received, counted or not
}

func newBodySlots(perIP int) *bodySlots {
	return &bodySlots{perIP: perIP, open: map[netip.Addr]int{}}
}

// take takes a slot of addr, unless it has all of them.
func (b *bodySlots) take(addr netip.Addr) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.open[addr] >= b.perIP {
		return false
	}
	b.open[addr]++
	return true
}

// give gives back a slot of addr.
func (b *bodySlots) give(addr netip.Addr) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.open[addr]--; b.open[addr] <= 0 {
		delete(b.open, addr)
	}
}

// timedBody is a request body with its deadline and slot.
type timedBody struct {
	body    io.ReadCloser
	rc      *http.ResponseController
	start   time.Time
	timeout time.Duration
	minRate int64 // bytes a second past timeout; 0: whole by start+timeout
	n       int64 // bytes read
	done    bool  // the slot was given back
	release func()
	met     *bodyMetrics
}

// receive sets the deadline of r's body and takes a slot of its client
// address for it. If the address has none left, it answers 429 and
// returns nil.
func (s *Server) receive(w http.ResponseWriter, r *http.Request) *timedBody {
	b := &timedBody{body: r.Body, rc: http.NewResponseController(w), start: time.Now(), timeout: s.cfg.BodyTimeout, met: &s.bodyMet}
	_ = b.rc.SetReadDeadline(b.start.Add(b.timeout))
	var addr netip.Addr
	var counted bool
	if s.hub != nil {
		addr, counted = s.hub.ClientAddr(r)
	}
	if counted && !s.bodies.take(addr) {
		s.bodyMet.refused.Inc()
		w.Header().Set("Retry-After", "1")
		w.Header().Set("Connection", "close") // net/http would otherwise read the body first
		textError(w, http.StatusTooManyRequests, fmt.Sprintf("too many request bodies arriving from your address at once (%d)", s.cfg.MaxBodiesPerIP))
		return nil
	}
	s.bodies.receiving.Add(1)
	b.release = func() {
		s.bodies.receiving.Add(-1)
		if counted {
			s.bodies.give(addr)
		}
	}
	return b
}

// paced lets an admin upload's body arrive at UploadMinRate after the
// first BodyTimeout, instead of whole within it.
func (s *Server) paced(r *http.Request) {
	if b, ok := r.Body.(*timedBody); ok {
		b.minRate = int64(s.cfg.UploadMinRate)
	}
}

func (b *timedBody) Read(p []byte) (int, error) {
	if b.minRate > 0 {
		_ = b.rc.SetReadDeadline(b.start.Add(b.timeout + time.Duration(b.n*int64(time.Second)/b.minRate)))
	}
	k, err := b.body.Read(p)
	b.n += int64(k)
	switch {
	case err == io.EOF:
		// No deadline from here: net/http reads the connection in the
		// background once the body is read, and a deadline passing then
		// would cancel the request while its room works on it.
		_ = b.rc.SetReadDeadline(time.Time{})
		b.end()
	case errors.Is(err, os.ErrDeadlineExceeded):
		if !b.done {
			b.met.timeouts.Inc()
		}
		b.end()
		err = fmt.Errorf("%w: %d bytes in %v", errBodyTimeout, b.n, time.Since(b.start).Round(time.Millisecond))
	}
	return k, err
}

func (b *timedBody) Close() error { return b.body.Close() }

// end gives back the body's slot, once: at its end, or when its request
// is answered without it (the deadline stays, bounding what net/http
// still reads of it).
func (b *timedBody) end() {
	if !b.done {
		b.done = true
		b.release()
	}
}

// readBody reads r's body, at most limit bytes. On failure it returns the
// status to answer: 413 over the limit, 408 for a body that did not
// arrive in time (its connection is closed after the answer), 400 for a
// broken one.
func readBody(w http.ResponseWriter, r *http.Request, limit int64) ([]byte, int, error) {
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, limit))
	var tooBig *http.MaxBytesError
	switch {
	case err == nil:
		return body, 0, nil
	case errors.As(err, &tooBig):
		return nil, http.StatusRequestEntityTooLarge, err
	case errors.Is(err, errBodyTimeout):
		w.Header().Set("Connection", "close")
		return nil, http.StatusRequestTimeout, err
	}
	return nil, http.StatusBadRequest, err
}
