// Command counter is the smallest useful wasmkeep actor class: every room
// holds one counter in an ordinary Go variable, which survives hibernation
// because the host snapshots the room's memory.
//
//	POST   /actor/counter/<name>  increments the room's counter and answers the new count
//	GET    /actor/counter/<name>  answers the count
//	DELETE /actor/counter/<name>  deletes the room (wk.DeleteState): its stored
//	                              state is gone, and its next request finds 0
//
// Answers are plain decimal text without a newline. Other methods get 405
// with an Allow header, other paths 404.
//
// Build it with:
//
//	GOOS=wasip1 GOARCH=wasm go build -buildmode=c-shared -o counter.wasm ./examples/counter
package main

import (
	"strconv"

	wk "github.com/wasmkeep/wasmkeep/guest-sdk/go"
)

var count uint64

func init() {
	wk.HandleRequest(serve)
}

func serve(r *wk.Request) *wk.Response {
	if r.Path != "/" {
		return wk.Text(404, "not found")
	}
	switch r.Method {
	case "GET":
	case "POST":
		count++
	case "DELETE":
		if err := wk.DeleteState(); err != nil {
			return wk.Text(500, err.Error())
		}
		return wk.Text(200, "deleted")
	default:
		return wk.Text(405, "method not allowed").SetHeader("Allow", "GET, POST, DELETE")
	}
	return wk.Text(200, strconv.FormatUint(count, 10))
}

// main is required by the compiler but never runs: a c-shared (reactor)
// module only runs package initialization, then the host calls its exports.
func main() {}
