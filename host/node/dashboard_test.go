package node

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/wasmkeep/wasmkeep/host/engine"
	"github.com/wasmkeep/wasmkeep/host/rooms"
	"github.com/wasmkeep/wasmkeep/host/server"
	"github.com/wasmkeep/wasmkeep/internal/clock"
	"github.com/wasmkeep/wasmkeep/internal/testenv"
	"github.com/wasmkeep/wasmkeep/internal/testwasm"
	"github.com/wasmkeep/wasmkeep/internal/wasmbuild"
	"github.com/wasmkeep/wasmkeep/internal/wstest"
)

// slowEvent bounds the hostile guest's /sleep-forever in TestDashboard: the
// request stays open at its room that long, which the dashboard shows,
// unless the test skips its clock past it.
const slowEvent = 20 * time.Second

// skippingClock is the real clock, which a test may move forward: its
// timers and tickers keep real time, and what compares its readings (the
// engine's event time limit, on the watchdog's next tick) sees the time
// skipped.
type skippingClock struct {
	clock.Clock
	skipped atomic.Int64
}

func (c *skippingClock) Now() int64 { return c.Clock.Now() + c.skipped.Load() }

func (c *skippingClock) skip(d time.Duration) { c.skipped.Add(int64(d)) }

// TestDashboard starts a node with rooms in several states (resident,
// hibernated, hibernated with sockets held, one with an HTTP request in
// flight), checks the admin endpoints the dashboard reads, then loads the
// dashboard in headless Chromium (test/dashboard/check.mjs) and checks
// what it shows. Screenshots go to $WASMKEEP_ARTIFACTS, or
// .build/artifacts/ at the module's root.
func TestDashboard(t *testing.T) {
	t.Parallel()
	clk := &skippingClock{Clock: clock.Real()}
	n := startNode(t, Config{Clock: clk, Engine: engine.Config{EventTimeout: slowEvent}})
	putHibernateClass(t, n, "counter", "./examples/counter") // a resident room without a snapshot
	putClass(t, n, "chat", "./examples/chat")
	putClass(t, n, "hostile", "./testdata/guests/hostile")
	putFront(t, n, "web", frontGuest, "/app", "/api")
	base := n.URL()
	expect(t, 200, "GET", base+"/app/", nil)

	for _, name := range []string{"alpha", "beta", "gamma", "delta"} {
		expect(t, 200, "POST", base+"/actor/counter/"+name, nil)
	}
	hibernate(t, n, "counter", "gamma")
	hibernate(t, n, "counter", "delta")
	expect(t, 200, "POST", base+"/admin/rooms/counter/beta/pin", nil)
	lobby := wstest.Dial(t, base+"/actor/chat/lobby")
	for i := range 2 {
		// The second socket gets the first's message as history first:
		// read up to its own echo, so that the room has handled every
		// message before it is hibernated.
		c := wstest.Dial(t, base+"/actor/chat/support")
		msg := fmt.Sprintf("hello %d", i)
		c.Send(msg)
		for j := 0; ; j++ {
			got := c.ReadText()
			if got == msg {
				break
			}
			if j >= i {
				t.Fatalf("chat: %q, want the history then %q", got, msg)
			}
		}
	}
	lobby.Send("hi")
	lobby.ReadText()
	hibernate(t, n, "chat", "support") // its two sockets stay open

	// A request held in the guest until the event time limit cuts it.
	slow := make(chan int, 1)
	go func() {
		resp, err := http.Post(base+"/actor/hostile/slow/sleep-forever", "text/plain", nil)
		if err != nil {
			slow <- -1
			return
		}
		resp.Body.Close()
		slow <- resp.StatusCode
	}()
	t.Cleanup(func() {
		select {
		case <-slow:
		case <-time.After(slowEvent + 30*time.Second):
			t.Errorf("the slow request did not end")
		}
	})
	waitFor(t, "the slow request to be open at its room", func() bool {
		r, ok := dashRoom(t, n, "hostile/slow")
		return ok && r.Awake == rooms.AwakeRequest
	})

	t.Run("api", func(t *testing.T) { checkDashboardAPI(t, n) })
	t.Run("browser", func(t *testing.T) { checkDashboardBrowser(t, n) })
	// Seen: the slow request's time limit passes now rather than in real
	// time (the test waited 10 s and more for it).
	clk.skip(slowEvent)
}

