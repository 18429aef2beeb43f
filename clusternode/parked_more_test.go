package clusternode

// More of issue 12's cases on parked records (its Verification 2), on
// in-process nodes with real WebSockets: writes refused for one record,
// a record changed behind its node's back, an undecodable record, a lease
// lapse. Each node reaches the shared bucket through its link
// (member_test.go), which can refuse the PUTs of one key.

import (
	"context"
	"errors"
	"log/slog"
	"net/http"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/wasmkeep/wasmkeep/abi"
	"github.com/wasmkeep/wasmkeep/cluster"
	cm "github.com/wasmkeep/wasmkeep/cluster/member"
	"github.com/wasmkeep/wasmkeep/host/node"
	"github.com/wasmkeep/wasmkeep/host/server"
	"github.com/wasmkeep/wasmkeep/host/store"
	"github.com/wasmkeep/wasmkeep/internal/wstest"
)

// openEcho opens a socket to the echo room name on m and reads its
// greeting.
func openEcho(t *testing.T, m *member, name string) *wstest.Client {
	t.Helper()
	ws := wstest.Dial(t, strings.Replace(m.n.URL(), "http", "ws", 1)+"/actor/echo/"+name)
	if got := ws.ReadText(); !strings.HasPrefix(got, "open ") {
		t.Fatalf("the greeting of echo/%s: %q", name, got)
	}
	return ws
}

// pendingOn reports whether m has a release of room pending.
func pendingOn(m *member, room cluster.Room) bool {
	return slices.ContainsFunc(m.mem().Status().Pending, func(r server.ClusterRoom) bool { return r.Class == room.Class && r.Name == room.Name })
}

// socketsOn reports whether m has sockets of room open.
func socketsOn(m *member, room cluster.Room) bool {
	return slices.Contains(m.n.Rooms.RoomsWithSockets(), keyOf(room))
}

// recordETag reads a room's record and its version straight from the
// bucket.
func recordETag(t *testing.T, b store.Bucket, room cluster.Room) (cluster.Record, string) {
	t.Helper()
	body, etag, err := b.Get(context.Background(), cluster.RecordKey(room))
	if err != nil {
		t.Fatalf("the record of %s: %v", room, err)
	}
	rec, err := cluster.DecodeRecord(body)
	if err != nil {
		t.Fatalf("the record of %s: %v", room, err)
	}
	return rec, etag
}

// takeBehindBack writes room's record naming node other (a live peer) at
// the parked hold's generation + 1, If-Match on the parked version: the
// room taken elsewhere without the parking node hearing of it.
func takeBehindBack(t *testing.T, b store.Bucket, room cluster.Room, h cluster.Hold, other *member) string {
	t.Helper()
	body := cluster.EncodeRecord(cluster.Record{Node: other.name, Instance: other.mem().Instance(), Generation: h.Generation + 1, Nonce: "behind-the-back"})
	etag, err := b.Put(context.Background(), cluster.RecordKey(room), body, store.IfMatch(h.Version))
	if err != nil {
		t.Fatalf("writing %s's record behind its node's back: %v", room, err)
	}
	return etag
}

