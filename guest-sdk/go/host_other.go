//go:build !wasip1

package wasmkeep

import "unsafe"

// Off wasip1 the SDK still compiles, so that guests can be built, vetted and
// unit-tested natively, but there is no host: every host function answers
// StatusUnsupported unless this package's tests install a fake in native.

// nativeHost is the host the functions below call when it is not nil.
type nativeHost interface {
	HTTPRespond(b []byte) int32
	SocketSend(socket uint32, kind int32, b []byte) int32
	SocketClose(socket uint32, code int32, reason []byte) int32
	SocketList(ids []uint32) int32
	Broadcast(kind int32, b []byte, except uint32) int32
	RoomInfo(b []byte) int32
	SecretGet(name string, buf []byte) int32
	Log(level int32, b []byte) int32
	Checkpoint() int32
	StateDelete() int32
	UpgradeState(b []byte) int32
	UpgradeAccept() int32
	IdleCall() int32
	AlarmSet(atMs int64) int32
	AlarmClear() int32
	AlarmGet() (int64, int32)
	CallStart(b []byte) int32
	CallWait(handle int32) int32
	CallResult(handle int32, buf []byte) int32
	CallReply(b []byte) int32
	FetchStart(b []byte) int32
	FetchWait(handle int32) int32
	FetchResult(handle int32, buf []byte) int32
	HTTPHandOver(b []byte) int32
	// Channel stands for the channel functions: name is the import's
	// name, arg its first argument (a status, socket or except), b the record.
	Channel(name string, arg uint32, b []byte) int32
}

var native nativeHost

const unsupported = -4 // abi.StatusUnsupported

func bytesAt(ptr unsafe.Pointer, n uint32) []byte {
	if n == 0 {
		return nil
	}
	return unsafe.Slice((*byte)(ptr), n)
}

func hostHTTPRespond(ptr unsafe.Pointer, n uint32) int32 {
	if native == nil {
		return unsupported
	}
	return native.HTTPRespond(bytesAt(ptr, n))
}

func hostSocketSend(socket uint32, kind int32, ptr unsafe.Pointer, n uint32) int32 {
	if native == nil {
		return unsupported
	}
	return native.SocketSend(socket, kind, bytesAt(ptr, n))
}

func hostSocketClose(socket uint32, code int32, ptr unsafe.Pointer, n uint32) int32 {
	if native == nil {
		return unsupported
	}
	return native.SocketClose(socket, code, bytesAt(ptr, n))
}

func hostSocketList(ptr unsafe.Pointer, capacity uint32) int32 {
	if native == nil {
		return unsupported
	}
	var ids []uint32
	if capacity > 0 {
		ids = unsafe.Slice((*uint32)(ptr), capacity)
	}
	return native.SocketList(ids)
}

func hostBroadcast(kind int32, ptr unsafe.Pointer, n uint32, except uint32) int32 {
	if native == nil {
		return unsupported
	}
	return native.Broadcast(kind, bytesAt(ptr, n), except)
}

func hostRoomInfo(ptr unsafe.Pointer, capacity uint32) int32 {
	if native == nil {
		return unsupported
	}
	return native.RoomInfo(bytesAt(ptr, capacity))
}

func hostSecretGet(name unsafe.Pointer, nameLen uint32, buf unsafe.Pointer, capacity uint32) int32 {
	if native == nil {
		return unsupported
	}
	return native.SecretGet(string(bytesAt(name, nameLen)), bytesAt(buf, capacity))
}

func hostLog(level int32, ptr unsafe.Pointer, n uint32) int32 {
	if native == nil {
		return unsupported
	}
	return native.Log(level, bytesAt(ptr, n))
}

func hostCheckpoint() int32 {
	if native == nil {
		return unsupported
	}
	return native.Checkpoint()
}

func hostStateDelete() int32 {
	if native == nil {
		return unsupported
	}
	return native.StateDelete()
}

func hostUpgradeState(ptr unsafe.Pointer, n uint32) int32 {
	if native == nil {
		return unsupported
	}
	return native.UpgradeState(bytesAt(ptr, n))
}

func hostIdleCall() int32 {
	if native == nil {
		return unsupported
	}
	return native.IdleCall()
}

func hostUpgradeAccept() int32 {
	if native == nil {
		return unsupported
	}
	return native.UpgradeAccept()
}

func hostAlarmSet(atMs int64) int32 {
	if native == nil {
		return unsupported
	}
	return native.AlarmSet(atMs)
}

func hostAlarmClear() int32 {
	if native == nil {
		return unsupported
	}
	return native.AlarmClear()
}

func hostAlarmGet(at unsafe.Pointer) int32 {
	if native == nil {
		return unsupported
	}
	v, st := native.AlarmGet()
	if st == 0 {
		*(*int64)(at) = v
	}
	return st
}

func channelCall(name string, arg uint32, ptr unsafe.Pointer, n uint32) int32 {
	if native == nil {
		return unsupported
	}
	return native.Channel(name, arg, bytesAt(ptr, n))
}

func hostChannelReply(status int32, ptr unsafe.Pointer, n uint32) int32 {
	return channelCall("channel_reply", uint32(status), ptr, n)
}

func hostChannelPush(socket uint32, ptr unsafe.Pointer, n uint32) int32 {
	return channelCall("channel_push", socket, ptr, n)
}

func hostChannelBroadcast(except uint32, ptr unsafe.Pointer, n uint32) int32 {
	return channelCall("channel_broadcast", except, ptr, n)
}

func hostChannelClose(socket uint32, ptr unsafe.Pointer, n uint32) int32 {
	return channelCall("channel_close", socket, ptr, n)
}

func hostPresenceTrack(socket uint32, ptr unsafe.Pointer, n uint32) int32 {
	return channelCall("presence_track", socket, ptr, n)
}

func hostPresenceUntrack(socket uint32, ptr unsafe.Pointer, n uint32) int32 {
	return channelCall("presence_untrack", socket, ptr, n)
}

func hostCallStart(ptr unsafe.Pointer, n uint32) int32 {
	if native == nil {
		return unsupported
	}
	return native.CallStart(bytesAt(ptr, n))
}

func hostCallWait(handle int32) int32 {
	if native == nil {
		return unsupported
	}
	return native.CallWait(handle)
}

func hostCallResult(handle int32, ptr unsafe.Pointer, capacity uint32) int32 {
	if native == nil {
		return unsupported
	}
	return native.CallResult(handle, bytesAt(ptr, capacity))
}

func hostFetchStart(ptr unsafe.Pointer, n uint32) int32 {
	if native == nil {
		return unsupported
	}
	return native.FetchStart(bytesAt(ptr, n))
}

func hostFetchWait(handle int32) int32 {
	if native == nil {
		return unsupported
	}
	return native.FetchWait(handle)
}

func hostFetchResult(handle int32, ptr unsafe.Pointer, capacity uint32) int32 {
	if native == nil {
		return unsupported
	}
	return native.FetchResult(handle, bytesAt(ptr, capacity))
}

func hostCallReply(ptr unsafe.Pointer, n uint32) int32 {
	if native == nil {
		return unsupported
	}
	return native.CallReply(bytesAt(ptr, n))
}

func hostHTTPHandOver(ptr unsafe.Pointer, n uint32) int32 {
	if native == nil {
		return unsupported
	}
	return native.HTTPHandOver(bytesAt(ptr, n))
}
