//go:build linux

package main

import (
	"strings"
	"syscall"
	"testing"

	"github.com/wasmkeep/wasmkeep/internal/wstest"
)

// TestImagesSurviveACleanRestart: a node process stopped with SIGTERM
// keeps the memory images of its rooms, so that its next start wakes a Go
// chat room by mapping its image (the room hibernated by an operator, and
// the one the stop itself hibernated); a node killed with SIGKILL leaves
// nothing its next start reads, which restores the rooms from the store.
// Every wake serves the room's history.
func TestImagesSurviveACleanRestart(t *testing.T) {
	t.Parallel()
	chat := guestFile(t, "./examples/chat")
	data := t.TempDir()
	n := serveNode(t, data)
	n.ok("class", "put", "chat", chat)
	// say sends a message to a room, after reading the history it has.
	say := func(n *proc, room string, history []string, msg string) {
		ws := wstest.Dial(t, n.url+"/actor/chat/"+room)
		for _, want := range history {
			if got := ws.ReadText(); got != want {
				t.Fatalf("%s's history: %q, want %q", room, got, want)
			}
		}
		ws.Send(msg)
		if got := ws.ReadText(); got != msg {
			t.Fatalf("%s echoed %q, want %q", room, got, msg)
		}
		ws.Close(1000)
	}
	say(n, "a", nil, "to a")
	n.ok("rooms", "hibernate", "chat", "a")
	say(n, "b", nil, "to b") // resident until the stop
	stop := func(n *proc, sig syscall.Signal) {
		n.signal(sig)
		n.wait(stopDeadline)
	}
	stop(n, syscall.SIGTERM)
	if log := n.stderr.String(); !strings.Contains(log, "memory images kept for the next start") || !strings.Contains(log, "images=2") {
		t.Fatalf("the stop kept no images:\n%s", log)
	}

	wakes := func(n *proc, history map[string]string, imaged, restored float64) {
		t.Helper()
		for room, want := range history {
			if got := wstest.Dial(t, n.url+"/actor/chat/"+room).ReadText(); got != want {
				t.Fatalf("%s's history: %q, want %q", room, got, want)
			}
		}
		m, err := metricsOf(n.url)
		if err != nil {
			t.Fatal(err)
		}
		if got := m["wasmkeep_room_image_restores_total"]; got != imaged {
			t.Fatalf("%v wakes from an image, want %v", got, imaged)
		}
		if got := m["wasmkeep_room_restores_total"]; got != restored {
			t.Fatalf("%v restores from the store, want %v", got, restored)
		}
	}
	n = serveNode(t, data)
	n.waitOutput("memory images kept from the last run", healthDeadline)
	wakes(n, map[string]string{"a": "to a", "b": "to b"}, 2, 0)
	say(n, "a", []string{"to a"}, "again")
	n.ok("rooms", "hibernate", "chat", "a") // an image saved into the file the start picked up
	stop(n, syscall.SIGKILL)

	n = serveNode(t, data)
	wakes(n, map[string]string{"a": "to a"}, 0, 1)
}
