// Command chatv2 is the next version of examples/chat, for the upgrade
// tests: it takes over a chat room's history (the "chat-history-1" handoff
// examples/chat writes) and hands it on in the same format, and its new
// behaviour is visible: every message it relays is prefixed "v2: ", and
// GET /version answers "v2". A socket's open sends the history as chat does.
package main

import (
	"encoding/binary"
	"strings"

	wk "github.com/wasmkeep/wasmkeep/guest-sdk/go"
)

var history []string

const tag = "chat-history-1"

func init() {
	wk.HandleRequest(func(r *wk.Request) *wk.Response {
		if r.Path == "/version" {
			return wk.Text(200, "v2")
		}
		return wk.Text(200, strings.Join(history, "\n"))
	})
	wk.HandleSocketOpen(func(s wk.Socket, _ *wk.SocketOpen) {
		for _, m := range history {
			s.Send(m)
		}
	})
	wk.HandleSocketMessage(func(_ wk.Socket, m wk.Message) {
		text := "v2: " + m.Text()
		history = append(history, text)
		wk.Broadcast(text, 0)
	})
	wk.HandleUpgrade(func() []byte {
		out := []byte(tag)
		out = binary.LittleEndian.AppendUint32(out, uint32(len(history)))
		for _, m := range history {
			out = append(binary.LittleEndian.AppendUint32(out, uint32(len(m))), m...)
		}
		return out
	})
	wk.HandleStartFrom(func(prev []byte, _ string) {
		if !strings.HasPrefix(string(prev), tag) {
			panic("chatv2: not a chat history")
		}
		// Every length is checked against what is left: a short handoff
		// panics (the upgrade fails) rather than reading past its end.
		b := prev[len(tag):len(prev):len(prev)]
		count := binary.LittleEndian.Uint32(b)
		at := 4
		for i := uint32(0); i < count; i++ {
			size := int(binary.LittleEndian.Uint32(b[at:]))
			if size > len(b)-at-4 {
				panic("chatv2: a truncated history")
			}
			history = append(history, string(b[at+4:at+4+size]))
			at += 4 + size
		}
	})
}

func main() {}
