package phoenix

import (
	"encoding/json"
	"errors"
	"testing"
)

func TestPresenceShapes(t *testing.T) {
	p := NewPresence("r")
	check := func(what string, got json.RawMessage, want string) {
		t.Helper()
		if string(got) != want {
			t.Fatalf("%s:\ngot  %s\nwant %s", what, got, want)
		}
	}
	track := func(socket uint64, key, meta string) Diff {
		t.Helper()
		var raw json.RawMessage
		if meta != "" {
			raw = json.RawMessage(meta)
		}
		d, err := p.Track(socket, key, raw)
		if err != nil {
			t.Fatal(err)
		}
		return d
	}
	check("empty state", p.State(), `{}`)

	check("first track", track(1, "alice", `{"device":"phone"}`).JSON(),
		`{"joins":{"alice":{"metas":[{"phx_ref":"r1","device":"phone"}]}},"leaves":{}}`)
	check("second socket, same key", track(2, "alice", ` { "device" : "laptop", "at" : [1, 2] } `).JSON(),
		`{"joins":{"alice":{"metas":[{"phx_ref":"r2","device":"laptop","at":[1,2]}]}},"leaves":{}}`)
	check("no meta", track(1, "bob", "").JSON(),
		`{"joins":{"bob":{"metas":[{"phx_ref":"r3"}]}},"leaves":{}}`)
	check("state", p.State(),
		`{"alice":{"metas":[{"phx_ref":"r1","device":"phone"},{"phx_ref":"r2","device":"laptop","at":[1,2]}]},`+
			`"bob":{"metas":[{"phx_ref":"r3"}]}}`)

	// An update: new ref, the old one as phx_ref_prev, and the client's own
	// phx_ref fields ignored.
	check("update", track(1, "alice", `{"device":"phone","typing":true,"phx_ref":"evil","phx_ref_prev":"x"}`).JSON(),
		`{"joins":{"alice":{"metas":[{"phx_ref":"r4","phx_ref_prev":"r1","device":"phone","typing":true}]}},`+
			`"leaves":{"alice":{"metas":[{"phx_ref":"r1","device":"phone"}]}}}`)
	check("state after update", p.State(),
		`{"alice":{"metas":[{"phx_ref":"r2","device":"laptop","at":[1,2]},{"phx_ref":"r4","phx_ref_prev":"r1","device":"phone","typing":true}]},`+
			`"bob":{"metas":[{"phx_ref":"r3"}]}}`)

	check("untrack all of socket 1", p.UntrackAll(1).JSON(),
		`{"joins":{},"leaves":{"alice":{"metas":[{"phx_ref":"r4","phx_ref_prev":"r1","device":"phone","typing":true}]},`+
			`"bob":{"metas":[{"phx_ref":"r3"}]}}}`)
	if d := p.UntrackAll(1); !d.Empty() {
		t.Fatalf("second UntrackAll: %s", d.JSON())
	}
	if d := p.Untrack(2, "nobody"); !d.Empty() {
		t.Fatalf("Untrack of a key not tracked: %s", d.JSON())
	}
	if p.Len() != 1 {
		t.Fatalf("Len = %d", p.Len())
	}
	check("untrack", p.Untrack(2, "alice").JSON(),
		`{"joins":{},"leaves":{"alice":{"metas":[{"phx_ref":"r2","device":"laptop","at":[1,2]}]}}}`)
	check("empty again", p.State(), `{}`)
	if p.Len() != 0 || len(p.sockets) != 0 {
		t.Fatalf("leftovers: %d keys, %d sockets", p.Len(), len(p.sockets))
	}
	if d := (Diff{}); !d.Empty() || string(d.JSON()) != `{"joins":{},"leaves":{}}` {
		t.Fatalf("empty diff: %s", d.JSON())
	}

	// Refs keep counting: never reused within a Presence.
	check("after emptying", track(3, "c\"d", `{}`).JSON(),
		`{"joins":{"c\"d":{"metas":[{"phx_ref":"r5"}]}},"leaves":{}}`)
}

func TestPresenceErrors(t *testing.T) {
	p := NewPresence("x.")
	for _, meta := range []string{`[1]`, `"s"`, `1`, `null`, `{"a":`, `{"a":1} x`, `{"a":1}{}`, `{a:1}`, "{\"a\":\"\xff\"}"} {
		if _, err := p.Track(1, "k", json.RawMessage(meta)); !errors.Is(err, ErrPresenceMeta) {
			t.Errorf("Track with meta %q: %v", meta, err)
		}
	}
	if _, err := p.Track(1, "k\xff", nil); !errors.Is(err, ErrPresenceKey) {
		t.Errorf("Track with a bad key: %v", err)
	}
	if p.Len() != 0 || p.seq != 0 {
		t.Fatalf("failed tracks left state: %d keys, seq %d", p.Len(), p.seq)
	}
}

func TestPresenceManySockets(t *testing.T) {
	p := NewPresence("n")
	for s := uint64(0); s < 100; s++ {
		for _, k := range []string{"a", "b", "c"} {
			if _, err := p.Track(s, k, json.RawMessage(`{"s":1}`)); err != nil {
				t.Fatal(err)
			}
		}
	}
	for s := uint64(0); s < 100; s++ {
		d := p.UntrackAll(s)
		if len(d.Leaves) != 3 || len(d.Joins) != 0 {
			t.Fatalf("UntrackAll(%d): %s", s, d.JSON())
		}
	}
	if p.Len() != 0 || string(p.State()) != `{}` {
		t.Fatalf("state left: %s", p.State())
	}
}
