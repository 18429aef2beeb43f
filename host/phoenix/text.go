package phoenix

import (
	"bytes"
	"encoding/json"
	"fmt"
	"unicode/utf8"
)

// DecodeText decodes a text frame: a JSON array of exactly five elements,
// [join_ref, ref, topic, event, payload], where the refs are strings or
// null, topic and event are strings within MaxTopic and MaxEvent bytes,
// and payload is any JSON value (kept raw, its nesting depth bounded by
// encoding/json). Whitespace around the array is allowed; anything else is
// refused with one of the package's errors.
//
// The array is walked in place and the payload checked with json.Valid, so
// a decode allocates little more than the copy of the payload it returns.
func DecodeText(b []byte) (Message, error) {
	// encoding/json would quietly replace invalid UTF-8 in strings; a
	// topic must not change on its way through, so refuse such frames
	// whole (a WebSocket text message must be valid UTF-8 anyway).
	if !utf8.Valid(b) {
		return Message{}, ErrInvalidUTF8
	}
	i := skipSpace(b, 0)
	if i == len(b) {
		return Message{}, fmt.Errorf("%w: empty frame", ErrSyntax)
	}
	if b[i] != '[' {
		if json.Valid(b) {
			return Message{}, ErrNotArray
		}
		return Message{}, fmt.Errorf("%w: not a JSON array", ErrSyntax)
	}
	i++
	var (
		m   Message
		err error
	)
	if m.JoinRef, i, err = decodeRef(b, i, "join_ref"); err != nil {
		return Message{}, err
	}
	if m.Ref, i, err = decodeRef(b, i, "ref"); err != nil {
		return Message{}, err
	}
	if m.Topic, i, err = decodeString(b, i, "topic", MaxTopic); err != nil {
		return Message{}, err
	}
	if m.Event, i, err = decodeString(b, i, "event", MaxEvent); err != nil {
		return Message{}, err
	}
	start := skipSpace(b, i)
	if start < len(b) && b[start] == ']' {
		return Message{}, ErrArity
	}
	end, err := skipValue(b, start)
	if err != nil {
		return Message{}, err
	}
	payload := b[start:end]
	if !json.Valid(payload) {
		return Message{}, fmt.Errorf("%w: invalid payload", ErrSyntax)
	}
	i = skipSpace(b, end)
	switch {
	case i == len(b):
		return Message{}, fmt.Errorf("%w: unterminated array", ErrSyntax)
	case b[i] == ',':
		return Message{}, ErrArity
	case b[i] != ']':
		return Message{}, fmt.Errorf("%w: unexpected %q after the payload", ErrSyntax, b[i])
	}
	if skipSpace(b, i+1) != len(b) {
		return Message{}, ErrTrailingData
	}
	m.Payload = append(make(json.RawMessage, 0, len(payload)), payload...)
	return m, nil
}

func isSpace(c byte) bool { return c == ' ' || c == '\t' || c == '\n' || c == '\r' }

// skipSpace returns the index of the first byte at or after i that is not
// JSON whitespace.
func skipSpace(b []byte, i int) int {
	for i < len(b) && isSpace(b[i]) {
		i++
	}
	return i
}

// skipString returns the index just past the string that starts with the
// quote at b[i]. Escapes are skipped, not checked (the caller decodes or
// validates the string afterwards); raw control characters are refused.
func skipString(b []byte, i int) (int, error) {
	for i++; i < len(b); i++ {
		switch c := b[i]; {
		case c == '"':
			return i + 1, nil
		case c == '\\':
			i++
		case c < 0x20:
			return 0, fmt.Errorf("%w: control character in a string", ErrSyntax)
		}
	}
	return 0, fmt.Errorf("%w: unterminated string", ErrSyntax)
}

