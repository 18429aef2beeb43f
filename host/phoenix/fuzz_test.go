package phoenix

import (
	"bytes"
	"encoding/json"
	"testing"
	"unicode/utf8"
)

var textSeeds = []string{
	`["3","3","room:1","phx_join",{"token":"x"}]`,
	`[null,"6","phoenix","heartbeat",{}]`,
	`["3","7","room:1","new_msg",{"body":"hi","n":[1,2.5e3,null,true]}]`,
	`["3","8","room:1","phx_leave",{}]`,
	` [ null , null , "t\u00e9\n" , "e\"" , "s" ] `,
	`[null,null,"t","e",{}] x`,
	`[null,null,"t","e",{},{}]`,
	`[1,null,"t","e",{}]`,
	`[null,null,"t","e",[[[[]]]]]`,
	`{"a":1}`,
	``,
}

// oracleText decodes data with encoding/json alone, by the rules
// DecodeText documents, so that the two can be compared.
func oracleText(data []byte) (Message, bool) {
	if !utf8.Valid(data) {
		return Message{}, false
	}
	var arr []json.RawMessage
	if json.Unmarshal(data, &arr) != nil || len(arr) != 5 {
		return Message{}, false
	}
	var m Message
	refs := []*Ref{&m.JoinRef, &m.Ref}
	for i, r := range refs {
		var v any
		if json.Unmarshal(arr[i], &v) != nil {
			return Message{}, false
		}
		switch v := v.(type) {
		case nil:
		case string:
			if len(v) > MaxRef {
				return Message{}, false
			}
			*r = MakeRef(v)
		default:
			return Message{}, false
		}
	}
	for i, s := range []*string{&m.Topic, &m.Event} {
		if json.Unmarshal(arr[2+i], s) != nil || len(*s) > 255 {
			return Message{}, false
		}
		if arr[2+i][0] != '"' { // Unmarshal accepts null for a string
			return Message{}, false
		}
	}
	m.Payload = arr[4]
	return m, true
}

func FuzzDecodeText(f *testing.F) {
	for _, s := range textSeeds {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		m, err := DecodeText(data)
		want, ok := oracleText(data)
		if (err == nil) != ok {
			t.Fatalf("DecodeText(%q) error %v, encoding/json accepts: %v", data, err, ok)
		}
		if err != nil {
			return
		}
		if !equalMessage(m, want) {
			t.Fatalf("DecodeText(%q) = %+v, encoding/json reads %+v", data, m, want)
		}
		if len(m.Payload) > len(data) {
			t.Fatalf("payload of %d bytes from a %d-byte frame", len(m.Payload), len(data))
		}

		// decode(encode(x)) == x, in the client's layout.
		b, err := AppendMessage(nil, m)
		if err != nil {
			t.Fatalf("AppendMessage(%+v): %v", m, err)
		}
		if m2, err := DecodeText(b); err != nil || !equalMessage(m2, m) {
			t.Fatalf("round trip of %q via %q: %+v, %v", data, b, m2, err)
		}

		// The server's frames carry the fields through.
		b, err = AppendPush(nil, m.JoinRef, m.Topic, m.Event, m.Payload)
		if err != nil {
			t.Fatal(err)
		}
		p, err := DecodeText(b)
		if err != nil || p.JoinRef != m.JoinRef || p.Ref.Valid || p.Topic != m.Topic || p.Event != m.Event || !bytes.Equal(p.Payload, m.Payload) {
			t.Fatalf("push %q decodes to %+v, %v", b, p, err)
		}
		b, err = AppendReply(nil, m.JoinRef, m.Ref, m.Topic, m.Event, m.Payload)
		if err != nil {
			t.Fatal(err)
		}
		r, err := DecodeText(b)
		if err != nil || r.JoinRef != m.JoinRef || r.Ref != m.Ref || r.Event != EventReply {
			t.Fatalf("reply %q decodes to %+v, %v", b, r, err)
		}
		var body struct {
			Status   string          `json:"status"`
			Response json.RawMessage `json:"response"`
		}
		if err := json.Unmarshal(r.Payload, &body); err != nil || body.Status != m.Event || !bytes.Equal(body.Response, m.Payload) {
			t.Fatalf("reply payload %s: %+v, %v", r.Payload, body, err)
		}

		// Every valid text message also fits the binary layout.
		m.IsBinary, m.Binary, m.Payload = true, []byte(m.Payload), nil
		if _, err := AppendMessage(nil, m); err != nil {
			t.Fatalf("binary AppendMessage(%+v): %v", m, err)
		}
	})
}

