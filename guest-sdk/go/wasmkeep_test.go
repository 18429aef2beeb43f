//go:build !wasip1

package wasmkeep

import (
	"encoding/binary"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"
	"unsafe"

	"github.com/wasmkeep/wasmkeep/abi"
)

// fakeHost records what the SDK asks of the host.
type fakeHost struct {
	alarm      int64
	responses  []abi.Response
	sends      []string
	closes     []string
	sockets    []uint32
	listCalls  int
	roomCalls  int
	secrets    map[string]string
	logs       []string
	respStatus int32
	channel    []recordedCall
	handoff    []byte
	accepted   bool
	idleCalls  int   // idle_call calls
	idleStatus int32 // what idle_call answers

	// Calls: each started call is answered by answer, by its handle.
	started   []abi.Call
	answer    func(c abi.Call) (status int32, out []byte)
	answers   map[int32][]byte
	replies   [][]byte
	handOvers []abi.HandOver

	// Fetches: each started fetch is answered by fetchAnswer; its
	// answer waits in answers, as a call's does.
	fetches     []abi.Fetch
	fetchAnswer func(f abi.Fetch) (status int32, out []byte)
}

func (h *fakeHost) FetchStart(b []byte) int32 {
	f, err := abi.DecodeFetch(b)
	if err != nil {
		return int32(abi.StatusInvalid)
	}
	f.Body = append([]byte(nil), f.Body...)
	h.fetches = append(h.fetches, f)
	return int32(len(h.fetches))
}

func (h *fakeHost) FetchWait(handle int32) int32 {
	st, out := h.fetchAnswer(h.fetches[handle-1])
	if h.answers == nil {
		h.answers = map[int32][]byte{}
	}
	h.answers[handle] = out
	return st
}

func (h *fakeHost) FetchResult(handle int32, buf []byte) int32 { return h.CallResult(handle, buf) }

func (h *fakeHost) CallStart(b []byte) int32 {
	c, err := abi.DecodeCall(b)
	if err != nil {
		return int32(abi.StatusInvalid)
	}
	c.Payload = append([]byte(nil), c.Payload...)
	h.started = append(h.started, c)
	return int32(len(h.started))
}

func (h *fakeHost) CallWait(handle int32) int32 {
	st, out := h.answer(h.started[handle-1])
	if h.answers == nil {
		h.answers = map[int32][]byte{}
	}
	h.answers[handle] = out
	return st
}

func (h *fakeHost) CallResult(handle int32, buf []byte) int32 {
	out, ok := h.answers[handle]
	if !ok {
		return int32(abi.StatusInvalid)
	}
	if len(out) > len(buf) {
		return int32(len(out))
	}
	delete(h.answers, handle)
	return int32(copy(buf, out))
}

func (h *fakeHost) CallReply(b []byte) int32 {
	h.replies = append(h.replies, append([]byte(nil), b...))
	return 0
}

func (h *fakeHost) HTTPHandOver(b []byte) int32 {
	ho, err := abi.DecodeHandOver(b)
	if err != nil {
		return int32(abi.StatusInvalid)
	}
	h.handOvers = append(h.handOvers, ho)
	return 0
}

func (h *fakeHost) HTTPRespond(b []byte) int32 {
	r, err := abi.DecodeResponse(b)
	if err != nil {
		return int32(abi.StatusInvalid)
	}
	r.Body = append([]byte(nil), r.Body...)
	h.responses = append(h.responses, r)
	return h.respStatus
}

func (h *fakeHost) SocketSend(socket uint32, kind int32, b []byte) int32 {
	if socket == 99 {
		return int32(abi.StatusNoSocket)
	}
	h.sends = append(h.sends, string(rune('0'+kind))+":"+string(b))
	return 0
}

func (h *fakeHost) SocketClose(socket uint32, code int32, reason []byte) int32 {
	h.closes = append(h.closes, string(reason))
	return 0
}

func (h *fakeHost) SocketList(ids []uint32) int32 {
	h.listCalls++
	copy(ids, h.sockets)
	return int32(len(h.sockets))
}

func (h *fakeHost) Broadcast(kind int32, b []byte, except uint32) int32 {
	return int32(len(h.sockets))
}

