package node

import (
	"context"
	"fmt"
	"testing"

	"github.com/wasmkeep/wasmkeep/host/rooms"
	"github.com/wasmkeep/wasmkeep/host/rooms/life"
	"github.com/wasmkeep/wasmkeep/internal/limits"
	"github.com/wasmkeep/wasmkeep/internal/wstest"
)

// TestChatWakesIntoASpare: a Go chat room hibernated again and again with
// no instance kept and no image, so that each wake restores it from the
// store, wakes each time into the memory its last instance closed with
// (engine spare memories), with its history and its sockets; the node
// releases that memory a moment after the last hibernation.
func TestChatWakesIntoASpare(t *testing.T) {
	t.Parallel()
	n := startNode(t, Config{DataDir: t.TempDir(), Rooms: rooms.Config{WarmMemory: limits.Off, ImageBytes: limits.Off}})
	putClass(t, n, "chat", "./examples/chat")
	url := n.URL() + "/actor/chat/lobby"
	a, b := wstest.Dial(t, url), wstest.Dial(t, url)
	key := rooms.Key{Class: "chat", Name: "lobby"}
	before := n.Engine.Stats().SpareRestores
	const rounds = 4
	for i := range rounds {
		wakeChatWithMessage(t, n, key, i, a, b)
	}
	if got := metric(t, n, "wasmkeep_room_restores_total"); got != rounds {
		t.Fatalf("%v restores from the store, want %d", got, rounds)
	}
	if got := n.Engine.Stats().SpareRestores - before; got != rounds {
		t.Fatalf("%d restores into a spare memory, want %d", got, rounds)
	}
	c := wstest.Dial(t, url)
	for i := range rounds {
		if got, want := c.ReadText(), fmt.Sprintf("message %d", i); got != want {
			t.Fatalf("history: got %q, want %q", got, want)
		}
	}
	if err := n.Rooms.HandOver(context.Background(), key, life.EndIdle); err != nil {
		t.Fatal(err)
	}
	if got := metric(t, n, "wasmkeep_spare_memories"); got < 1 {
		t.Fatalf("wasmkeep_spare_memories = %v after a hibernation, want its memory kept", got)
	}
	waitFor(t, "the spare memories released", func() bool { return metric(t, n, "wasmkeep_spare_memories") == 0 })
}