// TestLastSocketGoneWhileWritesAreRefused: the last socket of a parked
// room closes while the bucket refuses writes of its record, so the close
// event's wake cannot take the record and the event cannot run. The freed
// slot releases the parked record anyway: the release is pending, retried
// while refused, and lands once the bucket accepts it (the record free at
// the parked generation, nothing pending, nothing parked).
func TestLastSocketGoneWhileWritesAreRefused(t *testing.T) {
	t.Parallel()
	start := time.Now()
	bucket, ms := startClusterWith(t, 2*time.Second, idleSoon, "a", "b")
	a := ms[0]
	putClass(t, a, "echo", "./testdata/guests/echo", true)
	room := cluster.Room{Class: "echo", Name: "refused"}
	ws := openEcho(t, a, room.Name)
	h := parkedOn(t, a, room)
	setup := time.Since(start)

	wakeErrors := a.n.Metrics.GetOrCreateCounter("wasmkeep_room_wake_errors_total")
	failedWakes := wakeErrors.Get()
	refused := a.link.refusePuts(cluster.RecordKey(room))
	ws.Close(abi.CloseNormal)
	// The release at the freed slot (refused), the close event's wake
	// (refused), then the settle duty's retries (refused): at least two
	// of those, so the pending release was tried again and is still due.
	waitFor(t, 10*time.Second, "the release refused and retried, the close event's wake refused", func() bool {
		return refused.Load() >= 4 && wakeErrors.Get() > failedWakes
	})
	if _, ok := a.mem().Core().Parked(room); ok {
		t.Fatal("the last socket went and the record is still parked")
	}
	if !pendingOn(a, room) {
		t.Fatalf("while refused, the parked record's release is not pending: %+v", a.mem().Status().Pending)
	}
	if socketsOn(a, room) {
		t.Fatal("the closed socket is still counted open")
	}
	if rec := readRecord(t, bucket, room.Class, room.Name); rec.Free || rec.Node != "a" || rec.Generation != h.Generation {
		t.Fatalf("while refused the record is %+v, want a's parked hold at %d, unchanged", rec, h.Generation)
	}
	if got := a.mem().met.parkedReleases["last_socket"].Get(); got != 1 {
		t.Fatalf("wasmkeep_parked_releases_total{reason=last_socket} = %d, want 1", got)
	}

	accepted := time.Now()
	a.link.acceptPuts(cluster.RecordKey(room))
	waitFor(t, 5*time.Second, "the pending release landed", func() bool {
		return readRecord(t, bucket, room.Class, room.Name).Free && len(a.mem().Status().Pending) == 0
	})
	landed := time.Since(accepted)
	if rec := readRecord(t, bucket, room.Class, room.Name); rec.Generation != h.Generation {
		t.Fatalf("the release wrote generation %d, want the parked hold's %d", rec.Generation, h.Generation)
	}
	if s := a.mem().Status(); len(s.Parked) != 0 || len(s.Holds) != 0 {
		t.Fatalf("after the release a has parked %v, holds %v", s.Parked, s.Holds)
	}
	if n := a.link.unconditional.Load(); n != 0 {
		t.Fatalf("a wrote a record %d times without a condition", n)
	}
	t.Logf("setup %v; %d writes refused; the release landed %v after the bucket accepted writes again",
		setup.Round(time.Millisecond), refused.Load(), landed.Round(time.Millisecond))
}

// TestMoveOfAParkedRoomWaitsForItsRelease: a move of a parked room whose
// release cannot land goes on in the background: the record still names
// a, the target does not hold the room, the socket stays open, and the
// room is listed moving. Once the bucket takes writes again the pending
// release lands, the move loop asks the target, which takes the room,
// and the socket closes with 1012 (no owner sweep runs in this test).
func TestMoveOfAParkedRoomWaitsForItsRelease(t *testing.T) {
	t.Parallel()
	start := time.Now()
	bucket, ms := startClusterWith(t, 2*time.Second, idleSoon, "a", "b")
	a, b := ms[0], ms[1]
	putClass(t, a, "echo", "./testdata/guests/echo", true)
	room := cluster.Room{Class: "echo", Name: "moving"}
	ws := openEcho(t, a, room.Name)
	h := parkedOn(t, a, room)
	setup := time.Since(start)

	refused := a.link.refusePuts(cluster.RecordKey(room))
	_, err := a.mem().Move(t.Context(), keyOf(room), "b")
	if !errors.Is(err, server.ErrMoveUnderWay) || !strings.Contains(err.Error(), "pending") {
		t.Fatalf("a move whose release was refused: %v; want it under way, naming the pending release", err)
	}
	if refused.Load() == 0 {
		t.Fatal("the move wrote no release")
	}
	moveStart := time.Now()
	if rec := readRecord(t, bucket, room.Class, room.Name); rec.Free || rec.Node != "a" || rec.Generation != h.Generation {
		t.Fatalf("with the release refused the record is %+v, want a at %d", rec, h.Generation)
	}
	if holds(b, room.Class, room.Name) {
		t.Fatal("the target holds the room though its record names a")
	}
	if !socketsOn(a, room) {
		t.Fatal("the move closed the room's socket before the target took it")
	}
	if mv := a.mem().Status().Moving; len(mv) != 1 || mv[0].Name != room.Name || mv[0].To != "b" {
		t.Fatalf("a lists moving %+v", mv)
	}
	if _, err := a.mem().Move(t.Context(), keyOf(room), "b"); !errors.Is(err, server.ErrMoveUnderWay) || !strings.Contains(err.Error(), "pending") {
		t.Fatalf("the same move asked again: %v; want it under way, naming the pending release", err)
	}

	took := b.mem().met.acquire["acquired"].Get()
	a.link.acceptPuts(cluster.RecordKey(room))
	ws.ExpectClose(abi.CloseServiceRestart)
	moved := time.Since(moveStart)
	checkMovedTo(t, bucket, b, room, h.Generation, took)
	if isMoving(a, room) || len(a.mem().Status().Moving) != 0 {
		t.Fatal("the move is still listed after the target took the room")
	}
	if got := a.mem().met.ownerClosed["move"].Get(); got != 1 {
		t.Fatalf("wasmkeep_websocket_owner_closes_total{reason=move} = %d, want 1", got)
	}
	if got := a.mem().met.ownerClosed["sweep"].Get(); got != 0 {
		t.Fatalf("wasmkeep_websocket_owner_closes_total{reason=sweep} = %d, want 0", got)
	}
	t.Logf("setup %v; once writes were accepted the move finished and closed the socket in %v",
		setup.Round(time.Millisecond), moved.Round(time.Millisecond))
}

