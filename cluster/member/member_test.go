package member

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/wasmkeep/wasmkeep/cluster"
	"github.com/wasmkeep/wasmkeep/host/store"
	"github.com/wasmkeep/wasmkeep/internal/clock"
)

// These tests drive one member over a real core on an in-memory bucket,
// with a manual clock and fakes of its rooms and peers. The simulation
// (cluster/sim) runs the same member on many nodes with faults; these pin
// the member's own decisions down one at a time.

var ctx = context.Background()

const ttl = 10 * time.Second

// fakeRooms records what the member asks of the node's rooms.
type fakeRooms struct {
	mu      sync.Mutex
	sockets map[cluster.Room]int
	closed  []cluster.Room
	handed  []cluster.Room
	dropped int
}

func (r *fakeRooms) WithSockets() []cluster.Room {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []cluster.Room
	for room, n := range r.sockets {
		if n > 0 {
			out = append(out, room)
		}
	}
	slices.SortFunc(out, cluster.CompareRooms)
	return out
}

func (r *fakeRooms) Sockets(room cluster.Room) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.sockets[room]
}

func (r *fakeRooms) CloseSockets(room cluster.Room, _ string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.closed = append(r.closed, room)
	r.sockets[room] = 0
}

func (r *fakeRooms) HandOver(_ context.Context, room cluster.Room, _ HandOverReason) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.handed = append(r.handed, room)
	return nil
}

func (r *fakeRooms) DropAll(context.Context) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.dropped++
}

type noPeers struct{}

func (noPeers) AskTake(context.Context, string, string, cluster.Room) error {
	return errors.New("no peers here")
}

// recorder keeps the member's events.
type recorder struct {
	mu     sync.Mutex
	events []Event
}

func (r *recorder) Observe(e Event) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.events = append(r.events, e)
}

func (r *recorder) whys(kind EventKind) []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []string
	for _, e := range r.events {
		if e.Kind == kind {
			out = append(out, e.Why)
		}
	}
	return out
}

// sleeper moves the manual clock, and records each sleep; onSleep, if
// set, runs after the clock moved.
type sleeper struct {
	clk     *clock.Manual
	slept   []time.Duration
	onSleep func(i int)
}

func (s *sleeper) Sleep(_ context.Context, d time.Duration) error {
	s.clk.Advance(d)
	s.slept = append(s.slept, d)
	if s.onSleep != nil {
		s.onSleep(len(s.slept))
	}
	return nil
}

type fixture struct {
	core  *cluster.Node
	m     *Member
	rooms *fakeRooms
	sl    *sleeper
	rec   *recorder
	clk   *clock.Manual
}

// newFixture is a member of node name on bucket b; it has not joined.
func newFixture(t *testing.T, b store.Bucket, name string, edit ...func(*Config)) *fixture {
	t.Helper()
	clk := clock.NewManual(time.Unix(0, 0))
	core, err := cluster.New(cluster.Config{Node: name, Address: name + ":8080", TTL: ttl, AckLapses: true,
		Bucket: b, Clock: clk, Rand: rand.New(rand.NewPCG(1, uint64(len(name))))})
	if err != nil {
		t.Fatal(err)
	}
	f := &fixture{core: core, rooms: &fakeRooms{sockets: map[cluster.Room]int{}}, sl: &sleeper{clk: clk}, rec: &recorder{}, clk: clk}
	cfg := Config{Core: core, Rooms: f.rooms, Peers: noPeers{}, Clock: clk, Sleeper: f.sl, TTL: ttl, Observer: f.rec}
	for _, e := range edit {
		e(&cfg)
	}
	if f.m, err = New(cfg); err != nil {
		t.Fatal(err)
	}
	return f
}

func (f *fixture) join(t *testing.T) {
	t.Helper()
	f.core.RenewLease(ctx)
	if !f.core.LeaseValid() {
		t.Fatal("the node did not join")
	}
}

var room = cluster.Room{Class: "c", Name: "r"}

func neverForward(t *testing.T) Forward {
	return func(context.Context, string, string) bool {
		t.Error("forwarded")
		return false
	}
}

// TestDispatchWaitsForTheRoom: an event for a room nobody may run yet
// (here: this node's lease is not written yet) polls the route with a
// back-off, and is served once the room may run here.
func TestDispatchWaitsForTheRoom(t *testing.T) {
	f := newFixture(t, store.NewMem(), "a")
	f.sl.onSleep = func(i int) {
		if i == 3 {
			f.core.RenewLease(ctx) // joins during the third sleep
		}
	}
	d := f.m.Dispatch(ctx, room, false, neverForward(t))
	if d.Outcome != Serve {
		t.Fatalf("the event: %+v, want served here", d)
	}
	if want := []time.Duration{50 * time.Millisecond, 100 * time.Millisecond, 200 * time.Millisecond}; !slices.Equal(f.sl.slept, want) {
		t.Errorf("slept %v, want %v", f.sl.slept, want)
	}
	if got := f.rec.whys(Waited); !slices.Equal(got, []string{"here"}) {
		t.Errorf("waits observed: %v", got)
	}
	// The routing read stands in for the acquisition's.
	if _, err := f.m.Acquire(ctx, room); err != nil {
		t.Fatalf("acquiring the room routed here: %v", err)
	}
}

