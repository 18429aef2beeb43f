package node

import (
	"net/http"
	"net/http/httptest"
	"slices"
	"testing"
	"time"

	"github.com/wasmkeep/wasmkeep/host/fetch"
	"github.com/wasmkeep/wasmkeep/host/store"
)

// BenchmarkFetch measures what a room's fetch costs against the same GET
// made by a plain Go program, in one run, interleaved so that both see
// the same machine:
//
//   - direct: a Go http.Client (the tests' keep-alive one) GETs a server
//     on loopback that answers "hello";
//   - request: GET /actor/echo/r/room, an exchange with the room
//     without a fetch;
//   - request+fetch: POST /actor/echo/r/fetch with the server's URL: the
//     room fetches it (wk.Fetch) and answers what it got.
//
// It reports each one's p50 and p99, the ratio of request+fetch's p50 to
// direct's (fetch-ratio), and what the fetch adds to the request at p50
// against direct's p50 (added-ratio: (request+fetch - request) / direct).
// 1,000 of each a run; the room is resident, its store in memory, its
// class durable at hibernation.
//
//	go test -run '^$' -bench 'BenchmarkFetch$' -benchtime 3x ./host/node/
func BenchmarkFetch(b *testing.B) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.Write([]byte("hello")) }))
	b.Cleanup(srv.Close)
	// An in-memory store, and a class durable at hibernation: the
	// event's commit is not what is measured.
	n := startNode(b, Config{Bucket: store.NewMem(), Fetch: fetch.Config{Allow: []string{"127.0.0.1"}}})
	putClassB(b, n, "echo?durability=hibernate", buildGuest(b, "./testdata/guests/echo"))
	room, fetchURL := n.URL()+"/actor/echo/r", n.URL()+"/actor/echo/r/fetch"
	if got := doB(b, "POST", fetchURL, srv.URL); got != "200 hello" {
		b.Fatalf("the room's fetch: %q", got)
	}
	var direct, request, fetched []time.Duration
	timed := func(ds *[]time.Duration, method, url, body string) {
		began := time.Now()
		doB(b, method, url, body)
		*ds = append(*ds, time.Since(began))
	}
	for b.Loop() {
		for range 1000 {
			timed(&direct, "GET", srv.URL, "")
			timed(&request, "GET", room+"/room", "")
			timed(&fetched, "POST", fetchURL, srv.URL)
		}
	}
	pct := func(ds []time.Duration, p int) float64 {
		s := slices.Sorted(slices.Values(ds))
		return float64(s[len(s)*p/100].Nanoseconds()) / 1e3
	}
	for _, m := range []struct {
		name string
		ds   []time.Duration
	}{{"direct", direct}, {"request", request}, {"fetch", fetched}} {
		b.ReportMetric(pct(m.ds, 50), m.name+"-p50-µs")
		b.ReportMetric(pct(m.ds, 99), m.name+"-p99-µs")
	}
	b.ReportMetric(pct(fetched, 50)/pct(direct, 50), "fetch-ratio")
	b.ReportMetric((pct(fetched, 50)-pct(request, 50))/pct(direct, 50), "added-ratio")
}
