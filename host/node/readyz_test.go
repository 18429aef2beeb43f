package node

import (
	"context"
	"net/http"
	"sync"
	"testing"

	"github.com/wasmkeep/wasmkeep/cluster"
	"github.com/wasmkeep/wasmkeep/host/store"
)

// putGate holds the writes of the keys hold picks while armed, until it
// is opened.
type putGate struct {
	store.Bucket
	hold    func(key string) bool
	mu      sync.Mutex
	armed   bool
	held    int
	release chan struct{}
	once    sync.Once
}

func newPutGate(b store.Bucket, armed bool, hold func(string) bool) *putGate {
	return &putGate{Bucket: b, hold: hold, armed: armed, release: make(chan struct{})}
}

func (g *putGate) arm() {
	g.mu.Lock()
	g.armed = true
	g.mu.Unlock()
}

func (g *putGate) open() { g.once.Do(func() { close(g.release) }) }

func (g *putGate) waiting() int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.held
}

func (g *putGate) Put(ctx context.Context, key string, body []byte, cond store.Cond) (string, error) {
	g.mu.Lock()
	hold := g.armed && g.hold(key)
	if hold {
		g.held++
	}
	g.mu.Unlock()
	if hold {
		<-g.release
	}
	return g.Bucket.Put(ctx, key, body, cond)
}

// readiness is what GET /readyz of n answers.
func readiness(t *testing.T, n *Node) httpResult {
	t.Helper()
	return do(t, http.MethodGet, n.URL()+"/readyz", nil)
}

// expectLive fails unless /healthz of n answers ok: liveness holds
// whatever the readiness.
func expectLive(t *testing.T, n *Node, what string) {
	t.Helper()
	if r := do(t, http.MethodGet, n.URL()+"/healthz", nil); r.Status != http.StatusOK || r.Body != "ok\n" {
		t.Fatalf("%s: /healthz answered %d %q", what, r.Status, r.Body)
	}
}

// TestReadyzDuringStop: a node's /readyz answers ok while it serves, and
// 503 "stopping" from the start of a clean stop, while the stop still
// hibernates its rooms (held here in their snapshot's write) and its
// listener still answers; /healthz stays ok.
func TestReadyzDuringStop(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	bucket, err := store.OpenDir(dir + "/store")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { bucket.Close() })
	gate := newPutGate(bucket, false, func(string) bool { return true })
	t.Cleanup(gate.open)
	n := startNode(t, Config{DataDir: dir, Bucket: gate})
	putHibernateClass(t, n, "counter", "./examples/counter") // the stop writes its state
	expect(t, http.StatusOK, http.MethodPost, n.URL()+"/actor/counter/a", nil)
	if r := readiness(t, n); r.Status != http.StatusOK || r.Body != "ok\n" {
		t.Fatalf("serving: /readyz answered %d %q", r.Status, r.Body)
	}

	gate.arm()
	stopped := make(chan error, 1)
	go func() { stopped <- n.Stop(context.Background()) }()
	waitFor(t, "the stop to write the room's state", func() bool { return gate.waiting() > 0 })
	if r := readiness(t, n); r.Status != http.StatusServiceUnavailable || r.Body != "not ready: stopping\n" {
		t.Fatalf("stopping: /readyz answered %d %q, want 503 \"not ready: stopping\"", r.Status, r.Body)
	}
	expectLive(t, n, "stopping")
	gate.open()
	if err := <-stopped; err != nil {
		t.Fatalf("stop: %v", err)
	}
	n.http = nil
}

// TestReadyzCluster: a cluster member's /readyz answers 503 until its
// lease is written (held here), ok once it is, and 503 while it drains;
// /healthz is ok throughout.
func TestReadyzCluster(t *testing.T) {
	t.Parallel()
	gate := newPutGate(store.NewMem(), true, func(key string) bool { return key == cluster.LeaseKey("n1") })
	t.Cleanup(gate.open)
	n := startNode(t, Config{Bucket: gate, Cluster: testCluster("n1")})
	waitFor(t, "the lease's first write", func() bool { return gate.waiting() > 0 })
	if r := readiness(t, n); r.Status != http.StatusServiceUnavailable || r.Body != "not ready: joining: the lease is not written yet\n" {
		t.Fatalf("joining: /readyz answered %d %q", r.Status, r.Body)
	}
	expectLive(t, n, "joining")

	gate.open()
	waitFor(t, "/readyz to answer ok once the lease is written", func() bool {
		r := readiness(t, n)
		return r.Status == http.StatusOK && r.Body == "ok\n"
	})

	if err := n.Member().Drain(true); err != nil {
		t.Fatal(err)
	}
	if r := readiness(t, n); r.Status != http.StatusServiceUnavailable || r.Body != "not ready: draining\n" {
		t.Fatalf("draining: /readyz answered %d %q", r.Status, r.Body)
	}
	expectLive(t, n, "draining")
	if err := n.Member().Drain(false); err != nil {
		t.Fatal(err)
	}
	if r := readiness(t, n); r.Status != http.StatusOK {
		t.Fatalf("undrained: /readyz answered %d %q", r.Status, r.Body)
	}
}
