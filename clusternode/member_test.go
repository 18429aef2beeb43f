package clusternode

// In-process clusters: two or three real nodes (host/node, with the
// membership built as cmd/wasmkeep builds it) on one shared store.Mem, with
// a real clock and short leases. Each node reaches the bucket through a
// store.Faulty of its own, which counts its requests for ownership records
// and can cut it off the bucket.

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/wasmkeep/wasmkeep/abi"
	"github.com/wasmkeep/wasmkeep/cluster"
	cm "github.com/wasmkeep/wasmkeep/cluster/member"
	"github.com/wasmkeep/wasmkeep/host/engine"
	"github.com/wasmkeep/wasmkeep/host/node"
	"github.com/wasmkeep/wasmkeep/host/rooms"
	"github.com/wasmkeep/wasmkeep/host/server"
	"github.com/wasmkeep/wasmkeep/host/store"
	"github.com/wasmkeep/wasmkeep/internal/testhttp"
	"github.com/wasmkeep/wasmkeep/internal/testwasm"
	"github.com/wasmkeep/wasmkeep/internal/wstest"
)

// testSecret is the test clusters' secret (16 bytes or more, as the CLI
// asks).
var testSecret = []byte("member-test-secret-0123456789")

// link is one node's way to the shared bucket: it counts the node's
// requests for ownership records and can refuse every request (the node
// cut off the bucket), or only the writes of chosen keys.
type link struct {
	*store.Faulty
	cut        atomic.Bool
	refused    sync.Map // key → *atomic.Int64: its PUTs are refused, and counted
	loseAnswer sync.Map // key → true: its next PUT lands, and its answer is lost
	recordGets atomic.Int64
	recordPuts atomic.Int64
	// unconditional counts record writes without If-Match or
	// If-None-Match: there must be none.
	unconditional atomic.Int64
}

var (
	errCut     = errors.New("injected: the node is cut off the bucket")
	errRefused = errors.New("injected: the bucket refuses writes of this key")
)

func newLink(b store.Bucket) *link {
	l := &link{}
	l.Faulty = store.WithFaults(b, func(op store.Op) store.Fault {
		if l.cut.Load() {
			return store.FailBefore(errCut)
		}
		if strings.HasPrefix(op.Key, "rooms/") && strings.HasSuffix(op.Key, "/owner") {
			switch op.Kind {
			case store.OpGet:
				l.recordGets.Add(1)
			case store.OpPut:
				l.recordPuts.Add(1)
				if op.Cond.IfMatch == "" && !op.Cond.IfNoneMatch {
					l.unconditional.Add(1)
				}
			}
		}
		if op.Kind == store.OpPut {
			if _, ok := l.loseAnswer.LoadAndDelete(op.Key); ok {
				return store.LoseAnswer()
			}
			if n, ok := l.refused.Load(op.Key); ok {
				n.(*atomic.Int64).Add(1)
				return store.FailBefore(errRefused)
			}
		}
		return store.Fault{}
	})
	return l
}

// refusePuts makes the link refuse every PUT of key (before it reaches
// the bucket) until acceptPuts; the counter returned counts the refusals.
func (l *link) refusePuts(key string) *atomic.Int64 {
	n, _ := l.refused.LoadOrStore(key, new(atomic.Int64))
	return n.(*atomic.Int64)
}

// loseAnswerOnce makes the next PUT of key land and answer
// ErrUnknownOutcome.
func (l *link) loseAnswerOnce(key string) { l.loseAnswer.Store(key, true) }

// acceptPuts ends refusePuts of key.
func (l *link) acceptPuts(key string) { l.refused.Delete(key) }

// records returns the record requests counted so far.
func (l *link) records() (gets, puts int64) { return l.recordGets.Load(), l.recordPuts.Load() }

// member is a running node of a test cluster.
type member struct {
	name string
	n    *node.Node
	link *link
}

