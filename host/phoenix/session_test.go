package phoenix

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"
)

const sec = int64(1e9)

// describe renders actions compactly: "send <frame>", "deliver join
// room:1 jr=3", "drop stale".
func describe(acts []Action) []string {
	var out []string
	for _, a := range acts {
		switch a.Kind {
		case ActionSend:
			kind := "send "
			if a.Frame.Binary {
				kind = "send binary "
			}
			out = append(out, kind+string(a.Frame.Data))
		case ActionDeliver:
			d := a.Delivery
			m := d.Message
			switch d.Kind {
			case DeliverJoin:
				out = append(out, fmt.Sprintf("deliver join %s jr=%s ref=%s %s", m.Topic, m.JoinRef, m.Ref, m.Payload))
			case DeliverMessage:
				out = append(out, fmt.Sprintf("deliver message %s jr=%s ref=%s %s %s", m.Topic, m.JoinRef, m.Ref, m.Event, m.Payload))
			case DeliverLeave:
				out = append(out, fmt.Sprintf("deliver leave %s jr=%s ref=%s %s", m.Topic, m.JoinRef, m.Ref, d.Reason))
			}
		case ActionDrop:
			out = append(out, "drop "+a.Drop.String())
		default:
			out = append(out, "?")
		}
	}
	return out
}

func expect(t *testing.T, got []Action, want ...string) {
	t.Helper()
	d := describe(got)
	if strings.Join(d, "\n") != strings.Join(want, "\n") {
		t.Fatalf("actions:\n  %s\nwant:\n  %s", strings.Join(d, "\n  "), strings.Join(want, "\n  "))
	}
}

func expectFrame(t *testing.T, f Frame, err error, want string) {
	t.Helper()
	if err != nil {
		t.Fatalf("error %v, want frame %s", err, want)
	}
	if f.Binary || string(f.Data) != want {
		t.Fatalf("frame %s (binary %v)\nwant  %s", f.Data, f.Binary, want)
	}
}

func msg(jr, ref, topic, event, payload string) Message {
	m := Message{Topic: topic, Event: event, Payload: json.RawMessage(payload)}
	if jr != "" {
		m.JoinRef = MakeRef(jr)
	}
	if ref != "" {
		m.Ref = MakeRef(ref)
	}
	return m
}

func join(jr, topic string) Message { return msg(jr, jr, topic, EventJoin, `{}`) }

// joined makes s join topic with join_ref jr, accepted.
func joined(t *testing.T, s *Session, now int64, jr, topic string) {
	t.Helper()
	acts := s.Handle(now, join(jr, topic))
	if len(acts) != 1 || acts[0].Kind != ActionDeliver {
		t.Fatalf("join %s: %v", topic, describe(acts))
	}
	if _, err := s.AcceptJoin(topic, MakeRef(jr), nil); err != nil {
		t.Fatal(err)
	}
}

func TestHeartbeat(t *testing.T) {
	s := NewSession(Config{})
	expect(t, s.Handle(5, msg("", "6", "phoenix", "heartbeat", `{}`)),
		`send [null,"6","phoenix","phx_reply",{"status":"ok","response":{}}]`)
	if s.LastHeartbeat() != 5 {
		t.Fatalf("LastHeartbeat = %d", s.LastHeartbeat())
	}
	// Heartbeats are never rate limited, even with the message bucket empty.
	s = NewSession(Config{MessageRate: 1, MessageBurst: 1})
	s.Handle(0, msg("1", "2", "x", "e", `{}`))
	for i := 0; i < 1000; i++ {
		if acts := s.Handle(0, msg("", "7", "phoenix", "heartbeat", `{}`)); len(acts) != 1 || acts[0].Kind != ActionSend {
			t.Fatalf("heartbeat %d: %v", i, describe(acts))
		}
	}
	// Other events on "phoenix" are not heartbeats, and "phoenix" cannot
	// be joined.
	expect(t, s.Handle(1*sec, msg("", "8", "phoenix", "other", `{}`)),
		`send [null,"8","phoenix","phx_reply",{"status":"error","response":{"reason":"unmatched topic"}}]`,
		"drop unmatched")
	expect(t, s.Handle(1*sec, join("9", "phoenix")),
		`send ["9","9","phoenix","phx_reply",{"status":"error","response":{"reason":"invalid topic"}}]`,
		"drop invalid_join")
}