// TestDashboardCluster: the dashboard of node b of a cluster of three,
// whose membership is a fake that places b's rooms: one another node runs
// (it shows elsewhere, not hibernated), one parked on node c (its record
// says held by c, and c's status that it is parked there), one free, one
// parked here with its socket, one whose record was not read. The room
// cards count what the table lists, and a class name is shown whole
// beside its durability tag. Screenshots go to dashboard-cluster/ beside
// TestDashboard's.
func TestDashboardCluster(t *testing.T) {
	t.Parallel()
	m := &member{}
	n := clusterNode(t, "b", newSteered(), m, Config{Server: server.Config{Cluster: &server.Cluster{}}})
	putClass(t, n, "counter", "./examples/counter")
	putClass(t, n, "chat", "./examples/chat")
	expect(t, http.StatusCreated, "PUT", n.AdminURL()+"/admin/classes/leaderboard?durability=event", testwasm.Build(t, "./examples/counter"))
	base := n.URL()
	for _, name := range []string{"alpha", "gamma", "delta", "eps", "unread"} {
		expect(t, 200, "POST", base+"/actor/counter/"+name, nil)
	}
	expect(t, 200, "POST", base+"/actor/leaderboard/x", nil)
	for _, name := range []string{"gamma", "delta", "eps", "unread"} {
		hibernate(t, n, "counter", name)
	}
	support := wstest.Dial(t, strings.Replace(base, "http", "ws", 1)+"/actor/chat/support")
	support.Send("hi")
	if got := support.ReadText(); got != "hi" {
		t.Fatalf("chat echoed %q", got)
	}
	hibernate(t, n, "chat", "support") // its socket stays open

	// The other nodes answer their status: c keeps counter/delta parked.
	peer := func(status server.ClusterNode) string {
		hs := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.URL.Path != "/cluster/v1/status" {
				http.NotFound(w, r)
				return
			}
			w.Header().Set("Content-Type", "application/json")
			_ = json.NewEncoder(w).Encode(status)
		}))
		t.Cleanup(hs.Close)
		return hs.Listener.Addr().String()
	}
	room := func(class, name string) server.ClusterRoom {
		return server.ClusterRoom{Class: class, Name: name, Generation: 1}
	}
	addrA := peer(server.ClusterNode{Node: "a", Instance: "ia", Phase: "active", LeaseValid: true, ValidForMS: 9000,
		Holds: []server.ClusterRoom{room("counter", "gamma")}})
	addrC := peer(server.ClusterNode{Node: "c", Instance: "ic", Phase: "active", LeaseValid: true, ValidForMS: 9000,
		Parked: []server.ClusterRoom{room("counter", "delta")}})
	key := func(class, name string) rooms.Key { return rooms.Key{Class: class, Name: name} }
	m.mu.Lock()
	m.status = server.ClusterNode{Node: "b", Instance: "ib", Address: n.Addr(), Phase: "active", LeaseValid: true, ValidForMS: 9000,
		Holds:  []server.ClusterRoom{room("counter", "alpha"), room("leaderboard", "x")},
		Parked: []server.ClusterRoom{room("chat", "support")},
		Peers:  []server.ClusterPeer{{Node: "a", Instance: "ia", Address: addrA, State: "live"}, {Node: "c", Instance: "ic", Address: addrC, State: "live"}}}
	m.places = map[rooms.Key]server.RoomPlace{
		key("counter", "alpha"): {Place: server.PlaceHeld, Node: "b"},
		key("leaderboard", "x"): {Place: server.PlaceHeld, Node: "b"},
		key("counter", "gamma"): {Place: server.PlaceHeld, Node: "a"},
		key("counter", "delta"): {Place: server.PlaceHeld, Node: "c"}, // a record does not say parked
		key("counter", "eps"):   {Place: server.PlaceFree},
		key("chat", "support"):  {Place: server.PlaceParked, Node: "b"},
	}
	m.mu.Unlock()

	driver := findChromiumDriver(t)
	want, err := json.Marshal(map[string]any{
		"cluster": true,
		"rooms": []dashboardExpect{
			{Key: "counter/alpha", State: "resident", Awake: "recent", Where: "held b"},
			{Key: "leaderboard/x", State: "resident", Awake: "recent", Where: "held b"},
			{Key: "counter/gamma", State: "hibernated", Snapshot: true, Where: "held a", Elsewhere: true},
			{Key: "counter/delta", State: "hibernated", Snapshot: true, Where: "parked c"},
			{Key: "counter/eps", State: "hibernated", Snapshot: true, Where: "free"},
			{Key: "counter/unread", State: "hibernated", Snapshot: true, Where: ""},
			{Key: "chat/support", State: "hibernated", Sockets: 1, Snapshot: true, Label: "1 held", Where: "parked b"},
		},
		// Resident: alpha and x; asleep: delta, eps, unread and support.
		"cards":   map[string]int{"resident": 2, "hibernated": 4},
		"classes": []string{"chat", "counter", "leaderboard"},
	})
	if err != nil {
		t.Fatal(err)
	}
	logScreenshots(t, driver.run(t, 3*time.Minute, "dashboard", "check.mjs", n.URL()+"/admin/", driver.artifacts(t, "dashboard-cluster"), string(want)))
}

