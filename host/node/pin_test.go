package node

import (
	"testing"
	"time"

	"github.com/wasmkeep/wasmkeep/host/rooms"
)

// TestPinnedRoomsStayResident: a pinned room is woken by the pin and then
// left in memory by the idle timeout and by --max-resident, while the same
// node puts unpinned rooms to sleep around it; unpinned, it sleeps again.
// Absence of a hibernation is shown against a room that was idle for less
// time and did hibernate, so the test waits on conditions, not on time.
func TestPinnedRoomsStayResident(t *testing.T) {
	n := startNode(t, Config{Rooms: rooms.Config{IdleTimeout: 200 * time.Millisecond, MaxResident: 2}})
	putClass(t, n, "counter", "./examples/counter")
	base := n.URL() + "/actor/counter/"
	state := func(name string) (string, rooms.AwakeReason) {
		t.Helper()
		info := dashRooms(t, n)["counter/"+name]
		return string(info.State), info.Awake
	}

	expect(t, 200, "POST", base+"pinned", nil)
	hibernate(t, n, "counter", "pinned")
	expect(t, 404, "POST", n.URL()+"/admin/rooms/counter/nobody/pin", nil)
	expect(t, 200, "POST", n.URL()+"/admin/rooms/counter/pinned/pin", nil)
	// Resident at once; "event" for as long as its worker finishes the
	// wake, then pinned.
	if st, _ := state("pinned"); st != "resident" {
		t.Fatalf("after pin: %s, want resident", st)
	}
	waitFor(t, "the room to show as pinned", func() bool {
		_, why := state("pinned")
		return why == rooms.AwakePinned
	})

	// Idle timeout: a room that had an event after the pinned one's last
	// goes to sleep; the pinned one stays.
	expect(t, 200, "POST", base+"other", nil)
	waitFor(t, "the unpinned room to hibernate when idle", func() bool {
		st, _ := state("other")
		return st == "hibernated"
	})
	if st, why := state("pinned"); st != "resident" || why != rooms.AwakePinned {
		t.Fatalf("pinned room after the idle sweep: %s, %q", st, why)
	}

	// --max-resident 2: a third room evicts the least recently used
	// unpinned room, never the pinned one, although it is the oldest.
	expect(t, 200, "POST", base+"b", nil)
	expect(t, 200, "POST", base+"c", nil)
	waitFor(t, "b to be evicted", func() bool {
		st, _ := state("b")
		return st == "hibernated"
	})
	if st, _ := state("pinned"); st != "resident" {
		t.Fatalf("pinned room after an eviction: %s", st)
	}
	// Its state is intact.
	if got := expect(t, 200, "GET", base+"pinned", nil); got != "1" {
		t.Fatalf("pinned room answered %q", got)
	}

	expect(t, 200, "POST", n.URL()+"/admin/rooms/counter/pinned/unpin", nil)
	waitFor(t, "the unpinned room to hibernate when idle", func() bool {
		st, _ := state("pinned")
		return st == "hibernated"
	})
	if got := expect(t, 200, "POST", base+"pinned", nil); got != "2" {
		t.Fatalf("after unpin and wake: %q", got)
	}
}
