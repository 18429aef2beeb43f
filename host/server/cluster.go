package server

import (
	"context"
	"errors"

	"github.com/wasmkeep/wasmkeep/calls"
	"github.com/wasmkeep/wasmkeep/host/rooms"
)

// Cluster makes a node's HTTP surface a member of a cluster: requests for
// rooms another node runs are forwarded to it (WebSocket upgrades
// relayed), node-to-node requests are signed with Secret and checked
// (peer.go), and the admin API gains /admin/cluster.
type Cluster struct {
	// Node is this node's name: the hop marker of what it forwards.
	Node string
	// Secret signs and checks node-to-node requests. Required: a node
	// without it refuses to join.
	Secret []byte
	// Member is the node's cluster membership.
	Member ClusterMember
}

// ClusterMember is what the HTTP surface asks of the node's membership of
// a cluster, for the admin API and for node-to-node calls.
type ClusterMember interface {
	// Dispatch routes a request for key that landed here (forwarded: a
	// peer sent it, and it may go no further): the room is here, or it
	// is sent to the room's node through forward (which reports
	// unreachable if it could not connect at all: nothing sent, nothing
	// answered), or refused. Waits for a room whose node stopped
	// answering, and routes again after an unreachable node, as the
	// member decides.
	Dispatch(ctx context.Context, key rooms.Key, forwarded bool, forward func(ctx context.Context, node, address string) (unreachable bool)) ClusterRoute
	// Status is this node's view: its lease, its holds and pending
	// releases, and its peers' leases.
	Status() ClusterNode
	// Ready is nil while the node can take traffic: it has joined (its
	// lease written), its lease is valid, and it is neither draining nor
	// stopping. Otherwise it says why not, for /readyz.
	Ready() error
	// Drain starts handing this node's rooms over (on) or takes rooms
	// again (off). It returns at once; Status tells when it is drained.
	Drain(on bool) error
	// Move hands a room held or parked here over to node to: its state
	// is written and its record released, to is asked to take it, and
	// its sockets here close with 1012 once it has. by is the node that
	// holds the room then: to, or another that one of the room's events
	// reached first. An error wrapping ErrMoveUnderWay says the move
	// goes on in the background (its release has not landed yet, or the
	// target has not taken it).
	Move(ctx context.Context, key rooms.Key, to string) (by string, err error)
	// Take acquires and wakes a room here: the target's side of a move.
	Take(ctx context.Context, key rooms.Key) error
	// FenceNode fences node by hand: its lease is written fenced at
	// once, which frees its records for any node to take. For a node
	// whose process is dead or stopped for good. (Not Fence: a
	// placement's Fence is the room's generation bound.)
	FenceNode(ctx context.Context, node string) error
	// Peer reads node's lease from the bucket now, for an operator's
	// command about a node this node's view may not have seen yet (it
	// lists the leases every third of a lease time).
	Peer(ctx context.Context, node string) (ClusterPeer, bool)
	// Gone reports, from this node's view alone (no request), whether
	// node's lease is fenced or released: a forward still waiting on it
	// is given up.
	Gone(node string) bool
	// Where says where each of keys runs, for GET /admin/rooms: a room
	// held or parked here from this node's own state, any other from a
	// read of its ownership record. It reads at most reads records (for
	// the first keys in order that need one), a few at a time; a key it
	// did not read, or whose record could not be read, is not in the
	// answer.
	Where(ctx context.Context, keys []rooms.Key, reads int) map[rooms.Key]RoomPlace
	// ServeCall serves a call another node sent (calls.AppendWire's
	// encoding): it runs here, or is refused, and its answer is
	// returned. An error is a malformed call.
	ServeCall(ctx context.Context, wire []byte) (calls.Result, error)
}

// ClusterRoute is what a member decided for a request.
type ClusterRoute struct {
	// Serve: the room is here; the caller serves the request.
	Serve bool
	// Answered: the request was forwarded, and forward answered it.
	Answered bool
	// Otherwise it is refused: 503 with Retry-After and this message;
	// Moved marks a request forwarded here for a room that is not here
	// (X-Wasmkeep-Room-Moved), Err a record that could not be read.
	Refused string
	Moved   bool
	Err     error
}

// Where a room runs in a cluster: RoomPlace.Place.
const (
	// PlaceHeld: Node holds the room's record, so the room runs there. A
	// record does not say whether its holder keeps the room resident or
	// parked: a room parked on another node is held as this node sees
	// it (GET /admin/cluster lists each node's parked rooms).
	PlaceHeld = "held"
	// PlaceParked: the room hibernated with sockets open on Node, which
	// keeps its record: its events go there and wake it there.
	PlaceParked = "parked"
	// PlaceFree: no live process holds the room's record (there is none,
	// it is free, or its holder's lease is fenced or released): the room
	// runs nowhere, and the node its next event reaches takes it.
	PlaceFree = "free"
)

// RoomPlace is where a room runs in a cluster, as GET /admin/rooms shows
// it.
type RoomPlace struct {
	// Place is held, parked or free.
	Place string `json:"place"`
	// Node is the node that holds or parks the room; empty when free.
	Node string `json:"node,omitempty"`
}

// ClusterNode is one node's state, as GET /admin/cluster shows it.
type ClusterNode struct {
	Node     string `json:"node"`
	Instance string `json:"instance"`
	Address  string `json:"address"`
	// Phase is joining, active, stopping, stopped or lost.
	Phase      string `json:"phase"`
	LeaseValid bool   `json:"lease_valid"`
	// ValidForMS is how long the lease stays valid without a renewal.
	ValidForMS int64 `json:"valid_for_ms"`
	Draining   bool  `json:"draining"`
	// Drained: draining, and nothing left that names the node.
	Drained bool          `json:"drained"`
	Holds   []ClusterRoom `json:"holds"`
	// Parked are the records kept for rooms that hibernated with sockets
	// open on the node: their events are routed to it.
	Parked  []ClusterRoom `json:"parked"`
	Pending []ClusterRoom `json:"pending_releases"`
	// Moving are the rooms being moved away from the node.
	Moving []ClusterMoving `json:"moving"`
	Peers  []ClusterPeer   `json:"peers"`
	Error  string          `json:"error,omitempty"` // a peer that could not be asked
}

// ErrMoveUnderWay: a move was begun and goes on in the background: its
// record's release has not landed yet, or its target has not taken it.
// The node finishes it or gives it up within two minutes (ClusterNode
// Moving shows it meanwhile).
var ErrMoveUnderWay = errors.New("server: the move goes on in the background")

// ClusterMoving is a room being moved away from a node.
type ClusterMoving struct {
	Class string `json:"class"`
	Name  string `json:"name"`
	To    string `json:"to"`
	// ForMS is how long the move has been under way.
	ForMS int64 `json:"for_ms"`
}

// ClusterRoom is a room a node holds or has a release pending for.
type ClusterRoom struct {
	Class      string `json:"class"`
	Name       string `json:"name"`
	Generation uint64 `json:"generation"`
}

// ClusterPeer is what a node knows of another's lease.
type ClusterPeer struct {
	Node     string `json:"node"`
	Instance string `json:"instance"`
	Address  string `json:"address"`
	// State is live, fenced or released.
	State    string `json:"state"`
	Draining bool   `json:"draining"`
	// SilentMS is for how long the observer has seen its lease unchanged.
	SilentMS int64 `json:"silent_ms"`
}
