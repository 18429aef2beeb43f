package node

import (
	"encoding/json"
	"fmt"
	"log/slog"
	"strings"
	"testing"

	"github.com/wasmkeep/wasmkeep/abi"
	"github.com/wasmkeep/wasmkeep/internal/testenv"
	"github.com/wasmkeep/wasmkeep/internal/wstest"
)

// phx is a Phoenix V2 client over a plain WebSocket: frames are JSON
// arrays [join_ref, ref, topic, event, payload].
type phx struct {
	t            *testing.T
	c            *wstest.Client
	ref          int
	skipPresence bool // reply skips presence_state and presence_diff frames
}

type phxFrame struct {
	JoinRef, Ref *string
	Topic, Event string
	Payload      json.RawMessage
}

func dialPhx(t *testing.T, n *Node, class, room string) *phx {
	return &phx{t: t, c: wstest.Dial(t, n.URL()+"/actor/"+class+"/"+room+"/socket/websocket?vsn=2.0.0")}
}

func (p *phx) send(joinRef *string, topic, event string, payload any) string {
	p.t.Helper()
	p.ref++
	ref := fmt.Sprint(p.ref)
	b, _ := json.Marshal([]any{joinRef, ref, topic, event, payload})
	p.c.Send(string(b))
	return ref
}

func (p *phx) read() phxFrame {
	p.t.Helper()
	var raw []json.RawMessage
	if err := json.Unmarshal([]byte(p.c.ReadText()), &raw); err != nil || len(raw) != 5 {
		p.t.Fatalf("not a Phoenix frame: %v", err)
	}
	var f phxFrame
	_ = json.Unmarshal(raw[0], &f.JoinRef)
	_ = json.Unmarshal(raw[1], &f.Ref)
	_ = json.Unmarshal(raw[2], &f.Topic)
	_ = json.Unmarshal(raw[3], &f.Event)
	f.Payload = raw[4]
	return f
}

// expect reads frames until one of event arrives (on topic), failing on
// anything else unless skip says to ignore it.
func (p *phx) expect(topic, event string) phxFrame {
	p.t.Helper()
	f := p.read()
	for p.skipPresence && strings.HasPrefix(f.Event, "presence_") && f.Event != event {
		f = p.read()
	}
	if f.Topic != topic || f.Event != event {
		p.t.Fatalf("got %s %s %s, want %s %s", f.Topic, f.Event, f.Payload, topic, event)
	}
	return f
}

func (p *phx) reply(ref string) (status string, response json.RawMessage) {
	p.t.Helper()
	f := p.read()
	for p.skipPresence && strings.HasPrefix(f.Event, "presence_") {
		f = p.read()
	}
	if f.Event != "phx_reply" || f.Ref == nil || *f.Ref != ref {
		p.t.Fatalf("want the reply to %s, got %s %s %s", ref, f.Topic, f.Event, f.Payload)
	}
	var r struct {
		Status   string
		Response json.RawMessage
	}
	_ = json.Unmarshal(f.Payload, &r)
	return r.Status, r.Response
}

func (p *phx) join(topic string, payload any) (*string, string, json.RawMessage) {
	p.t.Helper()
	p.ref++
	ref := fmt.Sprint(p.ref)
	b, _ := json.Marshal([]any{ref, ref, topic, "phx_join", payload})
	p.c.Send(string(b))
	status, resp := p.reply(ref)
	return &ref, status, resp
}

