package cluster

import (
	"cmp"
	"slices"
	"time"
)

// Acting reports whether the node holds a valid hold on room now. It
// changes nothing (the simulation's checks call it after every step).
func (n *Node) Acting(room Room) bool {
	n.mu.Lock()
	defer n.mu.Unlock()
	_, held := n.holds[room]
	return held && n.phase == active && n.clock.Now() < n.lease.validUntil
}

// Accounts reports whether the node has something that will settle a
// record of room at version written with nonce: the live hold of that
// version, a pending release of it, or the acquisition (in flight or
// unresolved) that wrote it. A record naming this instance with none of
// these is a leak.
func (n *Node) Accounts(room Room, version, nonce string) bool {
	n.mu.Lock()
	defer n.mu.Unlock()
	if h, ok := n.holds[room]; ok && h.Version == version {
		return true
	}
	if h, ok := n.parked[room]; ok && h.Version == version {
		return true
	}
	if _, ok := n.pending[pendingKey{room, version}]; ok {
		return true
	}
	if a, ok := n.acquiring[room]; ok && a == nonce {
		return true
	}
	u, ok := n.unresolved[nonce]
	return ok && u.room == room
}

// Drained reports whether nothing is left here that names this node:
// no hold, no pending release, no unresolved acquisition.
func (n *Node) Drained() bool {
	n.mu.Lock()
	defer n.mu.Unlock()
	return len(n.holds) == 0 && len(n.parked) == 0 && len(n.pending) == 0 && len(n.unresolved) == 0 && len(n.acquiring) == 0
}

// Counters count what the node did, for metrics and the simulation.
type Counters struct {
	Renewals, RenewalsFailed uint64
	Lapses                   uint64 // the lease ran out with holds: they became pending releases
	Parks                    uint64 // holds parked at a hibernation with sockets open
	ParkedWakes              uint64 // acquisitions of a room parked here (each at a new generation)
	ParkedReleases           uint64 // parked records released (last socket, drain, move)
	ParkedLapsed             uint64 // parked records made pending releases by a lapse
	ParkedStopped            uint64 // parked records released by a clean stop
	Fences                   uint64 // peers this node fenced
	Moves                    uint64 // moves begun
	MoveStrayReleases        uint64 // records found naming this node by a move's look, with nothing here holding them
	Acquired                 uint64
	AcquireContended         uint64 // the record moved between the read and the write
	AcquireUnknown           uint64 // handed to the resolver
	AcquireRefused           uint64 // the record names a live (or unknown) instance
	Released                 uint64 // releases that landed
	ReleaseMoot              uint64 // the record had moved: nothing left to release
	ReleaseRetries           uint64
	ResolvedLanded           uint64 // an unresolved acquisition had landed: released
	ResolvedMoved            uint64
	ResolvedExpired          uint64 // unchanged for ResolveWindow: could no longer land
}

// Counts returns the node's counters.
func (n *Node) Counts() Counters {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.counts
}

// Status is a node's state as operators see it.
type Status struct {
	Node, Instance string
	Phase          string
	LeaseValid     bool
	// ValidFor is how long the lease stays valid without another
	// renewal (0 if it is not valid).
	ValidFor   time.Duration
	Draining   bool
	Holds      []Hold
	Parked     []Hold // records kept for rooms that hibernated with sockets open here
	Pending    []Hold // releases not yet landed
	Unresolved []Hold // acquisitions whose answer was lost (Version is the one they replaced)
	Moving     []Move // rooms moving away
	Peers      []Peer
}

// Peer is what a node knows of another's lease.
type Peer struct {
	Node, Instance, Address string
	State                   LeaseState
	Draining                bool
	// Silent is for how long (by this node's clock) its lease has not
	// changed.
	Silent time.Duration
}

// Status returns the node's state, sorted by room and node.
func (n *Node) Status() Status {
	n.mu.Lock()
	defer n.mu.Unlock()
	now := n.clock.Now()
	s := Status{Node: n.cfg.Node, Instance: n.cfg.Instance, Phase: n.phase.String(), LeaseValid: n.validLocked(now), Draining: n.draining}
	if s.LeaseValid {
		s.ValidFor = time.Duration(n.lease.validUntil - now)
	}
	for _, h := range n.holds {
		s.Holds = append(s.Holds, h)
	}
	for _, h := range n.parked {
		s.Parked = append(s.Parked, h)
	}
	for _, p := range n.pending {
		s.Pending = append(s.Pending, p.hold)
	}
	for _, u := range n.unresolved {
		s.Unresolved = append(s.Unresolved, Hold{Room: u.room, Generation: u.gen, Version: u.from})
	}
	s.Moving = n.movesLocked()
	for name, p := range n.peers {
		s.Peers = append(s.Peers, Peer{Node: name, Instance: p.lease.Instance, Address: p.lease.Address, State: p.lease.State, Draining: p.lease.Draining, Silent: time.Duration(now - p.since)})
	}
	for _, hs := range [][]Hold{s.Holds, s.Parked, s.Pending, s.Unresolved} {
		slices.SortFunc(hs, compareHolds)
	}
	slices.SortFunc(s.Peers, func(a, b Peer) int { return cmp.Compare(a.Node, b.Node) })
	return s
}

// CompareRooms orders rooms by class, then name.
func CompareRooms(a, b Room) int {
	return cmp.Or(cmp.Compare(a.Class, b.Class), cmp.Compare(a.Name, b.Name))
}

func compareHolds(a, b Hold) int {
	return cmp.Or(CompareRooms(a.Room, b.Room), cmp.Compare(a.Version, b.Version))
}