func dashRooms(t *testing.T, n *Node) map[string]rooms.RoomInfo {
	t.Helper()
	var list []rooms.RoomInfo
	if err := json.Unmarshal([]byte(expect(t, 200, "GET", n.AdminURL()+"/admin/rooms", nil)), &list); err != nil {
		t.Fatal(err)
	}
	out := map[string]rooms.RoomInfo{}
	for _, r := range list {
		out[r.Class+"/"+r.Name] = r
	}
	return out
}

func dashRoom(t *testing.T, n *Node, key string) (rooms.RoomInfo, bool) {
	t.Helper()
	r, ok := dashRooms(t, n)[key]
	return r, ok
}

func checkDashboardAPI(t *testing.T, n *Node) {
	base := n.URL()
	list := dashRooms(t, n)
	row := func(key string) rooms.RoomInfo {
		t.Helper()
		r, ok := list[key]
		if !ok {
			t.Fatalf("/admin/rooms does not list %s: %v", key, list)
		}
		return r
	}

	alpha := row("counter/alpha")
	if alpha.State != rooms.StateResident || alpha.Awake != rooms.AwakeRecent || alpha.Memory == 0 ||
		alpha.LastEvent == nil || alpha.IdleSeconds == nil || *alpha.IdleSeconds > 600 || alpha.SnapshotBytes != 0 || alpha.SnapshotAt != nil {
		t.Errorf("a resident room without a snapshot: %+v", alpha)
	}
	if beta := row("counter/beta"); beta.State != rooms.StateResident || beta.Awake != rooms.AwakePinned || !beta.Pinned {
		t.Errorf("a pinned room: %+v", beta)
	}
	gamma := row("counter/gamma")
	if gamma.State != rooms.StateHibernated || gamma.Awake != "" || gamma.Memory == 0 || gamma.SnapshotBytes == 0 ||
		gamma.SnapshotAt == nil || gamma.LastEvent == nil {
		t.Errorf("a hibernated room: %+v", gamma)
	}
	if s := row("chat/support"); s.State != rooms.StateHibernated || s.Sockets != 2 || s.SnapshotBytes == 0 {
		t.Errorf("a hibernated room with two sockets: %+v", s)
	}
	if s := row("chat/lobby"); s.State != rooms.StateResident || s.Sockets != 1 || s.Awake != rooms.AwakeRecent {
		t.Errorf("a resident room with a socket: %+v", s)
	}
	if s := row("hostile/slow"); s.State != rooms.StateResident || s.Awake != rooms.AwakeRequest || s.OpenRequests != 1 {
		t.Errorf("a room with a request in flight: %+v", s)
	}

	// A new snapshot shows, though the listing keeps what it read.
	expect(t, 200, "POST", base+"/actor/counter/gamma", nil)
	hibernate(t, n, "counter", "gamma")
	waitFor(t, "the listing to show gamma's new snapshot", func() bool {
		g := row2(t, n, "counter/gamma")
		return g.SnapshotAt != nil && g.SnapshotAt.After(*gamma.SnapshotAt) && g.LastEvent.After(*gamma.LastEvent)
	})

	var detail rooms.RoomDetail
	if err := json.Unmarshal([]byte(expect(t, 200, "GET", base+"/admin/rooms/hostile/slow", nil)), &detail); err != nil {
		t.Fatal(err)
	}
	if detail.Awake != rooms.AwakeRequest || !strings.Contains(detail.AwakeDetail, "request") {
		t.Errorf("inspect of the slow room: %+v", detail)
	}

	var ov server.Overview
	if err := json.Unmarshal([]byte(expect(t, 200, "GET", base+"/admin/overview", nil)), &ov); err != nil {
		t.Fatal(err)
	}
	if ov.Version == "" || ov.Uptime <= 0 || ov.Rooms.Resident != 4 || ov.Rooms.Hibernated != 3 || ov.Rooms.HibernatedWithSockets != 1 ||
		ov.Sockets != 3 || len(ov.Classes) != 4 || ov.Totals.Events == 0 || ov.Totals.Hibernations < 4 || ov.IdleTimeout != time.Hour.Seconds() {
		t.Errorf("overview: %+v", ov)
	}
	if len(ov.Fronts) != 1 || ov.Fronts[0].Class != "web" || strings.Join(ov.Fronts[0].Prefixes, " ") != "/api /app" ||
		ov.Fronts[0].Instances != 1 || ov.Fronts[0].Busy != 0 || ov.Fronts[0].MaxInstances != 4 || ov.Fronts[0].Version == "" {
		t.Errorf("overview's fronts: %+v", ov.Fronts)
	}
	if web := ov.Classes[3]; web.Name != "web" || strings.Join(web.Front, " ") != "/api /app" {
		t.Errorf("overview's class web: %+v", web)
	}

	var sr server.Series
	after := time.Now().UnixMilli()
	waitFor(t, "a sample of the series", func() bool {
		if err := json.Unmarshal([]byte(expect(t, 200, "GET", base+"/admin/series", nil)), &sr); err != nil {
			t.Fatal(err)
		}
		return len(sr.Samples) > 0 && sr.Samples[len(sr.Samples)-1].T > after
	})
	last := sr.Samples[len(sr.Samples)-1]
	if sr.IntervalMS != 1000 || sr.WindowSeconds != 600 || last.Sockets != 3 || last.Resident != 4 || last.T <= 0 {
		t.Errorf("series: %+v, last sample %+v", sr, last)
	}
	if err := json.Unmarshal([]byte(expect(t, 200, "GET", fmt.Sprintf("%s/admin/series?since=%d", base, last.T), nil)), &sr); err != nil {
		t.Fatal(err)
	}
	for _, s := range sr.Samples {
		if s.T <= last.T {
			t.Errorf("series?since=%d has the sample of %d", last.T, s.T)
		}
	}
	expect(t, 400, "GET", base+"/admin/series?since=yesterday", nil)

	// The page: HTML, its own script and style only.
	page := do(t, "GET", base+"/admin/", nil)
	if page.Status != 200 || !strings.HasPrefix(page.Header.Get("Content-Type"), "text/html") ||
		!strings.Contains(page.Header.Get("Content-Security-Policy"), "default-src 'none'") || !strings.Contains(page.Body, "<table id=\"rooms\"") {
		t.Errorf("GET /admin/: %d %v", page.Status, page.Header)
	}
	for _, bad := range []string{`src="http`, `href="http`, `url(http`, "@import"} {
		if strings.Contains(page.Body, bad) {
			t.Errorf("the dashboard loads something from elsewhere: %s", bad)
		}
	}
	noFollow := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	for _, path := range []string{"/admin", "/admin/dashboard"} {
		resp, err := noFollow.Get(base + path)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusFound || resp.Header.Get("Location") != "/admin/" {
			t.Errorf("GET %s: %d to %q, want a redirect to /admin/", path, resp.StatusCode, resp.Header.Get("Location"))
		}
	}
}

