// Command hostile is the host tests' misbehaving guest: each request path
// breaks one rule, so tests can check that the host contains the damage
// (CPU deadline, memory limit, traps, bad pointers, a second response) and
// rolls the room back to its last snapshot.
//
//	/trap           panics (the Go runtime exits through WASI proc_exit(2))
//	/loop           spins forever in a busy loop with no host calls
//	/grow           allocates 1 MiB blocks forever, keeping every one
//	/badptr         calls host functions with pointers/lengths outside memory
//	                through raw imports and answers 200 with one line per call,
//	                "<call> <status>", e.g. "http_respond(0xFFFFFFF0,1000) -1"
//	/double         answers "first" through a raw http_respond, then calls
//	                http_respond again; the second status is logged and kept
//	GET /double-status  the status the last /double got from its second call
//	/sleep-forever  calls time.Sleep(time.Hour): the guest blocks in the
//	                host's nanosleep, which the event time limit must cut short
//	anything else   a counter like examples/counter: GET answers the count,
//	                POST increments it and answers the new count
//
// Sockets: the text message "trap" panics, "loop" spins forever; any other
// message is echoed back with the same kind. The open event panics for a
// socket opened at the path /trap-open; a socket opened with the query
// parameter trap-close=1 is remembered, and its close event panics. Opens
// and closes send nothing.
package main

import (
	"strconv"
	"strings"
	"time"
	"unsafe"

	"github.com/wasmkeep/wasmkeep/abi"
	wk "github.com/wasmkeep/wasmkeep/guest-sdk/go"
)

// Raw declarations of the host functions, taking addresses as plain
// integers so that any value can be passed.

//go:wasmimport wasmkeep http_respond
func rawHTTPRespond(ptr, n uint32) int32

//go:wasmimport wasmkeep socket_send
func rawSocketSend(socket uint32, kind int32, ptr, n uint32) int32

//go:wasmimport wasmkeep socket_close
func rawSocketClose(socket uint32, code int32, ptr, n uint32) int32

//go:wasmimport wasmkeep socket_list
func rawSocketList(ptr, capacity uint32) int32

//go:wasmimport wasmkeep broadcast
func rawBroadcast(kind int32, ptr, n, except uint32) int32

//go:wasmimport wasmkeep room_info
func rawRoomInfo(ptr, capacity uint32) int32

//go:wasmimport wasmkeep log
func rawLog(level int32, ptr, n uint32) int32

var (
	count        uint64
	spin         uint64   // written by the busy loop so it has an effect
	hoard        [][]byte // /grow keeps every block here
	doubleStatus = "none"
	trapOnClose  = map[wk.Socket]bool{} // sockets opened with trap-close=1
)

func init() {
	wk.HandleRequest(serve)
	wk.HandleSocketOpen(func(s wk.Socket, o *wk.SocketOpen) {
		if o.Path == "/trap-open" {
			panic("hostile: trap requested by a socket open")
		}
		if o.QueryValue("trap-close") == "1" {
			trapOnClose[s] = true
		}
	})
	wk.HandleSocketClose(func(s wk.Socket, code int, reason string) {
		if trapOnClose[s] {
			panic("hostile: trap requested by a socket close")
		}
	})
	wk.HandleSocketMessage(func(s wk.Socket, m wk.Message) {
		switch {
		case m.IsText() && m.Text() == "trap":
			panic("hostile: trap requested by a socket message")
		case m.IsText() && m.Text() == "loop":
			busy()
		case m.IsText():
			s.Send(m.Text())
		default:
			s.SendBinary(m.Data)
		}
	})
}

func serve(r *wk.Request) *wk.Response {
	switch r.Path {
	case "/trap":
		panic("hostile: trap requested")
	case "/loop":
		busy()
	case "/grow":
		for {
			b := make([]byte, 1<<20)
			for i := 0; i < len(b); i += 4096 {
				b[i] = 1 // touch every page
			}
			hoard = append(hoard, b)
		}
	case "/badptr":
		return wk.Text(200, badPointers())
	case "/double":
		double()
		return nil // the SDK's own answer is refused too (and logged)
	case "/double-status":
		return wk.Text(200, doubleStatus)
	case "/sleep-forever":
		time.Sleep(time.Hour)
		return wk.Text(200, "woke up after an hour")
	}
	switch r.Method {
	case "GET":
	case "POST":
		count++
	default:
		return wk.Text(405, "method not allowed").SetHeader("Allow", "GET, POST")
	}
	return wk.Text(200, strconv.FormatUint(count, 10))
}

//go:noinline
func busy() {
	x := spin | 1
	for {
		// An LCG step the compiler cannot fold away; the store keeps the
		// loop's effect observable.
		x = x*6364136223846793005 + 1442695040888963407
		spin = x
	}
}

func badPointers() string {
	var b strings.Builder
	line := func(call string, st int32) {
		b.WriteString(call + " " + strconv.Itoa(int(st)) + "\n")
	}
	line("http_respond(0xFFFFFFF0,1000)", rawHTTPRespond(0xFFFFFFF0, 1000))
	line("socket_send(1,1,0xFFFFFFFF,16)", rawSocketSend(1, 1, 0xFFFFFFFF, 16))
	line("socket_close(1,1000,0xFFFFFFF0,100)", rawSocketClose(1, 1000, 0xFFFFFFF0, 100))
	line("socket_list(0xFFFFFFFC,16)", rawSocketList(0xFFFFFFFC, 16))
	line("broadcast(1,0xFFFFFF00,4096,0)", rawBroadcast(1, 0xFFFFFF00, 4096, 0))
	line("room_info(0xFFFFFFF0,64)", rawRoomInfo(0xFFFFFFF0, 64))
	line("log(1,0,0x7FFFFFFF)", rawLog(1, 0, 0x7FFFFFFF))
	// A record that is in memory but malformed: a Response cut short.
	short := []byte{200, 0, 0}
	line("http_respond(short record)", rawHTTPRespond(addr(short), uint32(len(short))))
	return b.String()
}

func double() {
	first := abi.AppendResponse(nil, &abi.Response{Status: 200, Body: []byte("first")})
	rawHTTPRespond(addr(first), uint32(len(first)))
	second := abi.AppendResponse(nil, &abi.Response{Status: 200, Body: []byte("second")})
	st := rawHTTPRespond(addr(second), uint32(len(second)))
	doubleStatus = strconv.Itoa(int(st))
	wk.Info("hostile: second http_respond returned " + doubleStatus)
}

// addr is b's address in linear memory (wasm32 addresses fit in uint32).
func addr(b []byte) uint32 { return uint32(uintptr(unsafe.Pointer(unsafe.SliceData(b)))) }

func main() {}
