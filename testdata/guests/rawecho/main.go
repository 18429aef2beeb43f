// Command rawecho is a guest written against ABI v1 directly, without the
// SDK: it sends every socket message back to its socket. It exports only
// the per-message handler (no wasmkeep_on_socket_messages), so that tests
// see the host fall back to one call per message for such a guest, and
// that the ABI is usable without the SDK.
package main

import "unsafe"

//go:wasmimport wasmkeep socket_send
func socketSend(socket uint32, kind int32, ptr unsafe.Pointer, n uint32) int32

// inbox is the region the host writes event payloads into.
var inbox []byte

//go:wasmexport wasmkeep_abi_v1
func abiV1() {}

//go:wasmexport wasmkeep_alloc
func alloc(size uint32) unsafe.Pointer {
	if uint32(len(inbox)) < size {
		inbox = make([]byte, size)
	}
	return unsafe.Pointer(unsafe.SliceData(inbox))
}

//go:wasmexport wasmkeep_on_socket_message
func onSocketMessage(socket uint32, kind int32, ptr unsafe.Pointer, n uint32) {
	socketSend(socket, kind, ptr, n)
}

func main() {}
