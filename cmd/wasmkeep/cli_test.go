//go:build unix

package main

// The command line as a user meets it: a real `wasmkeep serve` (or demo)
// process on a free port, and the client commands run as processes against
// it, checked by their output and exit codes.

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/wasmkeep/wasmkeep/internal/testwasm"
	"github.com/wasmkeep/wasmkeep/internal/wstest"
)

// guestFile writes the module built from pkg to a file of its own.
func guestFile(t testing.TB, pkg string) string {
	t.Helper()
	file := filepath.Join(t.TempDir(), filepath.Base(pkg)+".wasm")
	if err := os.WriteFile(file, testwasm.Build(t, pkg), 0o644); err != nil {
		t.Fatal(err)
	}
	return file
}

func TestClassCommands(t *testing.T) {
	t.Parallel()
	counter := guestFile(t, "./examples/counter")
	wasm, err := os.ReadFile(counter)
	if err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(wasm)
	hash := "sha256:" + hex.EncodeToString(sum[:])
	n := serveNode(t, t.TempDir())

	// put prints what the node stored.
	want := fmt.Sprintf("class counter: %s (%d bytes, ABI v1, durable per event)\n", hash, len(wasm))
	if got := n.ok("class", "put", "counter", counter); got != want {
		t.Fatalf("class put printed %q, want %q", got, want)
	}
	// --durability hibernate is recorded; a bad value is refused by the node.
	want = fmt.Sprintf("class counter2: %s (%d bytes, ABI v1, durable at hibernation)\n", hash, len(wasm))
	if got := n.ok("class", "put", "--durability", "hibernate", "counter2", counter); got != want {
		t.Fatalf("class put --durability hibernate printed %q, want %q", got, want)
	}
	// A new version without --durability keeps its class's.
	if got := n.ok("class", "put", "counter2", counter); got != want {
		t.Fatalf("class put of a new version without --durability printed %q, want %q", got, want)
	}
	n.fails("invalid class option", "class", "put", "--durability", "sometimes", "counter3", counter)
	n.ok("class", "rm", "counter2")

	// list shows it in a table.
	rows := table(t, n.ok("class", "list"), "NAME", "HASH", "SIZE", "ABI", "UPLOADED", "VERSIONS", "ROOMS", "ON-OLDER", "DURABLE", "FRONT")
	if len(rows) != 1 {
		t.Fatalf("class list: %q, want one class", rows)
	}
	row := rows[0]
	if row[0] != "counter" || row[1] != hex.EncodeToString(sum[:])[:12] || row[2] != fmt.Sprint(len(wasm)) || row[3] != "v1" {
		t.Fatalf("class list row %q, want counter, %.12s, %d, v1", row, hex.EncodeToString(sum[:]), len(wasm))
	}
	if up, err := time.Parse(time.RFC3339, row[4]); err != nil || time.Since(up) > time.Hour || time.Until(up) > time.Minute {
		t.Fatalf("class list: uploaded %q (%v)", row[4], err)
	}
	if row[8] != "event" {
		t.Fatalf("class list: durable %q, want event (the default)", row[8])
	}

	// A file that is not wasm: the node's message, and nothing stored.
	script := filepath.Join(t.TempDir(), "script.wasm")
	if err := os.WriteFile(script, []byte("#!/bin/sh\necho hi\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	n.fails("not a WebAssembly module", "class", "put", "script", script)

	// A missing file: said before anything is sent.
	missing := filepath.Join(t.TempDir(), "nosuch.wasm")
	r := n.fails("reading the module", "class", "put", "ghost", missing)
	if !strings.Contains(r.stderr, missing) || !strings.Contains(r.stderr, "no such file or directory") {
		t.Fatalf("missing file: the message should name the file and the cause: %s", r.stderr)
	}
	// A name the node refuses.
	n.fails("invalid class name", "class", "put", "Bad.Name", counter)

	rows = table(t, n.ok("class", "list"), "NAME", "HASH", "SIZE", "ABI", "UPLOADED", "VERSIONS", "ROOMS", "ON-OLDER", "DURABLE", "FRONT")
	if len(rows) != 1 || rows[0][0] != "counter" {
		t.Fatalf("after refused uploads, class list: %q", rows)
	}

	// A front: its prefixes in put's line and in the list; a prefix it
	// holds refused to another, naming it; its path served.
	front := guestFile(t, "./testdata/guests/front")
	if got := n.ok("class", "put", "--front", "/app", "--front", "/api/", "web", front); !strings.HasSuffix(got, "ABI v1, a front serving /api /app)\n") {
		t.Fatalf("class put --front printed %q", got)
	}
	n.fails("front web holds /app", "class", "put", "--front", "/app", "shop", front)
	n.fails("node's own", "class", "put", "--front", "/admin", "shop", front)
	if body := expectHTTP(t, 200, "GET", n.url+"/app/x"); body != "front page /app/x" {
		t.Fatalf("GET /app/x: %q", body)
	}
	rows = table(t, n.ok("class", "list"), "NAME", "HASH", "SIZE", "ABI", "UPLOADED", "VERSIONS", "ROOMS", "ON-OLDER", "DURABLE", "FRONT")
	if len(rows) != 2 || rows[0][0] != "counter" || rows[0][8] != "event" || rows[0][9] != "-" ||
		rows[1][0] != "web" || rows[1][8] != "-" || rows[1][9] != "/api,/app" {
		t.Fatalf("class list with a front: %q", rows)
	}
	n.ok("class", "rm", "web")
	expectHTTP(t, 404, "GET", n.url+"/app/x")

	// rm, then the class is gone.
	if got := n.ok("class", "rm", "counter"); got != "class counter removed\n" {
		t.Fatalf("class rm printed %q", got)
	}
	if rows := table(t, n.ok("class", "list"), "NAME", "HASH", "SIZE", "ABI", "UPLOADED", "VERSIONS", "ROOMS", "ON-OLDER", "DURABLE", "FRONT"); len(rows) != 0 {
		t.Fatalf("after rm, class list: %q", rows)
	}
	expectHTTP(t, 404, "POST", n.url+"/actor/counter/x")
	n.fails("unknown class", "class", "rm", "nosuch")
	n.fails("unknown class", "class", "rm", "counter")
}

func TestRoomsCommands(t *testing.T) {
	t.Parallel()
	counter, chat := guestFile(t, "./examples/counter"), guestFile(t, "./examples/chat")
	n := serveNode(t, t.TempDir())
	n.ok("class", "put", "counter", counter)
	n.ok("class", "put", "chat", chat)

	header := roomsHeader
	if rows := table(t, n.ok("rooms"), header...); len(rows) != 0 {
		t.Fatalf("rooms of a fresh node: %q", rows)
	}
	rooms := func() map[string]string {
		t.Helper()
		m := map[string]string{}
		for _, r := range table(t, n.ok("rooms"), header...) {
			m[r[0]+"/"+r[1]] = r[2] + " " + r[3]
		}
		return m
	}
	expectState := func(room, want string) {
		t.Helper()
		if got := rooms()[room]; got != want {
			t.Fatalf("rooms lists %s as %q, want %q", room, got, want)
		}
	}

	if got := expectHTTP(t, 200, "POST", n.url+"/actor/counter/x"); got != "1" {
		t.Fatalf("POST: %q", got)
	}
	ws := wstest.Dial(t, n.url+"/actor/chat/lobby")
	ws.Send("hi")
	if got := ws.ReadText(); got != "hi" {
		t.Fatalf("chat echoed %q", got)
	}
	expectState("counter/x", "resident 0")
	expectState("chat/lobby", "resident 1")
	// The other columns: why it is awake, its memory, the time since its
	// last event, its snapshot's size.
	facts := func(room string) string {
		t.Helper()
		for _, r := range table(t, n.ok("rooms"), header...) {
			if r[0]+"/"+r[1] == room {
				return strings.Join(r[4:], " ")
			}
		}
		t.Fatalf("rooms does not list %s", room)
		return ""
	}
	// Durable per event: its first event wrote its snapshot.
	if got := facts("counter/x"); !regexp.MustCompile(`^recent [0-9.]+MiB [0-9]+s [0-9.]+KiB -$`).MatchString(got) {
		t.Fatalf("counter/x, resident with the snapshot of its last event: %q", got)
	}

	if got := n.ok("rooms", "hibernate", "counter", "x"); got != "room counter/x hibernated\n" {
		t.Fatalf("rooms hibernate printed %q", got)
	}
	expectState("counter/x", "hibernated 0")
	if got := facts("counter/x"); !regexp.MustCompile(`^- [0-9.]+MiB [0-9]+s [0-9.]+KiB -$`).MatchString(got) {
		t.Fatalf("counter/x, hibernated: %q", got)
	}
	n.ok("rooms", "hibernate", "chat", "lobby")
	expectState("chat/lobby", "hibernated 1") // its socket stays open

	// The next event wakes the room with its state.
	if got := expectHTTP(t, 200, "POST", n.url+"/actor/counter/x"); got != "2" {
		t.Fatalf("POST after hibernation: %q", got)
	}
	expectState("counter/x", "resident 0")

	// The client flags also work on `rooms` itself, before the subcommand.
	r := wk(t, nil, "rooms", "--server", n.url, "hibernate", "counter", "x")
	if r.code != 0 || r.stdout != "room counter/x hibernated\n" {
		t.Fatalf("rooms --server URL hibernate: %v", r)
	}
	expectState("counter/x", "hibernated 0")

	// Pinning wakes the room and keeps it; unpinning lets it sleep.
	if got := n.ok("rooms", "pin", "counter", "x"); got != "room counter/x pinned\n" {
		t.Fatalf("rooms pin printed %q", got)
	}
	expectState("counter/x", "resident 0")
	// "event" until its worker has finished the wake, then "pinned".
	for deadline := time.Now().Add(healthDeadline); !strings.HasPrefix(facts("counter/x"), "pinned "); {
		if time.Now().After(deadline) {
			t.Fatalf("counter/x, pinned: %q", facts("counter/x"))
		}
		time.Sleep(20 * time.Millisecond)
	}
	if got := n.ok("rooms", "unpin", "counter", "x"); got != "room counter/x unpinned\n" {
		t.Fatalf("rooms unpin printed %q", got)
	}
	if got := facts("counter/x"); !strings.HasPrefix(got, "recent ") {
		t.Fatalf("counter/x, unpinned: %q", got)
	}
	n.fails("no such room", "rooms", "pin", "counter", "nobody")

	// Per class, after the rooms: how many, how many resident, what they
	// take in the store.
	classes := map[string][]string{}
	out := n.ok("rooms")
	summary := out[strings.Index(out, "\n\n")+2:]
	for _, r := range table(t, summary, "CLASS", "ROOMS", "RESIDENT", "STORED") {
		classes[r[0]] = r[1:]
	}
	if c := classes["counter"]; len(c) != 3 || c[0] != "1" || !strings.HasSuffix(c[2], "KiB") {
		t.Fatalf("per-class summary of counter: %q in\n%s", c, out)
	}

	// rm deletes the room: its state is gone, the next request starts it.
	if got := n.ok("rooms", "rm", "counter", "x"); got != "room counter/x deleted\n" {
		t.Fatalf("rooms rm printed %q", got)
	}
	if _, listed := rooms()["counter/x"]; listed {
		t.Fatalf("rooms lists counter/x after rm:\n%s", n.ok("rooms"))
	}
	if got := expectHTTP(t, 200, "POST", n.url+"/actor/counter/x"); got != "1" {
		t.Fatalf("POST after rm: %q, want a fresh room", got)
	}
	n.fails("no such room", "rooms", "rm", "counter", "nobody")
}

// TestUsageErrors: wrong usage exits with code 2 and a usage line, before
// any request (no node is running).
func TestUsageErrors(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"class", "put", "onlyonearg"}, "usage: wasmkeep class put [--server URL] NAME FILE.wasm"},
		{[]string{"class", "put", "a", "b", "c"}, "usage: wasmkeep class put"},
		{[]string{"class", "put", "a", "b", "c", "--server", "http://x"}, "usage: wasmkeep class put"},
		{[]string{"class", "put", "a", "b", "--nope"}, "wasmkeep class put: flag provided but not defined: -nope"},
		{[]string{"class", "rm"}, "usage: wasmkeep class rm [--server URL] NAME"},
		{[]string{"class", "list", "extra"}, "usage: wasmkeep class list"},
		{[]string{"rooms", "hibernate", "counter"}, "usage: wasmkeep rooms hibernate [--server URL] CLASS NAME"},
		{[]string{"rooms", "hibernat", "counter", "x"}, "usage: wasmkeep rooms"},
		{[]string{"bogus"}, `wasmkeep: unknown command "bogus"`},
		{[]string{"class", "bogus"}, `wasmkeep class: unknown command "bogus"`},
		{[]string{"class", "put", "--nope", "a", "b"}, "wasmkeep class put: flag provided but not defined: -nope"},
		{[]string{"rooms", "hibernate", "--nope", "a", "b"}, "wasmkeep rooms hibernate: flag provided but not defined: -nope"},
	} {
		r := wk(t, []string{"WASMKEEP_SERVER=http://127.0.0.1:1"}, c.args...)
		if r.code != 2 || r.stdout != "" || !strings.Contains(r.stderr, c.want) {
			t.Errorf("wasmkeep %s: want exit code 2 and %q; got %v", strings.Join(c.args, " "), c.want, r)
		}
	}
}

