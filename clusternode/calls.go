package clusternode

import (
	"context"

	"github.com/wasmkeep/wasmkeep/abi"
	"github.com/wasmkeep/wasmkeep/calls"
	"github.com/wasmkeep/wasmkeep/host/rooms"
	"github.com/wasmkeep/wasmkeep/host/store"
)

// Calls is the router of the calls this node's rooms make: the member
// routes each (cm.Member.Call), the room manager serves the calls that
// are here, and the others go to their node signed.
func (m *Member) Calls() calls.Router { return callRouter{m} }

type callRouter struct{ m *Member }

// Route implements calls.Router.
func (r callRouter) Route(ctx context.Context, c *calls.Call) calls.Result {
	return r.m.mem.Call(ctx, c, false, r.m.serveCall, r.m.sendCall)
}

// ServeCall implements server.ClusterMember: a call another node sent.
func (m *Member) ServeCall(ctx context.Context, wire []byte) (calls.Result, error) {
	c, err := calls.DecodeWire(wire, m.cfg.Clock.Now())
	if err != nil {
		return calls.Result{}, err
	}
	if err := rooms.CheckKey(c.To.Class, c.To.Name, store.MaxNameLen); err != nil {
		return calls.Result{}, err
	}
	return m.mem.Call(ctx, &c, true, m.serveCall, m.sendCall), nil
}

func (m *Member) serveCall(ctx context.Context, c *calls.Call) calls.Result {
	mgr := m.mgr.Load()
	if mgr == nil {
		return calls.Fail(abi.StatusRefused, "node %s has not joined yet", m.cfg.Node)
	}
	return mgr.ServeCall(ctx, c)
}

func (m *Member) sendCall(ctx context.Context, node, address string, c *calls.Call) (calls.Result, bool) {
	return m.peers.SendCall(ctx, node, address, c, m.cfg.Clock.Now())
}