func (h *fakeHost) RoomInfo(b []byte) int32 {
	h.roomCalls++
	rec := abi.AppendRoomInfo(nil, &abi.RoomInfo{Class: "chat", Name: "a-rather-long-room-name-" + string(make([]byte, 200))})
	if len(rec) <= len(b) {
		copy(b, rec)
	}
	return int32(len(rec))
}

func (h *fakeHost) SecretGet(name string, buf []byte) int32 {
	v, ok := h.secrets[name]
	if !ok {
		return int32(abi.StatusNotFound)
	}
	if len(v) <= len(buf) {
		copy(buf, v)
	}
	return int32(len(v))
}

func (h *fakeHost) Log(level int32, b []byte) int32 {
	h.logs = append(h.logs, string(b))
	return 0
}

func (h *fakeHost) Checkpoint() int32  { return int32(abi.StatusUnsupported) }
func (h *fakeHost) StateDelete() int32 { return int32(abi.StatusUnsupported) }
func (h *fakeHost) UpgradeState(b []byte) int32 {
	h.handoff = append([]byte(nil), b...)
	return 0
}
func (h *fakeHost) UpgradeAccept() int32 { h.accepted = true; return 0 }
func (h *fakeHost) IdleCall() int32      { h.idleCalls++; return h.idleStatus }
func (h *fakeHost) AlarmSet(at int64) int32 {
	h.alarm = at
	return 0
}
func (h *fakeHost) AlarmClear() int32 {
	h.alarm = 0
	return 0
}
func (h *fakeHost) AlarmGet() (int64, int32) {
	if h.alarm == 0 {
		return 0, int32(abi.StatusNotFound)
	}
	return h.alarm, 0
}
func (h *fakeHost) Channel(name string, arg uint32, b []byte) int32 {
	h.channel = append(h.channel, recordedCall{name, arg, append([]byte(nil), b...)})
	return 0
}

type recordedCall struct {
	name string
	arg  uint32
	rec  []byte
}

func (h *fakeHost) last() *abi.Response { return &h.responses[len(h.responses)-1] }
func (h *fakeHost) lastBody() string    { return string(h.last().Body) }
func (h *fakeHost) lastHeader(n string) string {
	v, _ := LookupHeader(h.last().Headers, n)
	return v
}

func setup(t *testing.T) *fakeHost {
	h := &fakeHost{}
	native = h
	t.Cleanup(func() {
		native = nil
		onRequestFunc, onSocketOpenFunc, onSocketMessageFunc, onSocketCloseFunc = nil, nil, nil, nil
		room = nil
	})
	return h
}

// deliver writes rec into the SDK's buffer as the host would.
func deliver(rec []byte) (unsafe.Pointer, uint32) {
	p := alloc(uint32(max(len(rec), 1)))
	copy(unsafe.Slice((*byte)(p), len(rec)), rec)
	return p, uint32(len(rec))
}

func request(r *abi.Request) {
	onRequest(deliver(abi.AppendRequest(nil, r)))
}

func TestRequestDefaults(t *testing.T) {
	h := setup(t)
	request(&abi.Request{Method: "GET", Path: "/"})
	if r := h.last(); r.Status != 404 || string(r.Body) != "no request handler" {
		t.Fatalf("no handler: %d %q", r.Status, r.Body)
	}
	HandleRequest(func(*Request) *Response { return nil })
	request(&abi.Request{Method: "GET", Path: "/"})
	if r := h.last(); r.Status != 500 || string(r.Body) != "handler returned no response" {
		t.Fatalf("nil response: %d %q", r.Status, r.Body)
	}
	HandleRequest(func(*Request) *Response { return &Response{Body: []byte("x")} })
	request(&abi.Request{Method: "GET", Path: "/"})
	if r := h.last(); r.Status != 200 {
		t.Fatalf("status 0 sent as %d", r.Status)
	}
}

