//go:build unix

package main

// Parked records (issue 12, Verification 2) on three real `wasmkeep
// serve` processes, a, b and c, with a real WebSocket: on a shared
// directory store, or versitygw (WASMKEEP_TEST_STORE=s3), and always on
// versitygw in TestClusterParkedRoomOnS3. On versitygw every node reaches
// the bucket through a counting proxy of its own (cluster_bench_test.go),
// so a node's requests for ownership records are counted exactly; on a
// directory the record's version (its ETag) shows whether it was written.

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/wasmkeep/wasmkeep/abi"
	"github.com/wasmkeep/wasmkeep/cluster"
	"github.com/wasmkeep/wasmkeep/host/server"
	"github.com/wasmkeep/wasmkeep/internal/wstest"
)

// parkIdle is the idle timeout of the nodes: a room with a socket open
// parks a moment after its last event.
const parkIdle = 300 * time.Millisecond

// parkSweep is the nodes' owner sweep interval: the calls go on until a's
// sweep has had a pass, and at the default (a minute) that was most of
// the test's time.
const parkSweep = 5 * time.Second

// TestClusterParkedRoom: the parked-record scenario on the store
// WASMKEEP_TEST_STORE names.
func TestClusterParkedRoom(t *testing.T) {
	t.Parallel()
	parkedRoomScenario(t, testStoreS3(t))
}

// TestClusterParkedRoomOnS3: the same on versitygw, whatever
// WASMKEEP_TEST_STORE says.
func TestClusterParkedRoomOnS3(t *testing.T) {
	t.Parallel()
	parkedRoomScenario(t, true)
}

