package s3_test

import (
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"slices"
	"sync"
	"testing"

	"github.com/wasmkeep/wasmkeep/host/store"
	"github.com/wasmkeep/wasmkeep/host/store/s3"
	"github.com/wasmkeep/wasmkeep/internal/s3test"
)

// fault is what the proxy does with one request.
type fault int

const (
	pass        fault = iota // forward it and its answer
	dropAnswer               // forward it, read the answer, close the connection instead of answering
	stall                    // forward it, tell stalled, then answer nothing until the client gives up
	unavailable              // answer 503 without forwarding it
	otherETag                // forward it, and give its answer an ETag that is not the body's MD5
)

var faultNames = []string{pass: "pass", dropAnswer: "dropAnswer", stall: "stall", unavailable: "unavailable", otherETag: "otherETag"}

// notTheMD5 is the ETag otherETag gives: an MD5, of no body written.
const notTheMD5 = `"0123456789abcdef0123456789abcdef"`

// proxy stands between a Bucket and versitygw on loopback, and does to
// each request what its fault function says.
type proxy struct {
	t        *testing.T
	upstream *url.URL
	rp       *httputil.ReverseProxy
	rpETag   *httputil.ReverseProxy // rp, with otherETag's ETag
	tr       *http.Transport
	URL      string
	// stalled gets a value when a stalled request has been forwarded and
	// answered upstream.
	stalled chan struct{}

	mu    sync.Mutex
	fault func(r *http.Request) fault
	seen  []string // see requests
}

func newProxy(t *testing.T, srv *s3test.Server) *proxy {
	u, err := url.Parse(srv.Endpoint)
	if err != nil {
		t.Fatal(err)
	}
	p := &proxy{t: t, upstream: u, tr: &http.Transport{}, stalled: make(chan struct{}, 1)}
	// The request keeps its Host header, the proxy's: the client signed
	// it, and versitygw checks the signature against it.
	rewrite := func(r *httputil.ProxyRequest) { r.SetURL(u); r.Out.Host = r.In.Host }
	p.rp = &httputil.ReverseProxy{Rewrite: rewrite, Transport: p.tr}
	p.rpETag = &httputil.ReverseProxy{Rewrite: rewrite, Transport: p.tr, ModifyResponse: func(r *http.Response) error {
		r.Header.Set("ETag", notTheMD5)
		return nil
	}}
	hs := httptest.NewServer(p)
	t.Cleanup(func() {
		hs.Close()
		p.tr.CloseIdleConnections()
	})
	p.URL = hs.URL
	return p
}

// set makes f decide the fault of each request from now on.
func (p *proxy) set(f func(r *http.Request) fault) {
	p.mu.Lock()
	p.fault, p.seen = f, nil
	p.mu.Unlock()
}

// once returns a fault function that does f to the first request of
// method, and passes every other.
func once(method string, f fault) func(*http.Request) fault {
	var mu sync.Mutex
	done := false
	return func(r *http.Request) fault {
		mu.Lock()
		defer mu.Unlock()
		if r.Method != method || done {
			return pass
		}
		done = true
		return f
	}
}

// requests returns what the proxy saw since the last set, as
// "METHOD fault", such as "PUT dropAnswer".
func (p *proxy) requests() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return slices.Clone(p.seen)
}

func (p *proxy) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	p.mu.Lock()
	f := pass
	if p.fault != nil {
		f = p.fault(r)
	}
	p.seen = append(p.seen, r.Method+" "+faultNames[f])
	p.mu.Unlock()
	switch f {
	case pass:
		p.rp.ServeHTTP(w, r)
		return
	case otherETag:
		p.rpETag.ServeHTTP(w, r)
		return
	case unavailable:
		w.Header().Set("Content-Type", "application/xml")
		w.WriteHeader(http.StatusServiceUnavailable)
		io.WriteString(w, `<?xml version="1.0" encoding="UTF-8"?><Error><Code>ServiceUnavailable</Code><Message>injected</Message></Error>`)
		return
	}
	out := r.Clone(context.Background())
	out.RequestURI = ""
	out.URL.Scheme, out.URL.Host = p.upstream.Scheme, p.upstream.Host
	out.Host = r.Host
	resp, err := p.tr.RoundTrip(out)
	if err != nil {
		p.t.Errorf("proxy: forwarding %s %s: %v", r.Method, r.URL, err)
	} else {
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
	}
	if f == stall {
		p.stalled <- struct{}{}
		<-r.Context().Done() // the client gave up
	}
	conn, _, err := http.NewResponseController(w).Hijack()
	if err != nil {
		p.t.Errorf("proxy: hijack: %v", err)
		return
	}
	conn.Close()
}

