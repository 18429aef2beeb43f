// Command chat is a chat room as a wasmkeep actor class. Each room keeps the
// last 100 messages in memory (they survive hibernation with the rest of
// the room's memory) and relays every message to everyone in the room.
//
//	GET /actor/chat/<name>        an HTML page that joins the room over a WebSocket
//	WebSocket /actor/chat/<name>  on open, the history (oldest first), one text
//	                              frame per message; then every text message
//	                              any member sends, the sender's own included
//
// A text message a socket sends is appended to the history and broadcast to
// every socket of the room, the sender included, so every client shows the
// room's one order. Binary messages are ignored: the fitting close code,
// 1003 (unsupported data), is not one a guest may send (guests close with
// 1000 or 3000–4999), and the page never sends binary. A message longer than
// maxMessage closes its socket with 4009, so the history stays bounded.
// Other paths answer 404 (and their sockets are closed with 4004).
//
// When a new version of the class is uploaded, a room hands its history to
// it (HandleUpgrade) and a new version of this code takes it over
// (HandleStartFrom): the history survives the upgrade and the room's
// sockets stay connected. The handoff format is the history as a count and
// then each message, lengths as 4-byte little-endian, behind a format tag
// (historyFormat) so that a later version can tell what it is given.
//
// Build it with:
//
//	GOOS=wasip1 GOARCH=wasm go build -buildmode=c-shared -o chat.wasm ./examples/chat
package main

import (
	_ "embed"
	"encoding/binary"

	wk "github.com/wasmkeep/wasmkeep/guest-sdk/go"
)

//go:embed chat.html
var page string

const (
	maxHistory = 100
	maxMessage = 16 << 10
)

// history holds the last maxHistory messages, oldest first.
var history []string

func init() {
	wk.HandleRequest(serve)
	wk.HandleSocketOpen(open)
	wk.HandleSocketMessage(message)
	wk.HandleUpgrade(handOver)
	wk.HandleStartFrom(takeOver)
}

// historyFormat tags the handoff: a version that does not know the tag
// starts empty rather than misreading the bytes.
const historyFormat = "chat-history-1"

// handOver encodes the history for the next version.
func handOver() []byte {
	b := append([]byte(nil), historyFormat...)
	b = binary.LittleEndian.AppendUint32(b, uint32(len(history)))
	for _, m := range history {
		b = binary.LittleEndian.AppendUint32(b, uint32(len(m)))
		b = append(b, m...)
	}
	return b
}

// takeOver reads what handOver wrote, from this version or an older one. A
// handoff it cannot read panics, which fails the upgrade: the room stays on
// its version with its history rather than losing it.
func takeOver(prev []byte, from string) {
	rest, ok := cutPrefix(prev, historyFormat)
	if !ok {
		panic("chat: unknown handoff from " + from)
	}
	n, rest := u32(rest)
	var h []string
	for range n {
		var size uint32
		size, rest = u32(rest)
		if uint64(size) > uint64(len(rest)) {
			panic("chat: truncated handoff from " + from)
		}
		h, rest = append(h, string(rest[:size])), rest[size:]
	}
	history = h
}

func cutPrefix(b []byte, prefix string) ([]byte, bool) {
	if len(b) < len(prefix) || string(b[:len(prefix)]) != prefix {
		return nil, false
	}
	return b[len(prefix):], true
}

func u32(b []byte) (uint32, []byte) {
	if len(b) < 4 {
		panic("chat: truncated handoff")
	}
	return binary.LittleEndian.Uint32(b), b[4:]
}

func serve(r *wk.Request) *wk.Response {
	if r.Path != "/" {
		return wk.Text(404, "not found")
	}
	if r.Method != "GET" {
		return wk.Text(405, "method not allowed").SetHeader("Allow", "GET")
	}
	return wk.HTML(200, page).SetHeader("Cache-Control", "no-cache")
}

func open(s wk.Socket, o *wk.SocketOpen) {
	if o.Path != "/" {
		s.Close(4004, "not found")
		return
	}
	for _, m := range history {
		if s.Send(m) != nil {
			return // the socket is gone or overloaded; its close event follows
		}
	}
}

func message(s wk.Socket, m wk.Message) {
	if !m.IsText() {
		return
	}
	if len(m.Data) > maxMessage {
		s.Close(4009, "message too long")
		return
	}
	text := m.Text()
	if len(history) == maxHistory {
		// Shift in place: the backing array is reused, nothing leaks.
		copy(history, history[1:])
		history = history[:maxHistory-1]
	}
	history = append(history, text)
	if _, err := wk.Broadcast(text, 0); err != nil {
		wk.Warn("chat: broadcast: " + err.Error())
	}
}

// main is required by the compiler but never runs: a c-shared (reactor)
// module only runs package initialization, then the host calls its exports.
func main() {}