func TestUnreachableNode(t *testing.T) {
	t.Parallel()
	url := "http://" + freeAddr(t) // closed again: nothing listens there
	for _, args := range [][]string{
		{"class", "list", "--server", url},
		{"rooms", "--server", url},
		{"rooms", "hibernate", "--server", url, "counter", "x"},
		{"class", "rm", "--server", url, "counter"},
	} {
		r := wk(t, nil, args...)
		want := "cannot reach the node at " + url + " (is `wasmkeep serve` running?)"
		if r.code != 1 || r.stdout != "" || !strings.Contains(r.stderr, want) {
			t.Errorf("wasmkeep %s: want exit code 1 and %q; got %v", strings.Join(args, " "), want, r)
		}
	}
}

// nonLoopbackIP is an IPv4 address of this machine off loopback, or "".
func nonLoopbackIP(t *testing.T) string {
	addrs, err := net.InterfaceAddrs()
	if err != nil {
		t.Fatal(err)
	}
	for _, a := range addrs {
		if ip, ok := a.(*net.IPNet); ok && ip.IP.To4() != nil && !ip.IP.IsLoopback() && !ip.IP.IsLinkLocalUnicast() {
			return ip.IP.String()
		}
	}
	return ""
}

// TestAdminToken: a client off loopback needs the node's --admin-token
// (from --token or WASMKEEP_ADMIN_TOKEN); without a token on the node the
// admin API answers loopback only. The test reaches the node through an
// address of this machine off loopback, so the node sees a remote client.
func TestAdminToken(t *testing.T) {
	t.Parallel()
	ip := nonLoopbackIP(t)
	if ip == "" {
		// About the machine, not a tool CI could install: CI machines
		// have one.
		t.Skip("no IPv4 address off loopback on this machine: the test needs one to reach the node as a remote client")
	}
	n := startNode(t, nodeOpts{host: ip, args: []string{"--data", t.TempDir()}, env: []string{"WASMKEEP_ADMIN_TOKEN=s3cret"}})
	n.fails("missing or wrong admin token (HTTP 401)", "rooms")
	if r := wk(t, nil, "rooms", "--server", n.url, "--token", "wrong"); r.code != 1 || !strings.Contains(r.stderr, "missing or wrong admin token") {
		t.Fatalf("wrong --token: %v", r)
	}
	for _, r := range []result{
		wk(t, nil, "class", "list", "--server", n.url, "--token", "s3cret"),
		wk(t, []string{"WASMKEEP_ADMIN_TOKEN=s3cret"}, "class", "list", "--server", n.url),
	} {
		if r.code != 0 || !strings.HasPrefix(r.stdout, "NAME") {
			t.Fatalf("with the token: %v", r)
		}
	}
	// Rooms are open to everyone.
	expectHTTP(t, 404, "GET", n.url+"/actor/nosuch/x")

	open := startNode(t, nodeOpts{host: ip, args: []string{"--data", t.TempDir()}})
	r := wk(t, nil, "rooms", "--server", open.url, "--token", "s3cret")
	if r.code != 1 || !strings.Contains(r.stderr, "the admin API answers loopback clients only; start the node with --admin-token to use it remotely (HTTP 403)") {
		t.Fatalf("admin API of a node without a token, off loopback: %v", r)
	}
}