func TestJoinAcceptMessageReplyPush(t *testing.T) {
	s := NewSession(Config{})
	jr := MakeRef("3")
	expect(t, s.Handle(0, msg("3", "3", "room:1", "phx_join", `{"token":"t"}`)),
		`deliver join room:1 jr="3" ref="3" {"token":"t"}`)
	if _, ok := s.Joined("room:1"); ok || s.Len() != 1 {
		t.Fatal("a pending join counts as joined")
	}
	// Nothing reaches the room, and the room cannot push, while pending.
	expect(t, s.Handle(0, msg("3", "4", "room:1", "new_msg", `{}`)),
		`send ["3","4","room:1","phx_reply",{"status":"error","response":{"reason":"unmatched topic"}}]`,
		"drop unmatched")
	if _, err := s.Push("room:1", jr, "e", nil); !errors.Is(err, ErrNotJoined) {
		t.Fatalf("Push while pending: %v", err)
	}

	f, err := s.AcceptJoin("room:1", jr, json.RawMessage(`{"hello":"world"}`))
	expectFrame(t, f, err, `["3","3","room:1","phx_reply",{"status":"ok","response":{"hello":"world"}}]`)
	if got, ok := s.Joined("room:1"); !ok || got != jr {
		t.Fatalf("Joined = %v, %v", got, ok)
	}
	if _, err := s.AcceptJoin("room:1", jr, nil); !errors.Is(err, ErrNotPending) {
		t.Fatalf("second AcceptJoin: %v", err)
	}
	if _, ok := s.AbandonPending("room:1", jr); ok {
		t.Fatal("AbandonPending after AcceptJoin sent something")
	}

	expect(t, s.Handle(1, msg("3", "5", "room:1", "new_msg", `{"body":"hi"}`)),
		`deliver message room:1 jr="3" ref="5" new_msg {"body":"hi"}`)
	f, err = s.Reply("room:1", jr, MakeRef("5"), StatusOK, json.RawMessage(`{"id":1}`))
	expectFrame(t, f, err, `["3","5","room:1","phx_reply",{"status":"ok","response":{"id":1}}]`)
	f, err = s.Push("room:1", jr, "new_msg", json.RawMessage(`{"body":"hi"}`))
	expectFrame(t, f, err, `["3",null,"room:1","new_msg",{"body":"hi"}]`)

	f, err = s.PushBinary("room:1", jr, "blob", []byte{1, 2})
	if err != nil || !f.Binary || string(f.Data) != "\x00\x01\x06\x04"+"3room:1blob\x01\x02" {
		t.Fatalf("PushBinary = %q %v, %v", f.Data, f.Binary, err)
	}
	f, err = s.ReplyBinary("room:1", jr, MakeRef("5"), StatusOK, []byte{9})
	if err != nil || !f.Binary || string(f.Data) != "\x01\x01\x01\x06\x02"+"35room:1ok\x09" {
		t.Fatalf("ReplyBinary = %q %v, %v", f.Data, f.Binary, err)
	}

	// Binary messages from the client are delivered as they are.
	bin := Message{JoinRef: jr, Ref: MakeRef("6"), Topic: "room:1", Event: "blob", Binary: []byte{7}, IsBinary: true}
	acts := s.Handle(2, bin)
	if len(acts) != 1 || acts[0].Kind != ActionDeliver || !equalMessage(acts[0].Delivery.Message, bin) {
		t.Fatalf("binary message: %v", describe(acts))
	}

	// The room's calls must name the current join.
	if _, err := s.Push("room:1", MakeRef("2"), "e", nil); !errors.Is(err, ErrNotJoined) {
		t.Fatalf("Push with another join_ref: %v", err)
	}
	if _, err := s.Reply("room:9", jr, MakeRef("1"), StatusOK, nil); !errors.Is(err, ErrNotJoined) {
		t.Fatalf("Reply on another topic: %v", err)
	}
	if _, err := s.Push("room:1", jr, "e", json.RawMessage(`{`)); !errors.Is(err, ErrInvalidJSON) {
		t.Fatalf("Push of bad JSON: %v", err)
	}
}

