package node

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/wasmkeep/wasmkeep/abi"
	"github.com/wasmkeep/wasmkeep/host/engine"
	"github.com/wasmkeep/wasmkeep/internal/testwasm"
	"github.com/wasmkeep/wasmkeep/internal/wasmbuild"
	"github.com/wasmkeep/wasmkeep/internal/wstest"
)

// The AssemblyScript SDK (guest-sdk/assemblyscript) on a real node. The
// guests are built with the npm compiler pinned in the SDK's package.json
// (installed from its lock file if missing; the tests skip only when node
// is not installed).

const (
	asChat   = "examples/chat/index.ts"
	asChatV2 = "test/chatv2.ts" // testdata/guests/chatv2 in AssemblyScript
	asGuest  = "test/guest.ts"
)

func putAS(t *testing.T, n *Node, name, entry string, args ...string) {
	t.Helper()
	expect(t, http.StatusCreated, http.MethodPut, n.URL()+"/admin/classes/"+name, testwasm.AssemblyScript(t, entry, args...))
}

// TestAssemblyScriptChatAcrossHibernation is TestChatAcrossHibernation
// with the chat written in AssemblyScript: two sockets chat, the room
// hibernates while both stay open, a third socket joins and gets the
// history from the woken room, and a message reaches all three. The page
// is served by the room. The chat is built with the SDK's runtime (minimal)
// and with AssemblyScript's default one (incremental).
func TestAssemblyScriptChatAcrossHibernation(t *testing.T) {
	t.Parallel()
	t.Run("minimal", func(t *testing.T) { testASChatAcrossHibernation(t) })
	t.Run("incremental", func(t *testing.T) { testASChatAcrossHibernation(t, "--runtime", "incremental") })
}

func testASChatAcrossHibernation(t *testing.T, args ...string) {
	n := startNode(t, Config{})
	putAS(t, n, "aschat", asChat, args...)
	url, c := chatAcrossHibernation(t, n, "aschat")

	// The page is the Go chat's, served by the room itself.
	r := do(t, "GET", url, nil)
	goPage, err := os.ReadFile(filepath.Join("..", "..", "examples", "chat", "chat.html"))
	if err != nil {
		t.Fatal(err)
	}
	if r.Status != 200 || r.Body != string(goPage) || !strings.HasPrefix(r.Header.Get("Content-Type"), "text/html") ||
		r.Header.Get("Cache-Control") != "no-cache" {
		t.Fatalf("page: %d %v, %d bytes (want the %d of examples/chat/chat.html; run node examples/chat/embed.mjs in %s)",
			r.Status, r.Header, len(r.Body), len(goPage), testwasm.ASDir)
	}
	if r := do(t, "POST", url, nil); r.Status != 405 || r.Header.Get("Allow") != "GET" {
		t.Fatalf("POST: %d %v", r.Status, r.Header)
	}
	if r := do(t, "GET", url+"/nope", nil); r.Status != 404 {
		t.Fatalf("other path: %d", r.Status)
	}
	// The chat's limits: a socket on another path, a message too long.
	wstest.Dial(t, url+"/nope").ExpectClose(4004)
	c.Send(strings.Repeat("x", 16<<10+1))
	c.ExpectClose(4009)
}

// TestAssemblyScriptChatSurvivesRestart: a clean stop hibernates the room
// and closes its sockets with 1012; after a restart on the same data
// directory the room wakes from its snapshot with its history, and no room
// cold-starts.
func TestAssemblyScriptChatSurvivesRestart(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	n := startNode(t, Config{DataDir: dir})
	putAS(t, n, "aschat", asChat)
	a := wstest.Dial(t, n.URL()+"/actor/aschat/room")
	for _, m := range []string{"kept 1", "kept 2"} {
		a.Send(m)
		if got := a.ReadText(); got != m {
			t.Fatal(got)
		}
	}
	done := make(chan error, 1)
	go func() { done <- n.Stop(t.Context()) }()
	a.ExpectClose(1012)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	n.http = nil

	n = startNode(t, Config{DataDir: dir})
	b := wstest.Dial(t, n.URL()+"/actor/aschat/room")
	for _, want := range []string{"kept 1", "kept 2"} {
		if got := b.ReadText(); got != want {
			t.Fatalf("history after restart: %q, want %q", got, want)
		}
	}
	b.Send("after restart")
	if got := b.ReadText(); got != "after restart" {
		t.Fatal(got)
	}
	if got := metric(t, n, "wasmkeep_room_cold_starts_total"); got != 0 {
		t.Fatalf("%v cold starts after restart; the room should wake from its snapshot", got)
	}
}

