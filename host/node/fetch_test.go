package node

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/wasmkeep/wasmkeep/host/engine"
	"github.com/wasmkeep/wasmkeep/host/fetch"
)

// fetchServer is a service on loopback, the only kind a test can run:
// what rooms fetch. It answers "hello" to every request.
func fetchServer(t *testing.T) *httptest.Server {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.Write([]byte("hello")) }))
	t.Cleanup(srv.Close)
	return srv
}

// TestFetchRefusesLoopbackByDefault: on a real node, a Go room, an
// AssemblyScript room and a front fetch a server on loopback. With no
// --fetch-allow every fetch is refused, saying which flag allows it;
// allowed by a name that resolves to loopback (localhost), the address
// is still refused; allowed by address (--fetch-allow 127.0.0.1), the
// answer comes back.
func TestFetchRefusesLoopbackByDefault(t *testing.T) {
	t.Parallel()
	srv := fetchServer(t)
	port := srv.URL[strings.LastIndexByte(srv.URL, ':')+1:]
	byAddress := "http://127.0.0.1:" + port + "/"
	byName := "http://localhost:" + port + "/"

	// fetchFrom makes each guest fetch url and returns what each answered,
	// by guest, with its HTTP status.
	fetchFrom := func(t *testing.T, allow []string, url string) map[string]httpResult {
		n := startNode(t, Config{Fetch: fetch.Config{Allow: allow}})
		putClass(t, n, "echo", "./testdata/guests/echo")
		putAS(t, n, "as", asGuest)
		putFront(t, n, "web", frontGuest, "/app")
		return map[string]httpResult{
			"go room": do(t, "POST", n.URL()+"/actor/echo/r/fetch", []byte(url)),
			"as room": do(t, "POST", n.URL()+"/actor/as/r/fetch", []byte(url)),
			"front":   do(t, "GET", n.URL()+"/app/fetch?url="+url, nil),
		}
	}
	check := func(t *testing.T, got map[string]httpResult, status int, want ...string) {
		t.Helper()
		for guest, r := range got {
			for _, w := range want {
				if r.Status != status || !strings.Contains(r.Body, w) {
					t.Errorf("%s: %d %q; want %d with %q", guest, r.Status, r.Body, status, w)
				}
			}
		}
	}

	t.Run("nothing allowed", func(t *testing.T) {
		// The Go room and the AssemblyScript room give the status's
		// number, the front its name; all give the node's message.
		got := fetchFrom(t, nil, byAddress)
		check(t, got, http.StatusBadGateway, "host not allowed (--fetch-allow): 127.0.0.1")
		for _, guest := range []string{"go room", "as room"} {
			if !strings.HasPrefix(got[guest].Body, "-14 ") {
				t.Errorf("%s: %q, want status -14 (not allowed)", guest, got[guest].Body)
			}
		}
		if !strings.HasPrefix(got["front"].Body, "not allowed: ") {
			t.Errorf("front: %q, want status not allowed", got["front"].Body)
		}
	})
	t.Run("allowed by a name on loopback", func(t *testing.T) {
		check(t, fetchFrom(t, []string{"localhost"}, byName), http.StatusBadGateway,
			"address refused: loopback, private, link-local or reserved, and not allowed by address")
	})
	t.Run("allowed by address", func(t *testing.T) {
		check(t, fetchFrom(t, []string{"127.0.0.1"}, byAddress), http.StatusOK, "200 hello")
	})
}

