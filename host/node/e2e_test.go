package node

import (
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/wasmkeep/wasmkeep/host/engine"
	"github.com/wasmkeep/wasmkeep/host/rooms"
	"github.com/wasmkeep/wasmkeep/host/socket"
	"github.com/wasmkeep/wasmkeep/internal/wstest"
)

// TestChatAcrossHibernation is the walking skeleton's main story: two
// sockets chat, the room hibernates while both stay open, a third socket
// joins and gets the history from the woken room, and a message reaches
// all three.
func TestChatAcrossHibernation(t *testing.T) {
	n := startNode(t, Config{})
	putClass(t, n, "chat", "./examples/chat")
	url, _ := chatAcrossHibernation(t, n, "chat")
	// The page is served by the room itself.
	page := expect(t, 200, "GET", url, nil)
	if !strings.Contains(page, "WebSocket") {
		t.Fatalf("chat page does not open a WebSocket:\n%.300s", page)
	}
}

// chatAcrossHibernation runs the chat protocol's scenario on room "lobby"
// of class (the Go chat, or the AssemblyScript one): two sockets chat, the
// room hibernates while both stay open, a third socket joins and gets the
// history from the woken room in one wake, and a message reaches all
// three. It returns the room's URL and the third socket.
func chatAcrossHibernation(t *testing.T, n *Node, class string) (url string, c *wstest.Client) {
	t.Helper()
	url = n.URL() + "/actor/" + class + "/lobby"
	a := wstest.Dial(t, url)
	b := wstest.Dial(t, url)
	history := []string{"hello from a", "hello from b ✓"}
	for i, from := range []*wstest.Client{a, b} {
		want := history[i]
		from.Send(want)
		for _, c := range []*wstest.Client{a, b} {
			if got := c.ReadText(); got != want {
				t.Fatalf("got %q, want %q", got, want)
			}
		}
	}

	hibernate(t, n, class, "lobby")
	if row, _ := roomRowOf(t, n, class, "lobby"); row.Sockets != 2 {
		t.Fatalf("hibernated room lists %d sockets, want 2", row.Sockets)
	}
	wakes := metric(t, n, "wasmkeep_room_wakes_total")

	c = wstest.Dial(t, url)
	for _, want := range history {
		if got := c.ReadText(); got != want {
			t.Fatalf("history: got %q, want %q", got, want)
		}
	}
	if got := metric(t, n, "wasmkeep_room_wakes_total"); got != wakes+1 {
		t.Fatalf("wakes went from %v to %v, want one wake", wakes, got)
	}
	c.Send("hello from c")
	for _, cl := range []*wstest.Client{a, b, c} {
		if got := cl.ReadText(); got != "hello from c" {
			t.Fatalf("got %q", got)
		}
	}
	if row, _ := roomRowOf(t, n, class, "lobby"); row.State != "resident" || row.Sockets != 3 {
		t.Fatalf("room after wake: %+v", row)
	}
	return url, c
}

// TestCounterSurvivesHibernationAndRestart: state lives through a
// hibernation and a clean restart on the same data directory.
func TestCounterSurvivesHibernationAndRestart(t *testing.T) {
	dir := t.TempDir()
	n := startNode(t, Config{DataDir: dir})
	putClass(t, n, "counter", "./examples/counter")
	url := n.URL() + "/actor/counter/c1"
	for i := 1; i <= 3; i++ {
		if got := expect(t, 200, "POST", url, nil); got != fmt.Sprint(i) {
			t.Fatalf("POST %d: got %q", i, got)
		}
	}
	hibernate(t, n, "counter", "c1")
	if got := expect(t, 200, "POST", url, nil); got != "4" {
		t.Fatalf("after wake: got %q, want 4", got)
	}
	// A second room is independent.
	if got := expect(t, 200, "POST", n.URL()+"/actor/counter/c2", nil); got != "1" {
		t.Fatalf("second room: %q", got)
	}
	stop(t, n)

	n = startNode(t, Config{DataDir: dir})
	if got := expect(t, 200, "GET", n.URL()+"/actor/counter/c1", nil); got != "4" {
		t.Fatalf("after restart: got %q, want 4", got)
	}
	if got := expect(t, 200, "POST", n.URL()+"/actor/counter/c2", nil); got != "2" {
		t.Fatalf("second room after restart: %q", got)
	}
	if got := metric(t, n, "wasmkeep_room_cold_starts_total"); got != 0 {
		t.Fatalf("%v cold starts after restart; every room should wake from its snapshot", got)
	}
}