func FuzzDecodeBinary(f *testing.F) {
	f.Add([]byte{0, 1, 2, 6, 5, '3', '4', '2', 'r', 'o', 'o', 'm', ':', '1', 'e', 'v', 'e', 'n', 't', 0xde, 0xad})
	f.Add([]byte{0, 0, 0, 1, 1, 't', 'e'})
	f.Add([]byte{0, 255, 255, 255, 255})
	f.Add([]byte{1, 0, 0, 0, 0})
	f.Add([]byte{2, 1, 1, 't', 'e'})
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, data []byte) {
		m, err := DecodeBinary(data)
		if err != nil {
			return
		}
		if !m.IsBinary || m.Binary == nil || m.Payload != nil || len(m.Binary) > len(data) {
			t.Fatalf("DecodeBinary(%v) = %+v", data, m)
		}
		// The layout is canonical: encoding gives back the very bytes.
		b, err := AppendMessage(nil, m)
		if err != nil || !bytes.Equal(b, data) {
			t.Fatalf("AppendMessage(DecodeBinary(%v)) = %v, %v", data, b, err)
		}
		// The server's layouts carry the same fields.
		b, err = AppendBinaryPush(nil, m.JoinRef, m.Topic, m.Event, m.Binary)
		if err != nil || int(b[1]) != len(m.JoinRef.Value) || int(b[2]) != len(m.Topic) || int(b[3]) != len(m.Event) ||
			!bytes.Equal(b[4+len(m.JoinRef.Value)+len(m.Topic)+len(m.Event):], m.Binary) {
			t.Fatalf("AppendBinaryPush of %+v = %v, %v", m, b, err)
		}
		if _, err := AppendBinaryReply(nil, m.JoinRef, m.Ref, m.Topic, m.Event, m.Binary); err != nil {
			t.Fatal(err)
		}
	})
}

// FuzzRoundTrip builds a message from its fields and checks that every
// message the encoder accepts decodes back to itself, in both layouts.
func FuzzRoundTrip(f *testing.F) {
	f.Add("3", false, "3", false, "room:1", "phx_join", []byte(`{}`))
	f.Add("", true, "6", false, "phoenix", "heartbeat", []byte(`{}`))
	f.Add("é", false, "", true, "t\"\\\n", "\u2028", []byte(` [1, "x"] `))
	f.Add("x", false, "y", false, "t", "e", []byte(`{"a":`))
	f.Fuzz(func(t *testing.T, jr string, jrNull bool, ref string, refNull bool, topic, event string, payload []byte) {
		m := Message{Topic: topic, Event: event, Payload: payload}
		if !jrNull {
			m.JoinRef = MakeRef(jr)
		}
		if !refNull {
			m.Ref = MakeRef(ref)
		}
		b, err := AppendMessage(nil, m)
		if err != nil {
			return
		}
		got, err := DecodeText(b)
		if err != nil {
			t.Fatalf("DecodeText(%q): %v", b, err)
		}
		want := m
		want.Payload = bytes.TrimSpace(payload)
		if len(want.Payload) == 0 {
			want.Payload = json.RawMessage(`{}`)
		}
		if !equalMessage(got, want) {
			t.Fatalf("text round trip: %+v -> %q -> %+v", want, b, got)
		}

		m.IsBinary, m.Binary, m.Payload = true, payload, nil
		b, err = AppendMessage(nil, m)
		if err != nil {
			t.Fatalf("binary AppendMessage(%+v): %v", m, err)
		}
		got, err = DecodeBinary(b)
		if err != nil {
			t.Fatalf("DecodeBinary(%v): %v", b, err)
		}
		want = m
		for _, r := range []*Ref{&want.JoinRef, &want.Ref} {
			if r.Value == "" {
				*r = Ref{} // the binary layout reads an empty ref as null
			}
		}
		if !equalMessage(got, want) {
			t.Fatalf("binary round trip: %+v -> %v -> %+v", want, b, got)
		}
	})
}