// TestFetchWaitIsNotEventTime: a room waits on a server slower than the
// event time limit, and the event succeeds: the wait is not the room's
// time. A server that never answers ends the wait at the fetch timeout,
// and the event then too.
func TestFetchWaitIsNotEventTime(t *testing.T) {
	t.Parallel()
	const eventTimeout, fetchTimeout = 100 * time.Millisecond, 2 * time.Second
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		// The server's slowness is what is tested: no condition to wait
		// for but its own clock.
		wait := 5 * eventTimeout
		if r.URL.Path == "/never" {
			wait = time.Hour
		}
		select {
		case <-time.After(wait):
			w.Write([]byte("slow"))
		case <-r.Context().Done():
		}
	}))
	t.Cleanup(srv.Close)
	n := startNode(t, Config{
		Engine: engine.Config{EventTimeout: eventTimeout},
		Fetch:  fetch.Config{Allow: []string{"127.0.0.1"}, Timeout: fetchTimeout},
	})
	putClass(t, n, "echo", "./testdata/guests/echo")
	began := time.Now()
	if got := expect(t, 200, "POST", n.URL()+"/actor/echo/r/fetch", []byte(srv.URL+"/slow")); got != "200 slow" {
		t.Fatalf("a fetch slower than the event time limit: %q", got)
	}
	if took := time.Since(began); took < 5*eventTimeout {
		t.Fatalf("the slow server answered in %s, before its %s: the test proves nothing", took, 5*eventTimeout)
	}
	began = time.Now()
	got := expect(t, http.StatusBadGateway, "POST", n.URL()+"/actor/echo/r/fetch", []byte(srv.URL+"/never"))
	if took := time.Since(began); !strings.HasPrefix(got, "-9 ") || took < fetchTimeout || took > fetchTimeout+5*time.Second {
		t.Fatalf("a server that never answers: %q after %s, want -9 (timed out) after the fetch timeout, %s", got, took, fetchTimeout)
	}
	// The room lived through both: it was never interrupted.
	if got := expect(t, 200, "GET", n.URL()+"/actor/echo/r/collections", nil); got == "" {
		t.Fatal("the room after its fetches: no answer")
	}
	if c := metric(t, n, `wasmkeep_room_crashes_total{cause="timeout"}`); c != 0 {
		t.Fatalf("%v crashes by timeout, want none", c)
	}
	if c := metric(t, n, `wasmkeep_fetches_total{outcome="timeout"}`); c != 1 {
		t.Fatalf("wasmkeep_fetches_total{outcome=\"timeout\"} = %v, want 1", c)
	}
}

// TestFetchPerRoomInFlight: past --fetch-per-room fetches in flight, a
// room's next fetch is refused at once, "too many"; another room's goes.
func TestFetchPerRoomInFlight(t *testing.T) {
	t.Parallel()
	arrived, release := make(chan struct{}, 8), make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/slow" {
			arrived <- struct{}{}
			select {
			case <-release:
			case <-r.Context().Done():
				return
			}
		}
		w.Write([]byte(strings.TrimPrefix(r.URL.Path, "/")))
	}))
	t.Cleanup(srv.Close)
	t.Cleanup(func() {
		select {
		case <-release:
		default:
			close(release)
		}
	})
	n := startNode(t, Config{Fetch: fetch.Config{Allow: []string{"127.0.0.1"}, PerRoom: 2}})
	putClass(t, n, "echo", "./testdata/guests/echo")

	// Room r starts three fetches of /slow at once: two hold its places,
	// the third is refused before it is sent.
	done := make(chan httpResult, 1)
	go func() { done <- do(t, "POST", n.URL()+"/actor/echo/r/fetch?n=3", []byte(srv.URL+"/slow")) }()
	for range 2 {
		select {
		case <-arrived:
		case r := <-done:
			t.Fatalf("the room answered before its fetches arrived: %d %q", r.Status, r.Body)
		case <-time.After(10 * time.Second):
			t.Fatal("the room's fetches did not arrive")
		}
	}
	// Meanwhile another room fetches.
	if got := expect(t, 200, "POST", n.URL()+"/actor/echo/other/fetch", []byte(srv.URL+"/fast")); got != "200 fast" {
		t.Fatalf("another room's fetch while r's are in flight: %q", got)
	}
	close(release)
	r := <-done
	want := "200 slow\n200 slow\n-13 fetch: too many fetches in flight"
	if r.Status != 200 || r.Body != want {
		t.Fatalf("three fetches, two allowed in flight: %d %q, want %q", r.Status, r.Body, want)
	}
	if len(arrived) != 0 {
		t.Fatal("the refused fetch reached the server")
	}
}