// skipValue returns the index just past the JSON value starting at b[i],
// going by brackets and quotes only; the caller validates the value with
// json.Valid, which also catches brackets of the wrong kind.
func skipValue(b []byte, i int) (int, error) {
	depth := 0
	for i < len(b) {
		switch c := b[i]; {
		case c == '"':
			end, err := skipString(b, i)
			if err != nil {
				return 0, err
			}
			i = end
			if depth == 0 {
				return i, nil
			}
		case c == '[' || c == '{':
			depth++
			i++
		case c == ']' || c == '}':
			if depth == 0 {
				return i, nil
			}
			depth--
			i++
			if depth == 0 {
				return i, nil
			}
		case depth == 0 && (c == ',' || isSpace(c)):
			return i, nil
		default:
			i++
		}
	}
	if depth > 0 {
		return 0, fmt.Errorf("%w: unterminated payload", ErrSyntax)
	}
	return i, nil
}

// element finds the next array element at or after i, which must be a
// string or (when nullable) null, and is followed by a comma. It returns
// the raw string with its quotes (nil for null) and the index past the
// comma. wrongType is the error for an element of another type.
func element(b []byte, i int, nullable bool, wrongType error, name string) (raw []byte, next int, err error) {
	i = skipSpace(b, i)
	if i == len(b) {
		return nil, 0, fmt.Errorf("%w: unterminated array", ErrSyntax)
	}
	var end int
	switch c := b[i]; {
	case c == ']':
		return nil, 0, ErrArity
	case c == '"':
		if end, err = skipString(b, i); err != nil {
			return nil, 0, err
		}
		raw = b[i:end]
	case c == 'n' && nullable:
		if !bytes.HasPrefix(b[i:], []byte("null")) {
			return nil, 0, fmt.Errorf("%w: bad literal", ErrSyntax)
		}
		end = i + len("null")
	case c == ',':
		return nil, 0, fmt.Errorf("%w: missing %s", ErrSyntax, name)
	default:
		return nil, 0, fmt.Errorf("%w: %s", wrongType, name)
	}
	next = skipSpace(b, end)
	if next == len(b) {
		return nil, 0, fmt.Errorf("%w: unterminated array", ErrSyntax)
	}
	switch b[next] {
	case ',':
		return raw, next + 1, nil
	case ']':
		return nil, 0, ErrArity
	}
	return nil, 0, fmt.Errorf("%w: unexpected %q after %s", ErrSyntax, b[next], name)
}

// unquote decodes a raw JSON string of at most max bytes once decoded. The
// raw length is checked first: no escape is more than six times longer
// than what it stands for, so a longer string is refused undecoded.
func unquote(raw []byte, name string, max int) (string, error) {
	if len(raw)-2 > 6*max {
		return "", fmt.Errorf("%w: %s is over %d bytes", ErrTooLong, name, max)
	}
	var s string
	if err := json.Unmarshal(raw, &s); err != nil {
		return "", fmt.Errorf("%w: %s: %v", ErrSyntax, name, err)
	}
	if len(s) > max {
		return "", fmt.Errorf("%w: %s is %d bytes, at most %d", ErrTooLong, name, len(s), max)
	}
	return s, nil
}

// decodeRef reads the array element at i as a string or null.
func decodeRef(b []byte, i int, name string) (Ref, int, error) {
	raw, next, err := element(b, i, true, ErrRefType, name)
	if err != nil || raw == nil {
		return Ref{}, next, err
	}
	s, err := unquote(raw, name, MaxRef)
	if err != nil {
		return Ref{}, 0, err
	}
	return MakeRef(s), next, nil
}

// decodeString reads the array element at i as a string of at most max
// bytes.
func decodeString(b []byte, i int, name string, max int) (string, int, error) {
	raw, next, err := element(b, i, false, ErrFieldType, name)
	if err != nil {
		return "", 0, err
	}
	s, err := unquote(raw, name, max)
	if err != nil {
		return "", 0, err
	}
	return s, next, nil
}

// checkField refuses a string field an encoder would write if it is over
// max bytes or not valid UTF-8.
func checkField(name, s string, max int) error {
	if len(s) > max {
		return fmt.Errorf("%w: %s is %d bytes, at most %d", ErrTooLong, name, len(s), max)
	}
	if !utf8.ValidString(s) {
		return fmt.Errorf("%w: %s", ErrInvalidUTF8, name)
	}
	return nil
}