// parkedRoomScenario: a socket on a to echo room R; R hibernates and its
// record stays parked on a, written by nobody. Called through b (twice)
// and then through b and c in turn until a's owner sweep has run at least
// once, R wakes on a each time, at generation + 1, and the socket gets
// what each call broadcast; it never runs on b or c, and the owner sweep
// closes nothing anywhere. Closed, the socket leaves R's record free
// within seconds. A drain of a with another room parked closes that
// room's socket with 1012 and leaves no record naming a.
func parkedRoomScenario(t *testing.T, onS3 bool) {
	began := time.Now()
	c := newTestCluster(t, e2eTTL, onS3)
	c.args = []string{"--idle-timeout", parkIdle.String(), "--owner-sweep-interval", parkSweep.String()}
	via := proxyPoint(c)
	proxies := map[string]*keyCounts{}
	var aStarted, aJoined time.Time
	for _, name := range []string{"a", "b", "c"} {
		if via != nil {
			proxies[name] = via(name)
		}
		if name == "a" {
			aStarted = time.Now()
		}
		c.add(name)
		if name == "a" {
			aJoined = time.Now()
		}
	}
	// a's sweep of orphaned segments runs its first pass a minute after a
	// started and reads the record of every room with segments (R's too).
	// The calls end before it, a while after a's owner sweep (every
	// parkSweep) had its first pass, which reads no parked record.
	firstSweeps := [2]time.Time{aStarted.Add(time.Minute), aJoined.Add(time.Minute + 5*time.Second)}
	a, b, cc := c.node("a"), c.node("b"), c.node("c")
	c.putClass(a, "echo", "./testdata/guests/echo", true)
	acquired := map[string]float64{}
	for _, n := range []*clusterProc{b, cc} {
		acquired[n.name] = sumOf(mustMetrics(t, n), "wasmkeep_cluster_acquisitions_total", `outcome="acquired"`)
	}
	t.Logf("three nodes up, the class loaded: %v", time.Since(began).Round(time.Millisecond))

	// The socket on a; R parks there.
	phase := time.Now()
	room := cluster.Room{Class: "echo", Name: "R"}
	getsBefore, putsBefore := roomRecordRequests(proxies, "a", room)
	ws := wstest.Dial(t, "ws"+strings.TrimPrefix(a.url, "http")+"/actor/echo/R")
	if got := ws.ReadText(); !strings.HasPrefix(got, "open ") {
		t.Fatalf("the socket's greeting: %q", got)
	}
	rec, etag := c.recordVersion("echo", "R")
	if rec.Free || rec.Node != "a" {
		t.Fatalf("after the socket's open the record is %+v, want a's", rec)
	}
	gen := rec.Generation
	gets, puts := roomRecordRequests(proxies, "a", room)
	c.waitParked(a, "R", gen)
	c.checkUnwritten("R", etag, "R's first park")
	if onS3 {
		if g, p := roomRecordRequests(proxies, "a", room); g != gets || p != puts {
			t.Fatalf("a's first park of R cost %d GETs and %d PUTs of its record, want none", g-gets, p-puts)
		}
		t.Logf("the open of R cost a %d GETs and %d PUTs of its record; its park none", gets-getsBefore, puts-putsBefore)
	}
	if got := mustMetrics(t, a)["wasmkeep_parked_records"]; got != 1 {
		t.Fatalf("a's wasmkeep_parked_records = %v, want 1", got)
	}
	t.Logf("socket open, R parked on a at generation %d: %v", gen, time.Since(phase).Round(time.Millisecond))

	// Calls through the other nodes: twice through b, then b and c in
	// turn until a's owner sweep has had a pass (it runs once an
	// interval, the first an interval after a joined).
	phase = time.Now()
	sweptBy := aJoined.Add(parkSweep + 2*time.Second)
	calls := 0
	var wakes []time.Duration
	othersPuts := map[string]int{}
	for _, n := range []*clusterProc{b, cc} {
		_, othersPuts[n.name] = roomRecordRequests(proxies, n.name, room)
	}
	nearSweeps := 0
	for calls < 2 || time.Now().Before(sweptBy) {
		calls++
		through := b
		if calls > 2 && calls%2 == 1 {
			through = cc
		}
		gets, puts := roomRecordRequests(proxies, "a", room)
		msg := fmt.Sprintf("call %d through %s", calls, through.name)
		sent := time.Now()
		if status, body := postBody(t, through.url+"/actor/echo/R/broadcast", msg); status != 200 || body != "1" {
			t.Fatalf("call %d: POST echo/R/broadcast through %s: %d %q, want 200 \"1\" (one socket, on a)", calls, through.name, status, body)
		}
		wakes = append(wakes, time.Since(sent))
		if got := ws.ReadText(); got != msg {
			t.Fatalf("call %d: the socket on a got %q, want %q", calls, got, msg)
		}
		rec, etag := c.recordVersion("echo", "R")
		if rec.Free || rec.Node != "a" || rec.Generation != gen+uint64(calls) {
			t.Fatalf("after call %d the record is %+v, want a's at generation %d (one more a call)", calls, rec, gen+uint64(calls))
		}
		c.waitParked(a, "R", gen+uint64(calls))
		c.checkUnwritten("R", etag, fmt.Sprintf("R's park after call %d", calls))
		if onS3 {
			// The wake: one GET (the routing read, which the take
			// writes over) and one PUT; the park: none. A call while
			// a's first sweeps run may see their read of R's record.
			g, p := roomRecordRequests(proxies, "a", room)
			maxGets := 1
			if !time.Now().Before(firstSweeps[0]) && !sent.After(firstSweeps[1]) {
				maxGets++
				nearSweeps++
			}
			if p-puts != 1 || g-gets < 1 || g-gets > maxGets {
				t.Fatalf("call %d: a's wake and park cost %d GETs and %d PUTs of R's record, want 1 (at most %d) and 1", calls, g-gets, p-puts, maxGets)
			}
		}
	}
	ws.Send("still here")
	if got := ws.ReadText(); got != "still here" {
		t.Fatalf("after the calls the socket echoed %q", got)
	}
	for _, n := range []*clusterProc{b, cc} {
		if got := sumOf(mustMetrics(t, n), "wasmkeep_cluster_acquisitions_total", `outcome="acquired"`); got != acquired[n.name] {
			t.Fatalf("%s acquired %v rooms during the calls: R ran there", n.name, got-acquired[n.name])
		}
		if _, p := roomRecordRequests(proxies, n.name, room); p != othersPuts[n.name] {
			t.Fatalf("%s wrote R's record %d times during the calls", n.name, p-othersPuts[n.name])
		}
	}
	for _, n := range c.nodes {
		m := mustMetrics(t, n)
		const sweepCloses = `wasmkeep_websocket_owner_closes_total{reason="sweep"}`
		if v, ok := m[sweepCloses]; !ok || v != 0 {
			t.Fatalf("%s: %s = %v (present %v), want 0", n.name, sweepCloses, v, ok)
		}
		// Every call woke R parked, and so did the message after them.
		if got := m["wasmkeep_parked_wakes_total"]; n == a && got != float64(calls+1) {
			t.Fatalf("a's wasmkeep_parked_wakes_total = %v after %d calls and a message, want %d", got, calls, calls+1)
		}
	}
	slices.Sort(wakes)
	t.Logf("%d calls through b and c, each woke R on a at the next generation, over %v (a's sweeps ran meanwhile); call round trip p50 %v, max %v",
		calls, time.Since(phase).Round(time.Millisecond), wakes[len(wakes)/2].Round(time.Millisecond), wakes[len(wakes)-1].Round(time.Millisecond))
	if onS3 {
		t.Logf("each call cost a 1 GET and 1 PUT of R's record, and its park none; %d calls near a's first sweeps were allowed a second GET", nearSweeps)
	}

	// The socket closes: R's record is released.
	phase = time.Now()
	ws.Close(abi.CloseNormal)
	waitUntil(t, 5*time.Second, "R's record free once its socket closed", func() bool {
		rec, _ := c.recordVersion("echo", "R")
		return rec.Free
	})
	t.Logf("socket closed, R's record free %v later", time.Since(phase).Round(time.Millisecond))

	// A move of room M, parked on a, to b, asked through c (which holds
	// nothing of it: it finds a by asking its peers).
	wsM := wstest.Dial(t, "ws"+strings.TrimPrefix(a.url, "http")+"/actor/echo/M")
	if got := wsM.ReadText(); !strings.HasPrefix(got, "open ") {
		t.Fatalf("M's greeting: %q", got)
	}
	recM, _ := c.recordVersion("echo", "M")
	c.waitParked(a, "M", recM.Generation)
	phase = time.Now()
	took := sumOf(mustMetrics(t, b), "wasmkeep_cluster_acquisitions_total", `outcome="acquired"`)
	if r := wk(t, nil, "cluster", "move", "--server", cc.url, "--to", "b", "echo", "M"); r.code != 0 || !strings.Contains(r.stdout, "moved from node a to node b") {
		t.Fatalf("cluster move --to b echo M: %v", r)
	}
	moved := time.Since(phase)
	wsM.ExpectClose(abi.CloseServiceRestart)
	// b took M; with no socket there M may have hibernated and its
	// record been released since.
	if got := sumOf(mustMetrics(t, b), "wasmkeep_cluster_acquisitions_total", `outcome="acquired"`); got != took+1 {
		t.Fatalf("b made %v acquisitions during the move, want 1", got-took)
	}
	if rec, _ := c.recordVersion("echo", "M"); rec.Generation <= recM.Generation || !rec.Free && rec.Node != "b" {
		t.Fatalf("after the move M's record is %+v, want b's (or free) above generation %d", rec, recM.Generation)
	}
	if got := mustMetrics(t, a)[`wasmkeep_parked_releases_total{reason="move"}`]; got != 1 {
		t.Fatalf(`a's wasmkeep_parked_releases_total{reason="move"} = %v, want 1`, got)
	}
	if v := c.localView(a); len(v.Moving) != 0 || len(v.Parked) != 0 {
		t.Fatalf("a after the move: moving %v, parked %v", v.Moving, v.Parked)
	}
	t.Logf("M parked on a; cluster move through c took it to b in %v, its socket closed with 1012", moved.Round(time.Millisecond))

	if onS3 {
		refusedWrites(t, c, proxies["a"])
	}

	// A drain of a with room D parked there.
	phase = time.Now()
	wsD := wstest.Dial(t, "ws"+strings.TrimPrefix(a.url, "http")+"/actor/echo/D")
	if got := wsD.ReadText(); !strings.HasPrefix(got, "open ") {
		t.Fatalf("D's greeting: %q", got)
	}
	recD, _ := c.recordVersion("echo", "D")
	c.waitParked(a, "D", recD.Generation)
	parked := time.Since(phase)
	phase = time.Now()
	if r := wk(t, nil, "cluster", "drain", "--server", b.url, "--wait", "a"); r.code != 0 || !strings.Contains(r.stdout, "node a drained") {
		t.Fatalf("cluster drain --wait a: %v", r)
	}
	drained := time.Since(phase)
	wsD.ExpectClose(abi.CloseServiceRestart)
	for room, rec := range c.records() {
		if rec.Node == "a" {
			t.Fatalf("after the drain the record of %s names a: %+v", room, rec)
		}
	}
	if v := c.localView(a); !v.Drained || len(v.Parked) != 0 {
		t.Fatalf("a after the drain: drained %v, parked %v", v.Drained, v.Parked)
	}
	// The drain released D's record itself, before closing its socket
	// (whose slot, freed, would release it too).
	if got := mustMetrics(t, a)[`wasmkeep_parked_releases_total{reason="drain"}`]; got != 1 {
		t.Fatalf(`a's wasmkeep_parked_releases_total{reason="drain"} = %v, want 1`, got)
	}
	t.Logf("D parked on a in %v; cluster drain --wait a returned drained in %v, D's socket closed with 1012", parked.Round(time.Millisecond), drained.Round(time.Millisecond))
}