// TestCleanStopClosesSocketsAfterHibernating: a stop hibernates rooms
// before closing sockets with 1012; after the restart the room has its
// history and learns that its old sockets are gone.
func TestCleanStopClosesSocketsAfterHibernating(t *testing.T) {
	dir := t.TempDir()
	n := startNode(t, Config{DataDir: dir})
	putClass(t, n, "chat", "./examples/chat")
	putClass(t, n, "echo", "./testdata/guests/echo")
	a := wstest.Dial(t, n.URL()+"/actor/chat/room")
	a.Send("kept")
	if got := a.ReadText(); got != "kept" {
		t.Fatal(got)
	}
	e := wstest.Dial(t, n.URL()+"/actor/echo/e")
	if got := e.ReadText(); got != "open /?" {
		t.Fatalf("echo open: %q", got)
	}
	done := make(chan error, 1)
	go func() { done <- n.Stop(t.Context()) }()
	a.ExpectClose(1012)
	e.ExpectClose(1012)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	n.http = nil

	n = startNode(t, Config{DataDir: dir})
	b := wstest.Dial(t, n.URL()+"/actor/chat/room")
	if got := b.ReadText(); got != "kept" {
		t.Fatalf("history after restart: %q", got)
	}
	// The echo room's guest believed socket 1 open; waking told it that it
	// closed, so only the new socket is listed.
	e2 := wstest.Dial(t, n.URL()+"/actor/echo/e")
	e2.ReadText()
	if got := expect(t, 200, "GET", n.URL()+"/actor/echo/e/sockets", nil); got != "2" {
		t.Fatalf("sockets after restart: %q, want 2 (ids are not reused)", got)
	}
}

// TestIdleHibernationKeepsSocketsAndPings: an idle room hibernates by
// itself; its socket stays open and is pinged by the host without waking it.
func TestIdleHibernationKeepsSocketsAndPings(t *testing.T) {
	n := startNode(t, Config{
		Rooms: rooms.Config{IdleTimeout: 100 * time.Millisecond},
		// Pings every 200 ms: a client slower than twice that to answer is
		// closed as dead, which a loaded test machine must not cause.
		Sockets: socket.Config{PingInterval: 200 * time.Millisecond},
	})
	putClass(t, n, "echo", "./testdata/guests/echo")
	c := wstest.Dial(t, n.URL()+"/actor/echo/idle?x=1")
	if got := c.ReadText(); got != "open /?x=1" {
		t.Fatalf("open: %q", got)
	}
	// The client answers pings while it waits in Read; run reads in the
	// background until the room is hibernated and several pings passed.
	got := make(chan string, 1)
	go func() {
		_, data, err := c.Read()
		if err != nil {
			got <- err.Error()
			return
		}
		got <- string(data)
	}()
	waitFor(t, "idle hibernation", func() bool {
		row, ok := roomRowOf(t, n, "echo", "idle")
		return ok && row.State == "hibernated" && row.Sockets == 1
	})
	pings := metric(t, n, "wasmkeep_socket_pings_sent_total")
	waitFor(t, "pings", func() bool { return metric(t, n, "wasmkeep_socket_pings_sent_total") >= pings+3 })
	if row, _ := roomRowOf(t, n, "echo", "idle"); row.State != "hibernated" {
		t.Fatalf("pings woke the room: %+v", row)
	}
	if w := metric(t, n, "wasmkeep_room_wakes_total"); w != 0 {
		t.Fatalf("%v wakes before any message", w)
	}
	c.Send("wake up")
	if m := <-got; m != "wake up" {
		t.Fatalf("echo after wake: %q", m)
	}
	if w := metric(t, n, "wasmkeep_room_wakes_total"); w != 1 {
		t.Fatalf("%v wakes, want 1", w)
	}
}

// TestSocketCloseWakesRoom: a client's close wakes a hibernated room to
// deliver its close event.
func TestSocketCloseWakesRoom(t *testing.T) {
	n := startNode(t, Config{})
	putClass(t, n, "echo", "./testdata/guests/echo")
	a := wstest.Dial(t, n.URL()+"/actor/echo/r")
	a.ReadText()
	b := wstest.Dial(t, n.URL()+"/actor/echo/r")
	b.ReadText()
	if got := expect(t, 200, "GET", n.URL()+"/actor/echo/r/sockets", nil); got != "1,2" {
		t.Fatalf("sockets: %q", got)
	}
	hibernate(t, n, "echo", "r")
	a.Close(1000)
	waitFor(t, "the close to wake the room", func() bool {
		row, _ := roomRowOf(t, n, "echo", "r")
		return row.State == "resident" && row.Sockets == 1
	})
	if got := expect(t, 200, "GET", n.URL()+"/actor/echo/r/sockets", nil); got != "2" {
		t.Fatalf("sockets after close: %q", got)
	}
	if got := metric(t, n, `wasmkeep_room_events_total{kind="socket_close"}`); got != 1 {
		t.Fatalf("close events: %v", got)
	}
}