// TestAssemblyScriptSDK drives every part of the SDK through its test
// guest: request and response encoding, room info, sockets, broadcasts,
// closes, checkpoints, the reserved alarm, WASI clocks and randomness, a
// trap rolling the room back, and Phoenix channels.
func TestAssemblyScriptSDK(t *testing.T) {
	t.Parallel()
	n := startNode(t, Config{})
	putAS(t, n, "asguest", asGuest)
	room := n.URL() + "/actor/asguest/r"

	t.Run("requests", func(t *testing.T) {
		req, _ := http.NewRequest("PUT", room+"/some/deep%2Fpath?a=1&status=201", strings.NewReader("the body\nline 2 ✓"))
		req.Header.Set("X-Test", "hello")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		body := readAll(t, resp)
		want := "method PUT\npath /some/deep%2Fpath\nquery a=1&status=201\nx-test hello\nbody the body\nline 2 ✓"
		if resp.StatusCode != 201 || body != want || resp.Header.Values("X-Echo")[0] != "1" || len(resp.Header.Values("X-Echo")) != 1 {
			t.Fatalf("status %d, X-Echo %q, body:\n%s\nwant:\n%s", resp.StatusCode, resp.Header.Values("X-Echo"), body, want)
		}
		if got := expect(t, 200, "GET", n.URL()+"/actor/asguest/r%C3%A9sum%C3%A9/room", nil); got != "asguest/résumé" {
			t.Fatalf("room: %q", got)
		}
		if got := expect(t, 200, "GET", room+"/query?k%20x=%E2%9C%93&a=1&a=2&bad=%zz&flag", nil); got != "✓\n1\n\n<null>" {
			t.Fatalf("queryValue: %q", got)
		}
		if got := expect(t, 200, "GET", room+"/misc", nil); got != "ok" {
			t.Fatalf("misc: %q", got)
		}
		if got := expect(t, 200, "POST", room+"/checkpoint", nil); got != "0" {
			t.Fatalf("checkpoint: %q", got)
		}
		if got := expect(t, 200, "POST", room+"/alarm", nil); got != "0" {
			t.Fatalf("alarm: %q, want 0", got)
		}
		if f := strings.Fields(expect(t, 200, "GET", room+"/alarm", nil)); len(f) != 3 || f[0] == "0" || f[1] != "0" {
			t.Fatalf("alarm set a minute ahead: %q, want its time and no run", f)
		}
		fired := metric(t, n, "wasmkeep_alarms_fired_total")
		if got := expect(t, 200, "POST", room+"/alarm/now", nil); got != "0" {
			t.Fatalf("alarm/now: %q", got)
		}
		waitFor(t, "the alarm to run", func() bool { return metric(t, n, "wasmkeep_alarms_fired_total") == fired+1 })
		if got := expect(t, 200, "GET", room+"/alarm", nil); got != "0 1 0" {
			t.Fatalf("after the alarm ran: %q, want none set, one run, retry 0", got)
		}
	})

	t.Run("delete state", func(t *testing.T) {
		room := n.URL() + "/actor/asguest/deleted"
		expect(t, 200, "POST", room, nil)
		c := wstest.Dial(t, room)
		if got := c.ReadText(); got != "open /? remote" {
			t.Fatalf("open: %q", got)
		}
		if got := expect(t, 200, "DELETE", room, nil); got != "0" {
			t.Fatalf("deleteState: %q", got)
		}
		if got := expect(t, 200, "GET", room, nil); got != "0" {
			t.Fatalf("after deleteState the counter is %q, want 0", got)
		}
		// The socket stayed open, and the fresh room was told of it.
		if got := c.ReadText(); got != "open /? remote" {
			t.Fatalf("the fresh room's open: %q", got)
		}
		c.Send("still here")
		if got := c.ReadText(); got != "still here" {
			t.Fatalf("echo after deleteState: %q", got)
		}
	})

	t.Run("traps roll back", func(t *testing.T) {
		for i := 1; i <= 2; i++ {
			expect(t, 200, "POST", room, nil)
		}
		hibernate(t, n, "asguest", "r")
		expect(t, 200, "POST", room, nil) // 3, durable before its answer (the default)
		for _, path := range []string{"/abort", "/throw"} {
			r := do(t, "POST", room+path, nil)
			if r.Status != 500 || !strings.Contains(r.Body, "guest trapped") {
				t.Fatalf("%s: %d %s", path, r.Status, r.Body)
			}
			if got := expect(t, 200, "GET", room, nil); got != "3" {
				t.Fatalf("after %s: %q, want the last acknowledged 3", path, got)
			}
		}
		if got := metric(t, n, `wasmkeep_room_crashes_total{cause="trap"}`); got != 2 {
			t.Fatalf("trap crashes: %v", got)
		}
	})

	t.Run("sockets", func(t *testing.T) {
		a := wstest.Dial(t, room+"/ws?x=1")
		if got := a.ReadText(); got != "open /ws?x=1 remote" {
			t.Fatalf("open: %q", got)
		}
		b := wstest.Dial(t, room)
		b.ReadText()
		ids := expect(t, 200, "GET", room+"/sockets", nil)
		if strings.Count(ids, ",") != 1 {
			t.Fatalf("sockets: %q", ids)
		}
		a.Send("echo ✓")
		if got := a.ReadText(); got != "echo ✓" {
			t.Fatal(got)
		}
		a.SendBinary([]byte{0, 1, 2, 255})
		if kind, data, err := a.Read(); err != nil || kind != 2 || string(data) != "\x00\x01\x02\xff" {
			t.Fatalf("binary echo: %v %v %q", err, kind, data)
		}
		a.Send("others:to b")
		if got := b.ReadText(); got != "to b" {
			t.Fatal(got)
		}
		if got := expect(t, 200, "POST", room+"/broadcast", []byte("to all")); got != "2" {
			t.Fatalf("broadcast count: %q", got)
		}
		for _, c := range []*wstest.Client{a, b} {
			if got := c.ReadText(); got != "to all" {
				t.Fatal(got)
			}
		}
		// A trap in a message closes only that socket, with 1011.
		a.Send("trap")
		a.ExpectClose(1011)
		b.Send("close")
		b.ExpectClose(4000)
		waitFor(t, "the close", func() bool {
			return strings.Contains(expect(t, 200, "GET", room+"/closes", nil), " 4000 bye")
		})
	})

	t.Run("channels", func(t *testing.T) {
		p := dialPhx(t, n, "asguest", "ch")
		p.skipPresence = true
		if _, st, resp := p.join("reject", map[string]any{}); st != "error" || string(resp) != `{"reason":"rejected"}` {
			t.Fatalf("rejected join: %s %s", st, resp)
		}
		join, st, resp := p.join("room:a", map[string]any{"name": "ada"})
		if st != "ok" || string(resp) != `{"joined":"room:a","payload":{"name":"ada"}}` {
			t.Fatalf("join: %s %s", st, resp)
		}
		if st, resp := p.reply(p.send(join, "room:a", "echo", map[string]any{"x": "✓"})); st != "ok" || string(resp) != `{"x":"✓"}` {
			t.Fatalf("echo: %s %s", st, resp)
		}
		ref := p.send(join, "room:a", "push", map[string]any{"y": 2})
		if f := p.expect("room:a", "pushed"); string(f.Payload) != `{"y":2}` {
			t.Fatalf("push: %s", f.Payload)
		}
		if st, _ := p.reply(ref); st != "ok" {
			t.Fatalf("push reply: %s", st)
		}

		q := dialPhx(t, n, "asguest", "ch")
		q.skipPresence = true
		qjoin, _, _ := q.join("room:a", nil)
		// Presence: q sees ada's socket tracked.
		p.send(join, "room:a", "shout", map[string]any{"body": "hi"})
		for _, c := range []*phx{p, q} {
			if f := c.expect("room:a", "shout"); string(f.Payload) != `{"body":"hi"}` {
				t.Fatalf("shout: %s", f.Payload)
			}
		}
		if st, resp := q.reply(q.send(qjoin, "room:a", "untrack", nil)); st != "ok" || string(resp) != `{"status":0}` {
			t.Fatalf("untrack: %s %s", st, resp)
		}
		if st, resp := q.reply(q.send(qjoin, "room:a", "nope", nil)); st != "error" || !strings.Contains(string(resp), "unknown event") {
			t.Fatalf("unknown event: %s %s", st, resp)
		}
		// A trap in a topic's message closes that topic with phx_error.
		q.send(qjoin, "room:a", "trap", nil)
		q.expect("room:a", "phx_error")
		p.send(join, "room:a", "close", nil)
		p.expect("room:a", "phx_close")
		waitFor(t, "the leave", func() bool {
			return strings.Contains(expect(t, 200, "GET", n.URL()+"/actor/asguest/ch/leaves", nil), "room:a closed")
		})
	})
}

