package fronts

import (
	"context"

	"github.com/wasmkeep/wasmkeep/abi"
	"github.com/wasmkeep/wasmkeep/calls"
	"github.com/wasmkeep/wasmkeep/host/engine"
	"github.com/wasmkeep/wasmkeep/host/rooms"
)

// host is what a front's instance acts on (engine.Host, engine.CallHost):
// no sockets, no channels, its class for a room, and calls to rooms.
type host struct {
	p      *pool
	caller rooms.Caller
}

var (
	_ engine.Host     = (*host)(nil)
	_ engine.CallHost = (*host)(nil)
)

// StartCall starts a call the front made while serving a request: its
// chain is the front alone, its deadline the call timeout from now.
func (h *host) StartCall(to calls.Room, payload []byte) (*calls.Pending, *calls.Error) {
	f := h.p.f
	c := &calls.Call{To: to, Chain: calls.Chain{{Class: h.p.name}}, Payload: payload,
		Deadline: f.cfg.Clock.Now() + int64(f.calls.CallTimeout())}
	return f.calls.StartCall(&h.caller, c, f.met.calls)
}

// A front has no sockets: what names one finds none, what would reach
// them all is not for a front.

func (*host) SocketSend(uint32, int, []byte) abi.Status            { return abi.StatusNoSocket }
func (*host) SocketClose(uint32, abi.CloseCode, string) abi.Status { return abi.StatusNoSocket }
func (*host) SocketList(dst []uint32) []uint32                     { return dst }
func (*host) Broadcast(int, []byte, uint32) int                    { return int(abi.StatusState) }

func (*host) ChannelPush(uint32, *abi.ChannelMessage) abi.Status { return abi.StatusNoSocket }
func (*host) ChannelBroadcast(uint32, *abi.ChannelMessage) int   { return int(abi.StatusState) }
func (*host) ChannelClose(uint32, string) abi.Status             { return abi.StatusNoSocket }
func (*host) PresenceTrack(uint32, *abi.Presence) abi.Status     { return abi.StatusNoSocket }
func (*host) PresenceUntrack(uint32, *abi.Presence) abi.Status   { return abi.StatusNoSocket }

// RoomInfo is the front's class, with no room name.
func (h *host) RoomInfo() abi.RoomInfo { return abi.RoomInfo{Class: h.p.name} }

// Log logs a guest's line under its front's name.
func (h *host) Log(level int, msg string) {
	h.p.f.log.Log(context.Background(), engine.LogLevel(level), msg, "front", h.p.name, "source", "guest")
}
