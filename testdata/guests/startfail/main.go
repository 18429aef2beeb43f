// Command startfail is a version whose start from an older version's state
// always panics, for the upgrade tests: a room upgraded to it must stay on
// its old version with its state. Requests answer "startfail"; as a first
// version it offers no handoff.
package main

import wk "github.com/wasmkeep/wasmkeep/guest-sdk/go"

func init() {
	wk.HandleRequest(func(*wk.Request) *wk.Response { return wk.Text(200, "startfail") })
	wk.HandleStartFrom(func([]byte, string) { panic("startfail: cannot read the state") })
}

func main() {}
