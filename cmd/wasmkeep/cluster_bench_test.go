//go:build unix

package main

// Benchmarks of a cluster of three real `wasmkeep serve` processes on one
// store, built on the end-to-end harness (cluster_e2e_test.go): what a
// forward costs a request and a socket message, what a wake on another
// node costs in bucket requests, and what an idle node costs its bucket
// a minute. The figures are in docs/PERFORMANCE.md, "The cluster".
//
// They are Go benchmarks, not a `wasmkeep bench` mode, because they need
// what only the test harness has: node processes started and stopped on a
// shared store, the store read directly (records), and a versitygw server
// (WASMKEEP_TEST_STORE=s3) with a counting proxy in front of it. Each one
// uses b.Loop, so its cluster is started once per run; give -benchtime as
// a count (2000x), since an iteration is several requests.
//
// On versitygw every node reaches the bucket through a proxy of its own
// that counts its requests by key (record, lease, manifest, segment,
// class, listing), which the node's /metrics cannot tell apart.

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"path"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gobwas/ws"

	"github.com/wasmkeep/wasmkeep/host/snapshot"
	"github.com/wasmkeep/wasmkeep/host/store"

	"github.com/wasmkeep/wasmkeep/internal/wstest"
)

// benchClients is how many clients load a relay benchmark at once.
const benchClients = 8

// benchTTL is the benchmarks' lease time: the default, so that the
// background requests are those of a cluster as it runs by default.
const benchTTL = 10 * time.Second

// idleWindow is how long the idle benchmark watches a node's requests.
const idleWindow = time.Minute

// keyCounts counts the bucket requests one node sent through its proxy,
// by kind ("GET record", "PUT lease if-match", "LIST nodes/", ...).
type keyCounts struct {
	mu     sync.Mutex
	node   string
	bucket string // the store's bucket
	prefix string // and the prefix of its keys, "wk/"
	counts map[string]int
	keys   map[string]int // by method and key: "GET rooms/echo/R/owner"
	// refused are the keys whose PUTs the proxy answers 503 without
	// passing them on (refusePuts), with the count of refusals.
	refused map[string]int
}

// refusePuts makes the proxy refuse every PUT of key (without the
// store's prefix) with 503, never sending it on, until acceptPuts.
func (k *keyCounts) refusePuts(key string) {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.refused[key] = 0
}

// acceptPuts ends refusePuts of key and returns how many PUTs it refused.
func (k *keyCounts) acceptPuts(key string) int {
	k.mu.Lock()
	defer k.mu.Unlock()
	n := k.refused[key]
	delete(k.refused, key)
	return n
}

// refuse reports whether the proxy refuses r, counting it.
func (k *keyCounts) refuse(r *http.Request) bool {
	if r.Method != http.MethodPut {
		return false
	}
	key := strings.TrimPrefix(r.URL.Path, "/"+k.bucket+"/"+k.prefix)
	k.mu.Lock()
	defer k.mu.Unlock()
	n, ok := k.refused[key]
	if ok {
		k.refused[key] = n + 1
	}
	return ok
}

// key is how many requests of method for key (without the store's
// prefix) the node sent so far.
func (k *keyCounts) key(method, key string) int {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.keys[method+" "+key]
}

// snapshot copies the counts.
func (k *keyCounts) snapshot() map[string]int {
	k.mu.Lock()
	defer k.mu.Unlock()
	out := make(map[string]int, len(k.counts))
	for kind, n := range k.counts {
		out[kind] = n
	}
	return out
}

