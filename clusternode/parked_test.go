package clusternode

import (
	"strings"
	"testing"
	"time"

	"github.com/wasmkeep/wasmkeep/abi"
	"github.com/wasmkeep/wasmkeep/cluster"
	"github.com/wasmkeep/wasmkeep/host/node"
	"github.com/wasmkeep/wasmkeep/internal/wstest"
)

// idleSoon makes rooms hibernate a moment after their last event, as an
// idle drop (which parks), not an operator's hibernate (which releases).
func idleSoon(cfg *node.Config) { cfg.Rooms.IdleTimeout = 300 * time.Millisecond }

// parkedOn waits until m keeps room's record parked, and returns the hold.
func parkedOn(t *testing.T, m *member, room cluster.Room) cluster.Hold {
	t.Helper()
	var h cluster.Hold
	waitFor(t, 10*time.Second, room.String()+" parked on "+m.name, func() bool {
		var ok bool
		h, ok = m.mem().Core().Parked(room)
		return ok
	})
	return h
}

// TestAParkedRoomWakesWhereItsSocketsAre: a room with a socket on a
// hibernates idle and keeps its record (no request for it); called
// through b it wakes on a, at a new generation each time, and its socket
// gets what the call broadcast; once the socket closes (its close woken
// at home too) the record names nobody.
func TestAParkedRoomWakesWhereItsSocketsAre(t *testing.T) {
	t.Parallel()
	bucket, ms := startClusterWith(t, 2*time.Second, idleSoon, "a", "b")
	a, b := ms[0], ms[1]
	putClass(t, a, "echo", "./testdata/guests/echo", true)
	room := cluster.Room{Class: "echo", Name: "home"}
	ws := wstest.Dial(t, strings.Replace(a.n.URL(), "http", "ws", 1)+"/actor/echo/home")
	if got := ws.ReadText(); !strings.HasPrefix(got, "open ") {
		t.Fatalf("greeting %q", got)
	}
	h := parkedOn(t, a, room)
	gets, puts := a.link.records()
	if rec := readRecord(t, bucket, "echo", "home"); rec.Free || rec.Node != "a" || rec.Generation != h.Generation {
		t.Fatalf("the parked room's record: %+v, want a at %d", rec, h.Generation)
	}
	for i := 1; i <= 2; i++ {
		r := do(t, "POST", b.n.URL()+"/actor/echo/home/broadcast", []byte("call "+string(rune('0'+i))))
		if r.Status != 200 || r.Body != "1" {
			t.Fatalf("broadcast %d through b: %d %q", i, r.Status, r.Body)
		}
		if got := ws.ReadText(); got != "call "+string(rune('0'+i)) {
			t.Fatalf("the socket on a got %q", got)
		}
		rec := readRecord(t, bucket, "echo", "home")
		if rec.Node != "a" || rec.Generation != h.Generation+uint64(i) {
			t.Fatalf("after call %d the record is %+v, want a at generation %d", i, rec, h.Generation+uint64(i))
		}
		parkedOn(t, a, room)
	}
	// Each wake: one GET and one conditional PUT of the record on a; the
	// parks between them: none.
	if g, p := a.link.records(); g-gets != 2 || p-puts != 2 {
		t.Errorf("two wakes and three parks cost a %d record GETs and %d PUTs, want 2 and 2", g-gets, p-puts)
	}
	if b.n.Rooms.Counts().Resident != 0 {
		t.Error("the room ran on b")
	}
	ws.Close(abi.CloseNormal)
	waitFor(t, 5*time.Second, "the record released at the last socket", func() bool {
		return readRecord(t, bucket, "echo", "home").Free
	})
	if _, ok := a.mem().Core().Parked(room); ok {
		t.Error("a still keeps the record parked")
	}
	// The close woke the room once more to tell it (a third wake at
	// home); it then hibernated with no socket, and released.
	if c := a.mem().Core().Counts(); c.ParkedWakes != 3 {
		t.Errorf("parked wakes %d, want 3", c.ParkedWakes)
	}
	if got := a.mem().met.ownerClosed["sweep"].Get(); got != 0 {
		t.Errorf("the owner sweep closed sockets %d times", got)
	}
}

// TestADrainReleasesParkedRecords: a drain releases the parked record,
// closes the room's socket with 1012, and is drained only then.
func TestADrainReleasesParkedRecords(t *testing.T) {
	t.Parallel()
	bucket, ms := startClusterWith(t, 2*time.Second, idleSoon, "a", "b")
	a := ms[0]
	putClass(t, a, "echo", "./testdata/guests/echo", true)
	ws := wstest.Dial(t, strings.Replace(a.n.URL(), "http", "ws", 1)+"/actor/echo/d")
	ws.ReadText()
	parkedOn(t, a, cluster.Room{Class: "echo", Name: "d"})
	if a.mem().Status().Drained {
		t.Fatal("drained before the drain")
	}
	if err := a.mem().Drain(true); err != nil {
		t.Fatal(err)
	}
	ws.ExpectClose(abi.CloseServiceRestart)
	waitFor(t, 10*time.Second, "a drained", func() bool { return a.mem().Status().Drained })
	if rec := readRecord(t, bucket, "echo", "d"); !rec.Free {
		t.Errorf("the parked record after the drain: %+v", rec)
	}
	if got := a.mem().met.parkedReleases["drain"].Get(); got != 1 {
		t.Errorf("wasmkeep_parked_releases_total{reason=drain} = %d", got)
	}
}

