// Command abiv2 declares ABI version 2, which no host speaks yet, so that
// tests can check the host refuses it at upload with a version error. It
// does not use the SDK (which declares v1): it exports the v2 marker, an
// allocator and a request handler that answers 200 "abiv2" through the v1
// http_respond, in case a host ran it anyway.
package main

import (
	"unsafe"

	"github.com/wasmkeep/wasmkeep/abi"
)

//go:wasmimport wasmkeep http_respond
func httpRespond(ptr unsafe.Pointer, n uint32) int32

var buf []byte

//go:wasmexport wasmkeep_abi_v2
func abiV2() {}

//go:wasmexport wasmkeep_alloc
func alloc(size uint32) unsafe.Pointer {
	if int(size) > len(buf) {
		buf = make([]byte, size)
	}
	return unsafe.Pointer(unsafe.SliceData(buf))
}

//go:wasmexport wasmkeep_on_request
func onRequest(ptr unsafe.Pointer, n uint32) {
	resp := abi.AppendResponse(nil, &abi.Response{Status: 200, Body: []byte("abiv2")})
	httpRespond(unsafe.Pointer(unsafe.SliceData(resp)), uint32(len(resp)))
}

func main() {}