// roomsHeader is the header line of `wasmkeep rooms`.
var roomsHeader = []string{"CLASS", "NAME", "STATE", "SOCKETS", "AWAKE", "MEMORY", "LAST-EVENT", "SNAPSHOT", "ALARM"}

// TestAdminListen: with --admin-listen the client commands talk to that
// address (given with --server, or found in WASMKEEP_ADMIN_LISTEN, the
// node's own variable), and the rooms' address serves rooms only: the
// client pointed at it says where the admin API went.
func TestAdminListen(t *testing.T) {
	t.Parallel()
	counter := guestFile(t, "./examples/counter")
	admin := freeAddr(t)
	adminEnv := []string{"WASMKEEP_ADMIN_LISTEN=" + admin}
	n := startNode(t, nodeOpts{args: []string{"--data", t.TempDir()}, env: adminEnv})

	if r := wk(t, nil, "class", "put", "--server", "http://"+admin, "counter", counter); r.code != 0 || !strings.HasPrefix(r.stdout, "class counter: ") {
		t.Fatalf("class put --server <admin address>: %v", r)
	}
	expectHTTP(t, 200, "POST", n.url+"/actor/counter/a")
	if r := wk(t, adminEnv, "rooms"); r.code != 0 || len(table(t, r.stdout, roomsHeader...)) != 1 {
		t.Fatalf("rooms with WASMKEEP_ADMIN_LISTEN: %v", r)
	}
	n.fails("--admin-listen", "rooms")
	expectHTTP(t, 404, "GET", n.url+"/metrics")
	expectHTTP(t, 200, "GET", "http://"+admin+"/metrics")
}

