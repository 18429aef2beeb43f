// Command first-go is the room of docs/getting-started.md: it counts the
// HTTP requests each room gets and relays every text message a socket sends
// to all the room's sockets.
package main

import (
	"strconv"

	wk "github.com/wasmkeep/wasmkeep/guest-sdk/go"
)

var hits int // plain Go state: it survives hibernation and restarts

func init() {
	wk.HandleRequest(func(r *wk.Request) *wk.Response {
		hits++
		return wk.Text(200, wk.Room().Name+": "+strconv.Itoa(hits))
	})
	wk.HandleSocketMessage(func(s wk.Socket, m wk.Message) {
		if m.IsText() {
			wk.Broadcast(m.Text(), 0) // to every socket of the room, sender included
		}
	})
}

func main() {} // required by the compiler, never runs