func row2(t *testing.T, n *Node, key string) rooms.RoomInfo {
	t.Helper()
	r, ok := dashRoom(t, n, key)
	if !ok {
		t.Fatalf("/admin/rooms does not list %s", key)
	}
	return r
}

// dashboardExpect is what check.mjs checks of one room.
type dashboardExpect struct {
	Key      string `json:"key"`
	State    string `json:"state"`
	Awake    string `json:"awake"`
	Sockets  int    `json:"sockets"`
	Snapshot bool   `json:"snapshot,omitempty"`
	Label    string `json:"label,omitempty"`
	// In a cluster: where the room runs ("held a", "parked c", "free",
	// "" if the node does not know), and whether another node runs it.
	Where     string `json:"where"`
	Elsewhere bool   `json:"elsewhere,omitempty"`
}

// chromiumDriver is what runs a script of test/dashboard in headless
// Chromium: node, the browser, and the directory of the scripts (its npm
// packages installed from the lock file the first time).
type chromiumDriver struct {
	node, browser, dir, root string
}

func findChromiumDriver(t *testing.T) chromiumDriver {
	t.Helper()
	node := testenv.Tool(t, "node")
	browser := testenv.Chromium(t)
	dir := testenv.NPMPackages(t, "test/dashboard", "playwright-core")
	root, err := wasmbuild.ModuleRoot()
	if err != nil {
		t.Fatal(err)
	}
	return chromiumDriver{node: node, browser: browser, dir: dir, root: root}
}