func (m *member) mem() *Member { return m.n.Member().(*Member) }

// testLogger keeps node logs out of passing tests' output unless -v.
func testLogger() *slog.Logger {
	if testing.Verbose() {
		return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	return slog.New(slog.NewTextHandler(io.Discard, nil))
}

// startMember starts node name of a cluster on bucket with lease time ttl
// and waits until its lease is valid. It is stopped at the end of the
// test if still running.
func startMember(t *testing.T, bucket store.Bucket, name string, ttl time.Duration, edit ...func(*node.Config)) *member {
	t.Helper()
	compileGuests(t)
	l := newLink(bucket)
	cfg := node.Config{
		DataDir: t.TempDir(), Listen: "127.0.0.1:0", Bucket: l, Logger: testLogger(),
		Rooms: rooms.Config{IdleTimeout: time.Hour}, // rooms hibernate when told to
		// Every node compiles through the compilation cache the test
		// processes of this user share (testwasm.CompileCacheDir): under
		// -race a Go guest takes seconds to compile, and with a cache of
		// the binary's own every run compiled each class again.
		Engine: engine.Config{CacheDir: testwasm.CompileCacheDir(t)},
		Cluster: &node.ClusterConfig{
			Secret: testSecret,
			// As cmd/wasmkeep/clusterflags.go builds it.
			Member: func(ctx context.Context, env node.MemberEnv) (node.Member, error) {
				return New(ctx, Config{Node: name, Address: env.Addr, Secret: testSecret, TTL: ttl, FailoverWait: time.Second,
					Bucket: env.Bucket, Clock: env.Clock, Metrics: env.Metrics, Logger: env.Logger.With("test_node", name)})
			},
		},
		StopTimeout: 20 * time.Second,
	}
	for _, e := range edit {
		e(&cfg)
	}
	n, err := node.Start(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	m := &member{name: name, n: n, link: l}
	t.Cleanup(func() {
		l.cut.Store(false)
		_ = n.Stop(context.Background())
	})
	waitFor(t, 10*time.Second, name+"'s lease valid", func() bool { return m.mem().Status().LeaseValid })
	return m
}

// guests are the packages the tests upload as classes.
var guests = []string{"./examples/counter", "./examples/chat", "./testdata/guests/chatv2", "./testdata/guests/echo", "./testdata/guests/caller"}

var (
	compileOnce sync.Once
	compileErr  error
)

// compileGuests compiles every guest once into the shared compilation
// cache before the first node of the process starts. The tests run in
// parallel, each with leases of a second or two renewed every third of
// it: a compile missing the cache (a first run, a new wazero) costs
// seconds of both cores under -race, and done by a node while another
// test's nodes run it could delay their renewals past their leases'
// validity. From a warm cache this takes a fraction of a second.
func compileGuests(t *testing.T) {
	t.Helper()
	dir := testwasm.CompileCacheDir(t)
	wasms := make([][]byte, len(guests))
	for i, pkg := range guests {
		wasms[i] = testwasm.Build(t, pkg) // once a process
	}
	compileOnce.Do(func() {
		// As a node makes its engine (node.Start): the same
		// configuration, so the same cache entries.
		e, err := engine.New(context.Background(), engine.Config{CacheDir: dir, Logger: slog.New(slog.DiscardHandler)})
		if err != nil {
			compileErr = err
			return
		}
		defer e.Close(context.Background())
		// Side by side: most of a compile from the cache is one core's
		// work (rewriting the module, under -race).
		errs := make([]error, len(guests))
		var wg sync.WaitGroup
		for i, wasm := range wasms {
			wg.Go(func() {
				if _, err := e.Compile(context.Background(), wasm); err != nil {
					errs[i] = errors.New(guests[i] + ": " + err.Error())
				}
			})
		}
		wg.Wait()
		compileErr = errors.Join(errs...)
	})
	if compileErr != nil {
		t.Fatalf("compiling the guests: %v", compileErr)
	}
}

// cluster starts the named nodes on one store.Mem and waits until each
// sees every other one live.
func startCluster(t *testing.T, ttl time.Duration, names ...string) (store.Bucket, []*member) {
	t.Helper()
	return startClusterWith(t, ttl, nil, names...)
}

// startClusterWith is startCluster with edit applied to every node's
// configuration.
func startClusterWith(t *testing.T, ttl time.Duration, edit func(*node.Config), names ...string) (store.Bucket, []*member) {
	t.Helper()
	bucket := store.NewMem()
	var ms []*member
	for _, name := range names {
		if edit == nil {
			ms = append(ms, startMember(t, bucket, name, ttl))
		} else {
			ms = append(ms, startMember(t, bucket, name, ttl, edit))
		}
	}
	for _, m := range ms {
		waitFor(t, 3*ttl, m.name+" sees its peers live", func() bool {
			live := 0
			for _, p := range m.mem().Status().Peers {
				if p.State == "live" {
					live++
				}
			}
			return live == len(names)-1
		})
	}
	return bucket, ms
}

// waitFor polls cond until it holds, failing the test after within.
func waitFor(t *testing.T, within time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(within)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("not within %v: %s", within, what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// putClass uploads the guest built from pkg as class name through m's
// admin API, with ?durability=event when durable.
func putClass(t *testing.T, m *member, name, pkg string, durable bool) {
	t.Helper()
	url := m.n.AdminURL() + "/admin/classes/" + name
	if durable {
		url += "?durability=event"
	}
	if r := do(t, "PUT", url, testwasm.Build(t, pkg)); r.Status != http.StatusCreated {
		t.Fatalf("PUT %s: %d %s", url, r.Status, r.Body)
	}
}

func do(t *testing.T, method, url string, body []byte) testhttp.Result {
	t.Helper()
	return testhttp.Do(t, method, url, body)
}

// count POSTs to the counter room name through m and fails unless it
// answers want.
func count(t *testing.T, m *member, name, want string) {
	t.Helper()
	if r := do(t, "POST", m.n.URL()+"/actor/counter/"+name, nil); r.Status != 200 || r.Body != want {
		t.Fatalf("POST counter/%s through %s: %d %q, want 200 %q", name, m.name, r.Status, r.Body, want)
	}
}

// readRecord reads a room's ownership record straight from the bucket.
func readRecord(t *testing.T, b store.Bucket, class, name string) cluster.Record {
	t.Helper()
	body, _, err := b.Get(context.Background(), cluster.RecordKey(cluster.Room{Class: class, Name: name}))
	if err != nil {
		t.Fatalf("the record of %s/%s: %v", class, name, err)
	}
	rec, err := cluster.DecodeRecord(body)
	if err != nil {
		t.Fatal(err)
	}
	return rec
}

func readLease(t *testing.T, b store.Bucket, name string) cluster.Lease {
	t.Helper()
	body, _, err := b.Get(context.Background(), cluster.LeaseKey(name))
	if err != nil {
		t.Fatalf("the lease of %s: %v", name, err)
	}
	l, err := cluster.DecodeLease(body)
	if err != nil {
		t.Fatal(err)
	}
	return l
}

func holds(m *member, class, name string) bool {
	for _, h := range m.mem().Status().Holds {
		if h.Class == class && h.Name == name {
			return true
		}
	}
	return false
}

// Most tests run in parallel: they spend their time waiting on leases,
// idle timeouts and the class record's cache, and each has a bucket,
// nodes, ports and metrics of its own. No node compiles a guest while
// another test's leases run (compileGuests). The tests that bound how
// long a lapse takes (TestLapseDropsRooms, TestLapseWithAParkedRoom) run
// one at a time, with no other test beside them, so that another
// cluster's load cannot stretch what they measure; TestFenceByHand's
// bound is ten times what it takes, and it runs in parallel.

// TestRouteToHolder: a room held by a routes to a from b and c, naming a's
// address, for one GET of its record each; on a itself it costs nothing.
func TestRouteToHolder(t *testing.T) {
	t.Parallel()
	_, ms := startCluster(t, time.Second, "a", "b", "c")
	a, b, c := ms[0], ms[1], ms[2]
	putClass(t, a, "counter", "./examples/counter", true)
	count(t, a, "r", "1")
	key := rooms.Key{Class: "counter", Name: "r"}
	for _, m := range []*member{b, c} {
		gets, puts := m.link.records()
		route, err := m.n.Rooms.Route(context.Background(), key)
		if err != nil {
			t.Fatal(err)
		}
		if route.Kind != rooms.RouteElsewhere || route.Node != "a" || route.Address != a.n.Addr() {
			t.Fatalf("from %s the room held by a routes to %+v, want elsewhere, a at %s", m.name, route, a.n.Addr())
		}
		g, p := m.link.records()
		if g-gets != 1 || p-puts != 0 {
			t.Fatalf("routing from %s cost %d GETs and %d PUTs of the record, want 1 and 0", m.name, g-gets, p-puts)
		}
	}
	gets, puts := a.link.records()
	if route, err := a.n.Rooms.Route(context.Background(), key); err != nil || route.Kind != rooms.RouteHere {
		t.Fatalf("on its holder the room routes to %+v (%v), want here", route, err)
	}
	if g, p := a.link.records(); g != gets || p != puts {
		t.Fatalf("routing on the holder cost %d GETs and %d PUTs of the record, want none", g-gets, p-puts)
	}
	// Through a non-owner the count is never wrong: forwarded (200, the
	// next count) or, without forwarding, refused naming the owner.
	r := do(t, "POST", b.n.URL()+"/actor/counter/r", nil)
	switch {
	case r.Status == 200 && r.Body == "2":
	case r.Status == http.StatusServiceUnavailable && r.Header.Get("X-Wasmkeep-Node") == "a":
	default:
		t.Fatalf("POST through b: %d %q (X-Wasmkeep-Node %q), want the count 2 or a 503 naming a", r.Status, r.Body, r.Header.Get("X-Wasmkeep-Node"))
	}
}

// TestWakeCost: the first wake of a room (no record yet) and a wake on
// another node after a release each cost one GET and one conditional PUT
// of the record, on the waking node only.
func TestWakeCost(t *testing.T) {
	t.Parallel()
	bucket, ms := startCluster(t, time.Second, "a", "b")
	a, b := ms[0], ms[1]
	putClass(t, a, "counter", "./examples/counter", true)

	gets, puts := a.link.records()
	count(t, a, "w", "1")
	if g, p := a.link.records(); g-gets != 1 || p-puts != 1 {
		t.Fatalf("the first wake cost %d GETs and %d PUTs of the record, want 1 and 1", g-gets, p-puts)
	}
	// Hibernating releases the hold: the record is free.
	if err := a.n.Rooms.Hibernate(context.Background(), rooms.Key{Class: "counter", Name: "w"}); err != nil {
		t.Fatal(err)
	}
	if rec := readRecord(t, bucket, "counter", "w"); !rec.Free {
		t.Fatalf("after a hibernation the record is %+v, want free", rec)
	}
	aGets, aPuts := a.link.records()
	gets, puts = b.link.records()
	count(t, b, "w", "2")
	if g, p := b.link.records(); g-gets != 1 || p-puts != 1 {
		t.Fatalf("the wake on b of a free record cost %d GETs and %d PUTs of it, want 1 and 1", g-gets, p-puts)
	}
	if g, p := a.link.records(); g != aGets || p != aPuts {
		t.Fatalf("b's wake cost a %d GETs and %d PUTs of the record, want none", g-aGets, p-aPuts)
	}
	if rec := readRecord(t, bucket, "counter", "w"); rec.Free || rec.Node != "b" || rec.Instance != b.mem().Instance() {
		t.Fatalf("after b's wake the record is %+v, want held by b's instance %s", rec, b.mem().Instance())
	}
	for _, m := range ms {
		if n := m.link.unconditional.Load(); n != 0 {
			t.Fatalf("%s wrote a record %d times without a condition", m.name, n)
		}
	}
}

// TestCleanStopFrees: a clean stop leaves every record it held free (at
// the generation of the hold) and its lease released; another node then
// takes the room at once with its state.
func TestCleanStopFrees(t *testing.T) {
	t.Parallel()
	bucket, ms := startCluster(t, time.Second, "a", "b")
	a, b := ms[0], ms[1]
	putClass(t, a, "counter", "./examples/counter", true)
	count(t, a, "s1", "1")
	count(t, a, "s2", "1")
	count(t, a, "s2", "2")
	held := readRecord(t, bucket, "counter", "s2")
	if err := a.n.Stop(context.Background()); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"s1", "s2"} {
		if rec := readRecord(t, bucket, "counter", name); !rec.Free {
			t.Fatalf("after a's clean stop the record of %s is %+v, want free", name, rec)
		}
	}
	if rec := readRecord(t, bucket, "counter", "s2"); rec.Generation != held.Generation {
		t.Fatalf("the release wrote generation %d, want the hold's %d", rec.Generation, held.Generation)
	}
	if l := readLease(t, bucket, "a"); l.State != cluster.LeaseReleased {
		t.Fatalf("after a clean stop a's lease is %s, want released", l.State)
	}
	count(t, b, "s2", "3")
	if rec := readRecord(t, bucket, "counter", "s2"); rec.Node != "b" || rec.Generation <= held.Generation {
		t.Fatalf("b's hold wrote %+v, want b at a generation above %d", rec, held.Generation)
	}
}

// TestLapseDropsRooms: a node cut off the bucket sees its lease run out
// within its ttl: every socket closes with 1012 and every room is dropped.
// Its peer fences it and takes its room (the state of every acknowledged
// event kept, the class being durable at every event); once the bucket
// answers again the node finds itself fenced and says it must exit.
func TestLapseDropsRooms(t *testing.T) {
	const ttl = time.Second
	_, ms := startCluster(t, ttl, "a", "b")
	a, b := ms[0], ms[1]
	putClass(t, a, "echo", "./testdata/guests/echo", true)
	putClass(t, a, "counter", "./examples/counter", true)
	count(t, a, "l", "1")
	count(t, a, "l", "2")
	ws := wstest.Dial(t, strings.Replace(a.n.URL(), "http", "ws", 1)+"/actor/echo/sock")
	if got := ws.ReadText(); !strings.HasPrefix(got, "open ") {
		t.Fatalf("echo's first message %q", got)
	}
	ws.Send("hi")
	if got := ws.ReadText(); got != "hi" {
		t.Fatalf("echo answered %q", got)
	}

	cut := time.Now()
	a.link.cut.Store(true)
	ws.ExpectClose(abi.CloseServiceRestart)
	if d := time.Since(cut); d > ttl {
		t.Fatalf("the socket closed %v after the node was cut off, more than the ttl %v", d, ttl)
	}
	waitFor(t, ttl, "a's rooms dropped", func() bool { return a.n.Rooms.Counts().Resident == 0 })
	if a.mem().Status().LeaseValid {
		t.Fatal("a counts its lease valid while cut off the bucket")
	}

	// b fences a once its lease has been silent for ttl + grace, then
	// takes the room with every acknowledged count.
	waitFor(t, 5*ttl, "b serves the room", func() bool {
		r := do(t, "POST", b.n.URL()+"/actor/counter/l", nil)
		if r.Status == 200 {
			if r.Body != "3" {
				t.Fatalf("b took the room at count %q, want 3", r.Body)
			}
			return true
		}
		if r.Status != http.StatusServiceUnavailable {
			t.Fatalf("POST through b while a is cut off: %d %q", r.Status, r.Body)
		}
		return false
	})
	a.link.cut.Store(false)
	select {
	case <-a.n.Lost():
	case <-time.After(5 * ttl):
		t.Fatal("a did not find itself fenced once the bucket answered again")
	}
	if a.mem().Status().LeaseValid {
		t.Fatal("a fenced node counts its lease valid")
	}
}

// TestDrainLeavesNothing: a draining node hands every room over: nothing
// held, no release pending, no record naming it; the rooms answer through
// the other node with their state.
func TestDrainLeavesNothing(t *testing.T) {
	t.Parallel()
	bucket, ms := startCluster(t, time.Second, "a", "b")
	a, b := ms[0], ms[1]
	putClass(t, a, "counter", "./examples/counter", true)
	names := []string{"d1", "d2", "d3"}
	for _, name := range names {
		count(t, a, name, "1")
	}
	if err := a.mem().Drain(true); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 10*time.Second, "a drained", func() bool { return a.mem().Status().Drained })
	s := a.mem().Status()
	if len(s.Holds) != 0 || len(s.Pending) != 0 || !s.Draining {
		t.Fatalf("a drained with holds %v, pending %v, draining %v", s.Holds, s.Pending, s.Draining)
	}
	for _, name := range names {
		if rec := readRecord(t, bucket, "counter", name); rec.Node == "a" {
			t.Fatalf("after the drain the record of %s names a: %+v", name, rec)
		}
		count(t, b, name, "2")
	}
	// A draining node takes no room: a new one routes to b.
	route, err := a.n.Rooms.Route(context.Background(), rooms.Key{Class: "counter", Name: "new"})
	if err != nil || route.Kind != rooms.RouteElsewhere || route.Node != "b" {
		t.Fatalf("a new room on a draining node routes to %+v (%v), want b", route, err)
	}
}

// TestMoveHandsOver: a move hands a room to the target, which holds it
// at once (before any event), with its state.
func TestMoveHandsOver(t *testing.T) {
	t.Parallel()
	bucket, ms := startCluster(t, time.Second, "a", "b", "c")
	a, c := ms[0], ms[2]
	putClass(t, a, "counter", "./examples/counter", true)
	count(t, a, "m", "1")
	count(t, a, "m", "2")
	key := rooms.Key{Class: "counter", Name: "m"}
	if by, err := a.mem().Move(context.Background(), key, "c"); err != nil || by != "c" {
		t.Fatalf("move to c: by %q, %v", by, err)
	}
	if !holds(c, "counter", "m") {
		t.Fatalf("after the move c holds %v, want counter/m", c.mem().Status().Holds)
	}
	if holds(a, "counter", "m") {
		t.Fatal("after the move a still holds the room")
	}
	if rec := readRecord(t, bucket, "counter", "m"); rec.Node != "c" {
		t.Fatalf("after the move the record is %+v, want c", rec)
	}
	if route, err := a.n.Rooms.Route(context.Background(), key); err != nil || route.Kind != rooms.RouteElsewhere || route.Node != "c" {
		t.Fatalf("after the move the room routes from a to %+v (%v), want c", route, err)
	}
	count(t, c, "m", "3")
	if _, err := a.mem().Move(context.Background(), key, "b"); !errors.Is(err, cm.ErrNotHeldHere) {
		t.Fatalf("moving a room a does not hold: %v, want cm.ErrNotHeldHere", err)
	}
}

// TestFenceByHand: a node whose process is cut off is fenced by hand, and
// its room is taken at once by the fencer, long before the automatic fence
// (ttl + grace of silence) could have landed.
func TestFenceByHand(t *testing.T) {
	// In parallel: the bound it checks (over 4 s) is ten times what the
	// fence by hand takes.
	t.Parallel()
	const ttl = 5 * time.Second
	bucket, ms := startCluster(t, ttl, "a", "b")
	a, b := ms[0], ms[1]
	putClass(t, a, "counter", "./examples/counter", true)
	count(t, a, "f", "1")
	a.link.cut.Store(true)
	start := time.Now()
	if err := b.mem().FenceNode(context.Background(), "a"); err != nil {
		t.Fatal(err)
	}
	if l := readLease(t, bucket, "a"); l.State != cluster.LeaseFenced || l.FencedBy != "b" {
		t.Fatalf("after the fence a's lease is %+v, want fenced by b", l)
	}
	count(t, b, "f", "2")
	took := time.Since(start)
	// The automatic fence needs a's lease silent for ttl + grace (6 s);
	// its last renewal was at most ttl/3 before the cut.
	if bound := ttl + ttl/5 - ttl/3; took >= bound {
		t.Fatalf("b took the room %v after the fence by hand, not before the automatic fence could (%v)", took, bound)
	}
	t.Logf("fence by hand to the room served by b: %v", took.Round(time.Millisecond))
	if err := b.mem().FenceNode(context.Background(), "b"); !errors.Is(err, cluster.ErrNotPeer) {
		t.Fatalf("a node fencing itself: %v, want ErrNotPeer", err)
	}
}

// TestConcurrentWakesOneHolder: many requests for one free room through
// three nodes at once: exactly one node holds it, and the counts it
// answers are 1..n with none twice.
func TestConcurrentWakesOneHolder(t *testing.T) {
	t.Parallel()
	bucket, ms := startCluster(t, time.Second, "a", "b", "c")
	putClass(t, ms[0], "counter", "./examples/counter", true)
	var mu sync.Mutex
	seen := map[string]bool{}
	var wg sync.WaitGroup
	for i := range 30 {
		m := ms[i%3]
		wg.Go(func() {
			req, _ := http.NewRequest("POST", m.n.URL()+"/actor/counter/race", nil)
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Error(err)
				return
			}
			defer resp.Body.Close()
			b, _ := io.ReadAll(resp.Body)
			if resp.StatusCode == http.StatusServiceUnavailable {
				return // refused while another node held or took it
			}
			mu.Lock()
			defer mu.Unlock()
			if resp.StatusCode != 200 || seen[string(b)] {
				t.Errorf("POST through %s: %d %q (seen before: %v)", m.name, resp.StatusCode, b, seen[string(b)])
			}
			seen[string(b)] = true
		})
	}
	wg.Wait()
	holders := 0
	for _, m := range ms {
		if holds(m, "counter", "race") {
			holders++
		}
	}
	rec := readRecord(t, bucket, "counter", "race")
	if holders != 1 || rec.Free {
		t.Fatalf("%d nodes hold the room, record %+v; want exactly one", holders, rec)
	}
	// The answers are 1..k: no count skipped or given twice.
	for i := 1; i <= len(seen); i++ {
		if !seen[strconv.Itoa(i)] {
			t.Fatalf("the counts answered skip %d: %v", i, seen)
		}
	}
	if len(seen) == 0 {
		t.Fatal("no request was served")
	}
}

// TestForwardBoundsAreTheMembers: the server's forwarder keeps the
// bounds the member's routing counts on (and the simulation models).
func TestForwardBoundsAreTheMembers(t *testing.T) {
	if server.DefaultForwardDialTimeout != cm.ForwardDialTimeout || server.DefaultForwardHeaderTimeout != cm.ForwardHeaderTimeout {
		t.Errorf("the server forwards with %v and %v; the member counts on %v and %v", server.DefaultForwardDialTimeout,
			server.DefaultForwardHeaderTimeout, cm.ForwardDialTimeout, cm.ForwardHeaderTimeout)
	}
}