// TestAssemblyScriptPageInSync: the chat example's page.ts is generated
// from the Go chat's page; a change to chat.html must be carried over.
func TestAssemblyScriptPageInSync(t *testing.T) {
	root, err := wasmbuild.ModuleRoot()
	if err != nil {
		t.Fatal(err)
	}
	html, err := os.ReadFile(filepath.Join(root, "examples", "chat", "chat.html"))
	if err != nil {
		t.Fatal(err)
	}
	src, err := os.ReadFile(filepath.Join(root, testwasm.ASDir, "examples", "chat", "page.ts"))
	if err != nil {
		t.Fatal(err)
	}
	_, lit, _ := strings.Cut(string(src), "= [")
	lit, _, _ = strings.Cut(lit, "]")
	var page []byte
	for _, f := range strings.FieldsFunc(lit, func(r rune) bool { return r == ',' || r == ' ' || r == '\n' }) {
		b, err := strconv.ParseUint(f, 10, 8)
		if err != nil {
			t.Fatalf("page.ts: %v", err)
		}
		page = append(page, byte(b))
	}
	if !bytes.Equal(page, html) {
		t.Fatalf("page.ts is not examples/chat/chat.html: run node examples/chat/embed.mjs in %s", testwasm.ASDir)
	}
}

// TestAssemblyScriptNames checks the AssemblyScript SDK's restatement of
// the ABI against the abi package: every import it declares is one the
// host provides, every wasmkeep_ export it defines is an ABI export, and
// its Status codes are abi's.
func TestAssemblyScriptNames(t *testing.T) {
	root, err := wasmbuild.ModuleRoot()
	if err != nil {
		t.Fatal(err)
	}
	read := func(name string) string {
		b, err := os.ReadFile(filepath.Join(root, testwasm.ASDir, "assembly", name))
		if err != nil {
			t.Fatal(err)
		}
		return string(b)
	}
	imports := map[string]bool{
		abi.ImportHTTPRespond: true, abi.ImportSocketSend: true, abi.ImportSocketClose: true,
		abi.ImportSocketList: true, abi.ImportBroadcast: true, abi.ImportRoomInfo: true, abi.ImportLog: true,
		abi.ImportCheckpoint: true, abi.ImportStateDelete: true, abi.ImportAlarmSet: true, abi.ImportAlarmClear: true,
		abi.ImportUpgradeState: true, abi.ImportUpgradeAccept: true,
		abi.ImportChannelReply: true, abi.ImportChannelPush: true, abi.ImportChannelBroadcast: true,
		abi.ImportChannelClose: true, abi.ImportPresenceTrack: true, abi.ImportPresenceUntrack: true,
		abi.ImportHTTPHandOver: true, abi.ImportCallStart: true, abi.ImportCallWait: true,
		abi.ImportCallResult: true, abi.ImportCallReply: true, abi.ImportSecretGet: true,
		abi.ImportFetchStart: true, abi.ImportFetchWait: true, abi.ImportFetchResult: true,
		abi.ImportAlarmGet: true,
	}
	declared := regexp.MustCompile(`@external\("`+abi.ImportModule+`", "([a-z_]+)"\)`).FindAllStringSubmatch(read("host.ts"), -1)
	for _, m := range declared {
		if !imports[m[1]] {
			t.Errorf("host.ts imports %s.%s, which abi does not define", abi.ImportModule, m[1])
		}
		delete(imports, m[1])
	}
	for name := range imports {
		t.Errorf("host.ts does not declare %s.%s", abi.ImportModule, name)
	}

	exports := map[string]bool{
		abi.VersionExport: true, abi.ExportAlloc: true, abi.ExportOnRequest: true,
		abi.ExportOnSocketOpen: true, abi.ExportOnSocketMessage: true, abi.ExportOnSocketMessages: true, abi.ExportOnSocketClose: true,
		abi.ExportOnJoin: true, abi.ExportOnChannelMessage: true, abi.ExportOnLeave: true,
		abi.ExportOnUpgrade: true, abi.ExportOnStartFrom: true, abi.ExportOnCall: true, abi.ExportOnAlarm: true,
	}
	for _, m := range regexp.MustCompile(`export function (wasmkeep_[a-z0-9_]+)\(`).FindAllStringSubmatch(read("exports.ts"), -1) {
		if !exports[m[1]] {
			t.Errorf("exports.ts exports %s, which is not an ABI v1 export", m[1])
		}
		delete(exports, m[1])
	}
	for name := range exports {
		t.Errorf("exports.ts does not export %s", name)
	}

	index := read("index.ts")
	for name, st := range map[string]abi.Status{
		"OK": abi.Success, "Invalid": abi.StatusInvalid, "NoSocket": abi.StatusNoSocket,
		"TooLarge": abi.StatusTooLarge, "Unsupported": abi.StatusUnsupported,
		"State": abi.StatusState, "Overloaded": abi.StatusOverloaded,
		"NotFound": abi.StatusNotFound, "Refused": abi.StatusRefused, "Timeout": abi.StatusTimeout,
		"Crashed": abi.StatusCrashed, "Cycle": abi.StatusCycle, "TooDeep": abi.StatusTooDeep,
		"TooMany": abi.StatusTooMany, "NotAllowed": abi.StatusNotAllowed, "Failed": abi.StatusFailed,
	} {
		if !strings.Contains(index, fmt.Sprintf("\n  %s = %d,\n", name, st)) {
			t.Errorf("index.ts: Status.%s is not %d", name, st)
		}
		if st < 0 && !strings.Contains(index, fmt.Sprintf("case Status.%s: return %q;", name, st.String())) {
			t.Errorf("index.ts: statusText(Status.%s) is not %q", name, st.String())
		}
	}
}

