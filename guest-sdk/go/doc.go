// Package wasmkeep is the Go SDK for wasmkeep actor classes: a class is a
// WebAssembly module, and every room (class + name) runs as its own
// instance of it. The package implements the guest side of ABI v1 (see the
// abi package): it exports the version marker, the allocator and the event
// entry points, imports the host functions, and turns both into typed Go
// handlers and calls.
//
// # A complete class
//
//	package main
//
//	import (
//		"strconv"
//
//		wk "github.com/wasmkeep/wasmkeep/guest-sdk/go"
//	)
//
//	var hits int // plain Go state; it survives hibernation
//
//	func init() {
//		wk.HandleRequest(func(r *wk.Request) *wk.Response {
//			hits++
//			return wk.Text(200, wk.Room().Name+": "+strconv.Itoa(hits))
//		})
//		wk.HandleSocketMessage(func(s wk.Socket, m wk.Message) {
//			if m.IsText() {
//				wk.Broadcast(m.Text(), 0) // to everyone, the sender too
//			}
//		})
//	}
//
//	func main() {} // required by the compiler; never runs
//
// Build it as a WASI reactor:
//
//	GOOS=wasip1 GOARCH=wasm go build -buildmode=c-shared -o class.wasm .
//
// # Register handlers in init, not main
//
// A c-shared (reactor) module has no main entry: the host calls the
// exported _initialize once for a fresh room, which initializes the runtime
// and runs every package's init functions (the main package's included),
// and then calls event exports. main.main never runs (measured with Go
// 1.26 and wazero 1.12: _initialize runs init, not main; calling an export
// before _initialize traps). The compiler still requires a main function.
// A room woken from a snapshot runs neither again: its memory, handlers
// included, is restored as it was.
//
// # Events
//
// The host delivers a room's events one at a time. A request handler's
// *Response is sent when it returns; a nil response is sent as 500 "handler
// returned no response", and a Response with Status 0 as 200. With no
// request handler registered every request is answered 404 "no request
// handler"; socket events without a handler are ignored. (The SDK always
// exports every event entry point, so the host accepts WebSockets for every
// class built with it.)
//
// Strings in events are copies, and Request.Body is a copy: a handler may
// keep them. Message.Data is not: it is only valid until the handler
// returns, because the SDK receives every event in one reused buffer.
//
// # Panics and crashes
//
// The SDK does not recover panics. An unrecovered panic (like any fatal
// runtime error, such as running out of memory) prints its trace to stderr
// and aborts the instance with a WebAssembly trap ("unreachable"). That is
// deliberate: the host treats a trap as a crash, discards the instance and
// restarts the room from its last snapshot, so a half-applied change is
// never kept. Only the request or socket whose event crashed sees an error.
// Recover in your own handler if a failure should not roll the room back.
//
// # Goroutines and time
//
// Goroutines, timers and time.Sleep work, but they only run while the host
// is inside one of the room's events: a goroutine started by a handler does
// not run until that handler (or a later event) yields, by blocking,
// sleeping or calling runtime.Gosched, and a timer that falls due while the
// room is idle cannot wake it (an alarm can: see Alarms). The monotonic
// clock continues across hibernation; wall time is real.
//
// # Memory and garbage collection
//
// A room's memory is its state: what a snapshot stores, what a wake
// restores, what a resident room holds. WebAssembly memory never shrinks
// and Go's collector does not clear what it frees, so a room is as big as
// its heap ever grew. The Go runtime would let the heap grow to 4 MiB
// before collecting, and its own collections are slow in a room (their
// marking waits for handlers to block). So the SDK collects by itself:
// once a room's heap has allocated DefaultCollectBudget bytes since the
// last collection (or half of what survived it, if more), the SDK asks
// the host to call it back once the room is idle, after the events queued
// meanwhile have had their output go, and collects there (the import
// idle_call and the export wasmkeep_on_idle, see the abi package).
// SetCollectBudget changes the budget or turns this off; Collections
// counts what it did. runtime/debug's settings still apply to the runtime's
// own collections, which remain a backstop.
//
// # Alarms
//
// A room has one alarm. SetAlarm sets it to a time; at that time the host
// runs the handler given to HandleAlarm as an event, waking the room
// wherever it sleeps. A recurring job sets its next time there:
//
//	wk.HandleAlarm(func(a wk.Alarm) {
//		sendDigest() // safe to run twice: a handler runs at least once
//		wk.SetAlarm(a.At.Add(time.Hour))
//	})
//
// The alarm is durable with the event that set it, cleared when its
// handler returns unless the handler set it again, retried after a panic
// (Alarm.Retry counts the failed runs), and never run twice at once.
//
// # Fetches
//
// Fetch sends an HTTP request to another service and waits for the
// answer; StartFetch starts one without waiting, so that several run at
// once:
//
//	resp, err := wk.Fetch(wk.FetchRequest{URL: "https://api.example.com/rates"})
//	if errors.Is(err, wk.ErrNotAllowed) {
//		// the operator did not allow it: err says why (--fetch-allow)
//	}
//
// Only the hosts the operator allows with --fetch-allow are fetched, and
// never an address of the node's machine or a private network unless
// allowed by address (docs/operations.md, "Fetches to other services").
// The wait does not count toward the event time limit. The request leaves
// mid-event, before the event's state is durable: make it safe to repeat.
//
// # Errors
//
// Host functions answer a status; the SDK turns failures into a *HostError
// that wraps one sentinel per status (ErrNoSocket, ErrUnsupported, ...),
// for errors.Is.
//
// Off GOOS=wasip1 the package compiles but has no host (every host call
// fails with ErrUnsupported), so that classes can be vetted and unit-tested
// natively.
package wasmkeep