// kind names a request to the bucket by method, the key's kind and the
// write's condition.
func (k *keyCounts) kind(r *http.Request) string {
	q := r.URL.Query()
	if r.Method == http.MethodGet && q.Has("list-type") {
		first, _, _ := strings.Cut(strings.TrimPrefix(q.Get("prefix"), k.prefix), "/")
		return "LIST " + first + "/"
	}
	key, ok := strings.CutPrefix(r.URL.Path, "/"+k.bucket+"/"+k.prefix)
	if !ok {
		return r.Method + " other"
	}
	var what string
	switch {
	case key == "nodes/"+k.node:
		what = "own lease"
	case strings.HasPrefix(key, "nodes/"):
		what = "peer lease"
	case strings.HasPrefix(key, "rooms/") && strings.HasSuffix(key, "/owner"):
		what = "record"
	case strings.HasPrefix(key, "rooms/") && strings.HasSuffix(key, "/manifest"):
		what = "manifest"
	case strings.HasPrefix(key, "rooms/") && strings.Contains(key, "/seg/"):
		what = "segment"
	case strings.HasPrefix(key, "classes/"):
		what = "class"
	case strings.HasPrefix(key, "alarms/"):
		what = "alarm entry"
	default:
		what = path.Dir(key) + "/…"
	}
	switch {
	case r.Header.Get("If-Match") != "":
		what += " if-match"
	case r.Header.Get("If-None-Match") != "":
		what += " if-none-match"
	}
	return r.Method + " " + what
}

// startKeyProxy starts a proxy to the S3 endpoint target that counts the
// requests of node by kind, and refuses the PUTs of keys it is told to. The client's Host is kept, so that its
// signature still checks.
func startKeyProxy(tb testing.TB, target, bucket, prefix, node string) (*httptest.Server, *keyCounts) {
	tb.Helper()
	u, err := url.Parse(target)
	if err != nil {
		tb.Fatal(err)
	}
	k := &keyCounts{node: node, bucket: bucket, prefix: prefix + "/", counts: map[string]int{}, keys: map[string]int{}, refused: map[string]int{}}
	p := &httputil.ReverseProxy{Rewrite: func(r *httputil.ProxyRequest) {
		r.SetURL(u)
		r.Out.Host = r.In.Host
		kind := k.kind(r.In)
		key := strings.TrimPrefix(r.In.URL.Path, "/"+k.bucket+"/"+k.prefix)
		k.mu.Lock()
		k.counts[kind]++
		k.keys[r.In.Method+" "+key]++
		k.mu.Unlock()
	}}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if k.refuse(r) {
			w.Header().Set("Content-Type", "application/xml")
			w.WriteHeader(http.StatusServiceUnavailable)
			io.WriteString(w, `<?xml version="1.0" encoding="UTF-8"?><Error><Code>ServiceUnavailable</Code><Message>refused by the test's proxy</Message></Error>`)
			return
		}
		p.ServeHTTP(w, r)
	}))
	tb.Cleanup(srv.Close)
	return srv, k
}

// benchCluster starts three nodes with extra serve flags; on versitygw
// (WASMKEEP_TEST_STORE=s3) each reaches the bucket through a counting
// proxy of its own, whose counts are returned by node name.
func benchCluster(b *testing.B, args ...string) (*testCluster, map[string]*keyCounts) {
	b.Helper()
	c := newTestCluster(b, benchTTL, testStoreS3(b))
	c.args = args
	via := proxyPoint(c)
	proxies := map[string]*keyCounts{}
	for i := 1; i <= 3; i++ {
		name := fmt.Sprintf("n%d", i)
		if via != nil {
			proxies[name] = via(name)
		}
		c.add(name)
	}
	return c, proxies
}

// proxyPoint returns, for a cluster on S3, a function that points the
// next node started at a counting proxy of its own to the cluster's
// endpoint (the store flags are "--store s3://BUCKET/PREFIX --s3-endpoint
// URL"); nil for a directory store.
func proxyPoint(c *testCluster) func(node string) *keyCounts {
	c.t.Helper()
	i := slices.Index(c.store, "--s3-endpoint")
	if i < 0 {
		return nil
	}
	bucket, prefix, _ := strings.Cut(strings.TrimPrefix(c.store[1], "s3://"), "/")
	endpoint := c.store[i+1]
	c.store = slices.Clone(c.store)
	return func(node string) *keyCounts {
		srv, k := startKeyProxy(c.t, endpoint, bucket, prefix, node)
		c.store[i+1] = srv.URL
		return k
	}
}

