package engine

import (
	"context"

	"github.com/tetratelabs/wazero/api"

	"github.com/wasmkeep/wasmkeep/abi"
)

// AlarmHost is a Host whose room keeps an alarm (abi.ImportAlarmSet). The
// engine has checked the time's bounds and that the class handles
// EventAlarm; the host keeps the alarm with the room's state.
type AlarmHost interface {
	SetAlarm(atMs int64) abi.Status
	ClearAlarm() abi.Status
	// Alarm returns the alarm's time, or false if none is set.
	Alarm() (atMs int64, ok bool)
}

// Alarm runs the room's alarm handler with an encoded abi.AlarmEvent.
// Only for a class that handles EventAlarm.
func (i *Instance) Alarm(payload []byte) error {
	return i.event(EventAlarm, 0, 0, 0, payload)
}

// alarmInstance is statefulInstance for the alarm functions, and answers
// StatusUnsupported for a class without an alarm handler or a host that
// keeps no alarms, returning no host.
func alarmInstance(ctx context.Context, stack []uint64) AlarmHost {
	inst := statefulInstance(ctx, stack)
	if inst == nil {
		return nil
	}
	host, ok := inst.host.(AlarmHost)
	if !ok || !inst.class.has[EventAlarm] {
		ret(stack, abi.StatusUnsupported)
		return nil
	}
	return host
}

// alarmSet sets the room's alarm (see abi.ImportAlarmSet).
func alarmSet(ctx context.Context, _ api.Module, stack []uint64) {
	at := int64(stack[0])
	host := alarmInstance(ctx, stack)
	switch {
	case host == nil:
	case at < abi.MinAlarmMs || at > abi.MaxAlarmMs:
		ret(stack, abi.StatusInvalid)
	default:
		ret(stack, host.SetAlarm(at))
	}
}

// alarmClear clears the room's alarm (see abi.ImportAlarmClear).
func alarmClear(ctx context.Context, _ api.Module, stack []uint64) {
	if host := alarmInstance(ctx, stack); host != nil {
		ret(stack, host.ClearAlarm())
	}
}

// alarmGet writes the alarm's time at ptr (see abi.ImportAlarmGet).
func alarmGet(ctx context.Context, mod api.Module, stack []uint64) {
	ptr := stack[0]
	host := alarmInstance(ctx, stack)
	if host == nil {
		return
	}
	at, ok := host.Alarm()
	if !ok {
		ret(stack, abi.StatusNotFound)
		return
	}
	if !mod.Memory().WriteUint64Le(uint32(ptr), uint64(at)) {
		ret(stack, abi.StatusInvalid)
		return
	}
	ret(stack, abi.Success)
}
