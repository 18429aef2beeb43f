package phoenix

import (
	"bytes"
	"encoding/json"
	"errors"
	"runtime"
	"strings"
	"testing"
)

// equalMessage compares two messages, treating a nil and an empty payload
// alike only where the codec does not distinguish them.
func equalMessage(a, b Message) bool {
	return a.JoinRef == b.JoinRef && a.Ref == b.Ref && a.Topic == b.Topic && a.Event == b.Event &&
		a.IsBinary == b.IsBinary && bytes.Equal(a.Payload, b.Payload) && bytes.Equal(a.Binary, b.Binary)
}

func TestDecodeText(t *testing.T) {
	long := strings.Repeat("x", 255)
	for _, tc := range []struct {
		in   string
		want Message
	}{
		{`["3","3","room:1","phx_join",{}]`,
			Message{JoinRef: MakeRef("3"), Ref: MakeRef("3"), Topic: "room:1", Event: "phx_join", Payload: json.RawMessage(`{}`)}},
		{`[null,"6","phoenix","heartbeat",{}]`,
			Message{Ref: MakeRef("6"), Topic: "phoenix", Event: "heartbeat", Payload: json.RawMessage(`{}`)}},
		{" \n[ null , \"1\" ,\t\"t\" , \"e\" , [1, {\"a\" : 2}] ] \r\n",
			Message{Ref: MakeRef("1"), Topic: "t", Event: "e", Payload: json.RawMessage(`[1, {"a" : 2}]`)}},
		{`[null,null,"","",null]`, Message{Payload: json.RawMessage(`null`)}},
		{`["","",  "t","e", "s"]`, Message{JoinRef: MakeRef(""), Ref: MakeRef(""), Topic: "t", Event: "e", Payload: json.RawMessage(`"s"`)}},
		{`[null,null,"t","e",-1.5e3]`, Message{Topic: "t", Event: "e", Payload: json.RawMessage(`-1.5e3`)}},
		{`[null,null,"t\u00e9\n","e\"",true]`, Message{Topic: "té\n", Event: `e"`, Payload: json.RawMessage(`true`)}},
		{`["` + long + `","` + long + `","` + long + `","` + long + `",{}]`,
			Message{JoinRef: MakeRef(long), Ref: MakeRef(long), Topic: long, Event: long, Payload: json.RawMessage(`{}`)}},
	} {
		got, err := DecodeText([]byte(tc.in))
		if err != nil {
			t.Errorf("DecodeText(%s): %v", tc.in, err)
			continue
		}
		if !equalMessage(got, tc.want) || got.Payload == nil || got.Binary != nil || got.IsBinary {
			t.Errorf("DecodeText(%s) = %+v, want %+v", tc.in, got, tc.want)
		}
	}
}

func TestDecodeTextErrors(t *testing.T) {
	long := strings.Repeat("x", 256)
	deep := `[null,null,"t","e",` + strings.Repeat("[", 10001) + strings.Repeat("]", 10001) + `]`
	for _, tc := range []struct {
		in   string
		want error
	}{
		{``, ErrSyntax},
		{`   `, ErrSyntax},
		{`{}`, ErrNotArray},
		{`"x"`, ErrNotArray},
		{`null`, ErrNotArray},
		{`5`, ErrNotArray},
		{`[]`, ErrArity},
		{`[null]`, ErrArity},
		{`[null,null]`, ErrArity},
		{`[null,null,"t"]`, ErrArity},
		{`[null,null,"t","e"]`, ErrArity},
		{`[null,null,"t","e",{},{}]`, ErrArity},
		{`[null,null,"t","e",{},[1]]`, ErrArity},
		{`[1,null,"t","e",{}]`, ErrRefType},
		{`[null,3,"t","e",{}]`, ErrRefType},
		{`[true,null,"t","e",{}]`, ErrRefType},
		{`[{},null,"t","e",{}]`, ErrRefType},
		{`[null,["x"],"t","e",{}]`, ErrRefType},
		{`[null,null,1,"e",{}]`, ErrFieldType},
		{`[null,null,null,"e",{}]`, ErrFieldType},
		{`[null,null,"t",null,{}]`, ErrFieldType},
		{`[null,null,"t",{},{}]`, ErrFieldType},
		{`["` + long + `",null,"t","e",{}]`, ErrTooLong},
		{`[null,"` + long + `","t","e",{}]`, ErrTooLong},
		{`[null,null,"` + long + `","e",{}]`, ErrTooLong},
		{`[null,null,"t","` + long + `",{}]`, ErrTooLong},
		{`[null,null,"t","e",{}] x`, ErrTrailingData},
		{`[null,null,"t","e",{}][]`, ErrTrailingData},
		{`[null,null,"t","e",{}]]`, ErrTrailingData},
		{"[null,null,\"t\xff\",\"e\",{}]", ErrInvalidUTF8},
		{"[null,null,\"t\",\"e\",{\"a\":\"\xc3\"}]", ErrInvalidUTF8},
		{`[null,null,"t","e",{]`, ErrSyntax},
		{`[null,null,"t","e",`, ErrSyntax},
		{`[null,null,"t","e",{}`, ErrSyntax},
		{`[null null "t" "e" {}]`, ErrSyntax},
		{`[nul,null,"t","e",{}]`, ErrSyntax},
		{`[null,null,"t","e",{"a":1,}]`, ErrSyntax},
		{`[null,null,"t","e",01]`, ErrSyntax},
		{`[null,null,"t\x01","e",{}]`, ErrSyntax},
		{deep, ErrSyntax},
	} {
		_, err := DecodeText([]byte(tc.in))
		if !errors.Is(err, tc.want) {
			in := tc.in
			if len(in) > 80 {
				in = in[:80] + "..."
			}
			t.Errorf("DecodeText(%q) = %v, want %v", in, err, tc.want)
		}
	}
}