// metricsOf reads a node's /metrics: each sample by its name and labels.
func metricsOf(url string) (map[string]float64, error) {
	resp, err := e2eClient.Get(url + "/metrics")
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		body, _ := io.ReadAll(resp.Body)
		return nil, fmt.Errorf("GET /metrics: %d %s", resp.StatusCode, body)
	}
	out := map[string]float64{}
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		line := sc.Text()
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		i := strings.LastIndexByte(line, ' ')
		if i < 0 {
			continue
		}
		v, err := strconv.ParseFloat(line[i+1:], 64)
		if err != nil {
			return nil, fmt.Errorf("metrics line %q: %v", line, err)
		}
		out[line[:i]] = v
	}
	return out, sc.Err()
}

// mustMetrics is metricsOf, failing tb.
func mustMetrics(tb testing.TB, n *clusterProc) map[string]float64 {
	tb.Helper()
	m, err := metricsOf(n.url)
	if err != nil {
		tb.Fatalf("%s: %v", n.name, err)
	}
	return m
}

// bucketOps are the bucket requests a node made, by operation, from its
// wasmkeep_bucket_requests_total{op,outcome}.
type bucketOps struct{ get, put, del, list float64 }

func opsOf(m map[string]float64) bucketOps {
	var o bucketOps
	for k, v := range m {
		name, labels, ok := strings.Cut(k, "{")
		if !ok || name != "wasmkeep_bucket_requests_total" {
			continue
		}
		switch {
		case strings.Contains(labels, `op="get"`):
			o.get += v
		case strings.Contains(labels, `op="put"`):
			o.put += v
		case strings.Contains(labels, `op="delete"`):
			o.del += v
		case strings.Contains(labels, `op="list"`):
			o.list += v
		}
	}
	return o
}

func (o bucketOps) minus(p bucketOps) bucketOps {
	return bucketOps{o.get - p.get, o.put - p.put, o.del - p.del, o.list - p.list}
}

func (o bucketOps) String() string {
	return fmt.Sprintf("%g GET, %g PUT, %g DELETE, %g LIST", o.get, o.put, o.del, o.list)
}

// sumOf adds the samples of metric name whose labels contain every one of
// labels.
func sumOf(m map[string]float64, name string, labels ...string) float64 {
	var sum float64
	for k, v := range m {
		n, l, _ := strings.Cut(k, "{")
		if n != name {
			continue
		}
		if !slices.ContainsFunc(labels, func(want string) bool { return !strings.Contains(l, want) }) {
			sum += v
		}
	}
	return sum
}

// countsDelta is after minus before, kinds with no change left out.
func countsDelta(before, after map[string]int) map[string]int {
	out := map[string]int{}
	for kind, n := range after {
		if d := n - before[kind]; d != 0 {
			out[kind] = d
		}
	}
	return out
}

// formatCounts prints counts (divided by per) sorted by kind.
func formatCounts(counts map[string]int, per float64) string {
	kinds := make([]string, 0, len(counts))
	for kind := range counts {
		kinds = append(kinds, kind)
	}
	sort.Strings(kinds)
	var sb strings.Builder
	for _, kind := range kinds {
		fmt.Fprintf(&sb, "\n  %-28s %8.2f", kind, float64(counts[kind])/per)
	}
	return sb.String()
}

// latencies collects round trips by path, from several goroutines.
type latencies struct {
	mu sync.Mutex
	by map[string][]time.Duration
}

func (l *latencies) add(path string, d time.Duration) {
	l.mu.Lock()
	if l.by == nil {
		l.by = map[string][]time.Duration{}
	}
	l.by[path] = append(l.by[path], d)
	l.mu.Unlock()
}