// faultBuckets returns a Bucket through p and one straight to srv, to see
// what really happened.
func faultBuckets(t *testing.T, srv *s3test.Server, p *proxy, seen *observed) (through, direct *s3.Bucket) {
	c := config(srv, srv.Bucket)
	c.Endpoint = p.URL
	if seen != nil {
		c.Observe = seen.observe
	}
	return open(t, c), open(t, config(srv, srv.Bucket))
}

// TestLostAnswer forwards a write and drops its answer: the write landed,
// and the Bucket must say that it does not know (not that it lost, which
// a hidden retry would have answered), after one request.
func TestLostAnswer(t *testing.T) {
	srv := s3test.Start(t)
	p := newProxy(t, srv)
	var seen observed
	b, direct := faultBuckets(t, srv, p, &seen)
	ctx := t.Context()
	old, err := direct.Put(ctx, "cas", []byte("v0"), store.Cond{})
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		key  string
		cond store.Cond
	}{
		{"plain", store.Cond{}},
		{"create", store.IfNoneMatch()},
		{"cas", store.IfMatch(old)},
	} {
		seen.take()
		p.set(once(http.MethodPut, dropAnswer))
		body := []byte("written by " + tc.cond.String())
		_, err := b.Put(ctx, tc.key, body, tc.cond)
		if !errors.Is(err, store.ErrUnknownOutcome) || errors.Is(err, store.ErrPrecondition) {
			t.Fatalf("Put(%s) whose answer was lost: %v, want ErrUnknownOutcome only", tc.cond, err)
		}
		if got := p.requests(); !slices.Equal(got, []string{"PUT dropAnswer"}) {
			t.Fatalf("Put(%s) sent %q, want one PUT", tc.cond, got)
		}
		if got := seen.take(); !slices.Equal(got, []string{"PutObject unknown"}) {
			t.Fatalf("Observe saw %q", got)
		}
		if got, _, err := direct.Get(ctx, tc.key); err != nil || string(got) != string(body) {
			t.Fatalf("after a Put(%s) whose answer was lost the object is %q, %v; want %q", tc.cond, got, err, body)
		}
		// What a retry would have answered, and the reason there is none.
		if tc.cond != (store.Cond{}) {
			if _, err := b.Put(ctx, tc.key, body, tc.cond); !errors.Is(err, store.ErrPrecondition) {
				t.Fatalf("the same Put(%s) again: %v, want ErrPrecondition", tc.cond, err)
			}
		}
	}

	// A conditional Delete: the HEAD passes, the DELETE's answer is lost.
	_, etag, err := direct.Get(ctx, "create")
	if err != nil {
		t.Fatal(err)
	}
	p.set(once(http.MethodDelete, dropAnswer))
	if err := b.Delete(ctx, "create", etag); !errors.Is(err, store.ErrUnknownOutcome) {
		t.Fatalf("Delete whose answer was lost: %v, want ErrUnknownOutcome", err)
	}
	if got := p.requests(); !slices.Equal(got, []string{"HEAD pass", "DELETE dropAnswer"}) {
		t.Fatalf("Delete sent %q", got)
	}
	if _, _, err := direct.Get(ctx, "create"); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("after a Delete whose answer was lost: %v, want the object gone", err)
	}
}

// TestStalledWrite forwards a conditional write, which lands, and then
// answers nothing until the caller gives up: an unknown outcome, with the
// caller's reason.
func TestStalledWrite(t *testing.T) {
	srv := s3test.Start(t)
	p := newProxy(t, srv)
	b, direct := faultBuckets(t, srv, p, nil)
	p.set(once(http.MethodPut, stall))
	ctx, cancel := context.WithCancel(t.Context())
	go func() {
		select {
		case <-p.stalled:
		case <-ctx.Done():
		}
		cancel()
	}()
	_, err := b.Put(ctx, "k", []byte("v"), store.IfNoneMatch())
	if !errors.Is(err, store.ErrUnknownOutcome) || !errors.Is(err, context.Canceled) {
		t.Fatalf("a Put given up in flight: %v, want ErrUnknownOutcome and context.Canceled", err)
	}
	if got := p.requests(); !slices.Equal(got, []string{"PUT stall"}) {
		t.Fatalf("Put sent %q, want one PUT", got)
	}
	if got, _, err := direct.Get(t.Context(), "k"); err != nil || string(got) != "v" {
		t.Fatalf("the stalled Put did not land: %q, %v", got, err)
	}
}

