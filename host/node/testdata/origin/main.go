// Command origin is the guest of TestUpgradeOrigins: a room that reads
// the Origin header of its sockets' upgrades, as a room that checks its
// clients' pages itself would, and refuses one origin by closing the
// socket in its open handler.
//
//	socket open, Origin http://refused.example   closed with 4003 "origin refused"
//	raw socket open, any other                   sent "origin <Origin>" ("" if none)
//	Phoenix socket open, any other               the Origin is kept for its joins
//	join                                         ok {"origin": "<the socket's Origin>"}
package main

import (
	"encoding/json"

	wk "github.com/wasmkeep/wasmkeep/guest-sdk/go"
)

// refused is the origin the room refuses.
const refused = "http://refused.example"

// origins are the Origin headers of the room's open Phoenix sockets.
var origins = map[wk.Socket]string{}

func init() {
	wk.HandleSocketOpen(func(s wk.Socket, o *wk.SocketOpen) {
		origin := o.Header("Origin")
		switch {
		case origin == refused:
			s.Close(4003, "origin refused")
		case o.Path == "/socket/websocket":
			origins[s] = origin
		default:
			s.Send("origin " + origin)
		}
	})
	wk.HandleSocketClose(func(s wk.Socket, _ int, _ string) { delete(origins, s) })
	wk.HandleJoin(func(s wk.Socket, _ *wk.Join) *wk.Reply {
		body, _ := json.Marshal(map[string]string{"origin": origins[s]})
		return wk.OK(body)
	})
}

func main() {} // required by the compiler, never runs
