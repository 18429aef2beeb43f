package phoenix

import (
	"fmt"
	"unicode/utf8"
)

// Kinds of binary frames: the first byte.
const (
	kindPush      = 0
	kindReply     = 1
	kindBroadcast = 2
)

// DecodeBinary decodes a binary frame from a client. The only kind a client
// sends is a push:
//
//	0, join_ref_len, ref_len, topic_len, event_len, join_ref, ref, topic, event, payload
//
// with one byte per length and the payload running to the end. Replies
// (kind 1) and broadcasts (kind 2) go from server to client only and are
// refused with ErrBinaryKind, as is any other kind. The string fields must
// be valid UTF-8. An empty join_ref or ref is read as null, the binary
// layout having no other way to write one.
func DecodeBinary(b []byte) (Message, error) {
	if len(b) == 0 {
		return Message{}, fmt.Errorf("%w: empty frame", ErrTruncated)
	}
	if b[0] != kindPush {
		return Message{}, fmt.Errorf("%w: kind %d", ErrBinaryKind, b[0])
	}
	const header = 5
	if len(b) < header {
		return Message{}, fmt.Errorf("%w: %d bytes, header needs %d", ErrTruncated, len(b), header)
	}
	jl, rl, tl, el := int(b[1]), int(b[2]), int(b[3]), int(b[4])
	end := header + jl + rl + tl + el
	if len(b) < end {
		return Message{}, fmt.Errorf("%w: %d bytes, header names %d", ErrTruncated, len(b), end)
	}
	p := header
	field := func(n int) []byte {
		f := b[p : p+n]
		p += n
		return f
	}
	joinRef, ref, topic, event := field(jl), field(rl), field(tl), field(el)
	for _, f := range [...]struct {
		name string
		v    []byte
	}{{"join_ref", joinRef}, {"ref", ref}, {"topic", topic}, {"event", event}} {
		if !utf8.Valid(f.v) {
			return Message{}, fmt.Errorf("%w: %s", ErrInvalidUTF8, f.name)
		}
	}
	return Message{
		JoinRef:  binaryRef(joinRef),
		Ref:      binaryRef(ref),
		Topic:    string(topic),
		Event:    string(event),
		Binary:   append(make([]byte, 0, len(b)-end), b[end:]...),
		IsBinary: true,
	}, nil
}

func binaryRef(b []byte) Ref {
	if len(b) == 0 {
		return Ref{}
	}
	return MakeRef(string(b))
}

// refBytes is what the binary layout writes for r: null is empty.
func refBytes(r Ref) string {
	if !r.Valid {
		return ""
	}
	return r.Value
}

// appendBinary writes a binary frame of the given kind: the header byte,
// the lengths of the fields present, the fields, the payload. Pushes from
// the server have no ref (withRef false); broadcasts have no refs at all
// and go through appendBinaryBroadcast.
func appendBinary(dst []byte, kind byte, joinRef, ref Ref, withRef bool, topic, event string, payload []byte) ([]byte, error) {
	eventName, eventMax := "event", MaxEvent
	if kind == kindReply {
		eventName, eventMax = "status", MaxStatus
	}
	err := firstError(checkRef("join_ref", joinRef), checkRef("ref", ref),
		checkField("topic", topic, MaxTopic), checkField(eventName, event, eventMax))
	if err != nil {
		return dst, err
	}
	jr, r := refBytes(joinRef), refBytes(ref)
	dst = append(dst, kind, byte(len(jr)))
	if withRef {
		dst = append(dst, byte(len(r)))
	}
	dst = append(dst, byte(len(topic)), byte(len(event)))
	dst = append(dst, jr...)
	if withRef {
		dst = append(dst, r...)
	}
	dst = append(dst, topic...)
	dst = append(dst, event...)
	return append(dst, payload...), nil
}

// AppendBinaryReply appends a binary reply:
//
//	1, join_ref_len, ref_len, topic_len, status_len, join_ref, ref, topic, status, response
//
// phoenix.js hands it to the waiting push as {status, response} with the
// response as an ArrayBuffer. A null ref is written empty. On error (a
// field over 255 bytes or not UTF-8) dst is returned unchanged.
func AppendBinaryReply(dst []byte, joinRef, ref Ref, topic, status string, response []byte) ([]byte, error) {
	return appendBinary(dst, kindReply, joinRef, ref, true, topic, status, response)
}

// AppendBinaryPush appends a binary push to one join:
//
//	0, join_ref_len, topic_len, event_len, join_ref, topic, event, payload
//
// (a server push has no ref, unlike the client's kind 0). On error dst is
// returned unchanged.
func AppendBinaryPush(dst []byte, joinRef Ref, topic, event string, payload []byte) ([]byte, error) {
	return appendBinary(dst, kindPush, joinRef, Ref{}, false, topic, event, payload)
}

// AppendBinaryBroadcast appends a binary broadcast:
//
//	2, topic_len, event_len, topic, event, payload
//
// It names no join, so one encoding serves every socket joined to the
// topic. On error dst is returned unchanged.
func AppendBinaryBroadcast(dst []byte, topic, event string, payload []byte) ([]byte, error) {
	err := firstError(checkField("topic", topic, MaxTopic), checkField("event", event, MaxEvent))
	if err != nil {
		return dst, err
	}
	dst = append(dst, kindBroadcast, byte(len(topic)), byte(len(event)))
	dst = append(dst, topic...)
	dst = append(dst, event...)
	return append(dst, payload...), nil
}