func TestDecodeDoesNotAlias(t *testing.T) {
	in := []byte(`["1","2","t","e",{"a":"b"}]`)
	m, err := DecodeText(in)
	if err != nil {
		t.Fatal(err)
	}
	for i := range in {
		in[i] = ' '
	}
	if string(m.Payload) != `{"a":"b"}` || m.Topic != "t" {
		t.Fatalf("text message changed with its input: %+v", m)
	}
	bin := []byte{0, 1, 1, 1, 1, '1', '2', 't', 'e', 9, 9}
	m, err = DecodeBinary(bin)
	if err != nil {
		t.Fatal(err)
	}
	for i := range bin {
		bin[i] = 0
	}
	if !bytes.Equal(m.Binary, []byte{9, 9}) || m.Topic != "t" || m.JoinRef != MakeRef("1") {
		t.Fatalf("binary message changed with its input: %+v", m)
	}
}

// TestDecodeAllocationBound checks that what a decode allocates stays
// within a small multiple of the frame, whatever the frame holds.
func TestDecodeAllocationBound(t *testing.T) {
	const size = 1 << 20
	payload := func(open, fill, close string) []byte {
		var b bytes.Buffer
		b.WriteString(`[null,null,"t","e",`)
		b.WriteString(open)
		for b.Len() < size-len(close)-len(fill)-1 {
			b.WriteString(fill)
		}
		b.WriteString(close)
		b.WriteString(`]`)
		return b.Bytes()
	}
	cases := map[string][]byte{
		"big string":  payload(`"`, `abcdefgh`, `"`),
		"many zeros":  payload(`[0`, `,0`, `]`),
		"many keys":   payload(`{"k":0`, `,"k":0`, `}`),
		"deep":        []byte(`[null,null,"t","e",` + strings.Repeat("[", 9999) + strings.Repeat("]", 9999) + `]`),
		"long topic":  []byte(`[null,null,"` + strings.Repeat("t", size) + `","e",{}]`),
		"many elems":  payload(`0,`, `0,`, `0`),
		"binary push": append([]byte{0, 0, 0, 1, 1, 't', 'e'}, make([]byte, size)...),
	}
	for name, frame := range cases {
		decode := DecodeText
		if frame[0] == 0 {
			decode = DecodeBinary
		}
		var before, after runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&before)
		_, err := decode(frame)
		runtime.ReadMemStats(&after)
		alloc := after.TotalAlloc - before.TotalAlloc
		limit := uint64(2*len(frame) + 512<<10)
		t.Logf("%s: %d bytes, %v, allocated %d", name, len(frame), err, alloc)
		if alloc > limit {
			t.Errorf("%s: allocated %d bytes for a %d-byte frame (limit %d)", name, alloc, len(frame), limit)
		}
	}
}

