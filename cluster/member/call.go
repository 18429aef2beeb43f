package member

import (
	"context"
	"time"

	"github.com/wasmkeep/wasmkeep/abi"
	"github.com/wasmkeep/wasmkeep/calls"
	"github.com/wasmkeep/wasmkeep/cluster"
)

// Calls between rooms in a cluster (docs/cluster.md, "Calls"). A call is
// routed as any event is (Dispatch): served here, sent to the node that
// holds or parks the callee (where a parked room wakes, beside its
// sockets), or refused; a silent owner is waited for, within the call's
// deadline. Three rules are the member's:
//
//   - the chain is checked where the call is made, before anything is
//     sent: a cycle or a chain too deep fails at once (calls.Check);
//   - a call is sent again only if it provably was not sent (no
//     connection): one that reached a node and got no answer may have
//     run, and fails as timed out instead of running twice;
//   - a call carries its deadline, and a node serves no call past it:
//     its caller has given up on it. Nor does it send one: a call whose
//     deadline passed while it was routed is answered timed out, and its
//     node is not taken for unreachable (nothing tried to reach it).

// CallSend sends a call to node, at address, and returns its answer. sent
// is false only if nothing of the call left this node (it could not
// connect): the member routes it once more. A call that was sent and got
// no answer is answered StatusTimeout by CallSend itself.
type CallSend func(ctx context.Context, node, address string, c *calls.Call) (res calls.Result, sent bool)

// noDeadline is how far off the CallWithoutDeadline variant puts a
// forwarded call's deadline: as good as none.
const noDeadline = time.Hour

// Call routes a call that landed here (forwarded: another node sent it)
// and returns its answer: serve runs it here, send takes it to another
// node.
func (m *Member) Call(ctx context.Context, c *calls.Call, forwarded bool, serve func(context.Context, *calls.Call) calls.Result, send CallSend) calls.Result {
	past := func() bool { return m.cfg.Clock.Now() >= c.Deadline }
	if !forwarded && !m.cfg.Broken.CycleCheckOff {
		if err := calls.Check(c.Chain, c.To); err != nil {
			return calls.Result{Err: err}
		}
	}
	if past() {
		return calls.Expired(c)
	}
	var res calls.Result
	d := m.dispatch(ctx, cluster.Room{Class: c.To.Class, Name: c.To.Name}, forwarded, c.Deadline, func(ctx context.Context, node, address string) bool {
		if past() {
			res = calls.Expired(c)
			return false
		}
		out := c
		if m.cfg.Broken.CallWithoutDeadline {
			cp := *c
			cp.Deadline = m.cfg.Clock.Now() + int64(noDeadline)
			out = &cp
		}
		var sent bool
		res, sent = send(ctx, node, address, out)
		if m.cfg.Broken.CallRetriedAfterRun && sent && res.Err != nil && res.Err.Status == abi.StatusTimeout {
			return true // as if it had not been sent: routed and sent again
		}
		return !sent
	})
	switch d.Outcome {
	case Serve:
		if past() {
			return calls.Expired(c)
		}
		return serve(ctx, c)
	case Forwarded:
		return res
	}
	if past() {
		return calls.Expired(c)
	}
	return calls.Fail(abi.StatusRefused, "%s: %s", c.To, d.Reason())
}

// Reason says why an event was refused, for its client or caller to
// read.
func (d Decision) Reason() string {
	switch d.Refusal {
	case RefusedInactive:
		return "this node's cluster lease is not valid (joining, or lapsed)"
	case RefusedMoved:
		return "the room moved to " + d.Node
	case RefusedUnreachable:
		return "the room's node " + d.Node + " cannot be reached"
	case RefusedBucket:
		return "cannot tell where the room runs: " + d.Err.Error()
	}
	return "the room's node stopped answering and the room is not free to run elsewhere yet"
}