// refusedWrites runs, on three processes on versitygw, the cases of
// seed 000's Verification 2 whose bucket refuses a record's writes: a's
// proxy answers 503 to every PUT of the room's record.
//
//   - The last socket of room L, parked on a, closes: its close event's
//     wake cannot take the record, and the freed slot releases it, pending
//     while refused; the record is free once the bucket accepts it.
//   - A move of room P, parked on a, to c (asked through b) goes on in the
//     background while its release is refused, P's socket open; once the
//     bucket accepts it, c takes P and the socket closes with 1012, a
//     move's close even if a's owner sweep ran meanwhile.
func refusedWrites(t *testing.T, c *testCluster, proxy *keyCounts) {
	a, b, cc := c.node("a"), c.node("b"), c.node("c")
	open := func(name string) (*wstest.Client, cluster.Record) {
		ws := wstest.Dial(t, "ws"+strings.TrimPrefix(a.url, "http")+"/actor/echo/"+name)
		if got := ws.ReadText(); !strings.HasPrefix(got, "open ") {
			t.Fatalf("%s's greeting: %q", name, got)
		}
		rec, _ := c.recordVersion("echo", name)
		c.waitParked(a, name, rec.Generation)
		return ws, rec
	}
	pending := func(name string) bool {
		return slices.ContainsFunc(c.localView(a).Pending, func(r server.ClusterRoom) bool { return r.Class == "echo" && r.Name == name })
	}

	wsL, recL := open("L")
	keyL := cluster.RecordKey(cluster.Room{Class: "echo", Name: "L"})
	proxy.refusePuts(keyL)
	wsL.Close(abi.CloseNormal)
	waitUntil(t, 10*time.Second, "L's release pending on a", func() bool { return pending("L") })
	if rec, _ := c.recordVersion("echo", "L"); rec.Free || rec.Node != "a" || rec.Generation != recL.Generation {
		t.Fatalf("with its writes refused L's record is %+v, want a's at %d", rec, recL.Generation)
	}
	accepted := time.Now()
	refused := proxy.acceptPuts(keyL)
	if refused == 0 {
		t.Fatal("the proxy refused no write of L's record")
	}
	waitUntil(t, 10*time.Second, "L's record free once the bucket accepts it", func() bool {
		rec, _ := c.recordVersion("echo", "L")
		return rec.Free && rec.Generation == recL.Generation && !pending("L")
	})
	t.Logf("L's last socket closed while its record's writes were refused (%d refused): released, pending, free %v after the bucket accepted writes",
		refused, time.Since(accepted).Round(time.Millisecond))

	wsP, recP := open("P")
	keyP := cluster.RecordKey(cluster.Room{Class: "echo", Name: "P"})
	took := sumOf(mustMetrics(t, cc), "wasmkeep_cluster_acquisitions_total", `outcome="acquired"`)
	const moveCloses = `wasmkeep_websocket_owner_closes_total{reason="move"}`
	closesBefore := mustMetrics(t, a)[moveCloses]
	proxy.refusePuts(keyP)
	r := wk(t, nil, "cluster", "move", "--server", b.url, "--to", "c", "echo", "P")
	if r.code != 0 || !strings.Contains(r.stdout, "in the background") || !strings.Contains(r.stdout, "pending") {
		t.Fatalf("cluster move of P with its release refused: %v", r)
	}
	if v := c.localView(a); !slices.ContainsFunc(v.Moving, func(m server.ClusterMoving) bool { return m.Name == "P" && m.To == "c" }) {
		t.Fatalf("a lists moving %+v, want P to c", v.Moving)
	}
	if rec, _ := c.recordVersion("echo", "P"); rec.Free || rec.Node != "a" {
		t.Fatalf("with its release refused P's record is %+v, want a's", rec)
	}
	accepted = time.Now()
	if proxy.acceptPuts(keyP) == 0 {
		t.Fatal("the proxy refused no write of P's record")
	}
	wsP.ExpectClose(abi.CloseServiceRestart)
	moved := time.Since(accepted)
	if got := sumOf(mustMetrics(t, cc), "wasmkeep_cluster_acquisitions_total", `outcome="acquired"`); got != took+1 {
		t.Fatalf("c made %v acquisitions during the move, want 1", got-took)
	}
	if rec, _ := c.recordVersion("echo", "P"); rec.Generation <= recP.Generation || !rec.Free && rec.Node != "c" {
		t.Fatalf("after the move P's record is %+v, want c's (or free) above generation %d", rec, recP.Generation)
	}
	m := mustMetrics(t, a)
	if got := m[moveCloses]; got != closesBefore+1 {
		t.Fatalf("a's %s went from %v to %v during the move, want one more", moveCloses, closesBefore, got)
	}
	if got := m[`wasmkeep_websocket_owner_closes_total{reason="sweep"}`]; got != 0 {
		t.Fatalf(`a's wasmkeep_websocket_owner_closes_total{reason="sweep"} = %v, want 0`, got)
	}
	if v := c.localView(a); len(v.Moving) != 0 {
		t.Fatalf("a still lists moving %+v", v.Moving)
	}
	t.Logf("a move of P with its release refused went on in the background; once the bucket accepted writes c took P and its socket closed with 1012 in %v",
		moved.Round(time.Millisecond))
}

