package node

import (
	"fmt"
	"net/http"
	"strings"
	"testing"

	"github.com/wasmkeep/wasmkeep/abi"
	"github.com/wasmkeep/wasmkeep/host/engine"
	"github.com/wasmkeep/wasmkeep/internal/testwasm"
)

// Calls between rooms written in AssemblyScript and in Go. The AS room
// (test/caller.ts) speaks the Go caller guest's commands, so either calls
// the other and chains cross languages both ways.

// asCaller is testdata/guests/caller in AssemblyScript.
const asCaller = "test/caller.ts"

// asFailure is how the AS caller answers a call that failed with st:
// the number, which shows the status reached the guest as abi has it,
// then its name.
func asFailure(st abi.Status, msg string) string {
	return fmt.Sprintf("%d %s: %s", int32(st), st, msg)
}

// TestAssemblyScriptCalls: an AS room calls Go rooms and AS rooms, a Go
// room calls AS rooms, and each failure reaches the AS room as its own
// status with the host's message. The AS rooms are built with the SDK's
// runtime (minimal) and with the incremental one, whose collector may run
// in the middle of a handler, between a call's start and its answer.
func TestAssemblyScriptCalls(t *testing.T) {
	t.Parallel()
	t.Run("minimal", func(t *testing.T) { testASCalls(t) })
	t.Run("incremental", func(t *testing.T) { testASCalls(t, "--runtime", "incremental") })
}

func testASCalls(t *testing.T, args ...string) {
	n := startNode(t, Config{})
	putClass(t, n, "caller", "./testdata/guests/caller")
	putClass(t, n, "echo", "./testdata/guests/echo")
	putAS(t, n, "ascaller", asCaller, args...)
	putAS(t, n, "asguest", asGuest)
	// asCall is the request that makes the AS room from call to.
	asCall := func(from, to string) string { return n.URL() + "/actor/ascaller/" + from + "/call?to=" + to }

	t.Run("AS calls Go", func(t *testing.T) {
		if got := expect(t, 200, "POST", asCall("a", "caller/b"), []byte("echo:x")); got != "x" {
			t.Fatalf("echo reply %q", got)
		}
		for _, want := range []string{"1", "2"} {
			if got := expect(t, 200, "POST", asCall("a", "caller/b"), []byte("count")); got != want {
				t.Fatalf("count reply %q, want %s", got, want)
			}
		}
		if got := expect(t, 200, "GET", n.URL()+"/actor/caller/b/count", nil); got != "2" {
			t.Fatalf("caller/b's count %q, want 2", got)
		}
		if got := expect(t, 200, "GET", n.URL()+"/actor/ascaller/a/count", nil); got != "0" {
			t.Fatalf("ascaller/a's count %q, want 0: the calls ran in caller/b", got)
		}
		// A reply larger than the SDK's first try at copying it (256
		// bytes) comes whole.
		long := strings.Repeat("0123456789", 500)
		if got := expect(t, 200, "POST", asCall("a", "caller/b"), []byte("echo:"+long)); got != long {
			t.Fatalf("a long reply: %d bytes, want %d", len(got), len(long))
		}
		// startCall: twenty calls under way at once, sixteen at a time.
		if got := expect(t, 200, "POST", n.URL()+"/actor/ascaller/a/fan?to=caller&n=20", nil); got != "20" {
			t.Fatalf("fan-out to Go rooms: %q, want 20", got)
		}
		if got := expect(t, 200, "POST", n.URL()+"/actor/ascaller/a/fan?to=ascaller&n=20", nil); got != "20" {
			t.Fatalf("fan-out to AS rooms: %q, want 20", got)
		}
	})

	t.Run("Go calls AS", func(t *testing.T) {
		if got := expect(t, 200, "POST", callURL(n, "a", "ascaller/b"), []byte("echo:y ✓")); got != "y ✓" {
			t.Fatalf("echo reply %q", got)
		}
		if got := expect(t, 200, "POST", callURL(n, "a", "ascaller/b"), []byte("count")); got != "1" {
			t.Fatalf("count reply %q", got)
		}
		if got := expect(t, 200, "GET", n.URL()+"/actor/ascaller/b/count", nil); got != "1" {
			t.Fatalf("ascaller/b's count %q, want 1", got)
		}
		if got := expect(t, 200, "POST", callURL(n, "a", "ascaller/b"), []byte("from")); got != "caller/a" {
			t.Fatalf("the AS room saw the caller as %q", got)
		}
		// Go → AS → Go.
		if got := expect(t, 200, "POST", callURL(n, "a", "ascaller/b"), []byte("call:caller/c:echo:deep")); got != "deep" {
			t.Fatalf("nested reply %q", got)
		}
	})

	t.Run("typed errors", func(t *testing.T) {
		for _, c := range []struct{ to, payload, want string }{
			{"nope/x", "count", asFailure(abi.StatusNotFound, `no class "nope"`)},
			{"echo/x", "count", asFailure(abi.StatusNotFound, "echo/x did not reply: its class has no call handler")},
			{"caller/b", "crash", asFailure(abi.StatusCrashed, "caller/b crashed")},
			// Refused by call_start itself: no room name.
			{"caller", "count", asFailure(abi.StatusInvalid, "")},
		} {
			got := do(t, "POST", asCall("a", c.to), []byte(c.payload))
			if got.Status != http.StatusBadGateway || !strings.HasPrefix(got.Body, c.want) {
				t.Errorf("AS call to %s with %q: %d %q, want 502 beginning %q", c.to, c.payload, got.Status, got.Body, c.want)
			}
		}
		// The test guest registers no call handler: the SDK exports
		// on_call all the same, and gives no reply.
		got := do(t, "POST", callURL(n, "a", "asguest/x"), []byte("count"))
		if want := "not found: asguest/x did not reply: its class has no call handler"; !strings.HasPrefix(got.Body, want) {
			t.Errorf("a call to an AS room without a handler: %d %q, want it to begin %q", got.Status, got.Body, want)
		}
		// An abort in the AS handler is a crash the Go caller sees as
		// one; the AS room rolls back and answers the next call.
		got = do(t, "POST", callURL(n, "a", "ascaller/c"), []byte("crash"))
		if want := "the callee crashed: ascaller/c crashed"; !strings.HasPrefix(got.Body, want) {
			t.Errorf("a crashing AS callee: %d %q, want it to begin %q", got.Status, got.Body, want)
		}
		if got := expect(t, 200, "POST", callURL(n, "a", "ascaller/c"), []byte("echo:alive")); got != "alive" {
			t.Fatalf("after the crash: %q", got)
		}
	})

	t.Run("cycles", func(t *testing.T) {
		// The AS room calls itself.
		got := do(t, "POST", asCall("a", "ascaller/a"), []byte("count"))
		if want := asFailure(abi.StatusCycle, "ascaller/a → ascaller/a"); got.Status != 502 || !strings.HasPrefix(got.Body, want) {
			t.Errorf("an AS room calling itself: %d %q, want 502 beginning %q", got.Status, got.Body, want)
		}
		// AS a → Go b → AS a: the Go room gets the cycle.
		want := "error:call cycle: ascaller/a → caller/b → ascaller/a"
		if got := expect(t, 200, "POST", asCall("a", "caller/b"), []byte("call:ascaller/a:count")); !strings.HasPrefix(got, want) {
			t.Errorf("AS → Go → AS: %q, want it to begin %q", got, want)
		}
		// AS a → Go b → AS c → AS a: the AS room c gets the cycle, with
		// its status, and its reply saying so comes back down the chain.
		want = "error:" + asFailure(abi.StatusCycle, "ascaller/a → caller/b → ascaller/c → ascaller/a")
		if got := expect(t, 200, "POST", asCall("a", "caller/b"), []byte("call:ascaller/c:call:ascaller/a:count")); !strings.HasPrefix(got, want) {
			t.Errorf("AS → Go → AS → AS: %q, want it to begin %q", got, want)
		}
		if got := expect(t, 200, "GET", n.URL()+"/actor/ascaller/a/count", nil); got != "0" {
			t.Fatalf("ascaller/a counted %s calls; the cycles should have stopped them", got)
		}
	})
}

