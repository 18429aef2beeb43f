// Command table is a game table of the example app (examples/site is its
// front, examples/lobby its lobby): players sit at it over WebSockets and
// talk; the lobby and the front reach it with calls.
//
//	WebSocket /actor/table/<name>  the front hands each player's socket
//	                               here with the player's name in
//	                               Wasmkeep-Front-Player; every event at the table
//	                               goes to every socket as a JSON object:
//	                               {"type":"joined"|"left","player":…},
//	                               {"type":"say","player":…,"text":…}
//	                               (a text message a player sends), and
//	                               {"type":"announce","text":…}
//
// Calls it answers (the payload is a command):
//
//	init:<title>   from the lobby, which created the table: its title
//	state          its state as JSON: name, title, players, messages
//	announce:<t>   sends <t> to every player; answers how many got it
//
// Calls it makes: when a player sits down or leaves, it tells the lobby
// its number of players ("players:<name>:<n>"), without waiting for the
// answer. Waiting would risk a wait on each other: the lobby calls tables
// for their state, and a table waiting on the lobby while the lobby waits
// on the table would both wait until the calls' deadline. A call started
// and not waited for still runs; the event goes on at once.
//
// The table keeps its players and the number of messages in memory: they
// survive hibernation with the rest of the room.
//
// The table takes the player's name from Wasmkeep-Front-Player, which the
// front set: the node removes every Wasmkeep-Front header from a client's
// own request, so only a front's hand-over can set one, and a client that
// opens /actor/table/<name> itself is turned away.
package main

import (
	"encoding/json"
	"strconv"
	"strings"

	wk "github.com/wasmkeep/wasmkeep/guest-sdk/go"
)

var (
	title    string
	players  = map[wk.Socket]string{}
	messages int
)

// maxText bounds what a player may say in one message.
const maxText = 2000

func init() {
	wk.HandleSocketOpen(sitDown)
	wk.HandleSocketMessage(say)
	wk.HandleSocketClose(leave)
	wk.HandleCall(answer)
}

func sitDown(s wk.Socket, o *wk.SocketOpen) {
	player := o.Header("Wasmkeep-Front-Player")
	if player == "" {
		_ = s.Close(4001, "come in through the front: /app")
		return
	}
	players[s] = player
	send(map[string]string{"type": "joined", "player": player})
	tellLobby()
}

func say(s wk.Socket, m wk.Message) {
	player, ok := players[s]
	if !ok || !m.IsText() || len(m.Data) > maxText {
		return
	}
	messages++
	send(map[string]string{"type": "say", "player": player, "text": m.Text()})
}

func leave(s wk.Socket, _ int, _ string) {
	player, ok := players[s]
	if !ok {
		return
	}
	delete(players, s)
	send(map[string]string{"type": "left", "player": player})
	tellLobby()
}

func answer(_ wk.Caller, payload []byte) []byte {
	cmd, arg, _ := strings.Cut(string(payload), ":")
	switch cmd {
	case "init":
		title = arg
		return []byte("ok")
	case "state":
		names := []string{}
		for _, p := range players {
			names = append(names, p)
		}
		b, _ := json.Marshal(map[string]any{"name": wk.Room().Name, "title": title, "players": names, "messages": messages})
		return b
	case "announce":
		return []byte(strconv.Itoa(send(map[string]string{"type": "announce", "text": arg})))
	}
	return []byte("unknown command")
}

// send broadcasts an event to every player and returns to how many.
func send(event map[string]string) int {
	b, _ := json.Marshal(event)
	n, _ := wk.Broadcast(string(b), 0)
	return n
}

// tellLobby tells the lobby how many players sit here, and does not wait.
func tellLobby() {
	wk.StartCall("lobby", "main", []byte("players:"+wk.Room().Name+":"+strconv.Itoa(len(players))))
}

func main() {}