// TestPhoenixChannels drives the presence example with the Phoenix V2
// wire protocol: heartbeats answered while the room sleeps, joins accepted
// and refused, presence state and diffs, broadcasts, replies, leaves.
func TestPhoenixChannels(t *testing.T) {
	n := startNode(t, Config{})
	putClass(t, n, "presence", "./examples/presence")

	ada := dialPhx(t, n, "presence", "r")
	if st, _ := ada.reply(ada.send(nil, "phoenix", "heartbeat", map[string]any{})); st != "ok" {
		t.Fatalf("heartbeat: %s", st)
	}
	if _, st, resp := ada.join("room:lobby", map[string]any{}); st != "error" || !strings.Contains(string(resp), "name required") {
		t.Fatalf("join without a name: %s %s", st, resp)
	}
	adaJoin, st, resp := ada.join("room:lobby", map[string]any{"name": "ada"})
	if st != "ok" || string(resp) != `{"history":[]}` {
		t.Fatalf("join: %s %s", st, resp)
	}
	if f := ada.expect("room:lobby", "presence_state"); string(f.Payload) != "{}" {
		t.Fatalf("first presence_state: %s", f.Payload)
	}
	if f := ada.expect("room:lobby", "presence_diff"); !strings.Contains(string(f.Payload), `"joins":{"ada"`) {
		t.Fatalf("own join diff: %s", f.Payload)
	}

	bob := dialPhx(t, n, "presence", "r")
	bobJoin, st, _ := bob.join("room:lobby", map[string]any{"name": "bob"})
	if st != "ok" {
		t.Fatal(st)
	}
	if f := bob.expect("room:lobby", "presence_state"); !strings.Contains(string(f.Payload), `"ada":{"metas":[{`) {
		t.Fatalf("bob's presence_state: %s", f.Payload)
	}
	bob.expect("room:lobby", "presence_diff")
	if f := ada.expect("room:lobby", "presence_diff"); !strings.Contains(string(f.Payload), `"joins":{"bob"`) {
		t.Fatalf("ada sees bob: %s", f.Payload)
	}

	// A broadcast reaches both; the sender also gets its reply.
	ref := ada.send(adaJoin, "room:lobby", "shout", map[string]string{"body": "hello"})
	for _, p := range []*phx{ada, bob} {
		f := p.expect("room:lobby", "shout")
		if string(f.Payload) != `{"name":"ada","body":"hello"}` || f.JoinRef != nil {
			t.Fatalf("broadcast: %s %v", f.Payload, f.JoinRef)
		}
	}
	if st, _ := ada.reply(ref); st != "ok" {
		t.Fatalf("shout reply: %s", st)
	}

	// The room sleeps; heartbeats do not wake it; a push does.
	hibernate(t, n, "presence", "r")
	wakes := metric(t, n, "wasmkeep_room_wakes_total")
	for range 3 {
		if st, _ := bob.reply(bob.send(nil, "phoenix", "heartbeat", map[string]any{})); st != "ok" {
			t.Fatal("heartbeat while hibernated")
		}
	}
	if got := metric(t, n, "wasmkeep_room_wakes_total"); got != wakes {
		t.Fatalf("heartbeats woke the room (%v → %v)", wakes, got)
	}
	if st, resp := bob.reply(bob.send(bobJoin, "room:lobby", "ping", map[string]any{})); st != "ok" || string(resp) != `{"pong":true}` {
		t.Fatalf("ping after wake: %s %s", st, resp)
	}
	if got := metric(t, n, "wasmkeep_room_wakes_total"); got != wakes+1 {
		t.Fatalf("wakes %v, want %v", got, wakes+1)
	}

	// Unjoined topics and stale join_refs.
	if st, resp := bob.reply(bob.send(bobJoin, "room:other", "shout", map[string]any{"body": "x"})); st != "error" || !strings.Contains(string(resp), "unmatched topic") {
		t.Fatalf("unjoined topic: %s %s", st, resp)
	}
	stale := "999"
	bob.send(&stale, "room:lobby", "shout", map[string]any{"body": "stale"})
	if st, resp := bob.reply(bob.send(bobJoin, "room:lobby", "ping", map[string]any{})); st != "ok" || string(resp) != `{"pong":true}` {
		t.Fatalf("after a stale message: %s %s", st, resp)
	}
	if got := metric(t, n, `wasmkeep_channel_drops_total{reason="stale"}`); got != 1 {
		t.Fatalf("stale drops: %v", got)
	}

	// Bob leaves: acknowledged, and ada sees him go.
	if st, _ := bob.reply(bob.send(bobJoin, "room:lobby", "phx_leave", map[string]any{})); st != "ok" {
		t.Fatalf("leave: %s", st)
	}
	if f := ada.expect("room:lobby", "presence_diff"); !strings.Contains(string(f.Payload), `"leaves":{"bob"`) {
		t.Fatalf("ada sees bob leave: %s", f.Payload)
	}
	// A new member gets the history from the room's memory.
	cyd := dialPhx(t, n, "presence", "r")
	if _, st, resp := cyd.join("room:lobby", map[string]any{"name": "cyd"}); st != "ok" || !strings.Contains(string(resp), `"body":"hello"`) {
		t.Fatalf("history: %s %s", st, resp)
	}
}

