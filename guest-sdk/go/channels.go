package wasmkeep

import (
	"github.com/wasmkeep/wasmkeep/abi"
)

// Phoenix channels. A room whose class registers HandleJoin serves the
// Phoenix Channels protocol on its /socket/websocket path: a phoenix.js
// client connects with
//
//	new Socket("/actor/<class>/<name>/socket")
//
// and joins topics of the room. The host speaks the protocol (heartbeats
// never wake the room); the room sees joins, messages and leaves, answers
// them, pushes, broadcasts to a topic, and tracks presence, which the host
// keeps and sends to clients as presence_state and presence_diff.
//
// Payloads are JSON, passed as bytes: encode them with encoding/json (or
// by hand, to keep the module small).

// Join is a client's request to join a topic.
type Join struct {
	Topic string
	// Payload is the join's parameters (JSON), a copy the handler may keep.
	Payload []byte
}

// ChannelMessage is an event a client sent on a topic it joined.
type ChannelMessage struct {
	Topic, Event string
	// Payload is JSON, or raw bytes when Binary (a Phoenix binary push).
	// It is only valid until the handler returns.
	Payload []byte
	Binary  bool
}

// Reply answers a join (OK accepts it, Error rejects it) or a channel
// message. Body is JSON; nil means {}.
type Reply struct {
	Error bool
	Body  []byte
}

// OK is a successful reply (for a join: accepted) with a JSON body.
func OK(body []byte) *Reply { return &Reply{Body: body} }

// Err is an error reply (for a join: rejected) with a JSON body, such as
// []byte(`{"reason":"unauthorized"}`).
func Err(body []byte) *Reply { return &Reply{Error: true, Body: body} }

var (
	onJoinFunc           func(Socket, *Join) *Reply
	onChannelMessageFunc func(Socket, *ChannelMessage) *Reply
	onLeaveFunc          func(s Socket, topic, reason string)
)

// HandleJoin registers the join handler. Returning OK accepts the join;
// Err or nil rejects it (a join nobody answers is refused). Without a
// handler every join is refused.
func HandleJoin(h func(Socket, *Join) *Reply) { onJoinFunc = h }

// HandleChannelMessage registers the handler for events on joined topics.
// A non-nil Reply answers the client's push (phoenix.js's receive("ok") or
// receive("error")); nil sends no reply.
func HandleChannelMessage(h func(Socket, *ChannelMessage) *Reply) { onChannelMessageFunc = h }

// HandleLeave registers the handler told when a join ends: reason is
// "client" (the client left), "rejoin" (it joined the topic again) or
// "closed" (the socket went away, or the room closed the topic). It runs
// only for joins the room accepted.
func HandleLeave(h func(s Socket, topic, reason string)) { onLeaveFunc = h }

func replyWith(r *Reply) {
	st := int32(abi.ReplyOK)
	if r.Error {
		st = abi.ReplyError
	}
	if n := hostChannelReply(st, bytesPtr(r.Body), uint32(len(r.Body))); n < 0 {
		Error("wasmkeep: channel_reply: " + abi.Status(n).String())
	}
}

func channelOut(topic, event string, payload []byte, binary bool) []byte {
	return abi.AppendChannelMessage(nil, &abi.ChannelMessage{Topic: topic, Event: event, Binary: binary, Payload: payload})
}

// Push sends an event with a JSON payload to this socket on a topic it
// joined (or is joining, from the join handler).
func (s Socket) Push(topic, event string, payload []byte) error {
	rec := channelOut(topic, event, payload, false)
	return status("channel_push", hostChannelPush(uint32(s), bytesPtr(rec), uint32(len(rec))))
}

// PushBinary is Push with a raw binary payload (a Phoenix binary frame).
func (s Socket) PushBinary(topic, event string, payload []byte) error {
	rec := channelOut(topic, event, payload, true)
	return status("channel_push", hostChannelPush(uint32(s), bytesPtr(rec), uint32(len(rec))))
}

// BroadcastTopic sends an event with a JSON payload to every socket of the
// room that joined topic, except except (0: none), and returns how many.
func BroadcastTopic(topic, event string, payload []byte, except Socket) (int, error) {
	rec := channelOut(topic, event, payload, false)
	return count("channel_broadcast", hostChannelBroadcast(uint32(except), bytesPtr(rec), uint32(len(rec))))
}

// CloseTopic ends this socket's join of topic: the client gets phx_close,
// and the room a leave with reason "closed".
func (s Socket) CloseTopic(topic string) error {
	rec := abi.AppendTopic(nil, topic)
	return status("channel_close", hostChannelClose(uint32(s), bytesPtr(rec), uint32(len(rec))))
}

// Track adds (or, for a key already tracked by this socket, updates) a
// presence entry for key on topic with a JSON object of metadata. Every
// socket on the topic gets a presence_diff; the entry ends with the join.
func (s Socket) Track(topic, key string, meta []byte) error {
	rec := abi.AppendPresence(nil, &abi.Presence{Topic: topic, Key: key, Meta: meta})
	return status("presence_track", hostPresenceTrack(uint32(s), bytesPtr(rec), uint32(len(rec))))
}

// Untrack removes this socket's presence entry for key on topic.
func (s Socket) Untrack(topic, key string) error {
	rec := abi.AppendPresence(nil, &abi.Presence{Topic: topic, Key: key})
	return status("presence_untrack", hostPresenceUntrack(uint32(s), bytesPtr(rec), uint32(len(rec))))
}
