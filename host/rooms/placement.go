package rooms

import (
	"context"
	"sync/atomic"
)

// Placement decides where a room runs and grants this node the right to run
// it. The room manager asks it before waking a room and tells it when a room
// goes to sleep; a cluster implements it over ownership records in the
// bucket, a single node with Local.
type Placement interface {
	// Locate says where events for key should go. A single node always
	// answers Here.
	Locate(ctx context.Context, key Key) (Location, error)
	// Acquire grants this node the right to run key until Release or Park.
	// Each grant has a generation of its own, higher than any before it for
	// that room, which tags what the hold writes.
	Acquire(ctx context.Context, key Key) (Hold, error)
	// Park ends a hold whose room hibernated with sockets still open here:
	// the room stays this node's, so its next wake happens here.
	Park(h Hold)
	// Release ends a hold: the room may wake anywhere next time.
	Release(ctx context.Context, h Hold) error
}

// Location is where a room's events are delivered.
type Location struct {
	// Here is true when this node runs (or may run) the room.
	Here bool
	// Node and Address name the node that does, when not Here.
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

// Locate implements Placement.
func (l *Local) Locate(context.Context, Key) (Location, error) { return Location{Here: true}, nil }

// Acquire implements Placement. One counter serves every room: a generation
// only has to exceed the room's earlier ones.
func (l *Local) Acquire(_ context.Context, key Key) (Hold, error) {
	return Hold{Key: key, Generation: l.next.Add(1)}, nil
}

// Park implements Placement.
func (l *Local) Park(Hold) {}

// Release implements Placement.
func (l *Local) Release(context.Context, Hold) error { return nil }

var _ Placement = (*Local)(nil)