// report adds each path's p50 and p99 (µs) to b's results, and each
// relayed path's over its direct one ("GET relayed" over "GET direct"),
// and logs them as a table.
func (l *latencies) report(b *testing.B, paths ...string) {
	b.Helper()
	us := func(d time.Duration) float64 { return float64(d.Nanoseconds()) / 1e3 }
	var sb strings.Builder
	fmt.Fprintf(&sb, "%-16s %6s %9s %9s", "path", "count", "p50 µs", "p99 µs")
	for _, p := range paths {
		ds := l.by[p]
		if len(ds) == 0 {
			b.Fatalf("no round trips of %s", p)
		}
		p50, p99 := percentile(ds, 50), percentile(ds, 99)
		unit := strings.ReplaceAll(p, " ", "-")
		b.ReportMetric(us(p50), unit+"-p50-µs")
		b.ReportMetric(us(p99), unit+"-p99-µs")
		fmt.Fprintf(&sb, "\n%-16s %6d %9.0f %9.0f", p, len(ds), us(p50), us(p99))
		if direct, ok := strings.CutSuffix(p, " relayed"); ok {
			d := l.by[direct+" direct"]
			r50, r99 := us(p50)/us(percentile(d, 50)), us(p99)/us(percentile(d, 99))
			b.ReportMetric(r50, strings.ReplaceAll(direct, " ", "-")+"-p50-ratio")
			b.ReportMetric(r99, strings.ReplaceAll(direct, " ", "-")+"-p99-ratio")
			fmt.Fprintf(&sb, "   relayed/direct: p50 %.2f, p99 %.2f", r50, r99)
		}
	}
	b.Logf("round trips, %d clients at once:\n%s", benchClients, sb.String())
}

// firstErr keeps the first error of several goroutines.
type firstErr struct {
	once sync.Once
	err  error
}

func (f *firstErr) set(err error) { f.once.Do(func() { f.err = err }) }

// runClients runs one worker per client, each taking the iterations of
// b.Loop from a channel (an iteration is a round of requests), and fails
// b with the first error a worker returned.
func runClients(b *testing.B, work func(client, iteration int) error) {
	b.Helper()
	iterations := make(chan int)
	var wg sync.WaitGroup
	var failed firstErr
	for client := range benchClients {
		wg.Go(func() {
			for i := range iterations {
				if failed.err != nil {
					continue
				}
				if err := work(client, i); err != nil {
					failed.set(err)
				}
			}
		})
	}
	i := 0
	for b.Loop() {
		iterations <- i
		i++
	}
	close(iterations)
	wg.Wait()
	if failed.err != nil {
		b.Fatal(failed.err)
	}
}