func checkRef(name string, r Ref) error {
	if !r.Valid {
		return nil
	}
	return checkField(name, r.Value, MaxRef)
}

// checkPayload refuses a JSON payload that is not one valid JSON value in
// valid UTF-8 (encoding/json lets invalid UTF-8 through inside strings, and
// a client fails the whole connection on a text message holding any). An
// empty payload is allowed: encoders write it as {}.
func checkPayload(p json.RawMessage) error {
	if len(p) == 0 || (json.Valid(p) && utf8.Valid(p)) {
		return nil
	}
	return ErrInvalidJSON
}

func firstError(errs ...error) error {
	for _, err := range errs {
		if err != nil {
			return err
		}
	}
	return nil
}

// appendHead writes `[join_ref,ref,topic,event,` of a text frame.
func appendHead(dst []byte, joinRef, ref Ref, topic, event string) []byte {
	dst = append(dst, '[')
	dst = appendRef(dst, joinRef)
	dst = append(dst, ',')
	dst = appendRef(dst, ref)
	dst = append(dst, ',')
	dst = appendString(dst, topic)
	dst = append(dst, ',')
	dst = appendString(dst, event)
	return append(dst, ',')
}

func appendRef(dst []byte, r Ref) []byte {
	if !r.Valid {
		return append(dst, "null"...)
	}
	return appendString(dst, r.Value)
}

// appendPayload writes a checked payload, or {} for an empty one.
func appendPayload(dst []byte, p json.RawMessage) []byte {
	if len(p) == 0 {
		return append(dst, "{}"...)
	}
	return append(dst, p...)
}

// AppendMessage appends m encoded in the layout a client sends: a text
// frame [join_ref, ref, topic, event, payload], or, when m.IsBinary, a
// binary push (kind 0 with a ref). It is the inverse of Decode, for test
// clients and tools; a server writes with the other Append functions. In
// the binary layout a null ref is written as an empty one, and an empty one
// is read back as null. On error dst is returned unchanged.
func AppendMessage(dst []byte, m Message) ([]byte, error) {
	if m.IsBinary {
		return appendBinary(dst, kindPush, m.JoinRef, m.Ref, true, m.Topic, m.Event, m.Binary)
	}
	err := firstError(checkRef("join_ref", m.JoinRef), checkRef("ref", m.Ref),
		checkField("topic", m.Topic, MaxTopic), checkField("event", m.Event, MaxEvent),
		checkPayload(m.Payload))
	if err != nil {
		return dst, err
	}
	dst = appendHead(dst, m.JoinRef, m.Ref, m.Topic, m.Event)
	dst = appendPayload(dst, m.Payload)
	return append(dst, ']'), nil
}

// AppendReply appends a text reply:
// [join_ref, ref, topic, "phx_reply", {"status": status, "response": response}].
// An empty response is written as {}. On error (a field over its limit or
// not UTF-8, a response that is not valid JSON) dst is returned unchanged.
func AppendReply(dst []byte, joinRef, ref Ref, topic, status string, response json.RawMessage) ([]byte, error) {
	err := firstError(checkRef("join_ref", joinRef), checkRef("ref", ref),
		checkField("topic", topic, MaxTopic), checkField("status", status, MaxStatus),
		checkPayload(response))
	if err != nil {
		return dst, err
	}
	dst = appendHead(dst, joinRef, ref, topic, EventReply)
	dst = appendReplyBody(dst, status, response)
	return append(dst, ']'), nil
}

func appendReplyBody(dst []byte, status string, response json.RawMessage) []byte {
	dst = append(dst, `{"status":`...)
	dst = appendString(dst, status)
	dst = append(dst, `,"response":`...)
	dst = appendPayload(dst, response)
	return append(dst, '}')
}

// appendErrorReply writes a reply with status "error" and response
// {"reason": reason}.
func appendErrorReply(dst []byte, joinRef, ref Ref, topic, reason string) []byte {
	dst = appendHead(dst, joinRef, ref, topic, EventReply)
	dst = append(dst, `{"status":"error","response":{"reason":`...)
	dst = appendString(dst, reason)
	return append(dst, "}}]"...)
}

