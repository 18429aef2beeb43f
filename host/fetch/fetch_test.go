package fetch

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/wasmkeep/wasmkeep/abi"
)

// names resolves every name to the addresses given for it.
type names map[string][]netip.Addr

func (n names) LookupNetIP(_ context.Context, _, host string) ([]netip.Addr, error) {
	if a, ok := n[host]; ok {
		return a, nil
	}
	return nil, errors.New("no such host " + host)
}

func newFetcher(t *testing.T, cfg Config) *Fetcher {
	t.Helper()
	f, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return f
}

// A server on loopback, the only kind a test can run.
func loopbackServer(t *testing.T, h http.HandlerFunc) (*httptest.Server, string) {
	t.Helper()
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	return srv, strings.TrimPrefix(srv.URL, "http://127.0.0.1:")
}

var lo = []netip.Addr{netip.MustParseAddr("127.0.0.1")}

// TestFetcherRefusesLoopbackByDefault: with nothing allowed every fetch is
// refused; a name that is allowed but resolves to loopback is refused at
// the dial; an address entry for loopback lets it through. (The node's
// TestFetchRefusesLoopbackByDefault does the same from a room.)
func TestFetcherRefusesLoopbackByDefault(t *testing.T) {
	_, port := loopbackServer(t, func(w http.ResponseWriter, r *http.Request) { w.Write([]byte("hello")) })
	ctx := t.Context()

	f := newFetcher(t, Config{Resolver: names{"svc.test": lo}})
	if _, err := f.Do(ctx, "r", Request{URL: "http://127.0.0.1:" + port + "/"}); !errors.Is(err, ErrNotAllowed) {
		t.Fatalf("nothing allowed: %v, want ErrNotAllowed", err)
	}
	f = newFetcher(t, Config{Allow: []string{"svc.test"}, Resolver: names{"svc.test": lo}})
	if _, err := f.Do(ctx, "r", Request{URL: "http://svc.test:" + port + "/"}); !errors.Is(err, ErrAddressRefused) {
		t.Fatalf("an allowed name on loopback: %v, want ErrAddressRefused", err)
	}
	for _, u := range []string{"http://169.254.169.254/latest/meta-data/", "http://[::1]:" + port + "/", "http://10.0.0.1/"} {
		if _, err := f.Do(ctx, "r", Request{URL: u}); !errors.Is(err, ErrNotAllowed) {
			t.Fatalf("%s: %v, want ErrNotAllowed", u, err)
		}
	}
	f = newFetcher(t, Config{Allow: []string{"svc.test", "127.0.0.1"}, Resolver: names{"svc.test": lo}})
	for _, u := range []string{"http://svc.test:" + port + "/", "http://127.0.0.1:" + port + "/"} {
		resp, err := f.Do(ctx, "r", Request{URL: u})
		if err != nil || resp.Status != 200 || string(resp.Body) != "hello" {
			t.Fatalf("%s allowed by address: %+v, %v", u, resp, err)
		}
	}
}

// TestFetchChecksRedirects: a redirect to a host not allowed is refused,
// as the host itself would be.
func TestFetchChecksRedirects(t *testing.T) {
	_, port := loopbackServer(t, func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/away" {
			http.Redirect(w, r, "http://elsewhere.test/", http.StatusFound)
			return
		}
		w.Write([]byte("here"))
	})
	f := newFetcher(t, Config{Allow: []string{"127.0.0.1"}, Resolver: names{"elsewhere.test": lo}})
	if _, err := f.Do(t.Context(), "r", Request{URL: "http://127.0.0.1:" + port + "/away"}); !errors.Is(err, ErrNotAllowed) {
		t.Fatalf("a redirect to a host not allowed: %v", err)
	}
}

// TestFetchBounds: bodies over the limits, the timeout, and the fetches
// in flight of a room are bounded.
func TestFetchBounds(t *testing.T) {
	block := make(chan struct{})
	t.Cleanup(func() { close(block) })
	_, port := loopbackServer(t, func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/big":
			w.Write(make([]byte, 2048))
		case "/slow":
			select {
			case <-block:
			case <-r.Context().Done():
			}
		}
	})
	base := "http://127.0.0.1:" + port
	f := newFetcher(t, Config{Allow: []string{"127.0.0.0/8"}, MaxResponse: 1024, MaxRequest: 10, Timeout: 200 * time.Millisecond, PerRoom: 1})
	ctx := t.Context()
	if _, err := f.Do(ctx, "r", Request{URL: base + "/big"}); !errors.Is(err, ErrTooLarge) {
		t.Fatalf("a response over the limit: %v", err)
	}
	if _, err := f.Do(ctx, "r", Request{Method: "POST", URL: base + "/", Body: make([]byte, 11)}); !errors.Is(err, ErrTooLarge) {
		t.Fatalf("a request over the limit: %v", err)
	}
	if _, err := f.Do(ctx, "r", Request{URL: base + "/slow"}); !errors.Is(err, ErrTimeout) || Outcome(err) != OutcomeTimeout {
		t.Fatalf("past the timeout: %v", err)
	}
	// One fetch of room r in flight (Start takes its place before it
	// returns): the next is refused at once, another room's goes, and
	// once the first is answered the room may fetch again.
	long := newFetcher(t, Config{Allow: []string{"127.0.0.0/8"}, PerRoom: 1})
	slowCtx, cancel := context.WithCancel(ctx)
	first := long.Start(slowCtx, "r", Request{URL: base + "/slow"})
	if _, err := long.Do(ctx, "r", Request{URL: base + "/"}); !errors.Is(err, ErrTooMany) {
		t.Fatalf("a second fetch of the room while one is in flight: %v, want ErrTooMany", err)
	}
	if _, err := long.Do(ctx, "other", Request{URL: base + "/"}); err != nil {
		t.Fatalf("another room's fetch: %v", err)
	}
	cancel()
	<-first.Done()
	if _, err := first.Result(); Outcome(err) != OutcomeCanceled {
		t.Fatalf("a fetch whose context ended: %v", err)
	}
	if _, err := long.Do(ctx, "r", Request{URL: base + "/"}); err != nil {
		t.Fatalf("the room's fetch once the first ended: %v", err)
	}
	// One fetch of the node in flight: any room's next is refused.
	node := newFetcher(t, Config{Allow: []string{"127.0.0.0/8"}, PerNode: 1})
	slowCtx, cancel = context.WithCancel(ctx)
	defer cancel()
	node.Start(slowCtx, "a", Request{URL: base + "/slow"})
	if _, err := node.Do(ctx, "b", Request{URL: base + "/"}); !errors.Is(err, ErrTooMany) {
		t.Fatalf("another room's fetch while the node's one is in flight: %v, want ErrTooMany", err)
	}
}