// TestUnavailable answers 503: a write is not retried and its outcome is
// unknown (a server may fail after applying it); a read is retried.
func TestUnavailable(t *testing.T) {
	srv := s3test.Start(t)
	p := newProxy(t, srv)
	b, direct := faultBuckets(t, srv, p, nil)
	ctx := t.Context()
	p.set(once(http.MethodPut, unavailable))
	if _, err := b.Put(ctx, "k", []byte("v"), store.IfNoneMatch()); !errors.Is(err, store.ErrUnknownOutcome) {
		t.Fatalf("Put answered 503: %v, want ErrUnknownOutcome", err)
	}
	if got := p.requests(); !slices.Equal(got, []string{"PUT unavailable"}) {
		t.Fatalf("Put sent %q, want one PUT", got)
	}
	if _, err := direct.Put(ctx, "k", []byte("v"), store.IfNoneMatch()); err != nil {
		t.Fatal(err)
	}
	p.set(once(http.MethodGet, unavailable))
	if got, _, err := b.Get(ctx, "k"); err != nil || string(got) != "v" {
		t.Fatalf("Get after one 503: %q, %v; want it retried", got, err)
	}
	if got := p.requests(); !slices.Equal(got, []string{"GET unavailable", "GET pass"}) {
		t.Fatalf("Get sent %q, want a retry", got)
	}
}

// TestRefusedConnection: a write that could not connect was not sent, so
// its outcome is known.
func TestRefusedConnection(t *testing.T) {
	srv := s3test.Start(t)
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	c := config(srv, srv.Bucket)
	c.Endpoint = "http://" + addr
	b := open(t, c)
	_, err = b.Put(t.Context(), "k", []byte("v"), store.IfNoneMatch())
	if err == nil || errors.Is(err, store.ErrUnknownOutcome) {
		t.Fatalf("Put to a closed port: %v, want an error that is not ErrUnknownOutcome", err)
	}
}

// always returns a fault function that does f to every request of method.
func always(method string, f fault) func(*http.Request) fault {
	return func(r *http.Request) fault {
		if r.Method == method {
			return f
		}
		return pass
	}
}

// TestGetRereadsAnETagOfAnotherBody: a GET whose ETag has the form of an
// MD5 but is not its body's (versitygw's answer to a GET that races with
// a PUT) is sent again.
func TestGetRereadsAnETagOfAnotherBody(t *testing.T) {
	srv := s3test.Start(t)
	p := newProxy(t, srv)
	b, direct := faultBuckets(t, srv, p, nil)
	etag, err := direct.Put(t.Context(), "k", []byte("v"), store.Cond{})
	if err != nil {
		t.Fatal(err)
	}
	p.set(once(http.MethodGet, otherETag))
	if body, got, err := b.Get(t.Context(), "k"); err != nil || string(body) != "v" || got != etag {
		t.Fatalf("Get = %q, %s, %v; want v, %s", body, got, err, etag)
	}
	if got := p.requests(); !slices.Equal(got, []string{"GET otherETag", "GET pass"}) {
		t.Fatalf("Get sent %q, want the GET again", got)
	}
}

// TestGetLearnsETagsAreNotMD5s: a server whose ETags are never the MD5 of
// their bodies costs a few GETs once, then none.
func TestGetLearnsETagsAreNotMD5s(t *testing.T) {
	srv := s3test.Start(t)
	p := newProxy(t, srv)
	b, direct := faultBuckets(t, srv, p, nil)
	if _, err := direct.Put(t.Context(), "k", []byte("v"), store.Cond{}); err != nil {
		t.Fatal(err)
	}
	p.set(always(http.MethodGet, otherETag))
	for i, want := range [][]string{
		{"GET otherETag", "GET otherETag", "GET otherETag"},
		{"GET otherETag"},
	} {
		if body, got, err := b.Get(t.Context(), "k"); err != nil || string(body) != "v" || got != notTheMD5 {
			t.Fatalf("Get %d = %q, %s, %v; want v, %s", i, body, got, err, notTheMD5)
		}
		if got := p.requests(); !slices.Equal(got, want) {
			t.Fatalf("Get %d sent %q, want %q", i, got, want)
		}
		p.set(always(http.MethodGet, otherETag))
	}
}
