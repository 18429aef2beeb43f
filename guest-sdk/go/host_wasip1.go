package wasmkeep

import "unsafe"

// The host functions of ABI v1 (see the abi package for their contracts).
// Every pointer is an address in this module's linear memory; a length of
// zero may come with a nil pointer.

//go:wasmimport wasmkeep http_respond
func hostHTTPRespond(ptr unsafe.Pointer, n uint32) int32

//go:wasmimport wasmkeep socket_send
func hostSocketSend(socket uint32, kind int32, ptr unsafe.Pointer, n uint32) int32

//go:wasmimport wasmkeep socket_close
func hostSocketClose(socket uint32, code int32, ptr unsafe.Pointer, n uint32) int32

//go:wasmimport wasmkeep socket_list
func hostSocketList(ptr unsafe.Pointer, capacity uint32) int32

//go:wasmimport wasmkeep broadcast
func hostBroadcast(kind int32, ptr unsafe.Pointer, n uint32, except uint32) int32

//go:wasmimport wasmkeep room_info
func hostRoomInfo(ptr unsafe.Pointer, capacity uint32) int32

//go:wasmimport wasmkeep log
func hostLog(level int32, ptr unsafe.Pointer, n uint32) int32

//go:wasmimport wasmkeep secret_get
func hostSecretGet(name unsafe.Pointer, nameLen uint32, buf unsafe.Pointer, capacity uint32) int32

//go:wasmimport wasmkeep checkpoint
func hostCheckpoint() int32

//go:wasmimport wasmkeep state_delete
func hostStateDelete() int32

//go:wasmimport wasmkeep idle_call
func hostIdleCall() int32

//go:wasmimport wasmkeep upgrade_state
func hostUpgradeState(ptr unsafe.Pointer, n uint32) int32

//go:wasmimport wasmkeep upgrade_accept
func hostUpgradeAccept() int32

//go:wasmimport wasmkeep alarm_set
func hostAlarmSet(atMs int64) int32

//go:wasmimport wasmkeep alarm_clear
func hostAlarmClear() int32

//go:wasmimport wasmkeep alarm_get
func hostAlarmGet(at unsafe.Pointer) int32

//go:wasmimport wasmkeep channel_reply
func hostChannelReply(status int32, ptr unsafe.Pointer, n uint32) int32

//go:wasmimport wasmkeep channel_push
func hostChannelPush(socket uint32, ptr unsafe.Pointer, n uint32) int32

//go:wasmimport wasmkeep channel_broadcast
func hostChannelBroadcast(except uint32, ptr unsafe.Pointer, n uint32) int32

//go:wasmimport wasmkeep channel_close
func hostChannelClose(socket uint32, ptr unsafe.Pointer, n uint32) int32

//go:wasmimport wasmkeep presence_track
func hostPresenceTrack(socket uint32, ptr unsafe.Pointer, n uint32) int32

//go:wasmimport wasmkeep presence_untrack
func hostPresenceUntrack(socket uint32, ptr unsafe.Pointer, n uint32) int32

//go:wasmimport wasmkeep call_start
func hostCallStart(ptr unsafe.Pointer, n uint32) int32

//go:wasmimport wasmkeep call_wait
func hostCallWait(handle int32) int32

//go:wasmimport wasmkeep call_result
func hostCallResult(handle int32, ptr unsafe.Pointer, capacity uint32) int32

//go:wasmimport wasmkeep call_reply
func hostCallReply(ptr unsafe.Pointer, n uint32) int32

//go:wasmimport wasmkeep fetch_start
func hostFetchStart(ptr unsafe.Pointer, n uint32) int32

//go:wasmimport wasmkeep fetch_wait
func hostFetchWait(handle int32) int32

//go:wasmimport wasmkeep fetch_result
func hostFetchResult(handle int32, ptr unsafe.Pointer, capacity uint32) int32

//go:wasmimport wasmkeep http_hand_over
func hostHTTPHandOver(ptr unsafe.Pointer, n uint32) int32