// BenchmarkClusterRelayHTTP: eight clients, each with a counter room of
// its own held by n1, send GETs and POSTs to it directly (to n1) and
// through a non-owner (n2 or n3, which forwards them), interleaved: an
// iteration is one of each of the four, in an order that turns with the
// iteration. Reports each path's p50/p99 and relayed over direct, and the
// bucket requests of the forwarding nodes per relayed request.
func BenchmarkClusterRelayHTTP(b *testing.B) {
	c, proxies := benchCluster(b)
	owner := c.nodes[0]
	c.putClass(owner, "counter", "./examples/counter", false)
	rooms := make([]string, benchClients)
	counts := make([]int, benchClients)
	for i := range rooms {
		rooms[i] = fmt.Sprintf("relay%d", i)
		increment(b, owner, rooms[i], 1, 10*time.Second)
		counts[i] = 1
		if got := c.owner("counter", rooms[i]); got != owner {
			b.Fatalf("room %s is held by %s, want %s", rooms[i], got.name, owner.name)
		}
	}
	client := &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{MaxIdleConnsPerHost: 2 * benchClients}}
	do := func(method, url string) (string, error) {
		req, err := http.NewRequest(method, url, nil)
		if err != nil {
			return "", err
		}
		resp, err := client.Do(req)
		if err != nil {
			return "", err
		}
		defer resp.Body.Close()
		body, err := io.ReadAll(resp.Body)
		if err == nil && resp.StatusCode != http.StatusOK {
			err = fmt.Errorf("%s %s: %d %s", method, url, resp.StatusCode, body)
		}
		return string(body), err
	}
	forwarders := c.others(owner.name)
	before := map[string]map[string]float64{}
	keysBefore := map[string]map[string]int{}
	for _, n := range forwarders {
		before[n.name] = mustMetrics(b, n)
		if k := proxies[n.name]; k != nil {
			keysBefore[n.name] = k.snapshot()
		}
	}
	var lat latencies
	runClients(b, func(client, i int) error {
		room := "/actor/counter/" + rooms[client]
		relay := forwarders[client%len(forwarders)]
		for j := range 4 {
			step := (i + j) % 4
			method, node, path := "GET", owner, "GET direct"
			if step >= 2 {
				method, path = "POST", "POST direct"
			}
			if step%2 == 1 {
				node, path = relay, strings.Replace(path, "direct", "relayed", 1)
			}
			start := time.Now()
			body, err := do(method, node.url+room)
			if err != nil {
				return err
			}
			lat.add(path, time.Since(start))
			// The client is its room's only writer: a POST answers the
			// next count, a GET the current one.
			want := counts[client]
			if method == "POST" {
				want++
				counts[client] = want
			}
			if body != strconv.Itoa(want) {
				return fmt.Errorf("%s %s through %s: %q, want %d", method, room, node.name, body, want)
			}
		}
		return nil
	})
	lat.report(b, "GET direct", "GET relayed", "POST direct", "POST relayed")
	relayed := float64(2 * b.N)
	var ops bucketOps
	var forwarded float64
	keys := map[string]int{}
	for _, n := range forwarders {
		after := mustMetrics(b, n)
		d := opsOf(after).minus(opsOf(before[n.name]))
		ops = bucketOps{ops.get + d.get, ops.put + d.put, ops.del + d.del, ops.list + d.list}
		forwarded += sumOf(after, "wasmkeep_cluster_forwards_total", `kind="http"`, `outcome="ok"`) -
			sumOf(before[n.name], "wasmkeep_cluster_forwards_total", `kind="http"`, `outcome="ok"`)
		if k := proxies[n.name]; k != nil {
			for kind, d := range countsDelta(keysBefore[n.name], k.snapshot()) {
				keys[kind] += d
			}
		}
	}
	if forwarded != relayed {
		b.Fatalf("the forwarding nodes forwarded %g requests, want the %g relayed", forwarded, relayed)
	}
	b.ReportMetric(ops.get/relayed, "fwd-gets/relayed")
	b.Logf("bucket requests of the forwarding nodes per relayed request (lease duties included): %.3f GET, %.3f PUT, %.3f LIST",
		ops.get/relayed, ops.put/relayed, ops.list/relayed)
	if len(keys) > 0 {
		b.Logf("by key, per relayed request:%s", formatCounts(keys, relayed))
	}
}