// TestAParkedRoomMoves: a move of a parked room releases its record, has
// the target take it, and closes the socket with 1012 after, counted
// as a move's close even when an owner sweep runs meanwhile.
func TestAParkedRoomMoves(t *testing.T) {
	t.Parallel()
	// Only a drops idle rooms soon (so that the room parks there): b
	// keeps the room it takes, so that its record is still b's when the
	// sweep below reads it, however slow the machine.
	edited := 0
	idleSoonOnA := func(cfg *node.Config) {
		if edited++; edited == 1 {
			idleSoon(cfg)
		}
	}
	bucket, ms := startClusterWith(t, 2*time.Second, idleSoonOnA, "a", "b")
	a, b := ms[0], ms[1]
	putClass(t, a, "echo", "./testdata/guests/echo", true)
	ws := wstest.Dial(t, strings.Replace(a.n.URL(), "http", "ws", 1)+"/actor/echo/m")
	ws.ReadText()
	room := cluster.Room{Class: "echo", Name: "m"}
	h := parkedOn(t, a, room)
	took := b.mem().met.acquire["acquired"].Get()
	// An owner sweep between the move's end and its close of the socket
	// (the room then neither held, parked nor moving here, its record
	// b's) leaves the socket to the move; so does one while the socket
	// may still be closing.
	swept := false
	a.mem().Member().SetBeforeMoveCloses(func(r cluster.Room) {
		if r == room && socketsOn(a, room) && readRecord(t, bucket, room.Class, room.Name).Node == "b" {
			swept = true
		}
		a.mem().Sweep(t.Context())
	})
	if by, err := a.mem().Move(t.Context(), keyOf(room), "b"); err != nil || by != "b" {
		t.Fatalf("move to b: by %q, %v", by, err)
	}
	if !swept {
		t.Fatal("no sweep ran with the socket open and the record b's, before the move closed it")
	}
	a.mem().Sweep(t.Context())
	ws.ExpectClose(abi.CloseServiceRestart)
	checkMovedTo(t, bucket, b, room, h.Generation, took)
	if got := a.mem().met.parkedReleases["move"].Get(); got != 1 {
		t.Errorf("wasmkeep_parked_releases_total{reason=move} = %d", got)
	}
	if got := a.mem().met.ownerClosed["move"].Get(); got != 1 {
		t.Errorf("wasmkeep_websocket_owner_closes_total{reason=move} = %d, want 1", got)
	}
	if got := a.mem().met.ownerClosed["sweep"].Get(); got != 0 {
		t.Errorf("wasmkeep_websocket_owner_closes_total{reason=sweep} = %d, want 0", got)
	}
}

// TestARefusedParkClosesTheSockets: a room that goes idle with a socket
// open while its node may not park it (here the core is draining) is
// released, and its socket closes with 1012 rather than staying on a
// room the node no longer holds. (The member's drain passes, which read
// the core's draining, may close it first and hand the room over: the
// release then lands a moment after the close.)
func TestARefusedParkClosesTheSockets(t *testing.T) {
	t.Parallel()
	idle := func(cfg *node.Config) { cfg.Rooms.IdleTimeout = 3 * time.Second } // time to set the drain first
	bucket, ms := startClusterWith(t, 2*time.Second, idle, "a", "b")
	a := ms[0]
	putClass(t, a, "echo", "./testdata/guests/echo", true)
	ws := wstest.Dial(t, strings.Replace(a.n.URL(), "http", "ws", 1)+"/actor/echo/late")
	if got := ws.ReadText(); !strings.HasPrefix(got, "open ") {
		t.Fatalf("greeting %q", got)
	}
	// Before the room goes idle: the core refuses parks, and no drain
	// pass runs to close the socket.
	a.mem().Core().SetDraining(true)
	if !holds(a, "echo", "late") {
		t.Fatal("the room went idle before the test could begin")
	}
	ws.ExpectClose(abi.CloseServiceRestart)
	waitFor(t, 10*time.Second, "the record's release", func() bool { return readRecord(t, bucket, "echo", "late").Free })
	if _, ok := a.mem().Core().Parked(cluster.Room{Class: "echo", Name: "late"}); ok {
		t.Error("the room was parked on a draining node")
	}
}

// TestAnEventForAParkedRoomOfADrainingNodeReleasesItFirst: before a drain
// pass releases it, an event reaching the draining node for a room parked
// there releases the record, and goes to the peer, which takes the room.
func TestAnEventForAParkedRoomOfADrainingNodeReleasesItFirst(t *testing.T) {
	t.Parallel()
	bucket, ms := startClusterWith(t, 2*time.Second, idleSoon, "a", "b")
	a, b := ms[0], ms[1]
	putClass(t, a, "echo", "./testdata/guests/echo", true)
	ws := wstest.Dial(t, strings.Replace(a.n.URL(), "http", "ws", 1)+"/actor/echo/ev")
	ws.ReadText()
	parkedOn(t, a, cluster.Room{Class: "echo", Name: "ev"})
	// Draining as far as the member and its core know: the event or the
	// member's next drain pass releases the record, whichever comes
	// first (cluster/member's TestRouteOnADrainingNodeReleasesAParkedRecord
	// takes the event's path alone).
	a.mem().Core().SetDraining(true)
	if r := do(t, "GET", a.n.URL()+"/actor/echo/ev/room", nil); r.Status != 200 || r.Body != "echo/ev" {
		t.Fatalf("GET through the draining node: %d %q", r.Status, r.Body)
	}
	if !holds(b, "echo", "ev") {
		t.Error("the peer did not take the room")
	}
	if rec := readRecord(t, bucket, "echo", "ev"); rec.Node != "b" {
		t.Errorf("the record after the event: %+v, want b's", rec)
	}
	if got := a.mem().met.parkedReleases["drain"].Get(); got != 1 {
		t.Errorf("wasmkeep_parked_releases_total{reason=drain} = %d", got)
	}
}