func TestDecodeBinary(t *testing.T) {
	in := []byte{0, 1, 2, 6, 5, '3', '4', '2', 'r', 'o', 'o', 'm', ':', '1', 'e', 'v', 'e', 'n', 't', 0xde, 0xad, 0}
	m, err := DecodeBinary(in)
	if err != nil {
		t.Fatal(err)
	}
	want := Message{JoinRef: MakeRef("3"), Ref: MakeRef("42"), Topic: "room:1", Event: "event", Binary: []byte{0xde, 0xad, 0}, IsBinary: true}
	if !equalMessage(m, want) || m.Payload != nil {
		t.Fatalf("DecodeBinary = %+v, want %+v", m, want)
	}
	out, err := AppendMessage(nil, m)
	if err != nil || !bytes.Equal(out, in) {
		t.Fatalf("AppendMessage = %v, %v; want %v", out, err, in)
	}

	// Empty refs are null; an empty payload is an empty, non-nil slice.
	m, err = DecodeBinary([]byte{0, 0, 0, 1, 1, 't', 'e'})
	if err != nil || m.JoinRef.Valid || m.Ref.Valid || m.Binary == nil || len(m.Binary) != 0 {
		t.Fatalf("DecodeBinary of empty fields = %+v, %v", m, err)
	}
}

func TestDecodeBinaryErrors(t *testing.T) {
	for _, tc := range []struct {
		in   []byte
		want error
	}{
		{nil, ErrTruncated},
		{[]byte{0}, ErrTruncated},
		{[]byte{0, 0, 0, 0}, ErrTruncated},
		{[]byte{0, 1, 0, 0, 0}, ErrTruncated},
		{[]byte{0, 0, 0, 3, 0, 'a', 'b'}, ErrTruncated},
		{[]byte{0, 255, 255, 255, 255}, ErrTruncated},
		{[]byte{1, 0, 0, 0, 0}, ErrBinaryKind},
		{[]byte{2, 0, 0}, ErrBinaryKind},
		{[]byte{3}, ErrBinaryKind},
		{[]byte{255, 0, 0, 0, 0}, ErrBinaryKind},
		{[]byte{0, 1, 0, 0, 0, 0xff}, ErrInvalidUTF8},
		{[]byte{0, 0, 1, 0, 0, 0xc3}, ErrInvalidUTF8},
		{[]byte{0, 0, 0, 1, 0, 0x80}, ErrInvalidUTF8},
		{[]byte{0, 0, 0, 0, 2, 0xed, 0xa0}, ErrInvalidUTF8},
	} {
		if _, err := DecodeBinary(tc.in); !errors.Is(err, tc.want) {
			t.Errorf("DecodeBinary(%v) = %v, want %v", tc.in, err, tc.want)
		}
	}
}

func TestDecodeFrame(t *testing.T) {
	if m, err := Decode(Frame{Data: []byte(`[null,"1","phoenix","heartbeat",{}]`)}); err != nil || m.Event != EventHeartbeat {
		t.Fatalf("Decode text = %+v, %v", m, err)
	}
	if m, err := Decode(Frame{Data: []byte{0, 0, 0, 1, 1, 't', 'e', 7}, Binary: true}); err != nil || !m.IsBinary || m.Binary[0] != 7 {
		t.Fatalf("Decode binary = %+v, %v", m, err)
	}
}

