package rooms

import (
	"context"
	"sync/atomic"

	"github.com/wasmkeep/wasmkeep/host/rooms/life"
)

// Placement decides where a room runs and grants this node the right to
// run it. The server asks it where a room runs before it does any work for
// an event; the room manager asks it for a hold before waking a room,
// checks the hold before every event and snapshot write, and tells it when
// the hold ends and why. A cluster implements it over ownership records in
// the bucket (parking a hold whose room hibernated with sockets open here,
// seed 000 §1); a single node uses Local.
//
// The manager's side of the contract, for a placement to call back: Drop
// (a hold found invalid: the instance goes, unwritten), DropAll (a lease
// lapse), CloseSockets, RoomsWithSockets, and Hibernate (a hand-over).
type Placement interface {
	// Route says where key's events go: here, on another node (which the
	// server forwards requests and relays upgrades to), or nowhere yet
	// (its owner is dead and its record not yet free: wait, then 503). It
	// is asked before the class is resolved or a socket admitted.
	Route(ctx context.Context, key Key) (Route, error)
	// Acquire grants this node the right to run key until End. Each grant
	// has a generation of its own, higher than any before it for that
	// room, which tags what the hold writes.
	Acquire(ctx context.Context, key Key) (Hold, error)
	// Valid reports whether h still lets this node act: asked before each
	// event and each snapshot write (a cluster's lease may have lapsed).
	Valid(h Hold) bool
	// End ends a hold, for why, while open of the room's sockets are open
	// (and not closing) on this node. The placement parks the hold (the
	// room then wakes here again: life.EndReason.Parks, and the node's own
	// state) or releases it.
	End(ctx context.Context, h Hold, why life.EndReason, open int)
	// SocketsGone tells that key has no open socket left on this node
	// (checked each time one goes), so that a parked hold can be released.
	SocketsGone(key Key)
	// CloseLost tells that a socket of key closed and its guest could not
	// be told (its wake failed): the room's record of its sockets is out
	// of date until it next wakes.
	CloseLost(key Key)
}

// RouteKind is where a room's events go.
type RouteKind uint8

// Routes.
const (
	// RouteHere: this node runs the room, or may.
	RouteHere RouteKind = iota
	// RouteElsewhere: another node runs it: Route.Node at Route.Address.
	RouteElsewhere
	// RouteWait: nobody may run it yet (its owner died and its record is
	// not free); retry later.
	RouteWait
)

// Route is where a room's events go.
type Route struct {
	Kind RouteKind
	// Node and Address name the node that runs the room, for
	// RouteElsewhere.
	Node, Address string
}

// Hold is a node's right to run a room.
type Hold struct {
	Key        Key
	Generation uint64
	// Version is the ownership record's version (an ETag) in a cluster.
	Version string
}

// Local is the placement of a single node: every room runs here. It still
// hands out increasing generations, so snapshot tagging works the same way
// with one node as with many.
type Local struct {
	next atomic.Uint64
}

// NewLocal returns a single-node placement whose generations start above
// base, so that they keep growing across restarts when callers pass, say,
// the start time in microseconds.
func NewLocal(base uint64) *Local {
	l := &Local{}
	l.next.Store(base)
	return l
}

// Route implements Placement: here.
func (l *Local) Route(context.Context, Key) (Route, error) { return Route{Kind: RouteHere}, nil }

// Acquire implements Placement. One counter serves every room: a generation
// only has to exceed the room's earlier ones.
func (l *Local) Acquire(_ context.Context, key Key) (Hold, error) {
	return Hold{Key: key, Generation: l.next.Add(1)}, nil
}

// Valid implements Placement: a single node's holds stay valid.
func (l *Local) Valid(Hold) bool { return true }

// End implements Placement: a single node has nothing to park or release.
func (l *Local) End(context.Context, Hold, life.EndReason, int) {}

// SocketsGone implements Placement.
func (l *Local) SocketsGone(Key) {}

// CloseLost implements Placement.
func (l *Local) CloseLost(Key) {}

var _ Placement = (*Local)(nil)