// putVersion uploads wasm as a new version of class with the upload's
// query and returns its hash.
func putVersion(t *testing.T, n *Node, class string, wasm []byte, query string) string {
	t.Helper()
	expect(t, http.StatusCreated, http.MethodPut, n.AdminURL()+"/admin/classes/"+class+"?"+query, wasm)
	return engine.Hash(wasm)
}

// TestAssemblyScriptUpgrade is TestUpgradeKeepsHistoryAndSockets with the
// AssemblyScript chat and its second version (test/chatv2.ts), and across
// languages: both SDKs speak the same handoff, and both chats write the
// same history format, so an AssemblyScript room moves to a Go version and
// back with its history and its sockets.
func TestAssemblyScriptUpgrade(t *testing.T) {
	t.Parallel()
	var (
		asV1 = func(t *testing.T) []byte { return testwasm.AssemblyScript(t, asChat) }
		asV2 = func(t *testing.T) []byte { return testwasm.AssemblyScript(t, asChatV2) }
		goV1 = func(t *testing.T) []byte { return testwasm.Build(t, "./examples/chat") }
		goV2 = func(t *testing.T) []byte { return testwasm.Build(t, "./testdata/guests/chatv2") }
	)
	for _, c := range []struct {
		name, policy string
		v1, v2       func(*testing.T) []byte
	}{
		{"AS to AS, lazy", "lazy", asV1, asV2},
		{"AS to AS, now", "now", asV1, asV2},
		{"AS to Go", "lazy", asV1, goV2},
		{"Go to AS", "now", goV1, asV2},
	} {
		t.Run(c.name, func(t *testing.T) {
			n := startNode(t, Config{})
			v1 := putVersion(t, n, "chat", c.v1(t), "")
			url := n.URL() + "/actor/chat/lobby"
			a, b := chatWithHistory(t, url)
			if c.policy == "lazy" {
				hibernate(t, n, "chat", "lobby")
			}
			if row := upgradeRowOf(t, n, "chat", "lobby"); row.Version != v1 {
				t.Fatalf("the room runs %q, want v1 %s", row.Version, v1)
			}
			v2 := putVersion(t, n, "chat", c.v2(t), "upgrade="+c.policy)
			if c.policy == "now" {
				waitFor(t, "the room on v2", func() bool { return upgradeRowOf(t, n, "chat", "lobby").Version == v2 })
			}
			// v2 answers the sockets v1 had, with no open event replaying
			// the history to them.
			b.Send("three")
			everyoneReads(t, "v2: three", a, b)
			if got := expect(t, 200, "GET", url+"/history", nil); got != "one\ntwo\nv2: three" {
				t.Fatalf("v2's history is %q", got)
			}
			if row := upgradeRowOf(t, n, "chat", "lobby"); row.Version != v2 || row.Sockets != 2 || row.Upgrade != nil {
				t.Fatalf("after the upgrade: %+v", row)
			}
			// The upgraded state was written: a wake restores v2, and a new
			// socket gets its history.
			hibernate(t, n, "chat", "lobby")
			if got := expect(t, 200, "GET", url+"/version", nil); got != "v2" {
				t.Fatalf("after another wake the room answers %q", got)
			}
			d := wstest.Dial(t, url)
			for _, want := range []string{"one", "two", "v2: three"} {
				if got := d.ReadText(); got != want {
					t.Fatalf("a new socket's history: %q, want %q", got, want)
				}
			}
		})
	}
}