// BenchmarkClusterRelayWebSocket: eight clients, each with an echo room
// held by n1 and two sockets to it, one opened on n1 and one through a
// non-owner (n2 or n3, which relays it), send a message on each and wait
// for its echo, in an order that turns with the iteration. Reports each
// socket's p50/p99 round trip and relayed over direct. The nodes run
// with --socket-message-rate 0: the load is over the default rate.
func BenchmarkClusterRelayWebSocket(b *testing.B) {
	c, _ := benchCluster(b, "--socket-message-rate", "0")
	owner := c.nodes[0]
	c.putClass(owner, "echo", "./testdata/guests/echo", false)
	forwarders := c.others(owner.name)
	type pair struct{ direct, relayed *wstest.Client }
	pairs := make([]pair, benchClients)
	for i := range pairs {
		room := fmt.Sprintf("/actor/echo/ws%d", i)
		if status, _, _ := untilServed(b, "GET", owner.url+room+"/room", 10*time.Second); status != 200 {
			b.Fatalf("GET %s through %s: %d", room, owner.name, status)
		}
		if got := c.owner("echo", fmt.Sprintf("ws%d", i)); got != owner {
			b.Fatalf("room %s is held by %s, want %s", room, got.name, owner.name)
		}
		pairs[i] = pair{wstest.Dial(b, owner.url+room), wstest.Dial(b, forwarders[i%2].url+room)}
		for _, ws := range []*wstest.Client{pairs[i].direct, pairs[i].relayed} {
			if got := ws.ReadText(); !strings.HasPrefix(got, "open ") {
				b.Fatalf("the socket's first message is %q", got)
			}
		}
	}
	var relays float64
	for _, n := range forwarders {
		relays += mustMetrics(b, n)["wasmkeep_cluster_relayed_sockets"]
	}
	if relays != benchClients {
		b.Fatalf("the non-owners relay %g sockets, want %d", relays, benchClients)
	}
	var lat latencies
	runClients(b, func(client, i int) error {
		p := pairs[client]
		for j := range 2 {
			sock, path := p.direct, "WS direct"
			if (i+j)%2 == 1 {
				sock, path = p.relayed, "WS relayed"
			}
			msg := fmt.Sprintf("%d-%d-%d", client, i, j)
			start := time.Now()
			if err := sock.SendErr(msg); err != nil {
				return fmt.Errorf("%s: send: %v", path, err)
			}
			op, data, err := sock.Read()
			if err != nil {
				return fmt.Errorf("%s: read: %v", path, err)
			}
			lat.add(path, time.Since(start))
			if op != ws.OpText || string(data) != msg {
				return fmt.Errorf("%s: sent %q, echoed %q", path, msg, data)
			}
		}
		return nil
	})
	lat.report(b, "WS direct", "WS relayed")
}

// BenchmarkClusterWake: a counter room is hibernated where it runs (its
// record released), then woken by a GET through another node, which
// takes the room; the next iteration hibernates it there and wakes it
// on the next node, round the three. Reports the waker's bucket requests
// per wake from its /metrics (the median, since the nodes' lease duties
// run meanwhile), and, on versitygw, by key from its proxy. "single" is
// the same wake on one node of no cluster: what the wake reads of the
// snapshot, which the cluster's wake adds the record's requests to.
func BenchmarkClusterWake(b *testing.B) {
	b.Run("single", func(b *testing.B) {
		c := newTestCluster(b, benchTTL, testStoreS3(b))
		proxies := map[string]*keyCounts{}
		if via := proxyPoint(c); via != nil {
			proxies["single"] = via("single")
		}
		// No --node: the secret in c.env is not given either, and a
		// directory store is the data directory's own.
		n := &clusterProc{name: "single", data: b.TempDir()}
		args := []string{"--data", n.data, "--idle-timeout", "1h"}
		if len(proxies) > 0 {
			args = append(args, c.store...)
		}
		n.proc = startNode(b, nodeOpts{args: args, env: c.env[1:]})
		if len(proxies) == 0 {
			// The test reads the node's own store (flock(2) keeps it
			// safe beside the node).
			bucket, err := store.OpenDir(filepath.Join(n.data, "store"))
			if err != nil {
				b.Fatal(err)
			}
			b.Cleanup(func() { bucket.Close() })
			c.bucket = bucket
		}
		c.nodes = []*clusterProc{n}
		c.putClass(n, "counter", "./examples/counter", false)
		wakes(b, c, proxies, func(int) *clusterProc { return n })
	})
	b.Run("cluster", func(b *testing.B) {
		c, proxies := benchCluster(b)
		c.putClass(c.nodes[0], "counter", "./examples/counter", false)
		wakes(b, c, proxies, func(i int) *clusterProc { return c.nodes[(i+1)%3] })
	})
}

