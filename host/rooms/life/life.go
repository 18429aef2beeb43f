// Package life holds the decisions of a room's life, apart from doing
// them: which rooms to hibernate and when, how many may be resident, what
// an event's outcome requires before its output may leave, what a woken
// room must be told about its sockets, when a failed write is tried again,
// and why a hold ends. It does no I/O, reads no clock and starts no
// goroutine: callers pass the time and the facts, and get back what to
// do. The room manager (host/rooms) is the loop around it that talks to
// the engine, the store and the sockets.
//
// The shape is etcd-io/raft's RawNode (a pure state machine stepped with
// inputs and the time, whose answers say what to persist, send and apply)
// scaled down to what a room needs: most of a room's life is a sequence
// the worker runs in order, so the decisions are functions of the facts
// at each step rather than one Step with a queue of inputs.
package life

// Plan is what the worker does after a guest call returned: roll back, or
// delete the state (Delete) before letting the event's output go, or let
// it go once the state is durable (Write), or at once (Apply alone).
// Output never leaves before the state behind it is as durable as the
// class asks.
type Plan struct {
	// Rollback: the call crashed (trap, time limit, memory limit, exit):
	// drop its output and the instance; the room restarts from its last
	// snapshot at its next event.
	Rollback bool
	// Delete: the guest asked for its state to be deleted: delete the
	// stored state, then apply the output, then drop the instance without
	// writing it.
	Delete bool
	// Write: the output waits until the state is durable (the room's
	// next commit, host/rooms/commit.go); if that write fails, the output
	// fails and the room rolls back.
	Write bool
	// Apply: let the event's output (replies, sends, closes) go.
	Apply bool
}

// Call is what a guest call reported.
type Call struct {
	// Crashed: the call ended in an error of the guest's.
	Crashed bool
	// Checkpoint and Delete: what the guest asked for during the call.
	Checkpoint, Delete bool
}

// AfterCall decides what follows a guest call in a room whose class asks
// for its state to be durable after every event (durable) or not.
func AfterCall(c Call, durable bool) Plan {
	switch {
	case c.Crashed:
		return Plan{Rollback: true}
	case c.Delete:
		return Plan{Delete: true, Apply: true}
	case c.Checkpoint || durable:
		return Plan{Write: true, Apply: true}
	}
	return Plan{Apply: true}
}

// NeedsWrite reports whether hibernating (or checkpointing) a room must
// write a snapshot: its memory changed since the last one, or it has none.
func NeedsWrite(changed, stored bool) bool { return changed || !stored }
