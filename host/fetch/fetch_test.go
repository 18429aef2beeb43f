package fetch

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"net/url"
	"strings"
	"testing"
	"time"
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

// TestFetchRefusesLoopbackByDefault: with nothing allowed every fetch is
// refused; a name that is allowed but resolves to loopback is refused at
// the dial; an address entry for loopback lets it through.
func TestFetchRefusesLoopbackByDefault(t *testing.T) {
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
	if _, err := f.Do(ctx, "r", Request{URL: base + "/slow"}); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("past the timeout: %v", err)
	}
	// One fetch of room r in flight: the next is refused at once, another
	// room's goes.
	long := newFetcher(t, Config{Allow: []string{"127.0.0.0/8"}, PerRoom: 1})
	started := make(chan struct{})
	done := make(chan error, 1)
	go func() {
		close(started)
		_, err := long.Do(ctx, "r", Request{URL: base + "/slow"})
		done <- err
	}()
	<-started
	deadline := time.Now().Add(10 * time.Second)
	for {
		_, err := long.Do(ctx, "r", Request{URL: base + "/"})
		if errors.Is(err, ErrTooMany) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("a second fetch of the room while one is in flight: %v, want ErrTooMany", err)
		}
		time.Sleep(time.Millisecond)
	}
	if _, err := long.Do(ctx, "other", Request{URL: base + "/"}); err != nil {
		t.Fatalf("another room's fetch: %v", err)
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
