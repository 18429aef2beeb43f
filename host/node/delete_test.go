package node

import (
	"context"
	"testing"

	"github.com/wasmkeep/wasmkeep/abi"
	"github.com/wasmkeep/wasmkeep/internal/wstest"
)

// storedKeys lists what the store holds for one room.
func storedKeys(t *testing.T, n *Node, class, name string) []string {
	t.Helper()
	keys, err := n.Bucket.List(context.Background(), "rooms/"+class+"/"+name+"/")
	if err != nil {
		t.Fatal(err)
	}
	return keys
}

// TestDeleteRoom: DELETE /admin/rooms/CLASS/NAME removes a room's
// snapshot and segments (there was no way to, and every room name ever
// used stayed stored for good), drops its instance without writing it and
// closes its sockets; its next request starts it fresh.
func TestDeleteRoom(t *testing.T) {
	n := startNode(t, Config{})
	putClass(t, n, "counter", "./examples/counter")
	putClass(t, n, "echo", "./testdata/guests/echo")
	base := n.URL() + "/actor/counter/"
	expect(t, 200, "POST", base+"a", nil)
	expect(t, 200, "POST", base+"a", nil)
	hibernate(t, n, "counter", "a")
	expect(t, 200, "POST", base+"a", nil) // resident again, with a change not yet written
	if len(storedKeys(t, n, "counter", "a")) == 0 {
		t.Fatal("a hibernated room has nothing stored")
	}
	ws := wstest.Dial(t, n.URL()+"/actor/echo/s")
	if got := ws.ReadText(); got != "open /?" {
		t.Fatalf("echo open: %q", got)
	}
	stored := n.Rooms.Counts().Stored

	expect(t, 204, "DELETE", n.URL()+"/admin/rooms/counter/a", nil)
	if keys := storedKeys(t, n, "counter", "a"); len(keys) != 0 {
		t.Fatalf("after DELETE the store still holds %q", keys)
	}
	if _, listed := roomRowOf(t, n, "counter", "a"); listed {
		t.Fatal("a deleted room is still listed")
	}
	if got := n.Rooms.Counts().Stored; got != stored-1 {
		t.Fatalf("stored rooms went from %d to %d", stored, got)
	}
	if got := expect(t, 200, "POST", base+"a", nil); got != "1" {
		t.Fatalf("the next request to a deleted room: %q, want a fresh count", got)
	}

	expect(t, 204, "DELETE", n.URL()+"/admin/rooms/echo/s", nil)
	if c := ws.ExpectClose(abi.CloseNormal); c.Reason != "room deleted" {
		t.Fatalf("socket of a deleted room closed with %q", c.Reason)
	}
	expect(t, 404, "DELETE", n.URL()+"/admin/rooms/counter/nobody", nil)
}

// TestRoomDeletesItself: a room's DELETE handler calls wk.DeleteState(),
// and when the event returns its stored state is gone and the next request
// finds a fresh room.
func TestRoomDeletesItself(t *testing.T) {
	n := startNode(t, Config{})
	putClass(t, n, "counter", "./examples/counter")
	room := n.URL() + "/actor/counter/g"
	for range 3 {
		expect(t, 200, "POST", room, nil)
	}
	hibernate(t, n, "counter", "g")
	if got := expect(t, 200, "POST", room, nil); got != "4" {
		t.Fatalf("after wake: %q", got)
	}
	if got := expect(t, 200, "DELETE", room, nil); got != "deleted" {
		t.Fatalf("DELETE: %q", got)
	}
	if keys := storedKeys(t, n, "counter", "g"); len(keys) != 0 {
		t.Fatalf("after the room deleted itself the store still holds %q", keys)
	}
	if got := expect(t, 200, "GET", room, nil); got != "0" {
		t.Fatalf("after the room deleted itself: %q, want 0", got)
	}
	// Stopping and starting again does not bring the old state back.
	expect(t, 200, "POST", room, nil)
	dir := n.cfg.DataDir
	stop(t, n)
	n = startNode(t, Config{DataDir: dir})
	if got := expect(t, 200, "GET", n.URL()+"/actor/counter/g", nil); got != "1" {
		t.Fatalf("after a restart: %q, want 1", got)
	}
}