// TestStopAndRestart: SIGTERM stops the node cleanly (sockets closed with
// 1012, exit code 0) and a node on the same data directory has the rooms'
// state back.
func TestStopAndRestart(t *testing.T) {
	t.Parallel()
	counter, chat := guestFile(t, "./examples/counter"), guestFile(t, "./examples/chat")
	data := t.TempDir()
	n := serveNode(t, data)
	n.ok("class", "put", "counter", counter)
	n.ok("class", "put", "chat", chat)
	for i := 1; i <= 2; i++ {
		if got := expectHTTP(t, 200, "POST", n.url+"/actor/counter/x"); got != fmt.Sprint(i) {
			t.Fatalf("POST %d: %q", i, got)
		}
	}
	ws := wstest.Dial(t, n.url+"/actor/chat/lobby")
	ws.Send("before the restart")
	if got := ws.ReadText(); got != "before the restart" {
		t.Fatalf("chat echoed %q", got)
	}

	n.signal(syscall.SIGTERM)
	ws.ExpectClose(1012)
	if code := n.wait(stopDeadline); code != 0 {
		t.Fatalf("after SIGTERM: exit code %d, want 0", code)
	}
	if log := n.stderr.String(); strings.Contains(log, "level=ERROR") {
		t.Fatalf("errors logged during a clean stop:\n%s", log)
	}

	n = serveNode(t, data)
	if got := expectHTTP(t, 200, "POST", n.url+"/actor/counter/x"); got != "3" {
		t.Fatalf("POST after the restart: %q, want 3", got)
	}
	ws = wstest.Dial(t, n.url+"/actor/chat/lobby")
	if got := ws.ReadText(); got != "before the restart" {
		t.Fatalf("chat history after the restart: %q", got)
	}
	if rows := table(t, n.ok("class", "list"), "NAME", "HASH", "SIZE", "ABI", "UPLOADED", "VERSIONS", "ROOMS", "ON-OLDER", "DURABLE", "FRONT"); len(rows) != 2 {
		t.Fatalf("classes after the restart: %q", rows)
	}
}

