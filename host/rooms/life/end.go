package life

// EndReason says why a hold on a room ends. The placement decides from it,
// and from the room's open sockets here, whether to park the hold (keep
// the room's ownership so that it wakes where its sockets are) or release
// it (seed 000 §1: only an idle drop or an eviction of a room with an
// open socket parks; every other end releases).
type EndReason uint8

// Reasons a hold ends.
const (
	EndIdle          EndReason = iota + 1 // the idle sweep hibernated it
	EndEvict                              // evicted for a place under --max-resident
	EndCrash                              // a guest call crashed: rolled back
	EndAdmin                              // an operator hibernated it
	EndDrain                              // the node drains
	EndMove                               // the room moves to another node
	EndStop                               // a clean stop
	EndFailedRestore                      // the wake could not restore it
	EndDropped                            // the hold was found invalid: dropped unwritten
	EndDeleted                            // its state was deleted
	EndLapse                              // the node's lease lapsed: every hold ends
)

var endNames = [...]string{"", "idle", "evict", "crash", "admin", "drain", "move", "stop", "failed_restore", "dropped", "deleted", "lapse"}

// String is the reason as metrics and logs name it.
func (r EndReason) String() string {
	if int(r) < len(endNames) && r > 0 {
		return endNames[r]
	}
	return "unknown"
}

// Parks reports whether a hold ending for r, with open sockets that are
// open and not closing on this node, should be parked under seed 000 §1:
// only an idle drop or an eviction of a room with an open socket; the
// node's own state (draining, moving, stopping, a hold no longer valid)
// is the placement's to add.
func (r EndReason) Parks(open int) bool {
	return open > 0 && (r == EndIdle || r == EndEvict)
}