// TestEvictionPastMaxResident: past --max-resident the least recently used
// room is hibernated.
func TestEvictionPastMaxResident(t *testing.T) {
	n := startNode(t, Config{Rooms: rooms.Config{MaxResident: 2}})
	putClass(t, n, "counter", "./examples/counter")
	for _, name := range []string{"a", "b"} {
		expect(t, 200, "POST", n.URL()+"/actor/counter/"+name, nil)
	}
	// A room's worker is still busy for a moment after its answer, and a
	// wake that finds both rooms busy evicts the first to be done: under
	// load that could be b. Only idle rooms are ranked by last use.
	waitFor(t, "a and b to be done with their events", func() bool {
		ra, _ := roomRowOf(t, n, "counter", "a")
		rb, _ := roomRowOf(t, n, "counter", "b")
		return ra.Awake == string(rooms.AwakeRecent) && rb.Awake == string(rooms.AwakeRecent)
	})
	expect(t, 200, "POST", n.URL()+"/actor/counter/c", nil)
	waitFor(t, "eviction of a", func() bool {
		row, _ := roomRowOf(t, n, "counter", "a")
		return row.State == "hibernated"
	})
	for _, name := range []string{"b", "c"} {
		if row, _ := roomRowOf(t, n, "counter", name); row.State != "resident" {
			t.Fatalf("%s: %+v", name, row)
		}
	}
	if got := expect(t, 200, "POST", n.URL()+"/actor/counter/a", nil); got != "2" {
		t.Fatalf("evicted room lost its state: %q", got)
	}
	if got := metric(t, n, `wasmkeep_room_hibernations_total{reason="evict"}`); got < 1 {
		t.Fatalf("evictions: %v", got)
	}
}

// TestRequestEncoding: method, path below the room, query, headers and body
// reach the guest; its status and headers come back.
func TestRequestEncoding(t *testing.T) {
	n := startNode(t, Config{})
	putClass(t, n, "echo", "./testdata/guests/echo")
	req, _ := http.NewRequest("PUT", n.URL()+"/actor/echo/x/some/deep%2Fpath?a=1&b=2&status=201", strings.NewReader("the body\nline 2"))
	req.Header.Set("X-Test", "hello")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	body := readAll(t, resp)
	want := "method PUT\npath /some/deep%2Fpath\nquery a=1&b=2&status=201\nx-test hello\nbody the body\nline 2"
	if resp.StatusCode != 201 || body != want || resp.Header.Get("X-Echo") != "1" {
		t.Fatalf("status %d, X-Echo %q, body:\n%s\nwant:\n%s", resp.StatusCode, resp.Header.Get("X-Echo"), body, want)
	}
	if got := expect(t, 200, "GET", n.URL()+"/actor/echo/r%C3%A9sum%C3%A9/room", nil); got != "echo/résumé" {
		t.Fatalf("room info: %q", got)
	}
}

