package wasmkeep

import (
	"unsafe"

	"github.com/wasmkeep/wasmkeep/abi"
)

// The guest exports of ABI v1. Off wasip1 the //go:wasmexport directives are
// ignored and these are ordinary functions, which the native tests call.

// inbuf is the one region wasmkeep_alloc hands out: the host writes every
// event's payload into it. It only grows, so a room in steady state
// allocates nothing to receive an event.
var inbuf []byte

// outbuf holds the encoding of the response being sent.
var outbuf []byte

// minAlloc is the smallest size inbuf is grown to.
const minAlloc = 1024

// abiV1 is the version marker: the host reads its name and never calls it.
//
//lint:ignore U1000 an export: the host finds it by name on wasip1
//go:wasmexport wasmkeep_abi_v1
func abiV1() {}

// alloc returns a region of at least size bytes. The host may write every
// later payload that fits there, so the region stays allocated (in inbuf)
// until the host asks for a bigger one.
//
//go:wasmexport wasmkeep_alloc
func alloc(size uint32) unsafe.Pointer {
	if uint64(size) > uint64(cap(inbuf)) || cap(inbuf) == 0 {
		n := max(uint64(size), 2*uint64(cap(inbuf)), minAlloc)
		inbuf = make([]byte, n)
	}
	return unsafe.Pointer(unsafe.SliceData(inbuf[:cap(inbuf)]))
}

// payload views the n bytes the host wrote at ptr.
func payload(ptr unsafe.Pointer, n uint32) []byte {
	collectSeen += uint64(n)
	if n == 0 || ptr == nil {
		return nil
	}
	return unsafe.Slice((*byte)(ptr), n)
}

//go:wasmexport wasmkeep_on_request
func onRequest(ptr unsafe.Pointer, n uint32) {
	handleRequest(ptr, n)
	collectIfDue()
}

func handleRequest(ptr unsafe.Pointer, n uint32) {
	rec, err := abi.DecodeRequest(payload(ptr, n))
	if err != nil {
		Error("wasmkeep: malformed request record from the host")
		respond(Text(500, "malformed request record"))
		return
	}
	req := Request(rec)
	// The record's body aliases inbuf, which the next event overwrites;
	// handlers commonly keep bodies, so give them their own copy.
	if len(req.Body) > 0 {
		req.Body = append([]byte(nil), req.Body...)
	}
	var resp *Response
	if onRequestFunc == nil {
		resp = Text(404, "no request handler")
	} else if resp = onRequestFunc(&req); resp == nil {
		resp = Text(500, "handler returned no response")
	}
	respond(resp)
}

func respond(r *Response) {
	if r == handOverResponse {
		st := hostHTTPHandOver(bytesPtr(handOverBuf), uint32(len(handOverBuf)))
		if st >= 0 {
			return
		}
		Error("wasmkeep: http_hand_over: " + abi.Status(st).String())
	}
	rec := abi.Response(*r)
	if rec.Status == 0 {
		rec.Status = 200
	}
	outbuf = abi.AppendResponse(outbuf[:0], &rec)
	collectSeen += uint64(len(outbuf))
	if st := hostHTTPRespond(unsafe.Pointer(unsafe.SliceData(outbuf)), uint32(len(outbuf))); st < 0 {
		Error("wasmkeep: http_respond: " + abi.Status(st).String())
	}
}

//go:wasmexport wasmkeep_on_socket_open
func onSocketOpen(socket uint32, ptr unsafe.Pointer, n uint32) {
	rec, err := abi.DecodeSocketOpen(payload(ptr, n))
	switch {
	case err != nil:
		Error("wasmkeep: malformed socket open record from the host")
	case onSocketOpenFunc != nil:
		o := SocketOpen(rec)
		onSocketOpenFunc(Socket(socket), &o)
	}
	collectIfDue()
}

//go:wasmexport wasmkeep_on_socket_message
func onSocketMessage(socket uint32, kind int32, ptr unsafe.Pointer, n uint32) {
	if onSocketMessageFunc != nil {
		onSocketMessageFunc(Socket(socket), Message{Kind: MessageKind(kind), Data: payload(ptr, n)})
	}
	collectIfDue()
}

// onSocketMessages takes a burst of one socket's messages in one call
// (the host's cost per call is paid once) and hands them to the handler
// one by one, as if each had come alone.
//
//go:wasmexport wasmkeep_on_socket_messages
func onSocketMessages(socket uint32, ptr unsafe.Pointer, n uint32) {
	if onSocketMessageFunc != nil {
		handleMessages(socket, payload(ptr, n))
	}
	collectIfDue()
}

