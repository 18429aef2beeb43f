package node

import (
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/wasmkeep/wasmkeep/host/engine"
	"github.com/wasmkeep/wasmkeep/host/rooms"
)

// callURL is the request that makes room from (of class caller) call to
// with payload.
func callURL(n *Node, from, to string) string {
	return n.URL() + "/actor/caller/" + from + "/call?to=" + to
}

// TestCallsBetweenRooms: a room calls another and gets its reply; the
// callee's state changes and stays its own; nested calls carry on.
func TestCallsBetweenRooms(t *testing.T) {
	n := startNode(t, Config{})
	putClass(t, n, "caller", "./testdata/guests/caller")
	if got := expect(t, 200, "POST", callURL(n, "a", "caller/b"), []byte("echo:hello")); got != "hello" {
		t.Fatalf("echo reply %q", got)
	}
	for want := range []string{"1", "2", "3"} {
		got := expect(t, 200, "POST", callURL(n, "a", "caller/b"), []byte("count"))
		if got != []string{"1", "2", "3"}[want] {
			t.Fatalf("count reply %q, want %d", got, want+1)
		}
	}
	if got := expect(t, 200, "GET", n.URL()+"/actor/caller/b/count", nil); got != "3" {
		t.Fatalf("b's count %q, want 3", got)
	}
	if got := expect(t, 200, "GET", n.URL()+"/actor/caller/a/count", nil); got != "0" {
		t.Fatalf("a's count %q, want 0: the calls ran in b", got)
	}
	// a → b → c: b's call carries on to c.
	if got := expect(t, 200, "POST", callURL(n, "a", "caller/b"), []byte("call:caller/c:echo:deep")); got != "deep" {
		t.Fatalf("nested reply %q", got)
	}
	if got := expect(t, 200, "POST", n.URL()+"/actor/caller/a/fan?to=caller&n=40", nil); got != "40" {
		t.Fatalf("fan-out sum %q, want 40 (forty rooms counted once each)", got)
	}
	if v := metric(t, n, `wasmkeep_room_calls_total{outcome="ok"}`); v < 45 {
		t.Fatalf("calls counted ok: %v, want at least 45", v)
	}
}

// TestCallErrorsAreTyped: each failure reaches the guest as its own
// status, with a message that says what happened.
func TestCallErrorsAreTyped(t *testing.T) {
	n := startNode(t, Config{
		Engine: engine.Config{EventTimeout: 2 * time.Second},
		Rooms:  rooms.Config{CallTimeout: 500 * time.Millisecond},
	})
	putClass(t, n, "caller", "./testdata/guests/caller")
	putClass(t, n, "echo", "./testdata/guests/echo")
	for _, c := range []struct{ to, payload, want string }{
		{"nope/x", "count", `not found: no class "nope"`},
		{"echo/x", "count", "not found: echo/x did not reply: its class has no call handler"},
		{"caller/b", "crash", "the callee crashed: caller/b crashed"},
		{"caller/a", "count", "call cycle: caller/a → caller/a"},
		{"caller/b", "call:caller/a:count", "error:call cycle: caller/a → caller/b → caller/a"},
		{"caller/slow", "sleep:1500", "timed out: no answer from caller/slow"},
	} {
		got := do(t, "POST", callURL(n, "a", c.to), []byte(c.payload))
		if !strings.HasPrefix(got.Body, c.want) {
			t.Errorf("call to %s with %q: %d %q, want it to begin %q", c.to, c.payload, got.Status, got.Body, c.want)
		}
	}
	// The crash rolled b back, and the caller went on: b still answers.
	if got := expect(t, 200, "POST", callURL(n, "a", "caller/b"), []byte("echo:alive")); got != "alive" {
		t.Fatalf("after the crash: %q", got)
	}
}

