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
	"github.com/wasmkeep/wasmkeep/internal/testwasm"
)

// BenchmarkCall measures a call between rooms, in Go and in
// AssemblyScript, against the same small exchange made from outside:
//
//   - request: GET /actor/<class>/c/count from a Go client (keep-alive),
//     the exchange with a room made from outside;
//   - request+call-here: POST /actor/<class>/a/call?to=<class>/b, which
//     makes the room a call b ("echo:x") on the same node: less the
//     request above, what a call adds;
//   - request+call-elsewhere: the same through node n1 with b held by n2
//     (two nodes of one process on one in-memory store);
//   - call-here, call-elsewhere (Go): the call alone, as the calling room
//     sees it (its own clock around wk.Call), 1,000 calls a run;
//   - fan-out-100 (Go): caller/a calls caller/0 … caller/99 on its node,
//     16 at a time, timed from outside.
//
// The rooms are resident: what is timed is the call, not a wake.
//
//	go test -run '^$' -bench 'BenchmarkCall$' -benchtime 5x ./host/node/
func BenchmarkCall(b *testing.B) {
	bucket := store.NewMem()
	cfg := func(name string) Config {
		return Config{Bucket: bucket, Cluster: testCluster(name), Rooms: rooms.Config{IdleTimeout: time.Hour}}
	}
	n1, n2 := startNode(b, cfg("n1")), startNode(b, cfg("n2"))
	putClassB(b, n1, "caller", buildGuest(b, "./testdata/guests/caller"))
	putClassB(b, n1, "ascaller", testwasm.AssemblyScript(b, asCaller))
	for _, n := range []*Node{n1, n2} {
		waitReadyB(b, n)
	}
	for _, class := range []string{"caller", "ascaller"} {
		// a and c run on n1, b on n2 (the first event of each takes it).
		doB(b, "GET", n1.URL()+"/actor/"+class+"/a/count", "")
		doB(b, "GET", n1.URL()+"/actor/"+class+"/c/count", "")
		doB(b, "GET", n2.URL()+"/actor/"+class+"/b/count", "")
		doB(b, "GET", n1.URL()+"/actor/"+class+"/d/count", "")
		lang := map[string]string{"caller": "go", "ascaller": "as"}[class]
		b.Run(lang+"/request", func(b *testing.B) { timeRequests(b, "GET", n1.URL()+"/actor/"+class+"/c/count", "") })
		b.Run(lang+"/request+call-here", func(b *testing.B) {
			timeRequests(b, "POST", n1.URL()+"/actor/"+class+"/a/call?to="+class+"/d", "echo:x")
		})
		b.Run(lang+"/request+call-elsewhere", func(b *testing.B) {
			timeRequests(b, "POST", n1.URL()+"/actor/"+class+"/a/call?to="+class+"/b", "echo:x")
		})
	}
	b.Run("go/call-here", func(b *testing.B) { timeCalls(b, n1.URL()+"/actor/caller/a", "caller/d") })
	b.Run("go/call-elsewhere", func(b *testing.B) { timeCalls(b, n1.URL()+"/actor/caller/a", "caller/b") })
	b.Run("go/fan-out-100", func(b *testing.B) {
		url := n1.URL() + "/actor/caller/f/fan?to=caller&n=100"
		doB(b, "POST", url, "")
		var ds []time.Duration
		for b.Loop() {
			began := time.Now()
			doB(b, "POST", url, "")
			ds = append(ds, time.Since(began))
		}
		reportPercentiles(b, ds)
	})
}

// timeRequests times 1,000 requests a run, from outside.
func timeRequests(b *testing.B, method, url, body string) {
	doB(b, method, url, body)
	var ds []time.Duration
	for b.Loop() {
		for range 1000 {
			began := time.Now()
			doB(b, method, url, body)
			ds = append(ds, time.Since(began))
		}
	}
	reportPercentiles(b, ds)
}

func waitReadyB(b *testing.B, n *Node) {
	for try := 0; ; try++ {
		if r := testhttp.Do(b, "GET", n.URL()+"/readyz", nil); r.Status == 200 {
			return
		}
		if try == 1000 {
			b.Fatal("the node did not become ready")
		}
		time.Sleep(10 * time.Millisecond)
	}
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

func putClassB(b *testing.B, n *Node, name string, wasm []byte) {
	b.Helper()
	if r := testhttp.Do(b, "PUT", n.AdminURL()+"/admin/classes/"+name, wasm); r.Status != http.StatusCreated {
		b.Fatalf("put class: %d %s", r.Status, r.Body)
	}
}