// wakes runs the wake benchmark on c: the room is created through the
// first node, then hibernated where it runs and woken through next(i)
// every iteration. proxies, on S3, count each node's requests by key.
func wakes(b *testing.B, c *testCluster, proxies map[string]*keyCounts, next func(i int) *clusterProc) {
	b.Helper()
	const room = "wake"
	url := "/actor/counter/" + room
	increment(b, c.nodes[0], room, 1, 10*time.Second)
	where := c.nodes[0]
	clustered := len(c.nodes) > 1
	var ds []time.Duration
	var perWake []bucketOps
	var reads []float64 // the snapshot's objects, as the test read them
	keys := map[string]int{}
	i := 0
	for b.Loop() {
		b.StopTimer()
		if status, body, _, err := ask("POST", where.url+"/admin/rooms/counter/"+room+"/hibernate"); err != nil || status != 200 {
			b.Fatalf("hibernate on %s: %d %v %s", where.name, status, err, body)
		}
		if clustered {
			waitUntil(b, 10*time.Second, "the record freed by the hibernation", func() bool {
				rec, ok := c.record("counter", room)
				return ok && rec.Free
			})
		}
		waker := next(i)
		i++
		reads = append(reads, snapshotReads(b, c.bucket, room))
		before := opsOf(mustMetrics(b, waker))
		var keysBefore map[string]int
		if k := proxies[waker.name]; k != nil {
			keysBefore = k.snapshot()
		}
		b.StartTimer()
		start := time.Now()
		status, body, header, err := ask("GET", waker.url+url)
		took := time.Since(start)
		b.StopTimer()
		if err != nil || status != 200 || body != "1" {
			b.Fatalf("GET %s through %s: %d %q %v", url, waker.name, status, body, err)
		}
		if clustered {
			if n := header.Get("X-Wasmkeep-Node"); n != "" && n != waker.name {
				b.Fatalf("the wake through %s was answered by %s", waker.name, n)
			}
			if got := c.owner("counter", room); got != waker {
				b.Fatalf("after the wake through %s the record names %s", waker.name, got.name)
			}
		}
		perWake = append(perWake, opsOf(mustMetrics(b, waker)).minus(before))
		if k := proxies[waker.name]; k != nil {
			for kind, d := range countsDelta(keysBefore, k.snapshot()) {
				keys[kind] += d
			}
		}
		ds = append(ds, took)
		where = waker
		b.StartTimer()
	}
	median := func(f func(bucketOps) float64) float64 {
		vs := make([]float64, len(perWake))
		for i, o := range perWake {
			vs[i] = f(o)
		}
		slices.Sort(vs)
		return vs[len(vs)/2]
	}
	mean := func(f func(bucketOps) float64) float64 {
		var sum float64
		for _, o := range perWake {
			sum += f(o)
		}
		return sum / float64(len(perWake))
	}
	get, put := func(o bucketOps) float64 { return o.get }, func(o bucketOps) float64 { return o.put }
	list, del := func(o bucketOps) float64 { return o.list }, func(o bucketOps) float64 { return o.del }
	b.ReportMetric(float64(percentile(ds, 50).Microseconds()), "p50-µs")
	b.ReportMetric(float64(percentile(ds, 99).Microseconds()), "p99-µs")
	b.ReportMetric(median(get), "gets/wake")
	b.ReportMetric(median(put), "puts/wake")
	b.ReportMetric(median(list), "lists/wake")
	var others []float64 // the waker's GETs less the snapshot's objects
	var sumReads float64
	for i, o := range perWake {
		others = append(others, o.get-reads[i])
		sumReads += reads[i]
	}
	slices.Sort(others)
	b.ReportMetric(others[len(others)/2], "other-gets/wake")
	b.Logf("the snapshot's objects (manifest and the segments it names, read from the store by the test): mean %.2f; the waker's GETs less those: median %g",
		sumReads/float64(len(reads)), others[len(others)/2])
	b.Logf("%d wakes: p50 %v, p99 %v; bucket requests of the waking node per wake: median %g GET, %g PUT, %g LIST, %g DELETE; mean %.2f GET, %.2f PUT, %.2f LIST, %.2f DELETE",
		len(ds), percentile(ds, 50), percentile(ds, 99), median(get), median(put), median(list), median(del), mean(get), mean(put), mean(list), mean(del))
	if len(keys) > 0 {
		b.Logf("by key, per wake (mean):%s", formatCounts(keys, float64(len(ds))))
	}
}