// TestMoveOfAParkedRoomWaitsOutALaterGeneration: a wake of the parked room
// on a whose record write landed but was not answered leaves the record
// naming a at a later generation (the parked entry stays: the outcome is
// unknown). A move then finds its release of the parked version moot; it
// waits, socket open, until a's resolver releases the landed wake, then
// the target takes the room and the socket closes with 1012.
func TestMoveOfAParkedRoomWaitsOutALaterGeneration(t *testing.T) {
	t.Parallel()
	bucket, ms := startClusterWith(t, 2*time.Second, idleSoon, "a", "b")
	a, b := ms[0], ms[1]
	putClass(t, a, "echo", "./testdata/guests/echo", true)
	room := cluster.Room{Class: "echo", Name: "later"}
	ws := openEcho(t, a, room.Name)
	h := parkedOn(t, a, room)

	a.link.loseAnswerOnce(cluster.RecordKey(room))
	if r := do(t, "GET", a.n.URL()+"/actor/echo/"+room.Name, nil); r.Status == http.StatusOK {
		t.Fatalf("a wake whose answer was lost served the request: %d %s", r.Status, r.Body)
	}
	if rec := readRecord(t, bucket, room.Class, room.Name); rec.Node != "a" || rec.Generation != h.Generation+1 {
		t.Fatalf("after the unanswered wake the record is %+v, want a at %d", rec, h.Generation+1)
	}
	took := b.mem().met.acquire["acquired"].Get()
	_, err := a.mem().Move(t.Context(), keyOf(room), "b")
	if !errors.Is(err, server.ErrMoveUnderWay) {
		t.Fatalf("a move with the record at a later generation: %v; want it under way", err)
	}
	if !socketsOn(a, room) {
		t.Fatal("the move closed the room's socket while the record named a")
	}
	ws.ExpectClose(abi.CloseServiceRestart)
	checkMovedTo(t, bucket, b, room, h.Generation+1, took)
	if got := a.mem().met.ownerClosed["sweep"].Get(); got != 0 {
		t.Fatalf("wasmkeep_websocket_owner_closes_total{reason=sweep} = %d, want 0", got)
	}
}