func TestRejectAndAbandon(t *testing.T) {
	s := NewSession(Config{})
	s.Handle(0, join("1", "a"))
	f, err := s.RejectJoin("a", MakeRef("1"), json.RawMessage(`{"reason":"unauthorized"}`))
	expectFrame(t, f, err, `["1","1","a","phx_reply",{"status":"error","response":{"reason":"unauthorized"}}]`)
	if s.Len() != 0 {
		t.Fatal("rejected join kept")
	}
	if _, err := s.RejectJoin("a", MakeRef("1"), nil); !errors.Is(err, ErrNotPending) {
		t.Fatalf("second RejectJoin: %v", err)
	}

	// An answer with bad JSON leaves the join pending; the host's
	// AbandonPending then refuses it.
	s.Handle(0, join("2", "b"))
	if _, err := s.AcceptJoin("b", MakeRef("2"), json.RawMessage(`nope`)); !errors.Is(err, ErrInvalidJSON) {
		t.Fatalf("AcceptJoin of bad JSON: %v", err)
	}
	if _, err := s.RejectJoin("b", MakeRef("2"), json.RawMessage(`nope`)); !errors.Is(err, ErrInvalidJSON) {
		t.Fatalf("RejectJoin of bad JSON: %v", err)
	}
	if _, err := s.AcceptJoin("b", MakeRef("9"), nil); !errors.Is(err, ErrNotPending) {
		t.Fatalf("AcceptJoin with another join_ref: %v", err)
	}
	f, ok := s.AbandonPending("b", MakeRef("2"))
	if !ok {
		t.Fatal("AbandonPending of a pending join sent nothing")
	}
	expectFrame(t, f, nil, `["2","2","b","phx_reply",{"status":"error","response":{"reason":"join crashed"}}]`)
	if _, ok := s.AbandonPending("b", MakeRef("2")); ok || s.Len() != 0 {
		t.Fatal("AbandonPending twice")
	}
	expect(t, s.Handle(0, msg("2", "3", "b", "e", `{}`)),
		`send ["2","3","b","phx_reply",{"status":"error","response":{"reason":"unmatched topic"}}]`,
		"drop unmatched")
}

func TestRejoin(t *testing.T) {
	s := NewSession(Config{})
	joined(t, s, 0, "1", "room:1")
	// A second join closes the first, then proceeds.
	expect(t, s.Handle(0, join("5", "room:1")),
		`send ["1","1","room:1","phx_close",{}]`,
		`deliver leave room:1 jr="1" ref=null rejoin`,
		`deliver join room:1 jr="5" ref="5" {}`)
	if _, err := s.Push("room:1", MakeRef("1"), "e", nil); !errors.Is(err, ErrNotJoined) {
		t.Fatalf("push to the replaced join: %v", err)
	}
	// A third join while the second is pending replaces that one.
	expect(t, s.Handle(0, join("7", "room:1")),
		`send ["5","5","room:1","phx_close",{}]`,
		`deliver leave room:1 jr="5" ref=null rejoin`,
		`deliver join room:1 jr="7" ref="7" {}`)
	if _, err := s.AcceptJoin("room:1", MakeRef("5"), nil); !errors.Is(err, ErrNotPending) {
		t.Fatalf("accepting a replaced join: %v", err)
	}
	if _, ok := s.AbandonPending("room:1", MakeRef("5")); ok {
		t.Fatal("abandoning a replaced join sent something")
	}
	if _, err := s.AcceptJoin("room:1", MakeRef("7"), nil); err != nil {
		t.Fatal(err)
	}
	// Messages of the old joins are stale; of the new one, delivered.
	expect(t, s.Handle(0, msg("1", "8", "room:1", "e", `{}`)), "drop stale")
	expect(t, s.Handle(0, msg("", "8", "room:1", "e", `{}`)), "drop stale")
	expect(t, s.Handle(0, msg("7", "9", "room:1", "e", `{}`)), `deliver message room:1 jr="7" ref="9" e {}`)
	if s.Len() != 1 {
		t.Fatalf("Len = %d", s.Len())
	}
}

