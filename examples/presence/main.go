// Command presence is a room that speaks Phoenix Channels: clients join
// the topic "room:lobby" of a room with a name, see who is online (the host
// keeps presence and sends presence_state and presence_diff as phoenix.js
// expects), and shout messages to everyone on the topic.
//
//	GET /actor/presence/<name>          an HTML page that joins and shows who is online
//	/actor/presence/<name>/socket       the Phoenix socket (phoenix.js: new Socket(".../socket"))
//
// Channel protocol of the topic room:lobby (any topic "room:<x>" works):
//
//	join  {"name": "ada"}            → ok {"history": [...]} and a presence entry "ada";
//	                                   error {"reason":"name required"} without a name
//	push  "shout" {"body": "hi"}     → broadcast "shout" {"name":"ada","body":"hi"} to
//	                                   the topic (the sender included); reply ok {}
//	push  "ping" {}                  → reply ok {"pong": true}
//
// The last 50 shouts are kept in the room's memory, and survive hibernation
// like any other state.
//
// Build it with:
//
//	GOOS=wasip1 GOARCH=wasm go build -buildmode=c-shared -o presence.wasm ./examples/presence
package main

import (
	_ "embed"
	"encoding/json"
	"strings"
	"time"

	wk "github.com/wasmkeep/wasmkeep/guest-sdk/go"
)

//go:embed presence.html
var page string

const maxHistory = 50

type shout struct {
	Name string `json:"name"`
	Body string `json:"body"`
}

var (
	history []shout
	names   = map[wk.Socket]string{} // the name each socket joined with
)

func init() {
	wk.HandleRequest(serve)
	wk.HandleJoin(join)
	wk.HandleChannelMessage(message)
	wk.HandleLeave(func(s wk.Socket, topic, reason string) { delete(names, s) })
}

func serve(r *wk.Request) *wk.Response {
	if r.Path != "/" {
		return wk.Text(404, "not found")
	}
	return wk.HTML(200, page).SetHeader("Cache-Control", "no-cache")
}

func join(s wk.Socket, j *wk.Join) *wk.Reply {
	if !strings.HasPrefix(j.Topic, "room:") {
		return wk.Err([]byte(`{"reason":"unknown topic"}`))
	}
	var params struct {
		Name string `json:"name"`
	}
	_ = json.Unmarshal(j.Payload, &params)
	name := strings.TrimSpace(params.Name)
	if name == "" || len(name) > 40 {
		return wk.Err([]byte(`{"reason":"name required"}`))
	}
	names[s] = name
	meta, _ := json.Marshal(map[string]int64{"online_at": time.Now().UnixMilli()})
	if err := s.Track(j.Topic, name, meta); err != nil {
		wk.Warn("track: " + err.Error())
	}
	reply, _ := json.Marshal(map[string]any{"history": orEmpty(history)})
	return wk.OK(reply)
}

func message(s wk.Socket, m *wk.ChannelMessage) *wk.Reply {
	switch m.Event {
	case "shout":
		var in struct {
			Body string `json:"body"`
		}
		if json.Unmarshal(m.Payload, &in) != nil || strings.TrimSpace(in.Body) == "" {
			return wk.Err([]byte(`{"reason":"empty shout"}`))
		}
		sh := shout{Name: names[s], Body: in.Body}
		if len(in.Body) > 2000 {
			sh.Body = in.Body[:2000]
		}
		if len(history) == maxHistory {
			copy(history, history[1:])
			history = history[:maxHistory-1]
		}
		history = append(history, sh)
		out, _ := json.Marshal(sh)
		wk.BroadcastTopic(m.Topic, "shout", out, 0)
		return wk.OK(nil)
	case "ping":
		return wk.OK([]byte(`{"pong":true}`))
	}
	return wk.Err([]byte(`{"reason":"unknown event"}`))
}

func orEmpty(h []shout) []shout {
	if h == nil {
		return []shout{}
	}
	return h
}

// main is required by the compiler but never runs in a reactor module.
func main() {}