// TestAMovingRoomTakenByAnotherNodeFirst: while a's move of a parked room
// to b waits for b (whose writes of the record are refused), the same move
// asked again goes on (under way), a move elsewhere is refused, and a
// step taken by another caller is not interleaved. Then an event reaching
// c takes the free room there: the move is over, reported as taken by c
// (not moved to b), and a's socket closes with 1012.
func TestAMovingRoomTakenByAnotherNodeFirst(t *testing.T) {
	t.Parallel()
	bucket, ms := startClusterWith(t, 2*time.Second, idleSoon, "a", "b", "c")
	a, b, c := ms[0], ms[1], ms[2]
	putClass(t, a, "echo", "./testdata/guests/echo", true)
	room := cluster.Room{Class: "echo", Name: "first"}
	key := keyOf(room)
	ws := openEcho(t, a, room.Name)
	h := parkedOn(t, a, room)

	b.link.refusePuts(cluster.RecordKey(room))
	_, err := a.mem().Move(t.Context(), key, "b")
	if !errors.Is(err, server.ErrMoveUnderWay) || !strings.Contains(err.Error(), "node b did not take the room yet") {
		t.Fatalf("a move whose target cannot take the room: %v; want it under way, waiting on b", err)
	}
	if _, err := a.mem().Move(t.Context(), key, "b"); !errors.Is(err, server.ErrMoveUnderWay) {
		t.Fatalf("the same move asked again: %v; want it under way", err)
	}
	if _, err := a.mem().Move(t.Context(), key, "c"); !errors.Is(err, cluster.ErrMoveBusy) {
		t.Fatalf("a move elsewhere of a room under way: %v; want ErrMoveBusy", err)
	}

	// The test takes the next step itself: the move loop leaves the
	// move alone meanwhile, and a request for it is told so.
	if !a.mem().Member().BeginAdvance(room) {
		t.Fatal("the move is being advanced by another caller")
	}
	if _, err := a.mem().Move(t.Context(), key, "b"); !errors.Is(err, server.ErrMoveUnderWay) || !strings.Contains(err.Error(), "another request") {
		t.Fatalf("a move asked while another caller takes it a step: %v", err)
	}
	took := c.mem().met.acquire["acquired"].Get()
	if r := do(t, "GET", c.n.URL()+"/actor/echo/"+room.Name, nil); r.Status != http.StatusOK {
		t.Fatalf("an event of the free room at c: %d %s", r.Status, r.Body)
	}
	by, err := a.mem().Member().AdvanceMove(t.Context(), room)
	a.mem().Member().EndAdvance(room)
	if err != nil || by != "c" {
		t.Fatalf("the move's step once c holds the room: by %q, %v; want taken by c", by, err)
	}
	ws.ExpectClose(abi.CloseServiceRestart)
	checkMovedTo(t, bucket, c, room, h.Generation, took)
	if isMoving(a, room) {
		t.Fatal("the move outlived c's take")
	}
	if got := a.mem().met.ownerClosed["move"].Get(); got != 1 {
		t.Fatalf("wasmkeep_websocket_owner_closes_total{reason=move} = %d, want 1", got)
	}
}

// checkMovedTo checks that target took room once since its count of
// acquisitions was took, above generation gen. With no socket there the
// room may have gone idle and released its record since: free above gen
// passes too.
func checkMovedTo(t *testing.T, bucket store.Bucket, target *member, room cluster.Room, gen uint64, took uint64) {
	t.Helper()
	if got := target.mem().met.acquire["acquired"].Get(); got != took+1 {
		t.Fatalf("%s made %d acquisitions during the move, want 1", target.name, got-took)
	}
	if rec := readRecord(t, bucket, room.Class, room.Name); rec.Generation <= gen || !rec.Free && rec.Node != target.name {
		t.Fatalf("after the move the record is %+v, want %s's (or free) above generation %d", rec, target.name, gen)
	}
}

// sweepUntil runs owner sweep passes on m until done holds, at most
// cm.SweepRereadEvery of them, and returns how many ran. The passes that do
// not re-read parked records must cost no record request.
func sweepUntil(t *testing.T, m *member, what string, done func() bool) int {
	t.Helper()
	for pass := 1; pass <= cm.SweepRereadEvery; pass++ {
		rereads := (m.mem().Member().Sweeps()+1)%cm.SweepRereadEvery == 0
		gets, puts := m.link.records()
		m.mem().Sweep(t.Context())
		if g, p := m.link.records(); !rereads && (g != gets || p != puts) {
			t.Fatalf("a sweep pass without re-reads cost %d record GETs and %d PUTs, want none", g-gets, p-puts)
		}
		if done() {
			return pass
		}
	}
	t.Fatalf("not within %d sweep passes: %s", cm.SweepRereadEvery, what)
	return 0
}

