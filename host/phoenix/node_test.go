package phoenix

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"testing"
	"time"

	"github.com/wasmkeep/wasmkeep/internal/testenv"
)

// phoenixJS returns the directory of the phoenix npm client that `npm ci`
// installs in test/phoenix, whose package-lock.json pins it (1.8.16): the
// same client host/node's scenarios run. Without node the test skips, and
// under CI=1 fails, as it does without the package.
func phoenixJS(t *testing.T) string {
	t.Helper()
	testenv.Tool(t, "node")
	return filepath.Join(testenv.NPMPackages(t, "test/phoenix", "phoenix"), "node_modules", "phoenix")
}

// runNode runs script with the phoenix package's path as its argument,
// input as its standard input, and decodes its standard output as JSON.
func runNode(t *testing.T, pkg, script string, input, output any) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "script.js")
	if err := os.WriteFile(path, []byte(script), 0o644); err != nil {
		t.Fatal(err)
	}
	in, err := json.Marshal(input)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "node", path, pkg)
	cmd.Stdin = bytes.NewReader(in)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("node: %v\n%s", err, stderr.Bytes())
	}
	if err := json.Unmarshal(out, output); err != nil {
		t.Fatalf("node output %s: %v", out, err)
	}
}

// The scripts read JSON on stdin and print JSON; ArrayBuffers travel as
// {"$b64": ...}.
const serializerScript = `
const {Serializer} = require(process.argv[2]);
const input = JSON.parse(require("fs").readFileSync(0, "utf8"));
const toB64 = (ab) => Buffer.from(ab).toString("base64");
const fromB64 = (s) => { const b = Buffer.from(s, "base64"); return b.buffer.slice(b.byteOffset, b.byteOffset + b.length); };
const plain = (v) => JSON.parse(JSON.stringify(v, (k, x) => x instanceof ArrayBuffer ? {"$b64": toB64(x)} : x));
const decoded = input.decode.map(f => {
  let out;
  Serializer.decode(f.binary ? fromB64(f.b64) : Buffer.from(f.b64, "base64").toString("utf8"), m => { out = m; });
  return plain(out);
});
const encoded = input.encode.map(m => {
  const msg = {join_ref: m.join_ref, ref: m.ref, topic: m.topic, event: m.event,
               payload: m.b64 !== undefined ? fromB64(m.b64) : m.payload};
  let out;
  Serializer.encode(msg, r => { out = r; });
  return typeof out === "string" ? {binary: false, b64: Buffer.from(out, "utf8").toString("base64")}
                                 : {binary: true, b64: toB64(out)};
});
process.stdout.write(JSON.stringify({decoded, encoded}));
`

const presenceScript = `
const {Presence} = require(process.argv[2]);
const input = JSON.parse(require("fs").readFileSync(0, "utf8"));
const list = (state) => Presence.list(state, (key, p) => [key, p.metas]);
const results = input.scenarios.map(sc => {
  if (sc.channel) {
    // A Presence on a stand-in channel: diffs that come before the state
    // wait for it.
    const handlers = {};
    const channel = {on: (ev, cb) => { handlers[ev] = cb; }, joinRef: () => "1"};
    const p = new Presence(channel);
    for (const s of sc.steps) handlers[s.kind === "state" ? "presence_state" : "presence_diff"](s.payload);
    return p.list((key, pres) => [key, pres.metas]);
  }
  let state = {};
  for (const s of sc.steps) {
    state = s.kind === "state" ? Presence.syncState(state, s.payload) : Presence.syncDiff(state, s.payload);
  }
  return list(state);
});
process.stdout.write(JSON.stringify(results));
`

// TestPhoenixJS runs the real phoenix npm client on this package's frames
// and presence payloads.
func TestPhoenixJS(t *testing.T) {
	pkg := phoenixJS(t)
	t.Run("serializer", func(t *testing.T) { testSerializerJS(t, pkg) })
	t.Run("presence", func(t *testing.T) { testPresenceJS(t, pkg) })
}

type jsFrame struct {
	Binary bool   `json:"binary"`
	B64    string `json:"b64"`
}