// TestCallsTooDeep: a chain of calls stops at the depth limit with its
// own error, where the ninth room would be called.
func TestCallsTooDeep(t *testing.T) {
	n := startNode(t, Config{})
	putClass(t, n, "caller", "./testdata/guests/caller")
	payload := "echo:bottom"
	for i := 8; i >= 1; i-- {
		payload = "call:caller/r" + string(rune('0'+i)) + ":" + payload
	}
	// r0 (from the request) → r1 … r8: the ninth room is one too many.
	got := do(t, "POST", n.URL()+"/actor/caller/r0/call?to=caller/r1", []byte(strings.SplitN(payload, ":", 3)[2]))
	if !strings.Contains(got.Body, "call chain too deep") {
		t.Fatalf("a chain of nine rooms: %d %q, want too deep", got.Status, got.Body)
	}
	short := "echo:bottom"
	for i := 6; i >= 2; i-- {
		short = "call:caller/r" + string(rune('0'+i)) + ":" + short
	}
	if got := expect(t, 200, "POST", n.URL()+"/actor/caller/r0/call?to=caller/r1", []byte(short)); got != "bottom" {
		t.Fatalf("a chain of seven rooms: %q, want bottom", got)
	}
}

// TestCallWaitIsNotEventTime: the time a room waits on calls is not
// counted toward its event time limit: three calls of 400 ms in a row
// from an event limited to 700 ms.
func TestCallWaitIsNotEventTime(t *testing.T) {
	n := startNode(t, Config{Engine: engine.Config{EventTimeout: 700 * time.Millisecond}})
	putClass(t, n, "caller", "./testdata/guests/caller")
	got := expect(t, http.StatusOK, "POST", n.URL()+"/actor/caller/a/seq?to=caller/b&n=3", []byte("sleep:400"))
	if got != "slept" {
		t.Fatalf("three slow calls in a row: %q", got)
	}
}

// TestCallsToOneRoomRunInOrder: calls one event starts at once to one
// room run there in the order they were started.
func TestCallsToOneRoomRunInOrder(t *testing.T) {
	n := startNode(t, Config{})
	putClass(t, n, "caller", "./testdata/guests/caller")
	if got := expect(t, 200, "POST", n.URL()+"/actor/caller/a/order?to=caller/b&n=12", nil); got != "1 2 3 4 5 6 7 8 9 10 11 12" {
		t.Fatalf("twelve calls at once to one room: replies %q, want 1 to 12 in order", got)
	}
}

// TestCallLimits: past 16 unanswered calls a room's next fails at once;
// a payload or a reply over 1 MiB fails with too large.
func TestCallLimits(t *testing.T) {
	n := startNode(t, Config{Server: serverConfig(2 << 20)}) // room for a payload over 1 MiB
	putClass(t, n, "caller", "./testdata/guests/caller")
	got := expect(t, 200, "POST", n.URL()+"/actor/caller/a/burst?to=caller&n=17", []byte("sleep:200"))
	want := strings.Repeat("ok ", 16) + "too many calls in flight"
	if got != want {
		t.Fatalf("17 calls at once: %q, want %q", got, want)
	}
	big := strings.Repeat("x", 1<<20+1)
	if got := do(t, "POST", callURL(n, "a", "caller/b"), []byte("echo:"+big)); !strings.HasPrefix(got.Body, "too large") {
		t.Fatalf("a payload over 1 MiB: %d %.80q", got.Status, got.Body)
	}
	if got := do(t, "POST", callURL(n, "a", "caller/b"), []byte("big:1048577")); !strings.HasPrefix(got.Body, "too large: caller/b replied with more than 1048576 bytes") {
		t.Fatalf("a reply over 1 MiB: %d %.80q", got.Status, got.Body)
	}
	if got := expect(t, 200, "POST", callURL(n, "a", "caller/b"), []byte("big:1048576")); len(got) != 1<<20 {
		t.Fatalf("a reply of 1 MiB: %d bytes", len(got))
	}
}
