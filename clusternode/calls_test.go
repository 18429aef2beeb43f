package clusternode

import (
	"strings"
	"testing"
	"time"

	"github.com/wasmkeep/wasmkeep/cluster"
	"github.com/wasmkeep/wasmkeep/host/node"
	"github.com/wasmkeep/wasmkeep/internal/wstest"
)

// placeOn wakes the caller room name on m (its first event lands there,
// so m takes it) and checks m holds it.
func placeOn(t *testing.T, m *member, name string) {
	t.Helper()
	if r := do(t, "GET", m.n.URL()+"/actor/caller/"+name+"/count", nil); r.Status != 200 {
		t.Fatalf("waking caller/%s on %s: %d %s", name, m.name, r.Status, r.Body)
	}
	if !holds(m, "caller", name) {
		t.Fatalf("caller/%s is not held by %s", name, m.name)
	}
}

// longCalls gives calls half a minute: a test that needs less shows the
// calls did not wait for their deadline.
func longCalls(cfg *node.Config) { cfg.Rooms.CallTimeout = 30 * time.Second }

// TestCallCycleFailsFast: x (on a) calls y (on b), which calls z (on a),
// which calls x again: the chain x → y → z → x is a cycle, and z's call
// fails at once with the cycle named, instead of waiting for x, which
// waits on the chain, until the deadline. Each room's answer goes back
// across the nodes.
func TestCallCycleFailsFast(t *testing.T) {
	t.Parallel()
	_, ms := startClusterWith(t, 2*time.Second, longCalls, "a", "b")
	a, b := ms[0], ms[1]
	putClass(t, a, "caller", "./testdata/guests/caller", false)
	placeOn(t, a, "x")
	placeOn(t, b, "y")
	placeOn(t, a, "z")
	began := time.Now()
	r := do(t, "POST", b.n.URL()+"/actor/caller/x/call?to=caller/y", []byte("call:caller/z:call:caller/x:count"))
	took := time.Since(began)
	want := "error:call cycle: caller/x → caller/y → caller/z → caller/x"
	if r.Status != 200 || r.Body != want {
		t.Fatalf("the cycle: %d %q, want 200 %q", r.Status, r.Body, want)
	}
	if took > 10*time.Second {
		t.Fatalf("the cycle took %v to fail: it waited for a deadline", took)
	}
	t.Logf("x → y → z → x failed in %v, calls having 30 s", took)
	// Nothing of the cycle ran: x counted nothing.
	if r := do(t, "GET", a.n.URL()+"/actor/caller/x/count", nil); r.Body != "0" {
		t.Fatalf("x's count %q, want 0", r.Body)
	}
	// Without the cycle the same path answers: x → y → z counts in z.
	r = do(t, "POST", a.n.URL()+"/actor/caller/x/call?to=caller/y", []byte("call:caller/z:count"))
	if r.Status != 200 || r.Body != "1" {
		t.Fatalf("x → y → z: %d %q, want 1", r.Status, r.Body)
	}
	if !holds(a, "caller", "z") || !holds(b, "caller", "y") {
		t.Fatal("the calls moved the rooms: each runs where it was placed")
	}
}

// TestACallWakesAParkedRoomAtHome: a room with a socket on a hibernates
// (parked); calls from a room on b wake it on a, at a new generation
// each, and what they broadcast reaches the socket, which stays open.
func TestACallWakesAParkedRoomAtHome(t *testing.T) {
	t.Parallel()
	bucket, ms := startClusterWith(t, 2*time.Second, idleSoon, "a", "b")
	a, b := ms[0], ms[1]
	putClass(t, a, "caller", "./testdata/guests/caller", true)
	room := cluster.Room{Class: "caller", Name: "chat"}
	ws := wstest.Dial(t, strings.Replace(a.n.URL(), "http", "ws", 1)+"/actor/caller/chat")
	h := parkedOn(t, a, room)
	for i := 1; i <= 3; i++ {
		msg := "hello " + string(rune('0'+i))
		// The caller room "from" runs on b (its request lands there).
		r := do(t, "POST", b.n.URL()+"/actor/caller/from/call?to=caller/chat", []byte("broadcast:"+msg))
		if r.Status != 200 || r.Body != "sent 1" {
			t.Fatalf("call %d: %d %q", i, r.Status, r.Body)
		}
		if got := ws.ReadText(); got != msg {
			t.Fatalf("the socket on a got %q, want %q", got, msg)
		}
		rec := readRecord(t, bucket, "caller", "chat")
		if rec.Node != "a" || rec.Generation != h.Generation+uint64(i) {
			t.Fatalf("after call %d the record is %+v, want a at generation %d", i, rec, h.Generation+uint64(i))
		}
		parkedOn(t, a, room)
	}
	for _, m := range ms {
		if got := m.mem().met.ownerClosed["sweep"].Get(); got != 0 {
			t.Errorf("%s's owner sweep closed sockets %d times", m.name, got)
		}
	}
}