// TestBadInput: every kind of bad input gets a clear error and loses
// nothing.
func TestBadInput(t *testing.T) {
	n := startNode(t, Config{Server: serverConfig(64 << 10)})
	putClass(t, n, "echo", "./testdata/guests/echo")
	base := n.URL()

	refusals := []struct {
		name, pkg string
		body      []byte
		want      string
	}{
		{name: "notwasm", body: []byte("#!/bin/sh\necho hi\n"), want: "not a WebAssembly module"},
		{name: "empty", body: nil, want: "not a WebAssembly module"},
		{name: "badimport", pkg: "./testdata/guests/badimport", want: "env.nonexistent"},
		{name: "abiv2", pkg: "./testdata/guests/abiv2", want: "ABI v2"},
		{name: "noabi", pkg: "./testdata/guests/noabi", want: "declares no wasmkeep ABI version"},
	}
	for _, c := range refusals {
		body := c.body
		if c.pkg != "" {
			body = buildGuest(t, c.pkg)
		}
		r := do(t, "PUT", base+"/admin/classes/"+c.name, body)
		if r.Status != 400 || !strings.Contains(r.Body, c.want) {
			t.Errorf("%s: status %d body %s; want 400 mentioning %q", c.name, r.Status, r.Body, c.want)
		}
	}
	if r := do(t, "PUT", base+"/admin/classes/Bad.Name", buildGuest(t, "./examples/counter")); r.Status != 400 {
		t.Errorf("bad class name: %d %s", r.Status, r.Body)
	}
	if r := do(t, "GET", base+"/actor/nosuch/room", nil); r.Status != 404 || !strings.Contains(r.Body, "unknown class") {
		t.Errorf("unknown class: %d %s", r.Status, r.Body)
	}
	if _, err := wstest.DialErr(base+"/actor/nosuch/room", nil); err == nil {
		t.Error("upgrade to an unknown class was accepted")
	}
	if r := do(t, "POST", base+"/actor/echo/x", make([]byte, 65<<10)); r.Status != 413 {
		t.Errorf("oversize body: %d %s", r.Status, r.Body)
	}
	// Nothing was lost: the class list has only echo, and echo still works.
	if got := expect(t, 200, "GET", base+"/admin/classes", nil); !strings.Contains(got, `"echo"`) || strings.Contains(got, "badimport") {
		t.Errorf("classes: %s", got)
	}
	expect(t, 200, "GET", base+"/actor/echo/x", nil)
	if r := do(t, "DELETE", base+"/admin/classes/echo", nil); r.Status != 204 {
		t.Errorf("rm: %d", r.Status)
	}
	if r := do(t, "GET", base+"/actor/echo/x", nil); r.Status != 404 {
		t.Errorf("removed class still answers: %d", r.Status)
	}
}

// TestCrashesAreContained: a trap, a timeout, a memory-limit hit and bad
// pointers each affect only the request or socket that caused them; the
// room restarts from its last snapshot (a hibernation, in this class's
// durability mode); other rooms are unaffected.
func TestCrashesAreContained(t *testing.T) {
	n := startNode(t, Config{Engine: engine.Config{EventTimeout: time.Minute, MaxMemoryPages: 256}})
	putHibernateClass(t, n, "hostile", "./testdata/guests/hostile")
	room := n.URL() + "/actor/hostile/h"
	other := n.URL() + "/actor/hostile/other"
	expect(t, 200, "POST", other, nil)
	expect(t, 200, "POST", room, nil)
	expect(t, 200, "POST", room, nil)
	hibernate(t, n, "hostile", "h")   // snapshot at 2
	expect(t, 200, "POST", room, nil) // 3, not yet in a snapshot

	for _, c := range []struct{ path, cause, want string }{
		{"/trap", "trap", "guest trapped"},
		{"/grow", "memory", "memory limit"},
	} {
		r := do(t, "POST", room+c.path, nil)
		if r.Status != 500 || !strings.Contains(r.Body, c.want) {
			t.Fatalf("%s: %d %s", c.path, r.Status, r.Body)
		}
		if got := expect(t, 200, "GET", room, nil); got != "2" {
			t.Fatalf("after %s the room should be back at its snapshot (2), got %q", c.path, got)
		}
		if got := metric(t, n, `wasmkeep_room_crashes_total{cause="`+c.cause+`"}`); got != 1 {
			t.Fatalf("crashes{cause=%s} = %v", c.cause, got)
		}
		if got := expect(t, 200, "GET", other, nil); got != "1" {
			t.Fatalf("other room after %s: %q", c.path, got)
		}
	}
	bad := expect(t, 200, "POST", room+"/badptr", nil)
	for _, line := range strings.Split(strings.TrimSpace(bad), "\n") {
		if !strings.HasSuffix(line, " -1") {
			t.Errorf("badptr: %q, want status -1 (invalid)", line)
		}
	}
	expect(t, 200, "POST", room+"/double", nil)
	if got := expect(t, 200, "GET", room+"/double-status", nil); got != "-5" {
		t.Errorf("second http_respond: %q, want -5", got)
	}

	// Sockets: a trap in one socket's message closes that socket with 1011;
	// the room's other socket keeps working.
	a := wstest.Dial(t, room)
	b := wstest.Dial(t, room)
	b.Send("still here?")
	if got := b.ReadText(); got != "still here?" {
		t.Fatal(got)
	}
	a.Send("trap")
	a.ExpectClose(1011)
	b.Send("and now?")
	if got := b.ReadText(); got != "and now?" {
		t.Fatalf("other socket after crash: %q", got)
	}
}