// TestSweepFindsAParkedRoomTakenElsewhere: the record of a room parked on
// a is changed behind a's back to name b (a live peer) at a higher
// generation. The owner sweep's passes pass the parked room over without
// a read, until the one in ten that re-reads it: then the parked entry is
// dropped, the socket closes with 1012 (counted as the sweep's), and a
// writes nothing to the record.
func TestSweepFindsAParkedRoomTakenElsewhere(t *testing.T) {
	t.Parallel()
	start := time.Now()
	bucket, ms := startClusterWith(t, 2*time.Second, idleSoon, "a", "b")
	a, b := ms[0], ms[1]
	putClass(t, a, "echo", "./testdata/guests/echo", true)
	room := cluster.Room{Class: "echo", Name: "taken"}
	ws := openEcho(t, a, room.Name)
	h := parkedOn(t, a, room)
	setup := time.Since(start)

	// The orphan sweep's fence of a parked room costs no read.
	gets, _ := a.link.records()
	if fence, err := a.mem().Fence(t.Context(), keyOf(room)); err != nil || fence != h.Generation {
		t.Fatalf("the fence of a room parked at generation %d: %d, %v", h.Generation, fence, err)
	}
	if g, _ := a.link.records(); g != gets {
		t.Fatalf("the fence of a parked room read its record %d times", g-gets)
	}

	etag := takeBehindBack(t, bucket, room, h, b)
	sweepStart := time.Now()
	passes := sweepUntil(t, a, "the parked entry dropped", func() bool {
		_, ok := a.mem().Core().Parked(room)
		return !ok
	})
	// The client has not answered the close yet: the socket is still
	// listed, and a second pass closes it again without counting it
	// again.
	if !socketsOn(a, room) {
		t.Fatal("the socket was gone before its client answered the close")
	}
	a.mem().Sweep(t.Context())
	ws.ExpectClose(abi.CloseServiceRestart)
	closed := time.Since(sweepStart)
	if got := a.mem().met.ownerClosed["sweep"].Get(); got != 1 {
		t.Fatalf(`wasmkeep_websocket_owner_closes_total{reason="sweep"} = %d, want 1`, got)
	}
	waitFor(t, 5*time.Second, "the socket gone from a", func() bool { return !socketsOn(a, room) })
	if _, got := recordETag(t, bucket, room); got != etag {
		t.Fatalf("a wrote the record of a room taken elsewhere (version %s, was %s)", got, etag)
	}
	if s := a.mem().Status(); len(s.Pending) != 0 || len(s.Holds) != 0 {
		t.Fatalf("a has pending %v, holds %v: it kept something of a room taken elsewhere", s.Pending, s.Holds)
	}
	t.Logf("setup %v; %d sweep passes to drop the entry; the socket closed %v after the passes began",
		setup.Round(time.Millisecond), passes, closed.Round(time.Millisecond))
}

// countingHandler counts the log records whose message contains msg.
type countingHandler struct {
	slog.Handler
	msg string
	n   *atomic.Int64
}

func (h countingHandler) Handle(ctx context.Context, r slog.Record) error {
	if strings.Contains(r.Message, h.msg) {
		h.n.Add(1)
	}
	return h.Handler.Handle(ctx, r)
}

func (h countingHandler) WithAttrs(as []slog.Attr) slog.Handler {
	return countingHandler{h.Handler.WithAttrs(as), h.msg, h.n}
}

func (h countingHandler) WithGroup(g string) slog.Handler {
	return countingHandler{h.Handler.WithGroup(g), h.msg, h.n}
}