// appendOKReply writes a reply with status "ok" and response {}.
func appendOKReply(dst []byte, joinRef, ref Ref, topic string) []byte {
	dst = appendHead(dst, joinRef, ref, topic, EventReply)
	return append(dst, `{"status":"ok","response":{}}]`...)
}

// AppendPush appends a text push to one join: [join_ref, null, topic,
// event, payload]. An empty payload is written as {}. On error dst is
// returned unchanged.
func AppendPush(dst []byte, joinRef Ref, topic, event string, payload json.RawMessage) ([]byte, error) {
	err := firstError(checkRef("join_ref", joinRef), checkField("topic", topic, MaxTopic),
		checkField("event", event, MaxEvent), checkPayload(payload))
	if err != nil {
		return dst, err
	}
	dst = appendHead(dst, joinRef, Ref{}, topic, event)
	dst = appendPayload(dst, payload)
	return append(dst, ']'), nil
}

// AppendBroadcast appends a text broadcast: [null, null, topic, event,
// payload]. It names no join, so one encoding serves every socket joined
// to the topic. An empty payload is written as {}. On error dst is returned
// unchanged.
func AppendBroadcast(dst []byte, topic, event string, payload json.RawMessage) ([]byte, error) {
	return AppendPush(dst, Ref{}, topic, event, payload)
}

// AppendClose appends the server's close of a join:
// [join_ref, join_ref, topic, "phx_close", {}].
func AppendClose(dst []byte, joinRef Ref, topic string) []byte {
	dst = appendHead(dst, joinRef, joinRef, topic, EventClose)
	return append(dst, "{}]"...)
}

// AppendError appends the notice that a join ended abnormally:
// [join_ref, join_ref, topic, "phx_error", {"reason": reason}].
func AppendError(dst []byte, joinRef Ref, topic, reason string) []byte {
	dst = appendHead(dst, joinRef, joinRef, topic, EventError)
	dst = append(dst, `{"reason":`...)
	dst = appendString(dst, reason)
	return append(dst, "}]"...)
}

// AppendHeartbeatReply appends the answer to a heartbeat whose ref is ref:
// [null, ref, "phoenix", "phx_reply", {"status":"ok","response":{}}].
func AppendHeartbeatReply(dst []byte, ref Ref) []byte {
	return appendOKReply(dst, Ref{}, ref, TopicPhoenix)
}

const hexDigits = "0123456789abcdef"

// appendString appends s as a JSON string. Quotes, backslashes and control
// characters are escaped, as are U+2028 and U+2029 (which some JavaScript
// parsers take for line ends); invalid UTF-8 becomes U+FFFD. Other
// characters, HTML-significant ones included, are written as they are.
func appendString(dst []byte, s string) []byte {
	dst = append(dst, '"')
	start := 0
	for i := 0; i < len(s); {
		c := s[i]
		if c < utf8.RuneSelf {
			if c >= 0x20 && c != '"' && c != '\\' {
				i++
				continue
			}
			dst = append(dst, s[start:i]...)
			switch c {
			case '"', '\\':
				dst = append(dst, '\\', c)
			case '\n':
				dst = append(dst, '\\', 'n')
			case '\r':
				dst = append(dst, '\\', 'r')
			case '\t':
				dst = append(dst, '\\', 't')
			default:
				dst = append(dst, '\\', 'u', '0', '0', hexDigits[c>>4], hexDigits[c&0xf])
			}
			i++
			start = i
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		if r == utf8.RuneError && size == 1 {
			dst = append(dst, s[start:i]...)
			dst = append(dst, `\ufffd`...)
			i += size
			start = i
			continue
		}
		if r == '\u2028' || r == '\u2029' {
			dst = append(dst, s[start:i]...)
			dst = append(dst, '\\', 'u', '2', '0', '2', hexDigits[r&0xf])
			i += size
			start = i
			continue
		}
		i += size
	}
	dst = append(dst, s[start:]...)
	return append(dst, '"')
}