func TestLeave(t *testing.T) {
	s := NewSession(Config{})
	joined(t, s, 0, "1", "room:1")
	// A stale leave is dropped without a reply.
	expect(t, s.Handle(0, msg("0", "2", "room:1", "phx_leave", `{}`)), "drop stale")
	expect(t, s.Handle(0, msg("1", "3", "room:1", "phx_leave", `{}`)),
		`send ["1","3","room:1","phx_reply",{"status":"ok","response":{}}]`,
		`deliver leave room:1 jr="1" ref="3" client`)
	if _, ok := s.Joined("room:1"); ok {
		t.Fatal("still joined after leave")
	}
	// A leave of a topic not joined is acknowledged, and goes no further.
	expect(t, s.Handle(0, msg("1", "4", "room:1", "phx_leave", `{}`)),
		`send ["1","4","room:1","phx_reply",{"status":"ok","response":{}}]`)
	// A leave while the join is pending ends it: the room, which has the
	// join in hand, gets the leave after it, and its late answer is void.
	s.Handle(0, join("5", "room:2"))
	expect(t, s.Handle(0, msg("5", "6", "room:2", "phx_leave", `{}`)),
		`send ["5","6","room:2","phx_reply",{"status":"ok","response":{}}]`,
		`deliver leave room:2 jr="5" ref="6" client`)
	if _, err := s.AcceptJoin("room:2", MakeRef("5"), nil); !errors.Is(err, ErrNotPending) {
		t.Fatalf("accepting a join left while pending: %v", err)
	}
	// Leaves take no message token.
	s = NewSession(Config{MessageRate: 1, MessageBurst: 1})
	joined(t, s, 0, "1", "a")
	s.Handle(0, msg("1", "2", "a", "e", `{}`))
	expect(t, s.Handle(0, msg("1", "2", "a", "e", `{}`)), "drop message_rate")
	expect(t, s.Handle(0, msg("1", "3", "a", "phx_leave", `{}`)),
		`send ["1","3","a","phx_reply",{"status":"ok","response":{}}]`,
		`deliver leave a jr="1" ref="3" client`)
}

func TestUnmatchedTopic(t *testing.T) {
	s := NewSession(Config{})
	expect(t, s.Handle(0, msg("3", "7", "room:9", "new_msg", `{}`)),
		`send ["3","7","room:9","phx_reply",{"status":"error","response":{"reason":"unmatched topic"}}]`,
		"drop unmatched")
	expect(t, s.Handle(0, msg("", "", "", "", `{}`)),
		`send [null,null,"","phx_reply",{"status":"error","response":{"reason":"unmatched topic"}}]`,
		"drop unmatched")
}

func TestInvalidJoins(t *testing.T) {
	s := NewSession(Config{})
	for _, topic := range []string{"", "phoenix", "wasmkeep:node", "a\x00b", "a\nb", "a\u0085b", "a\xffb", strings.Repeat("t", 256)} {
		m := join("1", topic)
		acts := s.Handle(0, m)
		want := string(appendErrorReply(nil, m.JoinRef, m.Ref, topic, ReasonInvalidTopic))
		expect(t, acts, "send "+want, "drop invalid_join")
	}
	expect(t, s.Handle(0, msg("", "1", "room:1", "phx_join", `{}`)),
		`send [null,"1","room:1","phx_reply",{"status":"error","response":{"reason":"missing join_ref"}}]`,
		"drop invalid_join")
	expect(t, s.Handle(0, Message{JoinRef: MakeRef(""), Ref: MakeRef("1"), Topic: "room:1", Event: EventJoin}),
		`send ["","1","room:1","phx_reply",{"status":"error","response":{"reason":"missing join_ref"}}]`,
		"drop invalid_join")
	if s.Len() != 0 {
		t.Fatalf("Len = %d", s.Len())
	}
}