// TestEventTimeout: a guest that loops forever is stopped at the event
// time limit; the node and the room's next request are fine.
func TestEventTimeout(t *testing.T) {
	n := startNode(t, Config{Engine: engine.Config{EventTimeout: 300 * time.Millisecond}})
	putClass(t, n, "hostile", "./testdata/guests/hostile")
	room := n.URL() + "/actor/hostile/h"
	expect(t, 200, "POST", room, nil)
	hibernate(t, n, "hostile", "h")
	r := do(t, "POST", room+"/loop", nil)
	if r.Status != 500 || !strings.Contains(r.Body, "time limit") {
		t.Fatalf("/loop: %d %s", r.Status, r.Body)
	}
	if got := expect(t, 200, "GET", room, nil); got != "1" {
		t.Fatalf("after the timeout: %q, want the snapshot's 1", got)
	}
	if got := metric(t, n, `wasmkeep_room_crashes_total{cause="timeout"}`); got != 1 {
		t.Fatalf("timeouts: %v", got)
	}
	// A socket message that loops closes only its socket, with 1011.
	a := wstest.Dial(t, room)
	b := wstest.Dial(t, room)
	a.Send("loop")
	a.ExpectClose(1011)
	b.Send("fine")
	if got := b.ReadText(); got != "fine" {
		t.Fatalf("other socket: %q", got)
	}
}

// TestClockContinuesAcrossHibernationAndRestart: a room's monotonic clock
// never goes back, and timers armed before hibernation still fire.
func TestClockContinuesAcrossHibernationAndRestart(t *testing.T) {
	dir := t.TempDir()
	n := startNode(t, Config{DataDir: dir})
	putClass(t, n, "clock", "./testdata/guests/clock")
	url := n.URL() + "/actor/clock/c"
	e1 := atoi(t, expect(t, 200, "GET", url+"/elapsed", nil))
	expect(t, 200, "POST", url+"/timer?ms=50", nil)
	hibernate(t, n, "clock", "c")
	e2 := atoi(t, expect(t, 200, "GET", url+"/elapsed", nil))
	if e2 <= e1 {
		t.Fatalf("clock went back across hibernation: %d then %d", e1, e2)
	}
	waitFor(t, "the timer armed before hibernation", func() bool {
		return expect(t, 200, "GET", url+"/fired", nil) == "1"
	})
	stop(t, n)
	n = startNode(t, Config{DataDir: dir})
	e3 := atoi(t, expect(t, 200, "GET", n.URL()+"/actor/clock/c/elapsed", nil))
	if e3 <= e2 {
		t.Fatalf("clock went back across a restart: %d then %d", e2, e3)
	}
	slept := atoi(t, expect(t, 200, "POST", n.URL()+"/actor/clock/c/sleep?ms=30", nil))
	if slept < int64(30*time.Millisecond) {
		t.Fatalf("a 30 ms sleep took %v: nanosleep is not real", time.Duration(slept))
	}
	wall := atoi(t, expect(t, 200, "GET", n.URL()+"/actor/clock/c/wall", nil))
	if d := time.Since(time.UnixMilli(wall)); d < -time.Minute || d > time.Minute {
		t.Fatalf("guest wall clock is off by %v", d)
	}
	r1 := expect(t, 200, "GET", n.URL()+"/actor/clock/c/rand", nil)
	r2 := expect(t, 200, "GET", n.URL()+"/actor/clock/c/rand", nil)
	if strings.Fields(r1)[0] == strings.Fields(r2)[0] {
		t.Fatalf("crypto/rand repeated: %q %q", r1, r2)
	}
}

// TestHibernateUnknownRoom: the admin API says so when asked to hibernate a
// room that does not exist.
func TestHibernateUnknownRoom(t *testing.T) {
	n := startNode(t, Config{})
	putClass(t, n, "counter", "./examples/counter")
	if r := do(t, "POST", n.URL()+"/admin/rooms/counter/nosuch/hibernate", nil); r.Status != 404 || !strings.Contains(r.Body, "no such room") {
		t.Fatalf("unknown room: %d %s", r.Status, r.Body)
	}
	expect(t, 200, "POST", n.URL()+"/actor/counter/x", nil)
	hibernate(t, n, "counter", "x")
	stop(t, n)
	// After a restart the room exists only in the bucket: still known.
	n = startNode(t, Config{DataDir: n.cfg.DataDir})
	expect(t, 200, "POST", n.URL()+"/admin/rooms/counter/x/hibernate", nil)
}
