// Command channels is the host tests' Phoenix channels guest, well-behaved
// and not:
//
//	join "trap"            panics (the join must be rejected: "join crashed")
//	join "silent"          returns no answer (the join must be refused: fail closed)
//	join "reject"          answers error {"reason":"rejected"}
//	join "badreply"        accepts it as any other, but answers ok with invalid UTF-8 in a JSON string
//	                       (json.Valid takes it, so the host's channel_reply does; no client can)
//	join anything else     answers ok {} and tracks presence key "s<socket>"
//	event "trap"           panics (the topic must close with phx_error)
//	event "echo" p         replies ok p
//	event "badreply"       replies ok with invalid UTF-8 in a JSON string
//	event "notjson"        replies ok with a body that is not JSON at all (channel_reply refuses it)
//	event "push" p         pushes "pushed" p to the sender, replies ok {}
//	event "shout" p        broadcasts "shout" p to the topic, no reply
//	event "close"          closes the sender's join of the topic
//	event "kick"           closes the sender's whole socket with 4000
//	event "untrack"        untracks the sender's presence key on the topic
//	GET /joins             the joins the room knows, one "socket topic" a line
//	GET /leaves            the leaves it saw, one "socket topic reason" a line
package main

import (
	"fmt"
	"sort"
	"strings"

	wk "github.com/wasmkeep/wasmkeep/guest-sdk/go"
)

var (
	joins  = map[string]bool{}
	leaves []string
)

// badReply is not valid JSON text: a JSON string must be UTF-8.
var badReply = []byte("{\"bad\":\"\xff\"}")

func init() {
	wk.HandleJoin(func(s wk.Socket, j *wk.Join) *wk.Reply {
		switch j.Topic {
		case "trap":
			panic("trap in join")
		case "silent":
			return nil
		case "reject":
			return wk.Err([]byte(`{"reason":"rejected"}`))
		}
		joins[fmt.Sprintf("%d %s", s, j.Topic)] = true
		s.Track(j.Topic, fmt.Sprintf("s%d", s), []byte(`{}`))
		if j.Topic == "badreply" {
			return wk.OK(badReply)
		}
		return wk.OK(nil)
	})
	wk.HandleChannelMessage(func(s wk.Socket, m *wk.ChannelMessage) *wk.Reply {
		switch m.Event {
		case "trap":
			panic("trap in a channel message")
		case "echo":
			return wk.OK(append([]byte(nil), m.Payload...))
		case "badreply":
			return wk.OK(badReply)
		case "notjson":
			return wk.OK([]byte(`{"unfinished":`))
		case "push":
			s.Push(m.Topic, "pushed", m.Payload)
			return wk.OK(nil)
		case "shout":
			wk.BroadcastTopic(m.Topic, "shout", m.Payload, 0)
			return nil
		case "close":
			s.CloseTopic(m.Topic)
			return nil
		case "kick":
			s.Close(4000, "kicked")
			return nil
		case "untrack":
			s.Untrack(m.Topic, fmt.Sprintf("s%d", s))
			return wk.OK(nil)
		}
		return wk.Err([]byte(`{"reason":"unknown event"}`))
	})
	wk.HandleLeave(func(s wk.Socket, topic, reason string) {
		delete(joins, fmt.Sprintf("%d %s", s, topic))
		leaves = append(leaves, fmt.Sprintf("%d %s %s", s, topic, reason))
	})
	wk.HandleRequest(func(r *wk.Request) *wk.Response {
		switch r.Path {
		case "/joins":
			var out []string
			for j := range joins {
				out = append(out, j)
			}
			sort.Strings(out)
			return wk.Text(200, strings.Join(out, "\n"))
		case "/leaves":
			return wk.Text(200, strings.Join(leaves, "\n"))
		}
		return wk.Text(404, "not found")
	})
}

func main() {}