// The expected frames are the examples of the protocol notes (phoenix
// 1.8.16), written out byte for byte.
func TestEncodeText(t *testing.T) {
	must := func(b []byte, err error) string {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
		return string(b)
	}
	jr := MakeRef("3")
	for _, tc := range []struct{ got, want string }{
		{string(AppendHeartbeatReply(nil, MakeRef("6"))),
			`[null,"6","phoenix","phx_reply",{"status":"ok","response":{}}]`},
		{must(AppendReply(nil, jr, jr, "room:1", StatusOK, json.RawMessage(`{"a":1}`))),
			`["3","3","room:1","phx_reply",{"status":"ok","response":{"a":1}}]`},
		{must(AppendReply(nil, jr, MakeRef("7"), "room:1", StatusError, nil)),
			`["3","7","room:1","phx_reply",{"status":"error","response":{}}]`},
		{must(AppendPush(nil, jr, "room:1", "new_msg", json.RawMessage(`{"body":"hi"}`))),
			`["3",null,"room:1","new_msg",{"body":"hi"}]`},
		{must(AppendBroadcast(nil, "room:1", "new_msg", json.RawMessage(`{"body":"hi"}`))),
			`[null,null,"room:1","new_msg",{"body":"hi"}]`},
		{must(AppendBroadcast(nil, "room:1", "tick", json.RawMessage(`[1, 2]`))),
			`[null,null,"room:1","tick",[1, 2]]`},
		{string(AppendClose(nil, jr, "room:1")),
			`["3","3","room:1","phx_close",{}]`},
		{string(AppendError(nil, jr, "room:1", ReasonChannelCrash)),
			`["3","3","room:1","phx_error",{"reason":"channel_crash"}]`},
		{string(appendErrorReply(nil, jr, MakeRef("9"), "room:2", ReasonUnmatchedTopic)),
			`["3","9","room:2","phx_reply",{"status":"error","response":{"reason":"unmatched topic"}}]`},
		{must(AppendMessage(nil, Message{JoinRef: jr, Ref: jr, Topic: "room:1", Event: "phx_join", Payload: json.RawMessage(`{"token":"x"}`)})),
			`["3","3","room:1","phx_join",{"token":"x"}]`},
		{must(AppendMessage(nil, Message{Ref: MakeRef("6"), Topic: "phoenix", Event: "heartbeat"})),
			`[null,"6","phoenix","heartbeat",{}]`},
	} {
		if tc.got != tc.want {
			t.Errorf("got  %s\nwant %s", tc.got, tc.want)
		}
	}

	// Appending keeps what dst holds.
	b := AppendClose([]byte("x"), jr, "t")
	if string(b) != `x["3","3","t","phx_close",{}]` {
		t.Errorf("append to non-empty dst = %s", b)
	}
}

func TestAppendString(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{``, `""`},
		{`room:1`, `"room:1"`},
		{"a\"b\\c", `"a\"b\\c"`},
		{"\n\r\t\x00\x1f\x7f", `"\n\r\t\u0000\u001f` + "\x7f" + `"`},
		{"<&>é€😀", `"<&>é€😀"`},
		{"\u2028\u2029", `"\u2028\u2029"`},
		{"a\xffb", `"a\ufffdb"`},
	} {
		got := string(appendString(nil, tc.in))
		if got != tc.want {
			t.Errorf("appendString(%q) = %s, want %s", tc.in, got, tc.want)
		}
		var back string
		if err := json.Unmarshal([]byte(got), &back); err != nil {
			t.Errorf("appendString(%q) = %s: not JSON: %v", tc.in, got, err)
		}
	}
}

func TestEncodeErrors(t *testing.T) {
	long := strings.Repeat("x", 256)
	dst := []byte("keep")
	check := func(name string, got []byte, err, want error) {
		t.Helper()
		if !errors.Is(err, want) {
			t.Errorf("%s: err = %v, want %v", name, err, want)
		}
		if string(got) != "keep" {
			t.Errorf("%s: dst changed to %q", name, got)
		}
	}
	b, err := AppendReply(dst, Ref{}, Ref{}, "t", "ok", json.RawMessage(`{"a":`))
	check("reply bad json", b, err, ErrInvalidJSON)
	b, err = AppendPush(dst, Ref{}, "t", "e", json.RawMessage(`1],["x"`))
	check("push injection", b, err, ErrInvalidJSON)
	b, err = AppendBroadcast(dst, "t", "e", json.RawMessage("\"\xff\""))
	check("broadcast bad utf-8 payload", b, err, ErrInvalidJSON)
	b, err = AppendPush(dst, Ref{}, long, "e", nil)
	check("push long topic", b, err, ErrTooLong)
	b, err = AppendReply(dst, Ref{}, Ref{}, "t", long, nil)
	check("reply long status", b, err, ErrTooLong)
	b, err = AppendReply(dst, MakeRef(long), Ref{}, "t", "ok", nil)
	check("reply long join_ref", b, err, ErrTooLong)
	b, err = AppendPush(dst, Ref{}, "t", "e\xff", nil)
	check("push bad utf-8 event", b, err, ErrInvalidUTF8)
	b, err = AppendBinaryPush(dst, Ref{}, "t", long, nil)
	check("binary push long event", b, err, ErrTooLong)
	b, err = AppendBinaryReply(dst, Ref{}, MakeRef(long), "t", "ok", nil)
	check("binary reply long ref", b, err, ErrTooLong)
	b, err = AppendBinaryReply(dst, Ref{}, Ref{}, "t", long, nil)
	check("binary reply long status", b, err, ErrTooLong)
	b, err = AppendBinaryBroadcast(dst, long, "e", nil)
	check("binary broadcast long topic", b, err, ErrTooLong)
	b, err = AppendBinaryBroadcast(dst, "t\xff", "e", nil)
	check("binary broadcast bad topic", b, err, ErrInvalidUTF8)
	b, err = AppendMessage(dst, Message{Topic: "t", Event: "e", Payload: json.RawMessage(`nope`)})
	check("message bad json", b, err, ErrInvalidJSON)
	b, err = AppendMessage(dst, Message{Topic: long, Event: "e", IsBinary: true})
	check("binary message long topic", b, err, ErrTooLong)
}