// TestSweepPassesOverAnUndecodableRecord: of two rooms parked on a, the
// first (in the re-read's order) has garbage written over its record, the
// second is taken behind a's back. A re-reading pass keeps the first
// (counted, logged), and still reads the second, whose socket it closes;
// the next re-reading pass counts the first again without logging it
// again. Its socket stays open throughout.
func TestSweepPassesOverAnUndecodableRecord(t *testing.T) {
	t.Parallel()
	start := time.Now()
	var logged atomic.Int64
	quietCounting := func(cfg *node.Config) {
		idleSoon(cfg)
		cfg.Logger = slog.New(countingHandler{testLogger().Handler(), "ownership record cannot be decoded", &logged})
	}
	bucket, ms := startClusterWith(t, 2*time.Second, quietCounting, "a", "b")
	a, b := ms[0], ms[1]
	putClass(t, a, "echo", "./testdata/guests/echo", true)
	bad, taken := cluster.Room{Class: "echo", Name: "a-garbled"}, cluster.Room{Class: "echo", Name: "b-taken"}
	openEcho(t, a, bad.Name)
	wsTaken := openEcho(t, a, taken.Name)
	badHold := parkedOn(t, a, bad)
	takenHold := parkedOn(t, a, taken)
	setup := time.Since(start)

	if _, err := bucket.Put(t.Context(), cluster.RecordKey(bad), []byte("not a record {"), store.Cond{}); err != nil {
		t.Fatal(err)
	}
	takeBehindBack(t, bucket, taken, takenHold, b)
	unreadable := a.mem().met.sweepUnreadable
	passes := sweepUntil(t, a, "the pass that re-reads", func() bool { return unreadable.Get() > 0 })
	if got := unreadable.Get(); got != 1 {
		t.Fatalf("wasmkeep_websocket_sweep_unreadable_total = %d after one re-read, want 1", got)
	}
	if _, ok := a.mem().Core().Parked(taken); ok {
		t.Fatal("the re-read stopped at the undecodable record: the room after it is still parked")
	}
	wsTaken.ExpectClose(abi.CloseServiceRestart)
	if h, ok := a.mem().Core().Parked(bad); !ok || h != badHold {
		t.Fatalf("the room whose record cannot be decoded: parked %v at %+v, want kept at %+v", ok, h, badHold)
	}
	if got := logged.Load(); got != 1 {
		t.Fatalf("the undecodable record was logged %d times, want once", got)
	}
	// A pass of the sweep still running over the closing socket would
	// close it again: wait until it is gone.
	waitFor(t, 5*time.Second, "the taken room's socket gone from a", func() bool { return !socketsOn(a, taken) })

	sweepUntil(t, a, "the next pass that re-reads", func() bool { return unreadable.Get() > 1 })
	if got := unreadable.Get(); got != 2 {
		t.Fatalf("wasmkeep_websocket_sweep_unreadable_total = %d after two re-reads, want 2", got)
	}
	if got := logged.Load(); got != 1 {
		t.Fatalf("the undecodable record was logged %d times after two passes, want once", got)
	}
	if _, ok := a.mem().Core().Parked(bad); !ok {
		t.Fatal("the second re-read dropped the room whose record cannot be decoded")
	}
	if got := a.mem().met.ownerClosed["sweep"].Get(); got != 1 {
		t.Fatalf(`wasmkeep_websocket_owner_closes_total{reason="sweep"} = %d, want 1 (the taken room)`, got)
	}
	// Its socket stays open (a message would wake the room, which cannot
	// read its record: the socket would be refused then).
	if !socketsOn(a, bad) {
		t.Fatal("the socket of the room whose record cannot be decoded was closed")
	}
	t.Logf("setup %v; the first re-read came at pass %d", setup.Round(time.Millisecond), passes)
}