// TestAssemblyScriptHandOver: a front written in AssemblyScript hands a
// WebSocket upgrade to a room with handOver, and the engine gets the
// room and the headers instead of a response; where a hand-over is not
// allowed, the SDK answers 500. Fronts are not served by a node yet, so
// the test drives the engine as one would.
func TestAssemblyScriptHandOver(t *testing.T) {
	t.Parallel()
	e, err := engine.New(t.Context(), engine.Config{})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close(t.Context())
	class, err := e.Compile(t.Context(), testwasm.AssemblyScript(t, asCaller))
	if err != nil {
		t.Fatal(err)
	}
	inst, err := class.Start(t.Context(), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer inst.Close()

	request := func(upgrade bool, headers ...abi.Header) ([]byte, *abi.HandOver) {
		t.Helper()
		req := abi.AppendRequest(nil, &abi.Request{Method: "GET", Path: "/front", Query: "class=chat&name=lobby&user=ada", Headers: headers})
		resp, to, err := inst.FrontRequest(req, upgrade)
		if err != nil {
			t.Fatal(err)
		}
		return resp, to
	}
	upgrade := []abi.Header{{Name: "Connection", Value: "Upgrade"}, {Name: "Upgrade", Value: "foo, WebSocket"}}

	resp, to := request(true, upgrade...)
	if to == nil || resp != nil {
		t.Fatalf("an upgrade: hand-over %+v, response %q", to, resp)
	}
	if to.Class != "chat" || to.Name != "lobby" || len(to.Headers) != 1 || to.Headers[0] != (abi.Header{Name: "X-User", Value: "ada"}) {
		t.Fatalf("handed over to %+v", to)
	}
	for _, c := range []struct {
		name    string
		upgrade bool
		headers []abi.Header
		status  int
		body    string
	}{
		{"not an upgrade", true, nil, 400, "not an upgrade"},
		// An upgrade the host does not let the guest hand over (not a
		// front's): the SDK's stand-in response goes out.
		{"not allowed", false, upgrade, 500, "the request could not be handed to a room"},
	} {
		resp, to := request(c.upgrade, c.headers...)
		if to != nil {
			t.Fatalf("%s: handed over to %+v", c.name, to)
		}
		r, err := abi.DecodeResponse(resp)
		if err != nil || r.Status != c.status || string(r.Body) != c.body {
			t.Fatalf("%s: %d %q (%v), want %d %q", c.name, r.Status, r.Body, err, c.status, c.body)
		}
	}
	// The refusal left nothing behind: the next upgrade hands over again.
	if _, to := request(true, upgrade...); to == nil || to.Name != "lobby" {
		t.Fatalf("after a refusal: hand-over %+v", to)
	}
}
