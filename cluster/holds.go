package cluster

// Hold is this node's right to run a room, granted by the record it
// wrote: the room's generation for this hold (which tags everything the
// hold writes) and the record's version after that write.
type Hold struct {
	Room       Room
	Generation uint64
	Version    string
}

// pendingKey names a pending release: a room's record at one version.
type pendingKey struct {
	room    Room
	version string
}

type pendingRelease struct {
	hold     Hold
	at       int64 // next attempt, on the node's clock
	tries    int
	inflight bool
}

// addPendingLocked makes h's record a pending release due now.
func (n *Node) addPendingLocked(h Hold, now int64) *pendingRelease {
	k := pendingKey{h.Room, h.Version}
	if p := n.pending[k]; p != nil {
		return p
	}
	p := &pendingRelease{hold: h, at: now}
	n.pending[k] = p
	return p
}

// retry is the back-off after tries failed attempts: TTL/40 doubling up
// to TTL/2 (250 ms to 5 s at the default TTL).
func (n *Node) retry(tries int) int64 {
	return min(int64(n.cfg.TTL/40)<<min(tries, 16), int64(n.cfg.TTL/2))
}

// unresolvedAcquire is an acquisition whose answer was lost: its write
// may have landed, or may still land until ResolveWindow has passed.
type unresolvedAcquire struct {
	room     Room
	gen      uint64
	nonce    string
	from     string // the version it was written If-Match on; "" for a create
	since    int64  // when the answer was lost, on the node's clock
	at       int64  // next read
	tries    int
	inflight bool
}