// recordVersion reads a room's record and its version from the store;
// the room must have one.
func (c *testCluster) recordVersion(class, name string) (cluster.Record, string) {
	c.t.Helper()
	body, etag, err := c.bucket.Get(context.Background(), cluster.RecordKey(cluster.Room{Class: class, Name: name}))
	if err != nil {
		c.t.Fatalf("the record of %s/%s: %v", class, name, err)
	}
	rec, err := cluster.DecodeRecord(body)
	if err != nil {
		c.t.Fatal(err)
	}
	return rec, etag
}

// checkUnwritten fails unless echo room name's record is still at
// version etag.
func (c *testCluster) checkUnwritten(name, etag, what string) {
	c.t.Helper()
	if rec, now := c.recordVersion("echo", name); now != etag {
		c.t.Fatalf("%s wrote the record (version %s, was %s): %+v", what, now, etag, rec)
	}
}

// localView is n's own status (GET /admin/cluster?local=1).
func (c *testCluster) localView(n *clusterProc) server.ClusterNode {
	c.t.Helper()
	status, body, _, err := ask("GET", n.url+"/admin/cluster?local=1")
	if err != nil || status != 200 {
		c.t.Fatalf("GET /admin/cluster?local=1 on %s: %d %v\n%s", n.name, status, err, body)
	}
	var v clusterView
	if err := json.Unmarshal([]byte(body), &v); err != nil {
		c.t.Fatalf("GET /admin/cluster?local=1 on %s: %v\n%s", n.name, err, body)
	}
	return v.Node
}