// TestDispatchRefusesPastTheFailoverWait: past the wait the event is
// refused; the last poll sleeps only for what is left of the wait.
func TestDispatchRefusesPastTheFailoverWait(t *testing.T) {
	f := newFixture(t, store.NewMem(), "a", func(c *Config) { c.FailoverWait = 300 * time.Millisecond })
	d := f.m.Dispatch(ctx, room, false, neverForward(t))
	if d.Outcome != Refused || d.Refusal != RefusedInactive {
		t.Fatalf("the event: %+v, want refused: the lease is not valid", d)
	}
	if want := []time.Duration{50 * time.Millisecond, 100 * time.Millisecond, 150 * time.Millisecond}; !slices.Equal(f.sl.slept, want) {
		t.Errorf("slept %v, want %v", f.sl.slept, want)
	}
	if got := f.rec.whys(Waited); !slices.Equal(got, []string{"timeout"}) {
		t.Errorf("waits observed: %v", got)
	}
}

// TestAForwardedEventDoesNotWait: its first node waited already.
func TestAForwardedEventDoesNotWait(t *testing.T) {
	f := newFixture(t, store.NewMem(), "a")
	if d := f.m.Dispatch(ctx, room, true, neverForward(t)); d.Outcome != Refused || len(f.sl.slept) != 0 {
		t.Fatalf("a forwarded event for a room that waits: %+v after sleeping %v", d, f.sl.slept)
	}
}

// twoNodes is a joined a, and b holding room, on one bucket.
func twoNodes(t *testing.T) (a, b *fixture) {
	t.Helper()
	bucket := store.NewMem()
	a, b = newFixture(t, bucket, "a"), newFixture(t, bucket, "b")
	a.join(t)
	b.join(t)
	if _, err := b.m.Acquire(ctx, room); err != nil {
		t.Fatal(err)
	}
	return a, b
}

// TestDispatchForwardsAndTheHopRule: an event for a room another node
// holds is forwarded there, and closes the room's sockets here; one
// forwarded here is refused as moved, never forwarded again.
func TestDispatchForwardsAndTheHopRule(t *testing.T) {
	a, _ := twoNodes(t)
	a.rooms.sockets[room] = 2
	var to []string
	d := a.m.Dispatch(ctx, room, false, func(_ context.Context, node, address string) bool {
		to = append(to, node+" "+address)
		return false
	})
	if d.Outcome != Forwarded || !slices.Equal(to, []string{"b b:8080"}) {
		t.Fatalf("the event: %+v, forwarded to %v", d, to)
	}
	if !slices.Equal(a.rooms.closed, []cluster.Room{room}) {
		t.Errorf("the room's sockets here were closed for %v", a.rooms.closed)
	}
	if d := a.m.Dispatch(ctx, room, true, neverForward(t)); d.Outcome != Refused || d.Refusal != RefusedMoved {
		t.Fatalf("an event forwarded here for a room elsewhere: %+v", d)
	}
}

// TestAForwardedEventReadsPastAStaleRoute: a node's cached route may
// still send a room to the node that just handed it over (a drain, a
// move) and now forwards its events here; refusing them as moved until
// the cache expired answered 503 for that long. A forwarded event that
// the cache would refuse reads the record once first.
func TestAForwardedEventReadsPastAStaleRoute(t *testing.T) {
	a, b := twoNodes(t)
	if w, err := a.m.Route(ctx, room); err != nil || w.Kind != cluster.Elsewhere || w.Node != "b" {
		t.Fatalf("a's route: %+v, %v", w, err)
	}
	b.core.Release(ctx, b.core.Status().Holds[0]) // handed over: free
	if d := a.m.Dispatch(ctx, room, true, neverForward(t)); d.Outcome != Serve {
		t.Fatalf("an event forwarded by b for the room b handed over: %+v; want it served here", d)
	}
}

// TestDispatchRoutesOnceMoreAfterAnUnreachableNode: a forward that
// cannot connect tells the core, and the event is routed again; a node
// still unreachable is refused, not dialled for ever.
func TestDispatchRoutesOnceMoreAfterAnUnreachableNode(t *testing.T) {
	a, _ := twoNodes(t)
	dials := 0
	d := a.m.Dispatch(ctx, room, false, func(context.Context, string, string) bool {
		dials++
		return true
	})
	if d.Outcome != Refused || dials != 1 {
		t.Fatalf("the event: %+v after %d dials; want refused after one", d, dials)
	}
}