func handleMessages(socket uint32, rest []byte) {
	for {
		kind, data, next, ok, err := abi.NextBatchedMessage(rest)
		if err != nil {
			Error("wasmkeep: malformed message batch from the host")
			return
		}
		if !ok {
			return
		}
		onSocketMessageFunc(Socket(socket), Message{Kind: MessageKind(kind), Data: data})
		rest = next
	}
}

//go:wasmexport wasmkeep_on_socket_close
func onSocketClose(socket uint32, code int32, ptr unsafe.Pointer, n uint32) {
	if onSocketCloseFunc != nil {
		onSocketCloseFunc(Socket(socket), int(code), string(payload(ptr, n)))
	}
	collectIfDue()
}

//go:wasmexport wasmkeep_on_join
func onJoin(socket uint32, ptr unsafe.Pointer, n uint32) {
	handleJoin(socket, ptr, n)
	collectIfDue()
}

func handleJoin(socket uint32, ptr unsafe.Pointer, n uint32) {
	rec, err := abi.DecodeJoin(payload(ptr, n))
	if err != nil {
		Error("wasmkeep: malformed join record from the host")
		return
	}
	if onJoinFunc == nil {
		replyWith(Err([]byte(`{"reason":"this room serves no channels"}`)))
		return
	}
	j := Join{Topic: rec.Topic, Payload: append([]byte(nil), rec.Payload...)}
	if r := onJoinFunc(Socket(socket), &j); r != nil {
		replyWith(r)
	}
}

//go:wasmexport wasmkeep_on_channel_message
func onChannelMessage(socket uint32, ptr unsafe.Pointer, n uint32) {
	handleChannelMessage(socket, ptr, n)
	collectIfDue()
}

func handleChannelMessage(socket uint32, ptr unsafe.Pointer, n uint32) {
	rec, err := abi.DecodeChannelMessage(payload(ptr, n))
	if err != nil {
		Error("wasmkeep: malformed channel message record from the host")
		return
	}
	if onChannelMessageFunc == nil {
		return
	}
	m := ChannelMessage{Topic: rec.Topic, Event: rec.Event, Payload: rec.Payload, Binary: rec.Binary}
	if r := onChannelMessageFunc(Socket(socket), &m); r != nil {
		replyWith(r)
	}
}

//go:wasmexport wasmkeep_on_leave
func onLeave(socket uint32, ptr unsafe.Pointer, n uint32) {
	handleLeave(socket, ptr, n)
	collectIfDue()
}

func handleLeave(socket uint32, ptr unsafe.Pointer, n uint32) {
	rec, err := abi.DecodeLeave(payload(ptr, n))
	if err != nil {
		Error("wasmkeep: malformed leave record from the host")
		return
	}
	if onLeaveFunc != nil {
		onLeaveFunc(Socket(socket), rec.Topic, rec.Reason)
	}
}

// onUpgrade hands the room's state to its next version, if the room offers
// one (HandleUpgrade); returning without a call to upgrade_state offers
// none.
//
//go:wasmexport wasmkeep_on_upgrade
func onUpgrade() {
	if onUpgradeFunc == nil {
		return
	}
	state := onUpgradeFunc()
	if state == nil {
		return
	}
	if st := hostUpgradeState(bytesPtr(state), uint32(len(state))); st < 0 {
		Error("wasmkeep: upgrade_state: " + abi.Status(st).String())
	}
}

// onIdle is the call collectIfDue asked the host for: a collection, made
// after the room's events have had their output go.
//
//go:wasmexport wasmkeep_on_idle
func onIdle() { collectIdle() }

// onStartFrom starts this version from an older one's state. The state is
// the handler's to keep (it gets its own copy), and the version takes it
// over only if the handler returns.
//
//go:wasmexport wasmkeep_on_start_from
func onStartFrom(ptr unsafe.Pointer, n uint32) {
	if onStartFromFunc == nil {
		return
	}
	rec, err := abi.DecodeStartFrom(payload(ptr, n))
	if err != nil {
		Error("wasmkeep: malformed start-from record from the host")
		return
	}
	onStartFromFunc(append([]byte(nil), rec.State...), rec.From)
	hostUpgradeAccept()
}