// TestFetchChecksGuestRequests: what a guest may not send is refused
// before anything is sent, each for its reason, and Observe hears of
// every outcome.
func TestFetchChecksGuestRequests(t *testing.T) {
	var got []string
	var mu sync.Mutex
	srv, _ := loopbackServer(t, func(w http.ResponseWriter, r *http.Request) {
		w.Write([]byte(r.Method + " " + r.Header.Get("X-Ok")))
	})
	f := newFetcher(t, Config{Allow: []string{"127.0.0.1"}, Observe: func(outcome string, _ time.Duration) {
		mu.Lock()
		got = append(got, outcome)
		mu.Unlock()
	}})
	for _, c := range []struct {
		req  Request
		want error
	}{
		{Request{Method: "CONNECT", URL: srv.URL}, ErrBadRequest},
		{Request{Method: "get", URL: srv.URL}, ErrBadRequest},
		{Request{URL: srv.URL, Header: http.Header{"Host": {"elsewhere.test"}}}, ErrBadRequest},
		{Request{URL: srv.URL, Header: http.Header{"transfer-encoding": {"chunked"}}}, ErrBadRequest},
		{Request{URL: srv.URL, Header: http.Header{"Proxy-Foo": {"x"}}}, ErrBadRequest},
		{Request{URL: srv.URL, Header: http.Header{"X-A": {"a\r\nHost: elsewhere.test"}}}, ErrBadRequest},
		{Request{URL: srv.URL, Header: http.Header{"X A": {"a"}}}, ErrBadRequest},
		{Request{URL: srv.URL, Header: http.Header{"X-A": {strings.Repeat("a", abi.MaxFetchHeaderBytes)}}}, ErrTooLarge},
		{Request{URL: srv.URL + "/" + strings.Repeat("a", abi.MaxFetchURL)}, ErrTooLarge},
		{Request{URL: "file:///etc/passwd"}, ErrBadRequest},
	} {
		if _, err := f.Do(t.Context(), "r", c.req); !errors.Is(err, c.want) {
			t.Errorf("%s %.60s %v: %v, want %v", c.req.Method, c.req.URL, c.req.Header, err, c.want)
		}
	}
	resp, err := f.Do(t.Context(), "r", Request{URL: srv.URL, Header: http.Header{"X-Ok": {"yes"}}})
	if err != nil || string(resp.Body) != "GET yes" {
		t.Fatalf("a good request: %+v, %v", resp, err)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(got) != 11 || got[0] != OutcomeBadRequest || got[7] != OutcomeTooLarge || got[10] != OutcomeOK {
		t.Fatalf("observed %v", got)
	}
}

func TestAllowEntries(t *testing.T) {
	for _, bad := range []string{"http://x.test", "x.test:port", "a b", "*."} {
		if _, err := New(Config{Allow: []string{bad}}); err == nil {
			t.Errorf("allow entry %q taken", bad)
		}
	}
	f := newFetcher(t, Config{Allow: []string{"API.example.com:443", "*.svc.test", "192.0.2.0/24"}})
	for u, want := range map[string]bool{
		"https://api.example.com/x":   true,
		"http://api.example.com/x":    false, // port 80
		"https://a.b.svc.test/":       true,
		"https://svc.test/":           false,
		"http://192.0.2.7/":           true,
		"http://192.0.3.7/":           false,
		"ftp://api.example.com/":      false,
		"https://u:p@api.example.com": false,
	} {
		u0, _ := parse(u)
		if got := f.allowedURL(u0) == nil; got != want {
			t.Errorf("%s allowed: %v, want %v", u, got, want)
		}
	}
}

func parse(s string) (*url.URL, error) { return url.Parse(s) }

// TestStartCopiesTheBody: the body may alias memory its caller reuses as
// soon as Start returns (a guest's): what is sent is what it was then.
func TestStartCopiesTheBody(t *testing.T) {
	srv, _ := loopbackServer(t, func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		w.Write(b)
	})
	f := newFetcher(t, Config{Allow: []string{"127.0.0.1"}})
	body := []byte("as it was")
	p := f.Start(t.Context(), "r", Request{Method: "POST", URL: srv.URL, Body: body})
	copy(body, "overwrite")
	<-p.Done()
	if resp, err := p.Result(); err != nil || string(resp.Body) != "as it was" {
		t.Fatalf("sent %+v, %v; want the body as it was when Start returned", resp, err)
	}
}