func TestTopicCap(t *testing.T) {
	s := NewSession(Config{MaxTopics: 2, JoinRate: -1})
	joined(t, s, 0, "1", "a")
	s.Handle(0, join("2", "b")) // pending joins count too
	expect(t, s.Handle(0, join("3", "c")),
		`send ["3","3","c","phx_reply",{"status":"error","response":{"reason":"too many channels joined"}}]`,
		"drop topic_limit")
	// Rejoining a topic at the cap works: the old join goes first.
	expect(t, s.Handle(0, join("4", "a")),
		`send ["1","1","a","phx_close",{}]`,
		`deliver leave a jr="1" ref=null rejoin`,
		`deliver join a jr="4" ref="4" {}`)
	// Once a topic is gone, there is room again.
	s.AbandonPending("b", MakeRef("2"))
	expect(t, s.Handle(0, join("5", "c")), `deliver join c jr="5" ref="5" {}`)

	// Negative: no cap.
	s = NewSession(Config{MaxTopics: -1, JoinRate: -1})
	for i := 0; i < 1000; i++ {
		if acts := s.Handle(0, join(fmt.Sprint(i), fmt.Sprint("t", i))); acts[0].Kind != ActionDeliver {
			t.Fatalf("join %d: %v", i, describe(acts))
		}
	}
}

func TestJoinRate(t *testing.T) {
	s := NewSession(Config{JoinRate: 1, JoinBurst: 2})
	expect(t, s.Handle(0, join("1", "a")), `deliver join a jr="1" ref="1" {}`)
	expect(t, s.Handle(0, join("2", "b")), `deliver join b jr="2" ref="2" {}`)
	expect(t, s.Handle(0, join("3", "c")),
		`send ["3","3","c","phx_reply",{"status":"error","response":{"reason":"join rate exceeded"}}]`,
		"drop join_rate")
	// An over-rate rejoin leaves the current join alone.
	expect(t, s.Handle(sec-1, join("4", "a")),
		`send ["4","4","a","phx_reply",{"status":"error","response":{"reason":"join rate exceeded"}}]`,
		"drop join_rate")
	if _, err := s.AcceptJoin("a", MakeRef("1"), nil); err != nil {
		t.Fatal(err)
	}
	expect(t, s.Handle(sec, join("5", "c")), `deliver join c jr="5" ref="5" {}`)
	expect(t, s.Handle(sec, join("6", "d")),
		`send ["6","6","d","phx_reply",{"status":"error","response":{"reason":"join rate exceeded"}}]`,
		"drop join_rate")
}

func TestMessageRate(t *testing.T) {
	s := NewSession(Config{MessageRate: 10, MessageBurst: 3})
	joined(t, s, 0, "1", "a")
	m := msg("1", "2", "a", "e", `{}`)
	for i := 0; i < 3; i++ {
		expect(t, s.Handle(0, m), `deliver message a jr="1" ref="2" e {}`)
	}
	expect(t, s.Handle(0, m), "drop message_rate")
	// Over-rate messages on unjoined topics are dropped before any reply.
	expect(t, s.Handle(0, msg("1", "2", "zzz", "e", `{}`)), "drop message_rate")
	expect(t, s.Handle(sec/10-1, m), "drop message_rate")
	expect(t, s.Handle(sec/10, m), `deliver message a jr="1" ref="2" e {}`)
	expect(t, s.Handle(sec/10, m), "drop message_rate")
	// A long pause refills to the burst, no further.
	for i := 0; i < 3; i++ {
		expect(t, s.Handle(100*sec, m), `deliver message a jr="1" ref="2" e {}`)
	}
	expect(t, s.Handle(100*sec, m), "drop message_rate")
}

func TestDefaults(t *testing.T) {
	s := NewSession(Config{})
	// A reconnecting client may rejoin DefaultMaxTopics topics at once.
	for i := 0; i < DefaultMaxTopics; i++ {
		if acts := s.Handle(0, join(fmt.Sprint(i), fmt.Sprint("t", i))); acts[0].Kind != ActionDeliver {
			t.Fatalf("join %d: %v", i, describe(acts))
		}
		s.AcceptJoin(fmt.Sprint("t", i), MakeRef(fmt.Sprint(i)), nil)
	}
	acts := s.Handle(0, join("x", "x"))
	if acts[len(acts)-1].Drop != DropJoinRate {
		t.Fatalf("join past the burst: %v", describe(acts))
	}
	acts = s.Handle(sec/DefaultJoinRate, join("x", "x"))
	if acts[len(acts)-1].Drop != DropTopicLimit {
		t.Fatalf("join past the cap: %v", describe(acts))
	}
	m := msg("0", "1", "t0", "e", `{}`)
	for i := 0; i < DefaultMessageBurst; i++ {
		if acts := s.Handle(0, m); acts[0].Kind != ActionDeliver {
			t.Fatalf("message %d: %v", i, describe(acts))
		}
	}
	expect(t, s.Handle(0, m), "drop message_rate")
	expect(t, s.Handle(sec/DefaultMessageRate, m), `deliver message t0 jr="0" ref="1" e {}`)

	// Negative rates disable the buckets.
	s = NewSession(Config{JoinRate: -1, MessageRate: -1, MaxTopics: -1})
	joined(t, s, 0, "1", "a")
	for i := 0; i < 10000; i++ {
		if acts := s.Handle(0, msg("1", "2", "a", "e", `{}`)); acts[0].Kind != ActionDeliver {
			t.Fatalf("message %d: %v", i, describe(acts))
		}
	}
}

