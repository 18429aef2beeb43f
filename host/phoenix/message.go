package phoenix

import (
	"encoding/json"
	"errors"
	"strconv"
)

// Size limits, in bytes, of the string fields of a frame. The binary layout
// stores each of these lengths in one byte, so 255 is the most it can carry;
// text frames are held to the same limits so that every message can be
// re-encoded either way.
const (
	// MaxTopic is the longest topic accepted or written.
	MaxTopic = 255
	// MaxEvent is the longest event name accepted or written.
	MaxEvent = 255
	// MaxRef is the longest join_ref or ref accepted or written.
	MaxRef = 255
	// MaxStatus is the longest reply status written.
	MaxStatus = 255
)

// Event names, topics and statuses with a meaning in the protocol.
const (
	// TopicPhoenix is the socket-level topic that carries heartbeats. It
	// cannot be joined.
	TopicPhoenix = "phoenix"
	// EventHeartbeat is the client's keepalive on TopicPhoenix.
	EventHeartbeat = "heartbeat"
	// EventJoin asks to join a topic; its payload is the join parameters.
	EventJoin = "phx_join"
	// EventLeave asks to leave a topic.
	EventLeave = "phx_leave"
	// EventReply is the event of every reply the server sends.
	EventReply = "phx_reply"
	// EventClose tells the client that the server ended a join.
	EventClose = "phx_close"
	// EventError tells the client that a join ended abnormally; phoenix.js
	// then rejoins with back-off.
	EventError = "phx_error"
	// EventPresenceState carries a whole presence state (see Presence.State).
	EventPresenceState = "presence_state"
	// EventPresenceDiff carries a presence change (see Diff).
	EventPresenceDiff = "presence_diff"

	// StatusOK is the status of a successful reply.
	StatusOK = "ok"
	// StatusError is the status of a failed reply.
	StatusError = "error"
)

// Reasons written in the {"reason": ...} response of the error replies and
// the phx_error payload this package produces.
const (
	// ReasonUnmatchedTopic answers a message on a topic the socket has not
	// joined (the reason Phoenix uses).
	ReasonUnmatchedTopic = "unmatched topic"
	// ReasonJoinCrashed answers a join the room did not accept or reject
	// (the reason Phoenix uses when a join handler fails).
	ReasonJoinCrashed = "join crashed"
	// ReasonTooManyTopics answers a join past Config.MaxTopics.
	ReasonTooManyTopics = "too many channels joined"
	// ReasonJoinRate answers a join over the join rate.
	ReasonJoinRate = "join rate exceeded"
	// ReasonInvalidTopic answers a join whose topic ValidateTopic refuses.
	ReasonInvalidTopic = "invalid topic"
	// ReasonInvalidJoinRef answers a join without a join_ref.
	ReasonInvalidJoinRef = "missing join_ref"
	// ReasonChannelCrash is the phx_error reason when a room failed while
	// serving a joined topic (the reason Phoenix 1.8 sends).
	ReasonChannelCrash = "channel_crash"
)

// Errors of the codec. Compare with errors.Is; most are returned wrapped
// with detail.
var (
	// ErrSyntax: a text frame is not well-formed JSON (or is empty).
	ErrSyntax = errors.New("phoenix: malformed JSON frame")
	// ErrNotArray: a text frame is JSON but not an array.
	ErrNotArray = errors.New("phoenix: frame is not a JSON array")
	// ErrArity: a text frame is an array of other than five elements.
	ErrArity = errors.New("phoenix: frame must have exactly 5 elements")
	// ErrRefType: a join_ref or ref is neither a string nor null.
	ErrRefType = errors.New("phoenix: join_ref and ref must be strings or null")
	// ErrFieldType: a topic or event is not a string.
	ErrFieldType = errors.New("phoenix: topic and event must be strings")
	// ErrTooLong: a topic, event, ref or status is over its limit.
	ErrTooLong = errors.New("phoenix: field too long")
	// ErrInvalidUTF8: a frame or a string field is not valid UTF-8.
	ErrInvalidUTF8 = errors.New("phoenix: invalid UTF-8")
	// ErrTrailingData: something follows the array of a text frame.
	ErrTrailingData = errors.New("phoenix: data after the frame")
	// ErrTruncated: a binary frame is shorter than its header says.
	ErrTruncated = errors.New("phoenix: binary frame truncated")
	// ErrBinaryKind: a binary frame from a client is not a push (kind 0).
	ErrBinaryKind = errors.New("phoenix: binary frame kind is not a client push")
	// ErrInvalidJSON: a payload given to an encoder is not valid JSON.
	ErrInvalidJSON = errors.New("phoenix: payload is not valid JSON")
)

// Ref is a join_ref or ref: a string chosen by the client, or null. The
// zero value is null. Refs are compared with ==.
type Ref struct {
	// Value is the string; meaningful only when Valid.
	Value string
	// Valid is false for null.
	Valid bool
}

// MakeRef returns the non-null Ref s.
func MakeRef(s string) Ref { return Ref{Value: s, Valid: true} }

// String returns the ref as it would appear in JSON: quoted, or null.
func (r Ref) String() string {
	if !r.Valid {
		return "null"
	}
	return strconv.Quote(r.Value)
}

// Message is one decoded frame: [join_ref, ref, topic, event, payload].
//
// A text frame sets Payload (raw JSON, never nil after decoding) and leaves
// Binary nil; a binary frame sets IsBinary and Binary (never nil after
// decoding, possibly empty) and leaves Payload nil. Decoded messages never
// alias the frame they came from.
type Message struct {
	// JoinRef names the join the message belongs to (null on heartbeats).
	JoinRef Ref
	// Ref is the client's reference for this message; a reply carries it
	// back.
	Ref Ref
	// Topic is the channel topic ("phoenix" for heartbeats).
	Topic string
	// Event is the event name (phx_join, phx_leave, heartbeat, or the
	// application's).
	Event string
	// Payload is the JSON payload of a text frame, kept as raw bytes.
	Payload json.RawMessage
	// Binary is the payload of a binary frame.
	Binary []byte
	// IsBinary tells which of Payload and Binary is meant.
	IsBinary bool
}

// Frame is an encoded frame for the socket layer to write: Data is the
// whole WebSocket message, Binary selects the binary opcode over text.
type Frame struct {
	// Data is the message body.
	Data []byte
	// Binary is true for a binary message, false for text.
	Binary bool
}

// Decode decodes a frame received from a client: DecodeBinary for a
// binary frame, DecodeText otherwise.
func Decode(f Frame) (Message, error) {
	if f.Binary {
		return DecodeBinary(f.Data)
	}
	return DecodeText(f.Data)
}
