package server

import (
	"net/http"

	"github.com/wasmkeep/wasmkeep/abi"
	"github.com/wasmkeep/wasmkeep/host/engine"
	"github.com/wasmkeep/wasmkeep/host/phoenix"
	"github.com/wasmkeep/wasmkeep/host/rooms"
	"github.com/wasmkeep/wasmkeep/host/socket"
)

// channelPath is where, below a room, the host serves the Phoenix socket
// (phoenix.js appends /websocket to the endpoint it is given: a client
// connects with new Socket("/actor/<class>/<name>/socket")).
const channelPath = "/socket/websocket"

// upgradeChannels accepts a Phoenix Channels V2 socket for a room whose
// class handles joins. The host terminates the protocol; see host/rooms.
func (s *Server) upgradeChannels(w http.ResponseWriter, r *http.Request, key rooms.Key, below string, class *engine.Class) {
	if !class.Handles(engine.EventJoin) {
		textError(w, http.StatusNotFound, "this class does not serve Phoenix channels (it exports no join handler)")
		return
	}
	if v := r.URL.Query().Get("vsn"); v != "2.0.0" {
		textError(w, http.StatusBadRequest, "unsupported Phoenix serializer version "+v+": connect with vsn=2.0.0 (phoenix.js 1.7 and later do)")
		return
	}
	// phoenix.js offers the "phoenix" subprotocol (with a token in a second
	// one) when it has an auth token; the room reads the token from the
	// open event's headers.
	opts := &socket.UpgradeOptions{Protocol: func(p string) bool { return p == "phoenix" }}
	s.upgradeInto(w, r, below, opts, func(c rooms.Conn, open *abi.SocketOpen) (*rooms.Socket, error) {
		return s.rooms.OpenChannelSocket(key, c, open, phoenix.Config{})
	})
}