// TestAssemblyScriptUpgradeWithoutHandlers: the SDK exports both upgrade
// functions whatever a room registers, and without handlers they offer no
// handoff and accept none, as the Go SDK's do. The test guest registers
// neither: a room of it stays on its version when the chat's v2 comes, and
// a chat room stays on the chat when the guest comes as its v2. A start
// that aborts (chatv2 given a state it cannot read) is a trap.
func TestAssemblyScriptUpgradeWithoutHandlers(t *testing.T) {
	t.Parallel()
	n := startNode(t, Config{})
	guest, chat, chatV2 := testwasm.AssemblyScript(t, asGuest), testwasm.AssemblyScript(t, asChat), testwasm.AssemblyScript(t, asChatV2)

	// What the versions list says each can do.
	handoff := map[string][2]bool{}
	for _, c := range []struct {
		class string
		wasm  []byte
	}{{"g", guest}, {"c", chat}} {
		putVersion(t, n, c.class, c.wasm, "")
		var vs struct {
			Versions []struct {
				Hash   string
				Offers bool `json:"offers_handoff"`
				Takes  bool `json:"takes_handoff"`
			}
		}
		if err := json.Unmarshal([]byte(expect(t, 200, "GET", n.AdminURL()+"/admin/classes/"+c.class+"/versions", nil)), &vs); err != nil {
			t.Fatal(err)
		}
		for _, v := range vs.Versions {
			handoff[v.Hash] = [2]bool{v.Offers, v.Takes}
		}
	}
	if got := handoff[engine.Hash(guest)]; got != [2]bool{false, false} {
		t.Errorf("the guest without handlers: offers, takes %v, want neither", got)
	}
	if got := handoff[engine.Hash(chat)]; got != [2]bool{true, true} {
		t.Errorf("the chat: offers, takes %v, want both", got)
	}

	// A guest room offers nothing to chatv2: it stays, and keeps its state.
	room := n.URL() + "/actor/g/r"
	expect(t, 200, "POST", room, nil)
	hibernate(t, n, "g", "r")
	putVersion(t, n, "g", chatV2, "")
	if got := expect(t, 200, "GET", room, nil); got != "1" {
		t.Fatalf("the guest room after chatv2's upload answers %q, want its counter", got)
	}
	if u := upgradeRowOf(t, n, "g", "r").Upgrade; u == nil || u.State != "no-handoff" || !strings.Contains(u.Error, engine.ErrNoHandoff.Error()) {
		t.Fatalf("the guest room's upgrade: %+v, want no-handoff (%v)", u, engine.ErrNoHandoff)
	}

	// The guest as the chat's v2 takes nothing over: the chat stays.
	url := n.URL() + "/actor/c/lobby"
	a, b := chatWithHistory(t, url)
	hibernate(t, n, "c", "lobby")
	putVersion(t, n, "c", guest, "")
	a.Send("three")
	everyoneReads(t, "three", a, b)
	if u := upgradeRowOf(t, n, "c", "lobby").Upgrade; u == nil || u.State != "no-handoff" || !strings.Contains(u.Error, engine.ErrNotTakenOver.Error()) {
		t.Fatalf("the chat room's upgrade: %+v, want no-handoff (%v)", u, engine.ErrNotTakenOver)
	}

	// chatv2 refuses a state it cannot read by aborting: a trap, and the
	// instance is dead.
	e, err := engine.New(t.Context(), engine.Config{})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close(t.Context())
	class, err := e.Compile(t.Context(), chatV2)
	if err != nil {
		t.Fatal(err)
	}
	inst, err := class.Start(t.Context(), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer inst.Close()
	if err := inst.StartFrom(engine.Hash(guest), []byte("not a history")); !errors.Is(err, engine.ErrTrap) || !inst.Dead() {
		t.Fatalf("chatv2 from garbage: %v (dead %v), want a trap", err, inst.Dead())
	}
}