func TestRequestFields(t *testing.T) {
	h := setup(t)
	var kept []byte
	HandleRequest(func(r *Request) *Response {
		if kept == nil {
			kept = r.Body
		}
		return Text(201, r.Method+" "+r.Path+" "+r.QueryValue("q")+" "+r.Header("x-test")).
			SetHeader("X-A", "1").SetHeader("x-a", "2").AddHeader("X-B", "3")
	})
	request(&abi.Request{
		Method: "POST", Path: "/p", Query: "a=1&q=hello+w%6Frld",
		Headers: []abi.Header{{Name: "X-TEST", Value: "v"}},
		Body:    []byte("body"),
	})
	if got := h.lastBody(); got != "POST /p hello world v" {
		t.Fatalf("body %q", got)
	}
	if r := h.last(); r.Status != 201 || h.lastHeader("X-A") != "2" || len(r.Headers) != 3 ||
		h.lastHeader("content-type") != "text/plain; charset=utf-8" {
		t.Fatalf("response %+v", r)
	}
	// The next event reuses the buffer; the kept body must not change.
	request(&abi.Request{Method: "GET", Path: "/zzzz", Body: []byte("ZZZZ")})
	if string(kept) != "body" {
		t.Fatalf("kept body changed to %q", kept)
	}
}

func TestMalformedRequest(t *testing.T) {
	h := setup(t)
	called := false
	HandleRequest(func(*Request) *Response { called = true; return nil })
	onRequest(deliver([]byte{1, 2, 3}))
	if called || h.last().Status != 500 || len(h.logs) != 1 {
		t.Fatalf("called=%v responses=%v logs=%v", called, h.responses, h.logs)
	}
}

func TestRespondFailureIsLogged(t *testing.T) {
	h := setup(t)
	h.respStatus = int32(abi.StatusTooLarge)
	request(&abi.Request{Method: "GET", Path: "/"})
	if len(h.logs) != 1 {
		t.Fatalf("logs %q", h.logs)
	}
}

func TestSockets(t *testing.T) {
	h := setup(t)
	var opened *SocketOpen
	var closed string
	HandleSocketOpen(func(s Socket, o *SocketOpen) { opened = o; s.Send("hi " + o.QueryValue("n")) })
	HandleSocketMessage(func(s Socket, m Message) {
		if m.IsText() {
			s.Send(m.Text())
		} else {
			s.SendBinary(m.Data)
		}
	})
	HandleSocketClose(func(s Socket, code int, reason string) { closed = reason + "/" + string(rune('0'+code%10)) })

	p, n := deliver(abi.AppendSocketOpen(nil, &abi.SocketOpen{Path: "/ws", Query: "n=7", Remote: "1.2.3.4:5",
		Headers: []abi.Header{{Name: "Origin", Value: "o"}}}))
	onSocketOpen(3, p, n)
	if opened == nil || opened.Path != "/ws" || opened.Remote != "1.2.3.4:5" || opened.Header("origin") != "o" {
		t.Fatalf("open %+v", opened)
	}
	p, n = deliver([]byte("txt"))
	onSocketMessage(3, abi.MessageText, p, n)
	p, n = deliver([]byte{0, 1})
	onSocketMessage(3, abi.MessageBinary, p, n)
	// A batch is handled as its messages one by one, in order.
	p, n = deliver(abi.AppendBatchedMessage(abi.AppendBatchedMessage(nil, abi.MessageText, []byte("b1")), abi.MessageBinary, []byte{9}))
	onSocketMessages(3, p, n)
	if err := Socket(3).SendText([]byte("raw")); err != nil {
		t.Fatal(err)
	}
	p, n = deliver([]byte("bye"))
	onSocketClose(3, 1001, p, n)
	want := []string{"1:hi 7", "1:txt", "2:\x00\x01", "1:b1", "2:\x09", "1:raw"}
	if !slices.Equal(h.sends, want) {
		t.Fatalf("sends %q, want %q", h.sends, want)
	}
	if closed != "bye/1" {
		t.Fatalf("closed %q", closed)
	}

	err := Socket(99).Send("x")
	var he *HostError
	if !errors.Is(err, ErrNoSocket) || !errors.As(err, &he) || he.Func != "socket_send" {
		t.Fatalf("send to a gone socket: %v", err)
	}
}

func TestSocketsList(t *testing.T) {
	h := setup(t)
	if got := Sockets(); len(got) != 0 {
		t.Fatalf("no sockets: %v", got)
	}
	for i := range 40 {
		h.sockets = append(h.sockets, uint32(i+1))
	}
	h.listCalls = 0
	got := Sockets()
	if len(got) != 40 || got[0] != 1 || got[39] != 40 || h.listCalls != 2 {
		t.Fatalf("got %v after %d calls", got, h.listCalls)
	}
	if n, err := Broadcast("x", 0); n != 40 || err != nil {
		t.Fatalf("broadcast %d %v", n, err)
	}
}

