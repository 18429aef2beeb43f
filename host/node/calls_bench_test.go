package node

import (
	"net/http"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/wasmkeep/wasmkeep/host/rooms"
	"github.com/wasmkeep/wasmkeep/host/store"
	"github.com/wasmkeep/wasmkeep/internal/testhttp"
)

// BenchmarkCall measures a call between rooms as the calling room sees it
// (its own clock around wk.Call), next to the same small exchange made
// from outside (an HTTP client's round trip to the callee room):
//
//   - outside: GET /actor/caller/c/count from a Go client (keep-alive):
//     the same small exchange with a room, made from outside;
//   - here: caller/a calls caller/b on the same node, 1,000 calls a run;
//   - elsewhere: caller/a on node n1 calls caller/b held by n2 (two
//     nodes of one process on one directory store);
//   - fan-out-100: caller/a calls caller/0 … caller/99 on its node, 16 at
//     a time, timed from outside.
//
// The rooms are resident: what is timed is the call, not a wake.
//
//	go test -run '^$' -bench 'BenchmarkCall$' -benchtime 5x ./host/node/
func BenchmarkCall(b *testing.B) {
	n := startNode(b, Config{})
	putClassB(b, n, "caller", "./testdata/guests/caller")
	b.Run("outside", func(b *testing.B) {
		url := n.URL() + "/actor/caller/c/count"
		doB(b, "GET", url, "")
		var ds []time.Duration
		for b.Loop() {
			for range 1000 {
				began := time.Now()
				doB(b, "GET", url, "")
				ds = append(ds, time.Since(began))
			}
		}
		reportPercentiles(b, ds)
	})
	b.Run("here", func(b *testing.B) { timeCalls(b, n.URL()+"/actor/caller/a", "caller/b") })
	b.Run("fan-out-100", func(b *testing.B) {
		warm(b, n.URL()+"/actor/caller/a/fan?to=caller&n=100", "")
		var ds []time.Duration
		for b.Loop() {
			began := time.Now()
			doB(b, "POST", n.URL()+"/actor/caller/a/fan?to=caller&n=100", "")
			ds = append(ds, time.Since(began))
		}
		reportPercentiles(b, ds)
	})
	b.Run("elsewhere", func(b *testing.B) {
		bucket := store.NewMem()
		cfg := func(name string) Config {
			return Config{Bucket: bucket, Cluster: testCluster(name), Rooms: rooms.Config{IdleTimeout: time.Hour}}
		}
		n1, n2 := startNode(b, cfg("n1")), startNode(b, cfg("n2"))
		putClassB(b, n1, "caller", "./testdata/guests/caller")
		for _, n := range []*Node{n1, n2} {
			for try := 0; ; try++ {
				resp, err := http.Get(n.URL() + "/readyz")
				if err == nil {
					resp.Body.Close()
					if resp.StatusCode == 200 {
						break
					}
				}
				if try == 1000 {
					b.Fatal("a node did not become ready")
				}
				time.Sleep(10 * time.Millisecond)
			}
		}
		doB(b, "GET", n2.URL()+"/actor/caller/b/count", "") // n2 takes b
		doB(b, "GET", n1.URL()+"/actor/caller/a/count", "") // n1 takes a
		timeCalls(b, n1.URL()+"/actor/caller/a", "caller/b")
	})
}

// timeCalls has the room at url time 1,000 calls to to, each run.
func timeCalls(b *testing.B, url, to string) {
	warm(b, url+"/call?to="+to, "echo:x")
	var p50, p99 []int
	for b.Loop() {
		got := doB(b, "POST", url+"/time?to="+to+"&n=1000", "echo:x")
		f := strings.Fields(got)
		if len(f) != 2 {
			b.Fatalf("/time answered %q", got)
		}
		a, _ := strconv.Atoi(f[0])
		c, _ := strconv.Atoi(f[1])
		p50, p99 = append(p50, a), append(p99, c)
	}
	b.ReportMetric(float64(median(p50)), "p50-µs")
	b.ReportMetric(float64(median(p99)), "p99-µs")
}

func median(xs []int) int {
	s := slices.Sorted(slices.Values(xs))
	return s[len(s)/2]
}

// warm sends one request and fails unless it is answered 200.
func warm(b *testing.B, url, body string) {
	b.Helper()
	doB(b, "POST", url, body)
}

func doB(b *testing.B, method, url, body string) string {
	b.Helper()
	r := testhttp.Do(b, method, url, []byte(body))
	if r.Status != 200 {
		b.Fatalf("%s %s: %d %s", method, url, r.Status, r.Body)
	}
	return r.Body
}

func putClassB(b *testing.B, n *Node, name, pkg string) {
	b.Helper()
	if r := testhttp.Do(b, "PUT", n.AdminURL()+"/admin/classes/"+name, buildGuest(b, pkg)); r.Status != http.StatusCreated {
		b.Fatalf("put class: %d %s", r.Status, r.Body)
	}
}