// waitParked waits until n's status lists echo room name parked at
// generation gen.
func (c *testCluster) waitParked(n *clusterProc, name string, gen uint64) {
	c.t.Helper()
	c.waitParkedRoom(n, cluster.Room{Class: "echo", Name: name}, gen)
}

// waitParkedRoom waits until n's status lists room parked at generation
// gen.
func (c *testCluster) waitParkedRoom(n *clusterProc, room cluster.Room, gen uint64) {
	c.t.Helper()
	waitUntil(c.t, 10*time.Second, fmt.Sprintf("%s parked on %s at generation %d", room, n.name, gen), func() bool {
		return slices.ContainsFunc(c.localView(n).Parked, func(r server.ClusterRoom) bool {
			return r.Class == room.Class && r.Name == room.Name && r.Generation == gen
		})
	})
}

// roomRecordRequests is how many GETs and PUTs of room's record node
// sent so far through its counting proxy; 0 without proxies (a
// directory store).
func roomRecordRequests(proxies map[string]*keyCounts, node string, room cluster.Room) (gets, puts int) {
	p := proxies[node]
	if p == nil {
		return 0, 0
	}
	return p.key("GET", cluster.RecordKey(room)), p.key("PUT", cluster.RecordKey(room))
}

// postBody POSTs body to url and returns the answer's status and body.
func postBody(t *testing.T, url, body string) (int, string) {
	t.Helper()
	req, err := http.NewRequest("POST", url, bytes.NewReader([]byte(body)))
	if err != nil {
		t.Fatal(err)
	}
	resp, err := e2eClient.Do(req)
	if err != nil {
		t.Fatalf("POST %s: %v", url, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, string(b)
}