func testSerializerJS(t *testing.T, pkg string) {
	must := func(b []byte, err error) []byte {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	b64 := base64.StdEncoding.EncodeToString
	jr := MakeRef("3")
	blob := []byte{0, 1, 2, 255}

	// Server frames, and what phoenix.js must make of them.
	frames := []struct {
		data   []byte
		binary bool
		want   string
	}{
		{AppendHeartbeatReply(nil, MakeRef("6")), false,
			`{"join_ref":null,"ref":"6","topic":"phoenix","event":"phx_reply","payload":{"status":"ok","response":{}}}`},
		{must(AppendReply(nil, jr, MakeRef("4"), "room:ü", StatusOK, json.RawMessage(`{"a":[1,"\u2028"]}`))), false,
			`{"join_ref":"3","ref":"4","topic":"room:ü","event":"phx_reply","payload":{"status":"ok","response":{"a":[1,"\u2028"]}}}`},
		{must(AppendPush(nil, jr, "room:1", "new_msg", json.RawMessage(`{"body":"a\"b\\c\n<>&"}`))), false,
			`{"join_ref":"3","ref":null,"topic":"room:1","event":"new_msg","payload":{"body":"a\"b\\c\n<>&"}}`},
		{must(AppendBroadcast(nil, "room:1", "tick", nil)), false,
			`{"join_ref":null,"ref":null,"topic":"room:1","event":"tick","payload":{}}`},
		{AppendClose(nil, jr, "room:1"), false,
			`{"join_ref":"3","ref":"3","topic":"room:1","event":"phx_close","payload":{}}`},
		{AppendError(nil, jr, "room:1", ReasonChannelCrash), false,
			`{"join_ref":"3","ref":"3","topic":"room:1","event":"phx_error","payload":{"reason":"channel_crash"}}`},
		{must(AppendBinaryReply(nil, jr, MakeRef("5"), "room:ü", StatusError, blob)), true,
			`{"join_ref":"3","ref":"5","topic":"room:ü","event":"phx_reply","payload":{"status":"error","response":{"$b64":"` + b64(blob) + `"}}}`},
		{must(AppendBinaryPush(nil, jr, "room:1", "blob", blob)), true,
			`{"join_ref":"3","ref":null,"topic":"room:1","event":"blob","payload":{"$b64":"` + b64(blob) + `"}}`},
		{must(AppendBinaryBroadcast(nil, "room:1", "blob", nil)), true,
			`{"join_ref":null,"ref":null,"topic":"room:1","event":"blob","payload":{"$b64":""}}`},
	}

	// Client messages phoenix.js encodes, which Decode must read back.
	clients := []Message{
		{JoinRef: jr, Ref: jr, Topic: "room:1", Event: EventJoin, Payload: json.RawMessage(`{"token":"t"}`)},
		{Ref: MakeRef("6"), Topic: TopicPhoenix, Event: EventHeartbeat, Payload: json.RawMessage(`{}`)},
		{JoinRef: jr, Ref: MakeRef("7"), Topic: "room:ü", Event: "new_msg", Payload: json.RawMessage(`{"body":"hé\n"}`)},
		{JoinRef: jr, Ref: MakeRef("8"), Topic: "room:ü", Event: "blob", Binary: blob, IsBinary: true},
		{JoinRef: jr, Ref: MakeRef("9"), Topic: "room:1", Event: "empty", Binary: []byte{}, IsBinary: true},
	}

	type decodeIn struct {
		B64    string `json:"b64"`
		Binary bool   `json:"binary"`
	}
	type encodeIn struct {
		JoinRef *string         `json:"join_ref"`
		Ref     *string         `json:"ref"`
		Topic   string          `json:"topic"`
		Event   string          `json:"event"`
		Payload json.RawMessage `json:"payload,omitempty"`
		B64     *string         `json:"b64,omitempty"`
	}
	ptr := func(r Ref) *string {
		if !r.Valid {
			return nil
		}
		return &r.Value
	}
	var input struct {
		Decode []decodeIn `json:"decode"`
		Encode []encodeIn `json:"encode"`
	}
	for _, f := range frames {
		input.Decode = append(input.Decode, decodeIn{B64: b64(f.data), Binary: f.binary})
	}
	for _, m := range clients {
		e := encodeIn{JoinRef: ptr(m.JoinRef), Ref: ptr(m.Ref), Topic: m.Topic, Event: m.Event, Payload: m.Payload}
		if m.IsBinary {
			s := b64(m.Binary)
			e.B64 = &s
		}
		input.Encode = append(input.Encode, e)
	}
	var output struct {
		Decoded []any     `json:"decoded"`
		Encoded []jsFrame `json:"encoded"`
	}
	runNode(t, pkg, serializerScript, input, &output)

	if len(output.Decoded) != len(frames) || len(output.Encoded) != len(clients) {
		t.Fatalf("node answered %d decodes and %d encodes", len(output.Decoded), len(output.Encoded))
	}
	for i, f := range frames {
		var want any
		if err := json.Unmarshal([]byte(f.want), &want); err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(output.Decoded[i], want) {
			got, _ := json.Marshal(output.Decoded[i])
			t.Errorf("phoenix.js decodes %q as\n  %s\nwant\n  %s", f.data, got, f.want)
		}
	}
	for i, want := range clients {
		data, err := base64.StdEncoding.DecodeString(output.Encoded[i].B64)
		if err != nil {
			t.Fatal(err)
		}
		if output.Encoded[i].Binary != want.IsBinary {
			t.Errorf("phoenix.js encoded %+v with binary=%v", want, output.Encoded[i].Binary)
		}
		got, err := Decode(Frame{Data: data, Binary: output.Encoded[i].Binary})
		if err != nil || !equalMessage(got, want) {
			t.Errorf("Decode(%q) of phoenix.js's encoding = %+v, %v; want %+v", data, got, err, want)
		}
		// And the client layout this package writes is byte for byte the
		// one phoenix.js writes.
		if mine, err := AppendMessage(nil, want); err != nil || !bytes.Equal(mine, data) {
			t.Errorf("AppendMessage(%+v) = %q, %v; phoenix.js writes %q", want, mine, err, data)
		}
	}
}

type presenceStep struct {
	Kind    string          `json:"kind"` // "state" or "diff"
	Payload json.RawMessage `json:"payload"`
}

type presenceScenario struct {
	Channel bool           `json:"channel"`
	Steps   []presenceStep `json:"steps"`
}

func testPresenceJS(t *testing.T, pkg string) {
	p := NewPresence("node1.7.")
	var (
		diffs  []json.RawMessage // diffs[i] is the diff of op i
		states []json.RawMessage // states[i] is the state after op i
	)
	op := func(d Diff, err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
		diffs = append(diffs, d.JSON())
		states = append(states, p.State())
	}
	track := func(s uint64, key, meta string) { op(p.Track(s, key, json.RawMessage(meta))) }
	track(1, "alice", `{"device":"phone"}`)
	track(2, "alice", `{"device":"laptop"}`)
	track(1, "bob", `{}`)
	track(3, "42", `{"n":1}`) // JavaScript lists integer-like keys first
	track(1, "alice", `{"device":"phone","typing":true}`)
	track(4, "__proto__", `{"x":1}`) // phoenix.js keeps presences in null-prototype objects
	op(p.Untrack(2, "alice"), nil)
	track(2, "alice", `{"device":"laptop","v":2}`)
	track(5, "carol", `{"v":1}`)
	op(p.UntrackAll(1), nil)
	track(5, "carol", `{"v":2}`)
	track(3, "42", `{"n":2}`)
	track(6, "bob", `{"device":"tv"}`)
	final := states[len(states)-1]

	fromStart := presenceScenario{}
	for _, d := range diffs {
		fromStart.Steps = append(fromStart.Steps, presenceStep{"diff", d})
	}
	scenarios := []presenceScenario{fromStart}
	const mid = 4
	// Joins midway: the state, then the diffs after it.
	midway := presenceScenario{Steps: []presenceStep{{"state", states[mid]}}}
	for _, d := range diffs[mid+1:] {
		midway.Steps = append(midway.Steps, presenceStep{"diff", d})
	}
	scenarios = append(scenarios, midway)
	// Reconnects: holds an old list, then receives the fresh state.
	scenarios = append(scenarios, presenceScenario{Steps: []presenceStep{{"state", states[mid]}, {"state", final}}})
	scenarios = append(scenarios, presenceScenario{Steps: []presenceStep{{"state", states[1]}, {"state", states[6]}, {"state", final}}})
	// A Presence on a channel, with a diff racing ahead of the state that
	// already holds it.
	racing := presenceScenario{Channel: true, Steps: []presenceStep{{"diff", diffs[mid]}, {"state", states[mid]}}}
	for _, d := range diffs[mid+1:] {
		racing.Steps = append(racing.Steps, presenceStep{"diff", d})
	}
	scenarios = append(scenarios, racing)
	// Only the final state.
	scenarios = append(scenarios, presenceScenario{Channel: true, Steps: []presenceStep{{"state", final}}})

	var results [][][2]any
	runNode(t, pkg, presenceScript, map[string]any{"scenarios": scenarios}, &results)
	if len(results) != len(scenarios) {
		t.Fatalf("node answered %d scenarios of %d", len(results), len(scenarios))
	}

	// What every client must end with: the final state, key by key, metas
	// in order.
	var want map[string]struct {
		Metas []any `json:"metas"`
	}
	if err := json.Unmarshal(final, &want); err != nil {
		t.Fatal(err)
	}
	if len(want) != 5 {
		t.Fatalf("final state has %d keys: %s", len(want), final)
	}
	for i, res := range results {
		got := map[string][]any{}
		for _, kv := range res {
			got[kv[0].(string)] = kv[1].([]any)
		}
		ok := len(got) == len(want)
		for k, w := range want {
			ok = ok && reflect.DeepEqual(got[k], w.Metas)
		}
		if !ok {
			g, _ := json.Marshal(res)
			t.Errorf("scenario %d: phoenix.js lists\n  %s\nwant (as a map)\n  %s", i, g, final)
		}
	}
}