// TestFlagsFromEnvironment: every flag has a WASMKEEP_ variable.
func TestFlagsFromEnvironment(t *testing.T) {
	t.Parallel()
	counter := guestFile(t, "./examples/counter")
	n := startNode(t, nodeOpts{
		args:      []string{"--data", t.TempDir()},
		env:       []string{"WASMKEEP_IDLE_TIMEOUT=1h", "WASMKEEP_LOG_FORMAT=json", "WASMKEEP_INTERPRETER=true"},
		listenEnv: true,
	})
	n.waitOutput("node serving", healthDeadline) // the log pipe may lag /readyz
	if log := n.stderr.String(); !strings.HasPrefix(log, "{") {
		t.Fatalf("WASMKEEP_LOG_FORMAT=json: the log is not JSON:\n%s", log)
	}
	env := []string{"WASMKEEP_SERVER=" + n.url}
	if r := wk(t, env, "class", "put", "counter", counter); r.code != 0 || !strings.HasPrefix(r.stdout, "class counter: sha256:") {
		t.Fatalf("class put with WASMKEEP_SERVER: %v", r)
	}
	expectHTTP(t, 200, "POST", n.url+"/actor/counter/x")
	r := wk(t, env, "rooms")
	if rows := table(t, r.stdout, roomsHeader...); r.code != 0 || len(rows) != 1 || rows[0][2] != "resident" {
		t.Fatalf("rooms with WASMKEEP_SERVER: %v", r)
	}
}