// BenchmarkClusterIdle: three nodes of no room at the default lease time
// (10 s); an iteration watches them for a minute and reports each
// node's bucket requests in it, by operation, from its /metrics (and,
// on versitygw, by key from its proxy). What to expect, at ttl T: a
// renewal of the node's own lease every T/3, a listing of the leases
// every T/3, and a GET of each peer lease whose version changed since
// the last listing (each peer renews every T/3 too): 18 PUTs, 18 LISTs
// and 36 GETs a minute at 10 s, with two peers. A node's first orphan
// sweep, a minute after it starts, adds a LIST of the rooms.
func BenchmarkClusterIdle(b *testing.B) {
	c, proxies := benchCluster(b)
	for b.Loop() {
		all, minutes := idleMinute(b, c, proxies)
		per := minutes * float64(len(c.nodes))
		b.ReportMetric(all.get/per, "gets/node/min")
		b.ReportMetric(all.put/per, "puts/node/min")
		b.ReportMetric(all.list/per, "lists/node/min")
		b.ReportMetric(all.del/per, "deletes/node/min")
	}
}

// counted is every node's metrics and requests by key at one time.
type counted struct {
	metrics map[string]map[string]float64
	keys    map[string]map[string]int
}

// countNow reads every node's metrics, and its requests by key where a
// proxy counts them.
func countNow(b *testing.B, c *testCluster, proxies map[string]*keyCounts) counted {
	b.Helper()
	now := counted{metrics: map[string]map[string]float64{}, keys: map[string]map[string]int{}}
	for _, n := range c.nodes {
		now.metrics[n.name] = mustMetrics(b, n)
		if k := proxies[n.name]; k != nil {
			now.keys[n.name] = k.snapshot()
		}
	}
	return now
}

// idleMinute watches the nodes for idleWindow, logs each one's bucket
// requests a minute (and by key, where counted), and returns them all
// with the minutes watched.
func idleMinute(b *testing.B, c *testCluster, proxies map[string]*keyCounts) (bucketOps, float64) {
	b.Helper()
	before := countNow(b, c, proxies)
	start := time.Now()
	time.Sleep(idleWindow) // the measurement: a minute of an idle node
	minutes := time.Since(start).Minutes()
	var all bucketOps
	for _, n := range c.nodes {
		after := mustMetrics(b, n)
		was := before.metrics[n.name]
		d := opsOf(after).minus(opsOf(was))
		renewals := sumOf(after, "wasmkeep_cluster_lease_renewals_total") - sumOf(was, "wasmkeep_cluster_lease_renewals_total")
		b.Logf("%s, a minute: %.1f GET, %.1f PUT, %.1f LIST, %.1f DELETE (%.1f lease writes counted); %v alarms pending",
			n.name, d.get/minutes, d.put/minutes, d.list/minutes, d.del/minutes, renewals/minutes, after["wasmkeep_alarms_pending"])
		if k := proxies[n.name]; k != nil {
			b.Logf("%s by key, a minute:%s", n.name, formatCounts(countsDelta(before.keys[n.name], k.snapshot()), minutes))
		}
		all = all.plus(d)
	}
	return all, minutes
}

// snapshotReads is how many objects a wake of the counter room reads for
// its snapshot, from the store as it is: the manifest and each segment
// it names.
func snapshotReads(tb testing.TB, bucket store.Bucket, room string) float64 {
	tb.Helper()
	body, _, err := bucket.Get(context.Background(), "rooms/counter/"+room+"/manifest")
	if err != nil {
		tb.Fatalf("the room's manifest: %v", err)
	}
	m, err := snapshot.DecodeManifest(body)
	if err != nil {
		tb.Fatal(err)
	}
	return float64(1 + len(m.SegmentIDs()))
}
