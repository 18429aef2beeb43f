package abi

import (
	"bytes"
	"errors"
	"reflect"
	"testing"
)

func TestRecordsRoundTrip(t *testing.T) {
	req := Request{Method: "POST", Path: "/x", Query: "a=1", Headers: []Header{{"A", "b"}, {"C", ""}}, Body: []byte("body")}
	if got, err := DecodeRequest(AppendRequest(nil, &req)); err != nil || !reflect.DeepEqual(got, req) {
		t.Errorf("request: %+v %v", got, err)
	}
	resp := Response{Status: 201, Headers: []Header{{"X", "y"}}, Body: []byte{}}
	if got, err := DecodeResponse(AppendResponse(nil, &resp)); err != nil || got.Status != 201 || !reflect.DeepEqual(got.Headers, resp.Headers) {
		t.Errorf("response: %+v %v", got, err)
	}
	open := SocketOpen{Path: "/", Query: "q", Remote: "1.2.3.4:5"}
	if got, err := DecodeSocketOpen(AppendSocketOpen(nil, &open)); err != nil || !reflect.DeepEqual(got, open) {
		t.Errorf("open: %+v %v", got, err)
	}
	join := Join{Topic: "room:1", Payload: []byte(`{"a":1}`)}
	if got, err := DecodeJoin(AppendJoin(nil, &join)); err != nil || !reflect.DeepEqual(got, join) {
		t.Errorf("join: %+v %v", got, err)
	}
	for _, m := range []ChannelMessage{
		{Topic: "t", Event: "e", Payload: []byte(`{}`)},
		{Topic: "t", Event: "e", Binary: true, Payload: []byte{0, 1, 2}},
	} {
		if got, err := DecodeChannelMessage(AppendChannelMessage(nil, &m)); err != nil || !reflect.DeepEqual(got, m) {
			t.Errorf("message: %+v %v", got, err)
		}
	}
	leave := Leave{Topic: "t", Reason: LeaveClient}
	if got, err := DecodeLeave(AppendLeave(nil, &leave)); err != nil || got != leave {
		t.Errorf("leave: %+v %v", got, err)
	}
	p := Presence{Topic: "t", Key: "ada", Meta: []byte(`{"x":1}`)}
	if got, err := DecodePresence(AppendPresence(nil, &p)); err != nil || !reflect.DeepEqual(got, p) {
		t.Errorf("presence: %+v %v", got, err)
	}
	sf := StartFrom{From: "sha256:00", State: []byte("history")}
	if got, err := DecodeStartFrom(AppendStartFrom(nil, &sf)); err != nil || !reflect.DeepEqual(got, sf) {
		t.Errorf("start from: %+v %v", got, err)
	}
	if _, err := DecodeStartFrom(AppendStartFrom(nil, &sf)[:10]); !errors.Is(err, ErrMalformed) {
		t.Errorf("truncated start from: %v", err)
	}
	f := Fetch{Method: "POST", URL: "https://api.example.com/x?y=1", Headers: []Header{{"Content-Type", "text/plain"}}, Body: []byte("hi")}
	if got, err := DecodeFetch(AppendFetch(nil, &f)); err != nil || !reflect.DeepEqual(got, f) {
		t.Errorf("fetch: %+v %v", got, err)
	}
	if _, err := DecodeFetch(AppendFetch(nil, &f)[:20]); !errors.Is(err, ErrMalformed) {
		t.Errorf("truncated fetch: %v", err)
	}
	if got, err := DecodeTopic(AppendTopic(nil, "t")); err != nil || got != "t" {
		t.Errorf("topic: %q %v", got, err)
	}
}