// TestBadFlagsFailFast: values the node cannot take stop serve (and demo)
// at once, as wrong usage (exit code 2) with a message naming the flag,
// before the data directory is touched.
func TestBadFlagsFailFast(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		args []string
		env  string
		want string
	}{
		{[]string{"serve", "--log-level", "bogus"}, "", `--log-level must be debug, info, warn or error, not "bogus"`},
		{[]string{"serve", "--log-format", "xml"}, "", `--log-format must be text or json, not "xml"`},
		{[]string{"serve", "--max-room-memory", "0"}, "", "--max-room-memory must be 1–4096 MiB, not 0"},
		{[]string{"serve"}, "WASMKEEP_MAX_ROOM_MEMORY=5000", "--max-room-memory must be 1–4096 MiB, not 5000"},
		{[]string{"serve", "--max-sockets", "0"}, "", "--max-sockets must be at least 1, not 0"},
		{[]string{"serve", "--socket-reader", "select"}, "", `--socket-reader must be auto, goroutine or epoll, not "select"`},
		{[]string{"serve", "--max-sockets-per-ip", "-1"}, "", "--max-sockets-per-ip must be 0 (no limit) or more, not -1"},
		{[]string{"serve", "--socket-queue-bytes", "0"}, "", "--socket-queue-bytes must be at least 1, not 0"},
		{[]string{"serve", "--handshake-timeout", "0s"}, "", "--handshake-timeout must be more than 0, not 0s"},
		{[]string{"serve", "--socket-slow-timeout", "0s"}, "", "--socket-slow-timeout must be more than 0, not 0s"},
		{[]string{"serve", "--max-response", "-1"}, "", "--max-response must be at least 1, not -1"},
		{[]string{"serve", "--max-event-output", "0"}, "", "--max-event-output must be at least 1, not 0"},
		{[]string{"serve", "--max-body", "0"}, "", "--max-body must be at least 1, not 0"},
		{[]string{"serve", "--body-timeout", "0s"}, "", "--body-timeout must be more than 0, not 0s"},
		{[]string{"serve", "--max-bodies-per-ip", "0"}, "", "--max-bodies-per-ip must be at least 1, not 0"},
		{[]string{"serve"}, "WASMKEEP_ALLOWED_ORIGINS=app.example", `--allowed-origins: allowed origin "app.example": want * or scheme://host[:port]`},
		{[]string{"serve", "--pool-size", "-1"}, "", "--pool-size must be 0 (no pool) or more, not -1"},
		{[]string{"serve", "--image-cache", "-1"}, "", "--image-cache must be 0 (none) to 1073741824 MiB, not -1"},
		{[]string{"serve", "--image-cache", "2000000000"}, "", "--image-cache must be 0 (none) to 1073741824 MiB, not 2000000000"},
		{[]string{"serve", "--compile-cache", "-5"}, "", "--compile-cache must be 0 (none) to 1073741824 MiB, not -5"},
		{[]string{"serve", "--image-files", "0"}, "", "--image-files must be at least 1, not 0"},
		{[]string{"serve", "--idle-timeout", "0"}, "", "--idle-timeout must be more than 0, not 0s"},
		{[]string{"serve", "--event-timeout", "-1s"}, "", "--event-timeout must be 0 (no limit) or more, not -1s"},
		{[]string{"serve", "--idle-timeout", "soon"}, "", `wasmkeep serve: invalid value "soon" for flag -idle-timeout`},
		{[]string{"serve"}, "WASMKEEP_IDLE_TIMEOUT=soon", `"WASMKEEP_IDLE_TIMEOUT"`},
		{[]string{"serve", "--no-such-flag"}, "", "wasmkeep serve: flag provided but not defined: -no-such-flag"},
		{[]string{"demo", "--max-room-memory", "0"}, "", "--max-room-memory must be 1–4096 MiB, not 0"},
		{[]string{"demo", "--nodes", "2", "--lease-ttl", "500ms"}, "", "--lease-ttl must be at least 1s, not 500ms"},
		{[]string{"demo", "--nodes", "2", "--failover-wait", "-1s"}, "", "--failover-wait must be 0 or more, not -1s"},
		{[]string{"demo", "--nodes", "2"}, "WASMKEEP_OWNER_SWEEP_INTERVAL=10ms", "--owner-sweep-interval must be at least 1s, not 10ms"},
		{[]string{"demo", "--nodes", "2", "--cluster-secret", "short"}, "", "--cluster-secret (or WASMKEEP_CLUSTER_SECRET) of at least 16 bytes"},
		{[]string{"serve", "--node", "a", "--store", "STORE", "--cluster-secret", "0123456789abcdef", "--owner-sweep-interval", "0s"}, "", "--owner-sweep-interval must be at least 1s, not 0s"},
	} {
		data := filepath.Join(t.TempDir(), "data")
		args := append(append([]string(nil), c.args...), "--data", data, "--listen", freeAddr(t))
		for i, a := range args {
			if a == "STORE" {
				args[i] = t.TempDir()
			}
		}
		var env []string
		if c.env != "" {
			env = append(env, c.env)
		}
		start := time.Now()
		r := wk(t, env, args...)
		if r.code != 2 || r.stdout != "" || !strings.Contains(r.stderr, c.want) || strings.Count(r.stderr, "\n") != 1 {
			t.Errorf("%s wasmkeep %s: want exit code 2 and one line with %q; got %v", c.env, strings.Join(c.args, " "), c.want, r)
		}
		if d := time.Since(start); d > 10*time.Second {
			t.Errorf("wasmkeep %s took %v to fail", strings.Join(c.args, " "), d)
		}
		if _, err := os.Stat(data); !os.IsNotExist(err) {
			t.Errorf("wasmkeep %s touched the data directory before failing (%v)", strings.Join(c.args, " "), err)
		}
	}
}

