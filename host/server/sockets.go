package server

import (
	"errors"
	"net/http"
	"strings"

	"github.com/wasmkeep/wasmkeep/abi"
	"github.com/wasmkeep/wasmkeep/host/engine"
	"github.com/wasmkeep/wasmkeep/host/rooms"
	"github.com/wasmkeep/wasmkeep/host/socket"
)

func isUpgrade(r *http.Request) bool {
	return r.Method == http.MethodGet && strings.EqualFold(r.Header.Get("Upgrade"), "websocket")
}

// upgrade accepts a WebSocket for a room. The class is checked before the
// handshake, so a bad URL costs no socket. The hub's admission (the node's
// cap and the per-address limits, HTTP 429) runs before anything is asked of
// the room: a refused client never wakes it. The open event is queued before
// the socket starts reading, so the room sees it before any message.
func (s *Server) upgrade(w http.ResponseWriter, r *http.Request, key rooms.Key, below string, class *engine.Class) {
	if !class.Handles(engine.EventSocketOpen) && !class.Handles(engine.EventSocketMessage) {
		textError(w, http.StatusNotFound, "this class does not accept WebSockets")
		return
	}
	s.upgradeInto(w, r, below, nil, func(c rooms.Conn, open *abi.SocketOpen) (*rooms.Socket, error) {
		return s.rooms.OpenSocket(key, c, open)
	})
}

// upgradeInto makes the open record of an upgrade request for the path
// below its room, upgrades it (with opts), and hands the socket to the
// room through openRoom; a room that cannot take it closes it at once with
// the code that says why.
func (s *Server) upgradeInto(w http.ResponseWriter, r *http.Request, below string, opts *socket.UpgradeOptions,
	openRoom func(rooms.Conn, *abi.SocketOpen) (*rooms.Socket, error)) {
	open := &abi.SocketOpen{Path: below, Query: r.URL.RawQuery, Headers: upgradeHeaders(r.Header, r.Host), Remote: r.RemoteAddr}
	if len(open.Headers) > abi.MaxHeaderCount {
		textError(w, http.StatusRequestHeaderFieldsTooLarge, "too many header lines")
		return
	}
	conn, err := s.hub.Upgrade(w, r, opts)
	if err != nil {
		return // the hub has answered
	}
	sock, err := openRoom(socketConn{conn}, open)
	if err != nil {
		code := abi.CloseInternalError
		if errors.Is(err, rooms.ErrStopping) {
			code = abi.CloseServiceRestart
		} else if errors.Is(err, rooms.ErrOverloaded) {
			code = abi.CloseTryAgainLater
		}
		conn.Close(code, forClient(err.Error()))
		conn.Start(discard{})
		return
	}
	conn.Start(socketEvents{sock})
}

// handshakeOnly are upgrade headers that mean nothing once the handshake is
// done; leaving them out of the open record saves memory on every socket the
// room keeps (the record is replayed if the room rolls back).
var handshakeOnly = map[string]bool{"Sec-Websocket-Key": true, "Sec-Websocket-Version": true, "Sec-Websocket-Extensions": true}

func upgradeHeaders(h http.Header, host string) []abi.Header {
	hs := headersOf(h, host)
	out := hs[:0]
	for _, x := range hs {
		if !handshakeOnly[x.Name] {
			out = append(out, x)
		}
	}
	return out
}

// socketConn adapts a socket.Conn to what rooms send through.
type socketConn struct{ c *socket.Conn }

func (c socketConn) SendFrame(f rooms.Frame) error           { return c.c.SendPrepared(f.(*socket.Prepared)) }
func (c socketConn) Send(kind int, data []byte) error        { return c.c.SendChecked(kind, data) }
func (c socketConn) Close(code abi.CloseCode, reason string) { c.c.Close(code, reason) }
func (c socketConn) Cork()                                   { c.c.Cork() }
func (c socketConn) Uncork()                                 { c.c.Uncork() }

// socketEvents forwards what happens on the wire to the room.
type socketEvents struct{ s *rooms.Socket }

func (e socketEvents) OnMessage(_ *socket.Conn, kind int, data []byte) { _ = e.s.Message(kind, data) }
func (e socketEvents) OnClose(_ *socket.Conn, code abi.CloseCode, reason string) {
	e.s.Closed(code, reason)
}

// OnMessages hands a burst of the socket's messages to the room as one
// event.
func (e socketEvents) OnMessages(_ *socket.Conn, msgs []socket.Message) {
	_ = rooms.DeliverMessages(e.s, msgs)
}

type discard struct{}

func (discard) OnMessage(*socket.Conn, int, []byte)         {}
func (discard) OnClose(*socket.Conn, abi.CloseCode, string) {}

// Framer returns the rooms.Framer that encodes messages for hub's sockets.
func Framer(hub *socket.Hub) rooms.Framer {
	return func(kind int, data []byte) (rooms.Frame, error) { return hub.Prepare(kind, data) }
}