// run runs script with args, within d, and returns what it printed; it
// fails unless the script exits 0 and prints "ok <done>".
func (c chromiumDriver) run(t *testing.T, d time.Duration, done string, script string, args ...string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	cmd := exec.CommandContext(ctx, c.node, append([]string{script}, args...)...)
	cmd.Dir = c.dir
	cmd.Env = append(os.Environ(), "CHROMIUM="+c.browser)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	if err != nil || !strings.Contains(out.String(), "ok "+done) {
		t.Fatalf("%s: %v\n%s", script, err, out.String())
	}
	return out.String()
}

// artifacts is the directory a test's screenshots go to: dir under
// $WASMKEEP_ARTIFACTS, or under .build/artifacts/ at the module's root.
func (c chromiumDriver) artifacts(t *testing.T, dir string) string {
	t.Helper()
	base := os.Getenv("WASMKEEP_ARTIFACTS")
	if base == "" {
		base = filepath.Join(c.root, ".build", "artifacts")
	}
	base = filepath.Join(base, dir)
	if err := os.MkdirAll(base, 0o755); err != nil {
		t.Fatal(err)
	}
	return base
}

// logScreenshots logs the screenshots a script's output names.
func logScreenshots(t *testing.T, out string) {
	for _, line := range strings.Split(out, "\n") {
		if f, ok := strings.CutPrefix(line, "screenshot "); ok {
			t.Logf("dashboard screenshot: %s", f)
		}
	}
}

func checkDashboardBrowser(t *testing.T, n *Node) {
	driver := findChromiumDriver(t)
	artifacts := driver.artifacts(t, "")

	// Traffic on other rooms while the page is open, so that the charts
	// have something to draw: requests, and a hibernation a second.
	ctx, cancel := context.WithCancel(context.Background())
	churned := make(chan struct{})
	go func() {
		defer close(churned)
		for i := 0; ctx.Err() == nil; i++ {
			room := fmt.Sprintf("busy-%d", i%3)
			post(ctx, n.URL()+"/actor/counter/"+room)
			if i%10 == 9 {
				post(ctx, n.URL()+"/admin/rooms/counter/"+room+"/hibernate")
			}
			select {
			case <-ctx.Done():
			case <-time.After(100 * time.Millisecond):
			}
		}
	}()
	defer func() { cancel(); <-churned }()

	want, err := json.Marshal(map[string]any{
		"rooms": []dashboardExpect{
			{Key: "counter/alpha", State: "resident", Awake: "recent"},
			{Key: "counter/beta", State: "resident", Awake: "pinned", Label: "pinned"},
			{Key: "counter/gamma", State: "hibernated", Snapshot: true},
			{Key: "chat/lobby", State: "resident", Awake: "recent", Sockets: 1},
			{Key: "chat/support", State: "hibernated", Sockets: 2, Snapshot: true, Label: "2 held"},
			{Key: "hostile/slow", State: "resident", Awake: "request", Label: "open request"},
		},
		"classes": []string{"chat", "counter", "hostile", "web"},
		"fronts":  []map[string]any{{"class": "web", "prefixes": []string{"/api", "/app"}, "instances": 1}},
	})
	if err != nil {
		t.Fatal(err)
	}
	logScreenshots(t, driver.run(t, 3*time.Minute, "dashboard", "check.mjs", n.URL()+"/admin/", artifacts, string(want)))
}

// post sends an empty POST (to the admin API, as the CLI does) and
// ignores the answer.
func post(ctx context.Context, url string) {
	req, err := http.NewRequestWithContext(ctx, "POST", url, nil)
	if err != nil {
		return
	}
	if strings.Contains(url, "/admin/") {
		req.Header.Set(server.AdminHeader, "1")
	}
	if resp, err := http.DefaultClient.Do(req); err == nil {
		resp.Body.Close()
	}
}
