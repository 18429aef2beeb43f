package cluster

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
	if _, ok := n.pending[pendingKey{room, version}]; ok {
		return true
	}
	if a, ok := n.acquiring[room]; ok && a == nonce {
		return true
	}
	u, ok := n.unresolved[nonce]
	return ok && u.room == room
}

// Counters count what the node did, for metrics and the simulation.
type Counters struct {
	Renewals, RenewalsFailed uint64
	Lapses                   uint64 // the lease ran out with holds: they became pending releases
	Fences                   uint64 // peers this node fenced
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
