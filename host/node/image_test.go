package node

import (
	"context"
	"fmt"
	"testing"

	"github.com/wasmkeep/wasmkeep/abi"
	"github.com/wasmkeep/wasmkeep/host/rooms"
	"github.com/wasmkeep/wasmkeep/host/rooms/life"
	"github.com/wasmkeep/wasmkeep/internal/limits"
	"github.com/wasmkeep/wasmkeep/internal/wstest"
)

// wakeChatWithMessage hibernates chat room key as the idle sweep does,
// sends message i from one of its sockets in turn, which wakes it, and
// checks that every socket gets it back; it returns the message.
func wakeChatWithMessage(t *testing.T, n *Node, key rooms.Key, i int, sockets ...*wstest.Client) string {
	t.Helper()
	if err := n.Rooms.HandOver(context.Background(), key, life.EndIdle); err != nil {
		t.Fatal(err)
	}
	msg := fmt.Sprintf("message %d", i)
	sockets[i%len(sockets)].Send(msg)
	for _, c := range sockets {
		if got := c.ReadText(); got != msg {
			t.Fatalf("round %d: got %q, want %q", i, got, msg)
		}
	}
	return msg
}

// TestChatWakesFromItsImage: a Go chat room hibernated again and again by
// the idle sweep, with no instance kept, wakes each time by mapping the
// memory image the node saved (rooms.Config.ImageDir), with its history
// and its sockets; after a clean restart of the node, which keeps its
// images, it wakes from its image again (cmd/wasmkeep's
// TestImagesSurviveACleanRestart kills a node too).
func TestChatWakesFromItsImage(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	cfg := Config{DataDir: dir, Rooms: rooms.Config{WarmMemory: limits.Off}}
	n := startNode(t, cfg)
	putClass(t, n, "chat", "./examples/chat")
	url := n.URL() + "/actor/chat/lobby"
	a, b := wstest.Dial(t, url), wstest.Dial(t, url)
	key := rooms.Key{Class: "chat", Name: "lobby"}
	var history []string
	const rounds = 6
	for i := range rounds {
		history = append(history, wakeChatWithMessage(t, n, key, i, a, b))
	}
	// Each round's message woke the room from the image its hibernation
	// saved.
	if got := metric(t, n, "wasmkeep_room_image_restores_total"); got != rounds {
		t.Fatalf("%v wakes from an image, want %d", got, rounds)
	}
	if got := metric(t, n, "wasmkeep_room_restores_total"); got != 0 {
		t.Fatalf("%v restores from the store, want none", got)
	}
	if got := metric(t, n, "wasmkeep_images"); got != 1 {
		t.Fatalf("%v images, want 1", got)
	}
	check := func(n *Node) {
		c := wstest.Dial(t, n.URL()+"/actor/chat/lobby")
		for _, want := range history {
			if got := c.ReadText(); got != want {
				t.Fatalf("history: got %q, want %q", got, want)
			}
		}
		c.Close(abi.CloseNormal)
	}
	if err := n.Rooms.HandOver(context.Background(), key, life.EndIdle); err != nil {
		t.Fatal(err)
	}
	check(n)
	closedA, closedB := answerClose(t, a, abi.CloseServiceRestart), answerClose(t, b, abi.CloseServiceRestart)
	if err := n.Stop(context.Background()); err != nil {
		t.Fatal(err)
	}
	closedA()
	closedB()
	n2 := startNode(t, cfg)
	check(n2)
	if got := metric(t, n2, "wasmkeep_room_image_restores_total"); got != 1 {
		t.Fatalf("after a clean restart: %v wakes from an image, want 1", got)
	}
	if got := metric(t, n2, "wasmkeep_room_restores_total"); got != 0 {
		t.Fatalf("after a clean restart: %v restores from the store, want none", got)
	}
}
