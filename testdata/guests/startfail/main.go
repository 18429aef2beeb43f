// Command startfail is a version whose start from an older version's state
// always fails, for the upgrade tests: a room upgraded to it must stay on
// its old version with its state. It panics, or spins for ever when the
// state handed over is "loop" (the event time limit must end it). Requests
// answer "startfail"; as a first version it offers no handoff.
package main

import wk "github.com/wasmkeep/wasmkeep/guest-sdk/go"

var spins int

func init() {
	wk.HandleRequest(func(*wk.Request) *wk.Response { return wk.Text(200, "startfail") })
	wk.HandleStartFrom(func(prev []byte, _ string) {
		for string(prev) == "loop" {
			spins++
		}
		panic("startfail: cannot read the state")
	})
}

func main() {}