func TestRoomCached(t *testing.T) {
	h := setup(t)
	a, b := Room(), Room()
	if a.Class != "chat" || a != b || h.roomCalls != 2 { // one too-small try, one fetch
		t.Fatalf("room %+v %+v after %d calls", a, b, h.roomCalls)
	}
}

func TestErrors(t *testing.T) {
	setup(t)
	if err := Checkpoint(); !errors.Is(err, ErrUnsupported) {
		t.Fatalf("checkpoint: %v", err)
	}
	if err := (&HostError{Func: "f", Status: -77}); !errors.Is(err, ErrUnknownStatus) || err.Error() != "wasmkeep: f: unknown status (-77)" {
		t.Fatalf("unknown: %v", err)
	}
	native = nil
	if err := Socket(1).Send("x"); !errors.Is(err, ErrUnsupported) {
		t.Fatalf("no host: %v", err)
	}
}

func TestAllocReuse(t *testing.T) {
	p1 := alloc(10)
	p2 := alloc(uint32(cap(inbuf)))
	if p1 != p2 {
		t.Fatal("alloc moved for a size that fits")
	}
	p3 := alloc(uint32(cap(inbuf)) + 1)
	if cap(inbuf) < 2*minAlloc {
		t.Fatalf("cap %d after growth", cap(inbuf))
	}
	if binary.LittleEndian.Uint32(unsafe.Slice((*byte)(p3), 4)) != 0 {
		t.Fatal("fresh buffer not zero")
	}
	if n := testing.AllocsPerRun(100, func() { alloc(100) }); n != 0 {
		t.Fatalf("alloc allocates %v times per event", n)
	}
}

func TestQueryValue(t *testing.T) {
	for _, c := range []struct {
		q, k, v string
		ok      bool
	}{
		{"a=1&b=2", "b", "2", true},
		{"a=1&a=2", "a", "1", true},
		{"flag&x=y", "flag", "", true},
		{"k%20x=%E2%9C%93", "k x", "✓", true},
		{"bad=%zz&bad=ok", "bad", "ok", true},
		{"", "a", "", false},
		{"a=1", "b", "", false},
	} {
		v, ok := QueryValue(c.q, c.k)
		if v != c.v || ok != c.ok {
			t.Errorf("QueryValue(%q, %q) = %q, %v; want %q, %v", c.q, c.k, v, ok, c.v, c.ok)
		}
	}
}

func TestChannels(t *testing.T) {
	h := &fakeHost{}
	native = h
	defer func() { native = nil; onJoinFunc, onChannelMessageFunc, onLeaveFunc = nil, nil, nil }()

	// Without a handler a join is refused.
	join := abi.AppendJoin(nil, &abi.Join{Topic: "room:1", Payload: []byte(`{"name":"ada"}`)})
	onJoin(7, bytesPtr(join), uint32(len(join)))
	if len(h.channel) != 1 || h.channel[0].name != "channel_reply" || h.channel[0].arg != abi.ReplyError {
		t.Fatalf("default join: %+v", h.channel)
	}

	HandleJoin(func(s Socket, j *Join) *Reply {
		if s != 7 || j.Topic != "room:1" || string(j.Payload) != `{"name":"ada"}` {
			t.Errorf("join: %d %+v", s, j)
		}
		if err := s.Track(j.Topic, "ada", []byte(`{"x":1}`)); err != nil {
			t.Error(err)
		}
		return OK([]byte(`{"welcome":true}`))
	})
	HandleChannelMessage(func(s Socket, m *ChannelMessage) *Reply {
		BroadcastTopic(m.Topic, "shout", m.Payload, s)
		return nil
	})
	var left string
	HandleLeave(func(s Socket, topic, reason string) { left = topic + " " + reason })

	h.channel = nil
	onJoin(7, bytesPtr(join), uint32(len(join)))
	if len(h.channel) != 2 || h.channel[0].name != "presence_track" || h.channel[1].name != "channel_reply" ||
		h.channel[1].arg != abi.ReplyOK || string(h.channel[1].rec) != `{"welcome":true}` {
		t.Fatalf("join: %+v", h.channel)
	}
	p, err := abi.DecodePresence(h.channel[0].rec)
	if err != nil || p.Key != "ada" || string(p.Meta) != `{"x":1}` {
		t.Fatalf("track record: %+v %v", p, err)
	}

	h.channel = nil
	msg := abi.AppendChannelMessage(nil, &abi.ChannelMessage{Topic: "room:1", Event: "shout", Payload: []byte(`{"t":"hi"}`)})
	onChannelMessage(7, bytesPtr(msg), uint32(len(msg)))
	if len(h.channel) != 1 || h.channel[0].name != "channel_broadcast" || h.channel[0].arg != 7 {
		t.Fatalf("message: %+v", h.channel)
	}
	out, err := abi.DecodeChannelMessage(h.channel[0].rec)
	if err != nil || out.Event != "shout" || string(out.Payload) != `{"t":"hi"}` {
		t.Fatalf("broadcast record: %+v %v", out, err)
	}

	leave := abi.AppendLeave(nil, &abi.Leave{Topic: "room:1", Reason: "client"})
	onLeave(7, bytesPtr(leave), uint32(len(leave)))
	if left != "room:1 client" {
		t.Fatalf("leave: %q", left)
	}
}