func TestCloseAndCrash(t *testing.T) {
	s := NewSession(Config{})
	joined(t, s, 0, "1", "a")
	joined(t, s, 0, "2", "b")
	if _, err := s.Close("a", MakeRef("2")); !errors.Is(err, ErrNotJoined) {
		t.Fatalf("Close with another join_ref: %v", err)
	}
	f, err := s.Close("a", MakeRef("1"))
	expectFrame(t, f, err, `["1","1","a","phx_close",{}]`)
	if _, err := s.Push("a", MakeRef("1"), "e", nil); !errors.Is(err, ErrNotJoined) {
		t.Fatalf("Push after Close: %v", err)
	}
	f, err = s.Crash("b", MakeRef("2"))
	expectFrame(t, f, err, `["2","2","b","phx_error",{"reason":"channel_crash"}]`)
	if _, err := s.Crash("b", MakeRef("2")); !errors.Is(err, ErrNotJoined) {
		t.Fatalf("second Crash: %v", err)
	}
	expect(t, s.Handle(0, msg("2", "3", "b", "e", `{}`)),
		`send ["2","3","b","phx_reply",{"status":"error","response":{"reason":"unmatched topic"}}]`,
		"drop unmatched")
	// Close and Crash do not end a pending join.
	s.Handle(0, join("4", "c"))
	if _, err := s.Close("c", MakeRef("4")); !errors.Is(err, ErrNotJoined) {
		t.Fatalf("Close of a pending join: %v", err)
	}
	if _, err := s.Crash("c", MakeRef("4")); !errors.Is(err, ErrNotJoined) {
		t.Fatalf("Crash of a pending join: %v", err)
	}
	if s.Len() != 1 {
		t.Fatalf("Len = %d", s.Len())
	}
}

func TestTerminate(t *testing.T) {
	s := NewSession(Config{})
	joined(t, s, 0, "1", "b")
	s.Handle(0, join("2", "a"))
	joined(t, s, 0, "3", "c")
	expect(t, s.Terminate(),
		`deliver leave a jr="2" ref=null closed`,
		`deliver leave b jr="1" ref=null closed`,
		`deliver leave c jr="3" ref=null closed`)
	if s.Len() != 0 {
		t.Fatalf("Len = %d", s.Len())
	}
	if _, err := s.AcceptJoin("a", MakeRef("2"), nil); !errors.Is(err, ErrNotPending) {
		t.Fatalf("AcceptJoin after Terminate: %v", err)
	}
	expect(t, s.Terminate())
}

func TestReasonStrings(t *testing.T) {
	for r, want := range map[fmt.Stringer]string{
		DropMessageRate: "message_rate", DropJoinRate: "join_rate", DropTopicLimit: "topic_limit",
		DropInvalidJoin: "invalid_join", DropStale: "stale", DropUnmatched: "unmatched", DropReason(0): "unknown",
		LeaveClient: "client", LeaveRejoin: "rejoin", LeaveClosed: "closed", LeaveReason(0): "unknown",
		ActionSend: "send", ActionDeliver: "deliver", ActionDrop: "drop", ActionKind(0): "unknown",
		DeliverJoin: "join", DeliverMessage: "message", DeliverLeave: "leave", DeliveryKind(0): "unknown",
	} {
		if r.String() != want {
			t.Errorf("%v.String() = %q, want %q", r, r.String(), want)
		}
	}
}