// TestLapseWithAParkedRoom: a node with a parked room is cut off the
// bucket: once its lease runs out the socket closes with 1012 and the
// parked record becomes a pending release (nothing parked). Once the
// bucket answers again the release lands (or, if the peer fenced the node
// first, the fence frees the record); either way nothing is left on a and
// b serves the room.
func TestLapseWithAParkedRoom(t *testing.T) {
	const ttl = 2 * time.Second
	start := time.Now()
	bucket, ms := startClusterWith(t, ttl, idleSoon, "a", "b")
	a, b := ms[0], ms[1]
	putClass(t, a, "echo", "./testdata/guests/echo", true)
	room := cluster.Room{Class: "echo", Name: "lapse"}
	ws := openEcho(t, a, room.Name)
	h := parkedOn(t, a, room)
	setup := time.Since(start)

	cut := time.Now()
	a.link.cut.Store(true)
	// The core applies a lapse at its next call that acts (here Valid),
	// not when its lease runs out: the member's watch, which closes the
	// sockets, only asks whether the lease is valid. Asked every few
	// milliseconds, the core nearly always applies it before the closed
	// socket's slot is freed, which would release the parked record
	// itself (and count it as its last socket's): either way it must be
	// pending once, and counted once.
	waitFor(t, ttl+ttl/5, "a's lease run out", func() bool {
		a.mem().Core().Valid(cluster.Hold{})
		return !a.mem().Core().LeaseValid()
	})
	ws.ExpectClose(abi.CloseServiceRestart)
	closed := time.Since(cut)
	// Its peers may take its rooms once its lease has been silent for
	// ttl + ttl/5: the socket must be closed before.
	if bound := ttl + ttl/5; closed > bound {
		t.Fatalf("the socket closed %v after the cut, later than its peers may take the room (%v)", closed, bound)
	}
	waitFor(t, ttl, "the parked record a pending release", func() bool {
		_, parked := a.mem().Core().Parked(room)
		return !parked && pendingOn(a, room)
	})
	lapsed, lastSocket := a.mem().Core().Counts().ParkedLapsed, a.mem().met.parkedReleases["last_socket"].Get()
	if lapsed+lastSocket != 1 {
		t.Fatalf("the parked record was made pending %d times by the lapse and %d by its last socket, want once", lapsed, lastSocket)
	}
	if rec := readRecord(t, bucket, room.Class, room.Name); rec.Free || rec.Node != "a" || rec.Generation != h.Generation {
		t.Fatalf("while a is cut off the record is %+v, want a's at %d", rec, h.Generation)
	}

	a.link.cut.Store(false)
	uncut := time.Now()
	how := ""
	waitFor(t, 3*ttl, "the lapsed parked record released or fenced", func() bool {
		select {
		case <-a.n.Lost():
			how = "freed by the fence"
			return true
		default:
		}
		if readRecord(t, bucket, room.Class, room.Name).Free && !pendingOn(a, room) {
			how = "released"
			return true
		}
		return false
	})
	settled := time.Since(uncut)
	if how == "released" {
		if rec := readRecord(t, bucket, room.Class, room.Name); rec.Generation != h.Generation {
			t.Fatalf("the release wrote generation %d, want %d", rec.Generation, h.Generation)
		}
	} else if l := readLease(t, bucket, "a"); l.State != cluster.LeaseFenced {
		t.Fatalf("a says it was lost, its lease is %s", l.State)
	}
	if s := a.mem().Status(); len(s.Parked)+len(s.Pending)+len(s.Holds) != 0 {
		t.Fatalf("a keeps parked %v, pending %v, holds %v", s.Parked, s.Pending, s.Holds)
	}
	waitFor(t, 5*ttl, "b serves the room", func() bool {
		r := do(t, "GET", b.n.URL()+"/actor/echo/lapse/sockets", nil)
		if r.Status != http.StatusOK && r.Status != http.StatusServiceUnavailable {
			t.Fatalf("GET through b: %d %q", r.Status, r.Body)
		}
		return r.Status == http.StatusOK
	})
	if rec := readRecord(t, bucket, room.Class, room.Name); rec.Node != "b" || rec.Generation <= h.Generation {
		t.Fatalf("after b served the room its record is %+v", rec)
	}
	t.Logf("setup %v; the socket closed %v after the cut; made pending by the lapse %d, by its last socket %d; %s %v after the bucket answered again",
		setup.Round(time.Millisecond), closed.Round(time.Millisecond), lapsed, lastSocket, how, settled.Round(time.Millisecond))
}

// isMoving reports whether m's node is moving room away.
func isMoving(m *member, room cluster.Room) bool {
	_, moving := m.mem().Core().Moving(room)
	return moving
}