func TestEncodeBinary(t *testing.T) {
	cat := func(parts ...any) []byte {
		var b []byte
		for _, p := range parts {
			switch p := p.(type) {
			case int:
				b = append(b, byte(p))
			case string:
				b = append(b, p...)
			case []byte:
				b = append(b, p...)
			}
		}
		return b
	}
	data := []byte{1, 2, 3}
	must := func(b []byte, err error) []byte {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	for _, tc := range []struct {
		name      string
		got, want []byte
	}{
		{"reply", must(AppendBinaryReply(nil, MakeRef("3"), MakeRef("42"), "room:1", "ok", data)),
			cat(1, 1, 2, 6, 2, "3", "42", "room:1", "ok", data)},
		{"reply null refs", must(AppendBinaryReply(nil, Ref{}, Ref{}, "t", "error", nil)),
			cat(1, 0, 0, 1, 5, "t", "error")},
		{"push", must(AppendBinaryPush(nil, MakeRef("3"), "room:1", "ev", data)),
			cat(0, 1, 6, 2, "3", "room:1", "ev", data)},
		{"broadcast", must(AppendBinaryBroadcast(nil, "room:1", "ev", data)),
			cat(2, 6, 2, "room:1", "ev", data)},
		{"client push", must(AppendMessage(nil, Message{JoinRef: MakeRef("3"), Ref: MakeRef("4"), Topic: "room:1", Event: "ev", Binary: data, IsBinary: true})),
			cat(0, 1, 1, 6, 2, "3", "4", "room:1", "ev", data)},
		{"255-byte fields", must(AppendBinaryBroadcast(nil, strings.Repeat("t", 255), strings.Repeat("e", 255), nil)),
			cat(2, 255, 255, strings.Repeat("t", 255), strings.Repeat("e", 255))},
	} {
		if !bytes.Equal(tc.got, tc.want) {
			t.Errorf("%s:\ngot  %v\nwant %v", tc.name, tc.got, tc.want)
		}
	}
}

// TestRoundTrip encodes valid messages the way a client does and decodes
// them back.
func TestRoundTrip(t *testing.T) {
	for _, m := range []Message{
		{JoinRef: MakeRef("1"), Ref: MakeRef("1"), Topic: "room:lobby", Event: "phx_join", Payload: json.RawMessage(`{"user":"ann"}`)},
		{Ref: MakeRef("2"), Topic: "phoenix", Event: "heartbeat", Payload: json.RawMessage(`{}`)},
		{JoinRef: MakeRef(""), Ref: Ref{}, Topic: "", Event: "", Payload: json.RawMessage(`null`)},
		{JoinRef: MakeRef("é\"\n"), Ref: MakeRef("\u2028"), Topic: "t\\", Event: "<>", Payload: json.RawMessage(`[ 1 , "x" ]`)},
	} {
		b, err := AppendMessage(nil, m)
		if err != nil {
			t.Fatal(err)
		}
		got, err := DecodeText(b)
		if err != nil || !equalMessage(got, m) {
			t.Errorf("text round trip of %+v: %s -> %+v, %v", m, b, got, err)
		}
		m.IsBinary, m.Binary, m.Payload = true, []byte(m.Payload), nil
		if m.JoinRef.Value == "" {
			m.JoinRef = Ref{} // the binary layout reads an empty ref as null
		}
		b, err = AppendMessage(nil, m)
		if err != nil {
			t.Fatal(err)
		}
		got, err = DecodeBinary(b)
		if err != nil || !equalMessage(got, m) {
			t.Errorf("binary round trip of %+v: %v -> %+v, %v", m, b, got, err)
		}
	}
}

func TestRefString(t *testing.T) {
	if s := (Ref{}).String(); s != "null" {
		t.Errorf("null ref = %s", s)
	}
	if s := MakeRef(`a"b`).String(); s != `"a\"b"` {
		t.Errorf("ref = %s", s)
	}
}
