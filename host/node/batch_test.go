package node

import (
	"fmt"
	"testing"

	"github.com/gobwas/ws"
	"github.com/wasmkeep/wasmkeep/host/socket"
	"github.com/wasmkeep/wasmkeep/internal/wstest"
)

// burst writes msgs as masked text frames in one TCP write, so that the
// node reads them together and delivers them as one batch.
func burst(t *testing.T, c *wstest.Client, msgs ...string) {
	t.Helper()
	var b []byte
	for _, m := range msgs {
		b = append(b, ws.MustCompileFrame(ws.MaskFrame(ws.NewTextFrame([]byte(m))))...)
	}
	if _, err := c.Conn().Write(b); err != nil {
		t.Fatal(err)
	}
}

// TestMessageBatches: a client's burst of messages reaches the room in
// order, through one guest call per batch for a guest that exports
// wasmkeep_on_socket_messages (both SDKs do), and through one call per
// message for one that does not (rawecho, written without an SDK); every
// message is counted as an event either way.
func TestMessageBatches(t *testing.T) {
	n := startNode(t, Config{})
	putClass(t, n, "echo", "./testdata/guests/echo")
	putClass(t, n, "rawecho", "./testdata/guests/rawecho")
	putAS(t, n, "aschat", asChat)
	const count = 200
	for _, tc := range []struct {
		class   string
		batches bool
		greet   bool // the room greets a new socket
	}{{"echo", true, true}, {"aschat", true, false}, {"rawecho", false, false}} {
		t.Run(tc.class, func(t *testing.T) {
			c := wstest.Dial(t, n.URL()+"/actor/"+tc.class+"/burst")
			if tc.greet {
				c.ReadText()
			}
			events := metric(t, n, `wasmkeep_room_events_total{kind="socket_message"}`)
			batches := metric(t, n, "wasmkeep_room_message_batches_total")
			var msgs []string
			for i := range count {
				msgs = append(msgs, fmt.Sprint("m", i))
			}
			burst(t, c, msgs...)
			for i, want := range msgs {
				if got := c.ReadText(); got != want {
					t.Fatalf("answer %d: %q, want %q", i, got, want)
				}
			}
			if got := metric(t, n, `wasmkeep_room_events_total{kind="socket_message"}`) - events; got != count {
				t.Errorf("%v message events counted, want %d", got, count)
			}
			got := metric(t, n, "wasmkeep_room_message_batches_total") - batches
			if tc.batches && (got < 1 || got >= count) {
				t.Errorf("%v batches for %d messages sent at once: want some, fewer than the messages", got, count)
			}
			if !tc.batches && got != 0 {
				t.Errorf("%v batches for a guest without wasmkeep_on_socket_messages", got)
			}
		})
	}
}

// TestTrapInBatch: a message that traps inside a batch closes its socket
// with 1011 (no message after it is answered) and rolls the room back;
// the room's other sockets go on.
func TestTrapInBatch(t *testing.T) {
	n := startNode(t, Config{})
	putClass(t, n, "hostile", "./testdata/guests/hostile")
	url := n.URL() + "/actor/hostile/batch"
	other := wstest.Dial(t, url)
	a := wstest.Dial(t, url)
	burst(t, a, "a1", "a2", "trap", "a3")
	// Answers to a1 and a2 may come before the close, if the node split
	// the burst; "a3" never does.
	for {
		op, data, err := a.Read()
		if err != nil {
			ce, ok := err.(*wstest.CloseError)
			if !ok || ce.Code != 1011 {
				t.Fatalf("after the trap: %v, want close 1011", err)
			}
			break
		}
		if op != ws.OpText || (string(data) != "a1" && string(data) != "a2") {
			t.Fatalf("after a trap in its burst the socket got %v %q", op, data)
		}
	}
	other.Send("still here")
	if got := other.ReadText(); got != "still here" {
		t.Fatalf("the room's other socket: %q", got)
	}
}

// TestBurstEchoedWhole: a client that writes 300 or 2,000 text frames at
// once to an echo room (the default message burst allows 2,000) and reads
// gets every echo, in order, and its socket stays open: the answers meet
// the socket's outbound budget (256 frames) by pausing its reader, not by
// evicting it. With both readers.
func TestBurstEchoedWhole(t *testing.T) {
	for _, mode := range []socket.ReadMode{socket.ReadEpoll, socket.ReadGoroutine} {
		t.Run(mode.String(), func(t *testing.T) {
			n := startNode(t, Config{Sockets: socket.Config{Reader: mode}})
			putClass(t, n, "echo", "./testdata/guests/echo")
			for _, count := range []int{300, 2000} {
				c := wstest.Dial(t, fmt.Sprintf("%s/actor/echo/burst%d", n.URL(), count))
				c.ReadText() // the greeting
				var msgs []string
				for i := range count {
					msgs = append(msgs, fmt.Sprint("m", i))
				}
				burst(t, c, msgs...)
				for i, want := range msgs {
					op, data, err := c.Read()
					if err != nil {
						t.Fatalf("%d at once: echo %d: %v", count, i, err)
					}
					if op != ws.OpText || string(data) != want {
						t.Fatalf("%d at once: echo %d: %v %q, want %q", count, i, op, data, want)
					}
				}
				c.Send("still open")
				if got := c.ReadText(); got != "still open" {
					t.Fatalf("after %d at once: %q", count, got)
				}
			}
			for _, reason := range []string{"slow_reader", "queue_limit", "write_timeout"} {
				if v := metric(t, n, `wasmkeep_socket_evictions_total{reason="`+reason+`"}`); v != 0 {
					t.Errorf("%v %s evictions", v, reason)
				}
			}
			t.Logf("the readers paused %v times", metric(t, n, "wasmkeep_socket_read_pauses_total"))
		})
	}
}
