package server

import (
	"errors"
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
	open := &abi.SocketOpen{Path: below, Query: r.URL.RawQuery, Headers: upgradeHeaders(r.Header, r.Host), Remote: r.RemoteAddr}
	if len(open.Headers) > abi.MaxHeaderCount {
		textError(w, http.StatusRequestHeaderFieldsTooLarge, "too many header lines")
		return
	}
	// phoenix.js offers the "phoenix" subprotocol (with a token in a second
	// one) when it has an auth token; the room reads the token from the
	// open event's headers.
	conn, err := s.hub.Upgrade(w, r, &socket.UpgradeOptions{Protocol: func(p string) bool { return p == "phoenix" }})
	if err != nil {
		return
	}
	sock, err := s.rooms.OpenChannelSocket(key, socketConn{conn}, open, phoenix.Config{})
	if err != nil {
		code := abi.CloseInternalError
		if errors.Is(err, rooms.ErrStopping) {
			code = abi.CloseServiceRestart
		} else if errors.Is(err, rooms.ErrOverloaded) {
			code = abi.CloseTryAgainLater
		}
		conn.Close(code, err.Error())
		conn.Start(discard{})
		return
	}
	conn.Start(socketEvents{sock})
}