// TestChannelCrashClosesOnlyTheTopic: a trap while handling a topic's
// message closes that topic with phx_error; the socket and its other
// topics go on; a trap in a join rejects the join.
func TestChannelCrashClosesOnlyTheTopic(t *testing.T) {
	n := startNode(t, Config{})
	putClass(t, n, "channels", "./testdata/guests/channels")
	p := dialPhx(t, n, "channels", "h")
	p.skipPresence = true
	if _, st, resp := p.join("trap", map[string]any{}); st != "error" || !strings.Contains(string(resp), "join crashed") {
		t.Fatalf("trapping join: %s %s", st, resp)
	}
	a, st, _ := p.join("room:a", map[string]any{})
	b, st2, _ := p.join("room:b", map[string]any{})
	if st != "ok" || st2 != "ok" {
		t.Fatalf("joins: %s %s", st, st2)
	}
	p.send(a, "room:a", "trap", map[string]any{})
	if f := p.expect("room:a", "phx_error"); f.JoinRef == nil || *f.JoinRef != *a {
		t.Fatalf("phx_error: %+v", f)
	}
	if st, resp := p.reply(p.send(b, "room:b", "echo", map[string]any{"x": 1})); st != "ok" || string(resp) != `{"x":1}` {
		t.Fatalf("other topic after the crash: %s %s", st, resp)
	}
	if got := metric(t, n, `wasmkeep_channel_joins_total{result="crashed"}`); got != 1 {
		t.Fatalf("crashed joins: %v", got)
	}
}

