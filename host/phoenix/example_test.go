package phoenix_test

import (
	"encoding/json"
	"fmt"

	"github.com/wasmkeep/wasmkeep/host/phoenix"
)

// A socket's life as the host drives it: frames from the client go through
// Decode and Handle; the room's answers through AcceptJoin, Push and the
// like; the host writes every frame it is handed, in order.
func ExampleSession() {
	s := phoenix.NewSession(phoenix.Config{})
	var now int64 // monotonic nanoseconds, from the host's clock

	fromClient := func(frame string) {
		m, err := phoenix.DecodeText([]byte(frame))
		if err != nil {
			fmt.Println("close the socket:", err)
			return
		}
		for _, a := range s.Handle(now, m) {
			switch a.Kind {
			case phoenix.ActionSend:
				fmt.Printf("to client: %s\n", a.Frame.Data)
			case phoenix.ActionDeliver:
				d := a.Delivery
				fmt.Printf("to room:   %s %s %s\n", d.Kind, d.Message.Topic, d.Message.Event)
				if d.Kind == phoenix.DeliverJoin {
					// The room's join handler runs here and accepts.
					f, _ := s.AcceptJoin(d.Message.Topic, d.Message.JoinRef, json.RawMessage(`{"welcome":true}`))
					fmt.Printf("to client: %s\n", f.Data)
					// After the event returns, an unanswered join fails closed.
					if f, ok := s.AbandonPending(d.Message.Topic, d.Message.JoinRef); ok {
						fmt.Printf("to client: %s\n", f.Data)
					}
				}
			case phoenix.ActionDrop:
				fmt.Println("dropped:", a.Drop)
			}
		}
	}

	fromClient(`[null,"1","phoenix","heartbeat",{}]`)
	fromClient(`["2","2","room:lobby","phx_join",{"name":"ann"}]`)
	fromClient(`["2","3","room:lobby","shout",{"text":"hi"}]`)

	// The room pushes to this join, and broadcasts to every socket joined.
	f, _ := s.Push("room:lobby", phoenix.MakeRef("2"), "shout", json.RawMessage(`{"text":"hi"}`))
	fmt.Printf("to client: %s\n", f.Data)
	b, _ := phoenix.AppendBroadcast(nil, "room:lobby", "count", json.RawMessage(`{"n":1}`))
	if _, ok := s.Joined("room:lobby"); ok {
		fmt.Printf("to client: %s\n", b)
	}

	fromClient(`["1","4","room:lobby","shout",{}]`) // a stale join_ref
	fromClient(`["2","5","room:lobby","phx_leave",{}]`)

	// Output:
	// to client: [null,"1","phoenix","phx_reply",{"status":"ok","response":{}}]
	// to room:   join room:lobby phx_join
	// to client: ["2","2","room:lobby","phx_reply",{"status":"ok","response":{"welcome":true}}]
	// to room:   message room:lobby shout
	// to client: ["2",null,"room:lobby","shout",{"text":"hi"}]
	// to client: [null,null,"room:lobby","count",{"n":1}]
	// dropped: stale
	// to client: ["2","5","room:lobby","phx_reply",{"status":"ok","response":{}}]
	// to room:   leave room:lobby phx_leave
}

// A presence list: the diff of each change is broadcast as presence_diff;
// a socket that joins gets State as presence_state.
func ExamplePresence() {
	p := phoenix.NewPresence("n1.")
	d, _ := p.Track(7, "ann", json.RawMessage(`{"status":"away"}`))
	fmt.Printf("%s\n", d.JSON())
	d, _ = p.Track(7, "ann", json.RawMessage(`{"status":"online"}`))
	fmt.Printf("%s\n", d.JSON())
	fmt.Printf("%s\n", p.State())
	fmt.Printf("%s\n", p.UntrackAll(7).JSON())
	// Output:
	// {"joins":{"ann":{"metas":[{"phx_ref":"n1.1","status":"away"}]}},"leaves":{}}
	// {"joins":{"ann":{"metas":[{"phx_ref":"n1.2","phx_ref_prev":"n1.1","status":"online"}]}},"leaves":{"ann":{"metas":[{"phx_ref":"n1.1","status":"away"}]}}}
	// {"ann":{"metas":[{"phx_ref":"n1.2","phx_ref_prev":"n1.1","status":"online"}]}}
	// {"joins":{},"leaves":{"ann":{"metas":[{"phx_ref":"n1.2","phx_ref_prev":"n1.1","status":"online"}]}}}
}