// TestDemo: the demo builds the examples from source and serves them until
// SIGINT.
func TestDemo(t *testing.T) {
	t.Parallel()
	n := startNode(t, nodeOpts{
		command:  "demo",
		args:     []string{"--data", t.TempDir()},
		dir:      moduleRoot(t),
		deadline: demoDeadline,
	})
	// /readyz answers before the classes are loaded; the banner follows.
	n.waitOutput("wasmkeep demo is up", demoDeadline)
	if !strings.Contains(n.stdout.String(), n.url+"/actor/chat/lobby") {
		t.Fatalf("the banner does not show the chat's URL:\n%s", n.stdout.String())
	}
	status, page, header := httpDo(t, "GET", n.url+"/actor/chat/lobby")
	if status != 200 || !strings.HasPrefix(header.Get("Content-Type"), "text/html") || !regexp.MustCompile(`(?i)<html`).MatchString(page) || !strings.Contains(page, "WebSocket") {
		t.Fatalf("GET /actor/chat/lobby: %d %q\n%.300s", status, header.Get("Content-Type"), page)
	}
	if got := expectHTTP(t, 200, "POST", n.url+"/actor/counter/x"); got != "1" {
		t.Fatalf("POST /actor/counter/x: %q", got)
	}
	n.signal(syscall.SIGINT)
	if code := n.wait(stopDeadline); code != 0 {
		t.Fatalf("after SIGINT: exit code %d, want 0", code)
	}
}