func TestDecodersRejectDamage(t *testing.T) {
	rec := AppendChannelMessage(nil, &ChannelMessage{Topic: "t", Event: "e", Payload: []byte("p")})
	for n := range len(rec) {
		if _, err := DecodeChannelMessage(rec[:n]); !errors.Is(err, ErrMalformed) {
			t.Fatalf("truncated to %d: %v", n, err)
		}
	}
	if _, err := DecodeChannelMessage(append(bytes.Clone(rec), 0)); !errors.Is(err, ErrMalformed) {
		t.Fatal("trailing byte accepted")
	}
	bad := bytes.Clone(rec)
	bad[4+1+4+1] = 7 // the binary flag
	if _, err := DecodeChannelMessage(bad); !errors.Is(err, ErrMalformed) {
		t.Fatal("flag 7 accepted")
	}
	// A header count that the input cannot hold is refused before
	// allocating for it.
	if _, err := DecodeRequest([]byte{0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 0, 0}); !errors.Is(err, ErrMalformed) {
		t.Fatal("huge header count accepted")
	}
}

func TestMessageBatch(t *testing.T) {
	msgs := []struct {
		kind int
		data string
	}{{MessageText, "one"}, {MessageBinary, ""}, {MessageText, "three ✓"}}
	var b []byte
	for _, m := range msgs {
		b = AppendBatchedMessage(b, m.kind, []byte(m.data))
	}
	rest := b
	for i, want := range msgs {
		kind, data, next, ok, err := NextBatchedMessage(rest)
		if err != nil || !ok || kind != want.kind || string(data) != want.data {
			t.Fatalf("message %d: %d %q %v %v", i, kind, data, ok, err)
		}
		rest = next
	}
	if _, _, _, ok, err := NextBatchedMessage(rest); ok || err != nil {
		t.Fatalf("after the last message: %v %v", ok, err)
	}
	for _, bad := range [][]byte{b[:len(b)-1], {3, 0, 0, 0, 0}, {MessageText, 9, 0, 0, 0, 'x'}} {
		if _, _, _, _, err := NextBatchedMessage(bad); err == nil {
			// A truncated batch fails on its last message.
			for rest := bad; err == nil; {
				var ok bool
				if _, _, rest, ok, err = NextBatchedMessage(rest); !ok && err == nil {
					t.Fatalf("malformed batch %v accepted", bad)
				}
			}
		}
	}
}

func FuzzRecords(f *testing.F) {
	f.Add(AppendRequest(nil, &Request{Method: "GET", Path: "/", Headers: []Header{{"a", "b"}}}))
	f.Add(AppendChannelMessage(nil, &ChannelMessage{Topic: "t", Event: "e", Payload: []byte("{}")}))
	f.Add(AppendPresence(nil, &Presence{Topic: "t", Key: "k", Meta: []byte("{}")}))
	f.Add(AppendBatchedMessage(AppendBatchedMessage(nil, MessageText, []byte("hi")), MessageBinary, nil))
	f.Fuzz(func(t *testing.T, b []byte) {
		var batch []byte
		for rest := b; ; {
			kind, data, next, ok, err := NextBatchedMessage(rest)
			if err != nil {
				batch = nil
				break
			}
			if !ok {
				if !bytes.Equal(batch, b) {
					t.Fatal("message batch")
				}
				break
			}
			batch = AppendBatchedMessage(batch, kind, data)
			rest = next
		}
		// Whatever decodes re-encodes to the same bytes.
		if r, err := DecodeRequest(b); err == nil && !bytes.Equal(AppendRequest(nil, &r), b) {
			t.Fatal("request")
		}
		if r, err := DecodeResponse(b); err == nil && !bytes.Equal(AppendResponse(nil, &r), b) {
			t.Fatal("response")
		}
		if r, err := DecodeSocketOpen(b); err == nil && !bytes.Equal(AppendSocketOpen(nil, &r), b) {
			t.Fatal("open")
		}
		if r, err := DecodeChannelMessage(b); err == nil && !bytes.Equal(AppendChannelMessage(nil, &r), b) {
			t.Fatal("channel message")
		}
		if r, err := DecodePresence(b); err == nil && !bytes.Equal(AppendPresence(nil, &r), b) {
			t.Fatal("presence")
		}
		if r, err := DecodeJoin(b); err == nil && !bytes.Equal(AppendJoin(nil, &r), b) {
			t.Fatal("join")
		}
	})
}
