//go:build !wasip1

package wasmkeep

import (
	"bytes"
	"errors"
	"strings"
	"testing"

	"github.com/wasmkeep/wasmkeep/abi"
)

func TestCallReturnsTheReply(t *testing.T) {
	h := setup(t)
	big := bytes.Repeat([]byte("r"), 1000) // past the first result buffer
	h.answer = func(c abi.Call) (int32, []byte) {
		if c.Class == "game" && c.Name == "g1" && string(c.Payload) == "players?" {
			return 0, big
		}
		return int32(abi.StatusNotFound), []byte("no class " + c.Class)
	}
	reply, err := Call("game", "g1", []byte("players?"))
	if err != nil || !bytes.Equal(reply, big) {
		t.Fatalf("Call = %d bytes, %v; want the 1000-byte reply", len(reply), err)
	}
	_, err = Call("nope", "x", nil)
	var ce *CallError
	if !errors.Is(err, ErrNotFound) || !errors.As(err, &ce) || ce.Class != "nope" || !strings.Contains(err.Error(), "no class nope") {
		t.Fatalf("Call to a missing class = %v; want ErrNotFound with the host's message", err)
	}
}

func TestCallErrorsAreTyped(t *testing.T) {
	h := setup(t)
	for st, want := range map[abi.Status]error{
		abi.StatusRefused: ErrRefused, abi.StatusTimeout: ErrTimeout, abi.StatusCrashed: ErrCrashed,
		abi.StatusCycle: ErrCycle, abi.StatusTooDeep: ErrTooDeep, abi.StatusTooMany: ErrTooMany,
	} {
		h.answer = func(abi.Call) (int32, []byte) { return int32(st), []byte("because") }
		p := StartCall("a", "b", nil)
		if _, err := p.Wait(); !errors.Is(err, want) {
			t.Errorf("status %s: Wait = %v, want %v", st, err, want)
		}
		if _, err := p.Wait(); !errors.Is(err, want) {
			t.Errorf("status %s: a second Wait = %v, want the same error", st, err)
		}
	}
}

func TestHandleCallReplies(t *testing.T) {
	h := setup(t)
	t.Cleanup(func() { onCallFunc = nil })
	var got Caller
	HandleCall(func(from Caller, p []byte) []byte {
		got = from
		return append([]byte("hello "), p...)
	})
	onCall(deliver(abi.AppendCall(nil, &abi.Call{Class: "lobby", Name: "main", Payload: []byte("you")})))
	if got != (Caller{"lobby", "main"}) || got.IsFront() || len(h.replies) != 1 || string(h.replies[0]) != "hello you" {
		t.Fatalf("caller %+v, replies %q", got, h.replies)
	}
}

func TestHandOverSendsTheRoom(t *testing.T) {
	h := setup(t)
	HandleRequest(func(r *Request) *Response {
		if !r.IsUpgrade() {
			return Text(400, "not an upgrade")
		}
		return HandOver("chat", "room-1", Header{Name: "X-User", Value: "ada"})
	})
	request(&abi.Request{Method: "GET", Path: "/ws", Headers: []abi.Header{{Name: "Upgrade", Value: "WebSocket"}}})
	if len(h.handOvers) != 1 || h.handOvers[0].Name != "room-1" || len(h.responses) != 0 {
		t.Fatalf("hand-overs %+v, responses %d", h.handOvers, len(h.responses))
	}
	request(&abi.Request{Method: "GET", Path: "/ws"})
	if len(h.responses) != 1 || h.last().Status != 400 {
		t.Fatalf("a plain request: responses %+v", h.responses)
	}
}