// TestDemoUnderGoRun: started with `go run`, the demo stops cleanly also
// when only the go command gets SIGTERM, which the go command does not pass
// on (it dies of it): rooms hibernated, sockets closed with 1012, the port
// and the data directory free again, every room's state kept.
func TestDemoUnderGoRun(t *testing.T) {
	t.Parallel()
	data := t.TempDir()
	n := startNode(t, nodeOpts{command: "demo", goRun: true, args: []string{"--data", data}, deadline: goRunDeadline})
	n.waitOutput("wasmkeep demo is up", goRunDeadline)
	ws := wstest.Dial(t, n.url+"/actor/chat/lobby")
	ws.Send("before the stop")
	if got := ws.ReadText(); got != "before the stop" {
		t.Fatalf("chat echoed %q", got)
	}
	if got := expectHTTP(t, 200, "POST", n.url+"/actor/counter/x"); got != "1" {
		t.Fatalf("POST /actor/counter/x: %q", got)
	}

	n.signal(syscall.SIGTERM) // the go command's pid: not the demo, not the group
	ws.ExpectClose(1012)
	// Wait returns once the go command has died and the demo, which
	// shares its output pipes, has exited too.
	n.wait(stopDeadline)
	if log := n.stderr.String(); !strings.Contains(log, "wasmkeep node stopped") || strings.Contains(log, "level=ERROR") {
		t.Fatalf("the demo did not stop cleanly:\n%s", log)
	}
	l, err := net.Listen("tcp", strings.TrimPrefix(n.url, "http://"))
	if err != nil {
		t.Fatalf("the demo's port after the stop: %v", err)
	}
	l.Close()

	next := serveNode(t, data) // the data directory is free, and has the rooms
	if got := expectHTTP(t, 200, "POST", next.url+"/actor/counter/x"); got != "2" {
		t.Fatalf("POST after the stop: %q, want 2", got)
	}
	if got := wstest.Dial(t, next.url+"/actor/chat/lobby").ReadText(); got != "before the stop" {
		t.Fatalf("chat history after the stop: %q", got)
	}
}