// TestChannelJoinsAndLeaves: unanswered joins fail closed, refusals are
// passed on, the room hears of every join that ends (a leave, a rejoin, a
// server close, a socket close, and a node restart while it slept).
func TestChannelJoinsAndLeaves(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	n := startNode(t, Config{DataDir: dir})
	putClass(t, n, "channels", "./testdata/guests/channels")
	room := n.URL() + "/actor/channels/j"
	p := dialPhx(t, n, "channels", "j")
	p.skipPresence = true
	if _, st, resp := p.join("silent", map[string]any{}); st != "error" || !strings.Contains(string(resp), "join refused") {
		t.Fatalf("unanswered join: %s %s", st, resp)
	}
	if _, st, resp := p.join("reject", map[string]any{}); st != "error" || string(resp) != `{"reason":"rejected"}` {
		t.Fatalf("rejected join: %s %s", st, resp)
	}
	a, _, _ := p.join("a", nil)
	p.join("b", nil)
	cJoin, _, _ := p.join("c", nil)
	if got := expect(t, 200, "GET", room+"/joins", nil); got != "1 a\n1 b\n1 c" {
		t.Fatalf("joins: %q", got)
	}
	// Leave a, rejoin b, have the server close c.
	p.reply(p.send(a, "a", "phx_leave", nil))
	p.ref++
	rejoin := fmt.Sprint(p.ref)
	b2, _ := json.Marshal([]any{rejoin, rejoin, "b", "phx_join", nil})
	p.c.Send(string(b2))
	p.expect("b", "phx_close") // the old join first, as Phoenix does
	if st, _ := p.reply(rejoin); st != "ok" {
		t.Fatalf("rejoin: %s", st)
	}
	p.send(cJoin, "c", "close", nil)
	p.expect("c", "phx_close")
	waitFor(t, "three leaves", func() bool {
		return strings.Count(expect(t, 200, "GET", room+"/leaves", nil), "\n") == 2
	})
	if got := expect(t, 200, "GET", room+"/leaves", nil); got != "1 a client\n1 b rejoin\n1 c closed" {
		t.Fatalf("leaves: %q", got)
	}

	// The room sleeps with b joined; the node stops (sockets closed) and
	// restarts: the room hears b closed when it wakes.
	hibernate(t, n, "channels", "j")
	closed := answerClose(t, p.c, abi.CloseServiceRestart)
	stop(t, n)
	closed()
	n = startNode(t, Config{DataDir: dir})
	if got := expect(t, 200, "GET", n.URL()+"/actor/channels/j/leaves", nil); !strings.HasSuffix(got, "1 b closed") {
		t.Fatalf("leaves after restart: %q", got)
	}
	if got := expect(t, 200, "GET", n.URL()+"/actor/channels/j/joins", nil); got != "" {
		t.Fatalf("joins after restart: %q", got)
	}
}

// TestChannelInvalidReply: a reply of the room's that is not valid JSON
// text (invalid UTF-8 in a string, which the engine's json.Valid lets
// through) reaches the client as an error reply saying so, instead of
// never: to a join, which is refused (the room, which accepted it, hears
// that it ended), and to a message, whose topic goes on. Each is logged
// once.
func TestChannelInvalidReply(t *testing.T) {
	var log testenv.Buffer
	n := startNode(t, Config{Logger: slog.New(slog.NewTextHandler(&log, nil))})
	putClass(t, n, "channels", "./testdata/guests/channels")
	room := n.URL() + "/actor/channels/i"
	p := dialPhx(t, n, "channels", "i")
	p.skipPresence = true
	if _, st, resp := p.join("badreply", nil); st != "error" || string(resp) != `{"reason":"invalid reply"}` {
		t.Fatalf("join answered with invalid JSON: %s %s", st, resp)
	}
	waitFor(t, "the room to hear that its join ended", func() bool {
		return expect(t, 200, "GET", room+"/leaves", nil) == "1 badreply closed"
	})
	if got := expect(t, 200, "GET", room+"/joins", nil); got != "" {
		t.Fatalf("joins the room still holds: %q", got)
	}
	a, st, _ := p.join("a", nil)
	if st != "ok" {
		t.Fatalf("join a: %s", st)
	}
	if st, resp := p.reply(p.send(a, "a", "badreply", nil)); st != "error" || string(resp) != `{"reason":"invalid reply"}` {
		t.Fatalf("message answered with invalid JSON: %s %s", st, resp)
	}
	if st, resp := p.reply(p.send(a, "a", "notjson", nil)); st != "error" || string(resp) != `{"reason":"invalid reply"}` {
		t.Fatalf("message answered with a body that is not JSON: %s %s", st, resp)
	}
	if st, resp := p.reply(p.send(a, "a", "echo", map[string]any{"x": 1})); st != "ok" || string(resp) != `{"x":1}` {
		t.Fatalf("the topic after an invalid reply: %s %s", st, resp)
	}
	if got := metric(t, n, `wasmkeep_channel_joins_total{result="rejected"}`); got != 1 {
		t.Fatalf("rejected joins: %v, want 1", got)
	}
	if got := strings.Count(log.String(), "not valid JSON"); got != 3 {
		t.Fatalf("%d log records of an invalid reply, want 2:\n%s", got, log.String())
	}
}