func TestUpgradeHandoff(t *testing.T) {
	h := setup(t)
	onUpgrade() // no handler: no handoff
	if h.handoff != nil {
		t.Fatalf("handed over %q without a handler", h.handoff)
	}
	HandleUpgrade(func() []byte { return []byte("v1:hello") })
	defer HandleUpgrade(nil)
	onUpgrade()
	if string(h.handoff) != "v1:hello" {
		t.Fatalf("handed over %q", h.handoff)
	}

	rec := abi.AppendStartFrom(nil, &abi.StartFrom{From: "sha256:ab", State: []byte("v1:hello")})
	onStartFrom(unsafe.Pointer(&rec[0]), uint32(len(rec)))
	if h.accepted {
		t.Fatal("accepted without a handler")
	}
	var got, from string
	HandleStartFrom(func(prev []byte, v string) { got, from = string(prev), v })
	defer HandleStartFrom(nil)
	onStartFrom(unsafe.Pointer(&rec[0]), uint32(len(rec)))
	if !h.accepted || got != "v1:hello" || from != "sha256:ab" {
		t.Fatalf("accepted %v, state %q from %q", h.accepted, got, from)
	}
}

// TestSecret: a secret longer than the first buffer is read whole with a
// second call; a missing one is ErrNotFound.
func TestSecret(t *testing.T) {
	h := &fakeHost{secrets: map[string]string{"SHORT": "s", "LONG": strings.Repeat("x", 1000)}}
	native = h
	defer func() { native = nil }()
	for name, want := range h.secrets {
		if got, err := Secret(name); err != nil || got != want {
			t.Fatalf("Secret(%s) = %d bytes, %v; want %d", name, len(got), err, len(want))
		}
	}
	if _, err := Secret("MISSING"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("a missing secret: %v, want ErrNotFound", err)
	}
}

func TestAlarm(t *testing.T) {
	native = &fakeHost{}
	defer func() { native = nil; onAlarmFunc = nil }()
	if _, ok := GetAlarm(); ok {
		t.Fatal("an alarm before any was set")
	}
	at := time.UnixMilli(1_900_000_000_123)
	if err := SetAlarm(at); err != nil {
		t.Fatal(err)
	}
	if got, ok := GetAlarm(); !ok || !got.Equal(at) {
		t.Fatalf("GetAlarm = %v, %v; want %v", got, ok, at)
	}
	var seen []Alarm
	HandleAlarm(func(a Alarm) { seen = append(seen, a) })
	rec := abi.AppendAlarmEvent(nil, abi.AlarmEvent{At: at.UnixMilli(), Retry: 3})
	onAlarm(unsafe.Pointer(&rec[0]), uint32(len(rec)))
	if len(seen) != 1 || !seen[0].At.Equal(at) || seen[0].Retry != 3 {
		t.Fatalf("the handler saw %+v", seen)
	}
	if err := ClearAlarm(); err != nil {
		t.Fatal(err)
	}
	if _, ok := GetAlarm(); ok {
		t.Fatal("an alarm after ClearAlarm")
	}
}