// parkedFixture is a joined member of a whose room went idle with a
// socket open: parked.
func parkedFixture(t *testing.T) *fixture {
	t.Helper()
	f := newFixture(t, store.NewMem(), "a")
	f.join(t)
	h, err := f.m.Acquire(ctx, room)
	if err != nil {
		t.Fatal(err)
	}
	f.rooms.sockets[room] = 1
	f.m.End(ctx, h, "idle", true)
	if _, parked := f.core.Parked(room); !parked {
		t.Fatal("a room that went idle with a socket open did not park")
	}
	return f
}

// TestEndParksOrReleases: a room that goes idle with sockets open parks;
// one whose node drains is released, and its sockets close.
func TestEndParksOrReleases(t *testing.T) {
	f := parkedFixture(t)
	if len(f.rooms.closed) != 0 {
		t.Fatalf("an idle room with a socket parked, and its sockets closed for %v", f.rooms.closed)
	}
	h, err := f.m.Acquire(ctx, room)
	if err != nil {
		t.Fatal(err)
	}
	f.m.Drain(ctx, true)
	f.m.End(ctx, h, "idle", true)
	if _, parked := f.core.Parked(room); parked || !slices.Equal(f.rooms.closed, []cluster.Room{room}) {
		t.Fatalf("an idle room with a socket on a draining node: parked %v, sockets closed for %v", parked, f.rooms.closed)
	}
	if got := f.rec.whys(Released); !slices.Equal(got, []string{"idle"}) {
		t.Errorf("releases observed: %v", got)
	}
}

// TestALapseDropsEverythingBeforeTheLeaseCountsAgain: after a lapse that
// ended a hold, the core counts its lease not valid, renewed or not,
// until the watch has dropped the rooms and closed the sockets.
func TestALapseDropsEverythingBeforeTheLeaseCountsAgain(t *testing.T) {
	f := newFixture(t, store.NewMem(), "a")
	f.join(t)
	if _, err := f.m.Acquire(ctx, room); err != nil {
		t.Fatal(err)
	}
	f.rooms.sockets[room] = 1
	f.clk.Advance(ttl) // past the lease's validity, unrenewed
	f.core.RenewLease(ctx)
	if f.core.LeaseValid() {
		t.Fatal("the lease counts valid again before the host dropped the lapsed holds' rooms")
	}
	f.m.Watch(ctx)
	if !f.core.LeaseValid() || f.rooms.dropped != 1 || !slices.Equal(f.rooms.closed, []cluster.Room{room}) {
		t.Fatalf("after the watch: valid %v, rooms dropped %d times, sockets closed for %v", f.core.LeaseValid(), f.rooms.dropped, f.rooms.closed)
	}
}

// TestRouteOnADrainingNodeReleasesAParkedRecord: an event for a room
// parked on a draining node releases its record before it is routed, so
// that the peer it goes to finds the room free rather than naming this
// live node (seed 000 §3).
func TestRouteOnADrainingNodeReleasesAParkedRecord(t *testing.T) {
	f := parkedFixture(t)
	f.core.SetDraining(true) // no drain pass runs here
	if _, err := f.m.Route(ctx, room); err != nil {
		t.Fatal(err)
	}
	if _, parked := f.core.Parked(room); parked {
		t.Fatal("the room is still parked on the draining node")
	}
	if got := f.rec.whys(ParkedReleased); !slices.Equal(got, []string{"drain"}) {
		t.Errorf("parked releases observed: %v", got)
	}
}

// TestRoutingReadsKeptAreBounded: a routing read is kept for the
// acquisition that follows it, but requests for rooms that never wake
// (routing comes before the class is known) keep at most maxSeen, and
// stale ones make room again.
func TestRoutingReadsKeptAreBounded(t *testing.T) {
	f := newFixture(t, store.NewMem(), "a")
	f.join(t)
	for i := range maxSeen + 100 {
		if _, err := f.m.Route(ctx, cluster.Room{Class: "nosuch", Name: fmt.Sprint(i)}); err != nil {
			t.Fatal(err)
		}
	}
	if n := len(f.m.seen); n != maxSeen {
		t.Fatalf("%d routing reads kept, want %d", n, maxSeen)
	}
	f.clk.Advance(seenFresh)
	if _, err := f.m.Route(ctx, room); err != nil {
		t.Fatal(err)
	}
	if _, kept := f.m.seen[room]; !kept || len(f.m.seen) != 1 {
		t.Fatalf("after the reads went stale: %d kept, the new one kept %v", len(f.m.seen), kept)
	}
}
