package engine

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"sync"
	"unicode/utf8"

	"github.com/tetratelabs/wazero"
	"github.com/tetratelabs/wazero/api"

	"github.com/wasmkeep/wasmkeep/abi"
)

// instantiateHostModule provides the "wasmkeep" import module. Every
// function validates the guest's pointers and lengths and answers a status
// rather than trapping: a hostile or buggy guest gets an error code, the host
// never reads outside the guest's memory.
func (e *Engine) instantiateHostModule(ctx context.Context, rt wazero.Runtime) error {
	i32, i64 := api.ValueTypeI32, api.ValueTypeI64
	b := rt.NewHostModuleBuilder(abi.ImportModule)
	def := func(name string, fn api.GoModuleFunc, params ...api.ValueType) {
		b.NewFunctionBuilder().WithGoModuleFunction(fn, params, []api.ValueType{i32}).Export(name)
	}
	def(abi.ImportHTTPRespond, e.httpRespond, i32, i32)
	def(abi.ImportSocketSend, socketSend, i32, i32, i32, i32)
	def(abi.ImportSocketClose, socketClose, i32, i32, i32, i32)
	def(abi.ImportSocketList, socketList, i32, i32)
	def(abi.ImportBroadcast, broadcast, i32, i32, i32, i32)
	def(abi.ImportRoomInfo, roomInfo, i32, i32)
	def(abi.ImportLog, logLine, i32, i32, i32)
	def(abi.ImportCheckpoint, checkpoint)
	def(abi.ImportStateDelete, stateDelete)
	def(abi.ImportUpgradeState, upgradeState, i32, i32)
	def(abi.ImportUpgradeAccept, upgradeAccept)
	def(abi.ImportChannelReply, e.channelReply, i32, i32, i32)
	def(abi.ImportChannelPush, channelPush, i32, i32, i32)
	def(abi.ImportChannelBroadcast, channelBroadcast, i32, i32, i32)
	def(abi.ImportChannelClose, channelClose, i32, i32, i32)
	def(abi.ImportPresenceTrack, presenceTrack, i32, i32, i32)
	def(abi.ImportPresenceUntrack, presenceUntrack, i32, i32, i32)
	def(abi.ImportIdleCall, idleCall)
	def(abi.ImportCallStart, callStart, i32, i32)
	def(abi.ImportCallWait, callWait, i32)
	def(abi.ImportCallResult, callResult, i32, i32, i32)
	def(abi.ImportCallReply, callReply, i32, i32)
	def(abi.ImportHTTPHandOver, httpHandOver, i32, i32)
	def(abi.ImportSecretGet, e.secretGet, i32, i32, i32, i32)
	def(abi.ImportFetchStart, e.fetchStart, i32, i32)
	def(abi.ImportFetchWait, fetchWait, i32)
	def(abi.ImportFetchResult, fetchResult, i32, i32, i32)
	def(abi.ImportAlarmSet, alarmSet, i64)
	def(abi.ImportAlarmClear, alarmClear)
	def(abi.ImportAlarmGet, alarmGet, i32)
	_, err := b.Instantiate(ctx)
	if err != nil {
		return fmt.Errorf("engine: host module: %w", err)
	}
	return nil
}

func instanceOf(ctx context.Context) *Instance {
	inst, _ := ctx.Value(instanceKey{}).(*Instance)
	return inst
}

// eventInstance returns the instance whose event calls a host function, or
// answers the call with StatusState and returns nil when there is none (a
// call outside an event, or from an instance without a host).
func eventInstance(ctx context.Context, stack []uint64) *Instance {
	inst := instanceOf(ctx)
	if inst == nil || inst.host == nil {
		ret(stack, abi.StatusState)
		return nil
	}
	return inst
}

// statefulInstance is eventInstance for the functions of a room's stored
// state: a front's instance has none, and is answered StatusState.
func statefulInstance(ctx context.Context, stack []uint64) *Instance {
	inst := eventInstance(ctx, stack)
	if inst != nil && inst.front {
		ret(stack, abi.StatusState)
		return nil
	}
	return inst
}

func ret(stack []uint64, s abi.Status) { stack[0] = uint64(uint32(int32(s))) }

// guestBytes returns a view of guest memory, or false for a range outside it.
// wazero leaves the upper half of an i32 argument's stack slot undefined,
// so both are truncated before use.
func guestBytes(mod api.Module, ptr, n uint64) ([]byte, bool) {
	if uint32(n) == 0 {
		return nil, true
	}
	return mod.Memory().Read(uint32(ptr), uint32(n))
}

func (e *Engine) httpRespond(ctx context.Context, mod api.Module, stack []uint64) {
	inst := instanceOf(ctx)
	body, ok := guestBytes(mod, stack[0], stack[1])
	switch {
	case inst == nil || !inst.inRequest || inst.responded:
		ret(stack, abi.StatusState)
	case !ok:
		ret(stack, abi.StatusInvalid)
	case len(body) > e.cfg.MaxResponseBytes:
		ret(stack, abi.StatusTooLarge)
	default:
		if _, err := abi.DecodeResponse(body); err != nil {
			ret(stack, abi.StatusInvalid)
			return
		}
		inst.response = append(inst.response[:0], body...)
		inst.responded = true
		ret(stack, abi.Success)
	}
}

func socketSend(ctx context.Context, mod api.Module, stack []uint64) {
	inst := eventInstance(ctx, stack)
	if inst == nil {
		return
	}
	kind, data, st := message(mod, stack[1], stack[2], stack[3])
	if st == abi.Success {
		st = inst.host.SocketSend(uint32(stack[0]), kind, data)
	}
	ret(stack, st)
}

// message reads the kind and payload of a send or broadcast: a text
// message must be valid UTF-8, as the WebSocket protocol requires.
func message(mod api.Module, kind, ptr, n uint64) (int, []byte, abi.Status) {
	k := int(uint32(kind))
	data, ok := guestBytes(mod, ptr, n)
	if !ok || (k != abi.MessageText && k != abi.MessageBinary) || (k == abi.MessageText && !utf8.Valid(data)) {
		return 0, nil, abi.StatusInvalid
	}
	return k, data, abi.Success
}

func socketClose(ctx context.Context, mod api.Module, stack []uint64) {
	inst := instanceOf(ctx)
	reason, ok := guestBytes(mod, stack[2], stack[3])
	code := int(int32(uint32(stack[1])))
	switch {
	case inst == nil || inst.host == nil:
		ret(stack, abi.StatusState)
	case !ok || !abi.ValidGuestCloseCode(code) || !utf8.Valid(reason):
		ret(stack, abi.StatusInvalid)
	case len(reason) > abi.MaxCloseReason:
		ret(stack, abi.StatusTooLarge)
	default:
		ret(stack, inst.host.SocketClose(uint32(stack[0]), abi.CloseCode(code), string(reason)))
	}
}

func socketList(ctx context.Context, mod api.Module, stack []uint64) {
	inst := eventInstance(ctx, stack)
	if inst == nil {
		return
	}
	limit := uint32(stack[1])
	if limit > 1<<20 {
		ret(stack, abi.StatusInvalid)
		return
	}
	buf, ok := guestBytes(mod, stack[0], uint64(limit)*4)
	if !ok {
		ret(stack, abi.StatusInvalid)
		return
	}
	inst.sockets = inst.host.SocketList(inst.sockets[:0])
	for n, id := range inst.sockets {
		if uint32(n) >= limit {
			break
		}
		binary.LittleEndian.PutUint32(buf[4*n:], id)
	}
	ret(stack, abi.Status(len(inst.sockets)))
}

func broadcast(ctx context.Context, mod api.Module, stack []uint64) {
	inst := eventInstance(ctx, stack)
	if inst == nil {
		return
	}
	kind, data, st := message(mod, stack[0], stack[1], stack[2])
	if st == abi.Success {
		st = abi.Status(inst.host.Broadcast(kind, data, uint32(stack[3])))
	}
	ret(stack, st)
}

func roomInfo(ctx context.Context, mod api.Module, stack []uint64) {
	inst := eventInstance(ctx, stack)
	if inst == nil {
		return
	}
	info := inst.host.RoomInfo()
	rec := abi.AppendRoomInfo(nil, &info)
	if uint64(len(rec)) <= uint64(uint32(stack[1])) {
		if !mod.Memory().Write(uint32(stack[0]), rec) {
			ret(stack, abi.StatusInvalid)
			return
		}
	}
	ret(stack, abi.Status(len(rec)))
}

// secretGet answers abi.ImportSecretGet.
func (e *Engine) secretGet(ctx context.Context, mod api.Module, stack []uint64) {
	inst := eventInstance(ctx, stack)
	if inst == nil {
		return
	}
	name, ok := guestBytes(mod, stack[0], stack[1])
	if !ok || !abi.ValidSecretName(string(name)) {
		ret(stack, abi.StatusInvalid)
		return
	}
	if e.cfg.Secrets == nil {
		ret(stack, abi.StatusNotFound)
		return
	}
	value, found, err := e.cfg.Secrets.Secret(ctx, string(name))
	switch {
	case err != nil:
		ret(stack, abi.StatusRefused)
		return
	case !found:
		ret(stack, abi.StatusNotFound)
		return
	}
	if uint64(len(value)) <= uint64(uint32(stack[3])) && len(value) > 0 {
		if !mod.Memory().Write(uint32(stack[2]), value) {
			ret(stack, abi.StatusInvalid)
			return
		}
	}
	ret(stack, abi.Status(len(value)))
}

func logLine(ctx context.Context, mod api.Module, stack []uint64) {
	inst := instanceOf(ctx)
	msg, ok := guestBytes(mod, stack[1], stack[2])
	msg = msg[:min(len(msg), abi.MaxLogLine)]
	switch {
	case inst == nil || inst.host == nil:
		ret(stack, abi.StatusState)
	case !ok:
		ret(stack, abi.StatusInvalid)
	default:
		inst.host.Log(int(int32(uint32(stack[0]))), string(msg))
		ret(stack, abi.Success)
	}
}

// channelReply records the guest's answer to the join or message being
// handled; the room turns it into a phx_reply once the event returns.
func (e *Engine) channelReply(ctx context.Context, mod api.Module, stack []uint64) {
	inst := instanceOf(ctx)
	body, ok := guestBytes(mod, stack[1], stack[2])
	status := int(uint32(stack[0]))
	switch {
	case inst == nil || inst.inChannel == noReply || inst.reply.Given:
		ret(stack, abi.StatusState)
	case !ok || (status != abi.ReplyOK && status != abi.ReplyError):
		ret(stack, abi.StatusInvalid)
	case len(body) > e.cfg.MaxResponseBytes:
		ret(stack, abi.StatusTooLarge)
	case len(body) > 0 && !json.Valid(body):
		// Kept as the answer, so that the room answers the client with an
		// error (the Phoenix encoder refuses the body) rather than leaving
		// it to time out; the guest learns that its reply was refused.
		inst.reply.Given, inst.reply.Status = true, status
		inst.reply.Body = append(inst.reply.Body[:0], body...)
		ret(stack, abi.StatusInvalid)
	default:
		inst.reply.Given, inst.reply.Status = true, status
		inst.reply.Body = append(inst.reply.Body[:0], body...)
		ret(stack, abi.Success)
	}
}

// channelOut reads a ChannelOut record: a JSON payload must be valid JSON.
func channelOut(mod api.Module, ptr, n uint64) (*abi.ChannelMessage, abi.Status) {
	b, ok := guestBytes(mod, ptr, n)
	if !ok {
		return nil, abi.StatusInvalid
	}
	m, err := abi.DecodeChannelMessage(b)
	if err != nil || m.Topic == "" || m.Event == "" || (!m.Binary && len(m.Payload) > 0 && !json.Valid(m.Payload)) {
		return nil, abi.StatusInvalid
	}
	return &m, abi.Success
}

func channelPush(ctx context.Context, mod api.Module, stack []uint64) {
	inst := eventInstance(ctx, stack)
	if inst == nil {
		return
	}
	m, st := channelOut(mod, stack[1], stack[2])
	if st == abi.Success {
		st = inst.host.ChannelPush(uint32(stack[0]), m)
	}
	ret(stack, st)
}

func channelBroadcast(ctx context.Context, mod api.Module, stack []uint64) {
	inst := eventInstance(ctx, stack)
	if inst == nil {
		return
	}
	m, st := channelOut(mod, stack[1], stack[2])
	if st == abi.Success {
		st = abi.Status(inst.host.ChannelBroadcast(uint32(stack[0]), m))
	}
	ret(stack, st)
}

func channelClose(ctx context.Context, mod api.Module, stack []uint64) {
	inst := eventInstance(ctx, stack)
	if inst == nil {
		return
	}
	b, ok := guestBytes(mod, stack[1], stack[2])
	topic, err := abi.DecodeTopic(b)
	if !ok || err != nil {
		ret(stack, abi.StatusInvalid)
		return
	}
	ret(stack, inst.host.ChannelClose(uint32(stack[0]), topic))
}

// presence reads a Presence record; a track's meta must be a JSON object.
func presence(mod api.Module, ptr, n uint64, track bool) (*abi.Presence, abi.Status) {
	b, ok := guestBytes(mod, ptr, n)
	if !ok {
		return nil, abi.StatusInvalid
	}
	p, err := abi.DecodePresence(b)
	if err != nil || p.Topic == "" || p.Key == "" {
		return nil, abi.StatusInvalid
	}
	if track {
		if len(p.Meta) == 0 {
			p.Meta = []byte("{}")
		}
		var obj map[string]json.RawMessage
		if json.Unmarshal(p.Meta, &obj) != nil {
			return nil, abi.StatusInvalid
		}
	}
	return &p, abi.Success
}

func presenceTrack(ctx context.Context, mod api.Module, stack []uint64) {
	inst := eventInstance(ctx, stack)
	if inst == nil {
		return
	}
	p, st := presence(mod, stack[1], stack[2], true)
	if st == abi.Success {
		st = inst.host.PresenceTrack(uint32(stack[0]), p)
	}
	ret(stack, st)
}

func presenceUntrack(ctx context.Context, mod api.Module, stack []uint64) {
	inst := eventInstance(ctx, stack)
	if inst == nil {
		return
	}
	p, st := presence(mod, stack[1], stack[2], false)
	if st == abi.Success {
		st = inst.host.PresenceUntrack(uint32(stack[0]), p)
	}
	ret(stack, st)
}

// checkpoint marks the event: the room makes its state durable when the
// event returns, before any of the event's output leaves the host. (A
// snapshot in the middle of a call could not be resumed: the guest's own
// stack of the call would be in it.)
func checkpoint(ctx context.Context, _ api.Module, stack []uint64) {
	inst := statefulInstance(ctx, stack)
	if inst == nil {
		return
	}
	inst.checkpoint = true
	ret(stack, abi.Success)
}

// stateDelete marks the event: when it returns, the room deletes its
// stored state and drops the instance (see abi.ImportStateDelete).
func stateDelete(ctx context.Context, _ api.Module, stack []uint64) {
	inst := statefulInstance(ctx, stack)
	if inst == nil {
		return
	}
	inst.deleteState = true
	ret(stack, abi.Success)
}

// idleCall records the guest's request for a call once its room is idle
// (see abi.ImportIdleCall); the room makes it (Instance.Idle).
func idleCall(ctx context.Context, _ api.Module, stack []uint64) {
	inst := eventInstance(ctx, stack)
	switch {
	case inst == nil:
	case !inst.class.has[EventIdle]:
		ret(stack, abi.StatusUnsupported)
	default:
		inst.idleWanted = true
		ret(stack, abi.Success)
	}
}

// upgradeState takes the state the guest hands over during
// wasmkeep_on_upgrade (see abi.ImportUpgradeState).
func upgradeState(ctx context.Context, mod api.Module, stack []uint64) {
	inst := instanceOf(ctx)
	state, ok := guestBytes(mod, stack[0], stack[1])
	switch {
	case inst == nil || !inst.inUpgrade || inst.handedOver:
		ret(stack, abi.StatusState)
	case !ok:
		ret(stack, abi.StatusInvalid)
	case len(state) > abi.MaxUpgradeState:
		ret(stack, abi.StatusTooLarge)
	default:
		inst.handoff = append(inst.handoff[:0], state...)
		inst.handedOver = true
		ret(stack, abi.Success)
	}
}

// upgradeAccept: the new version took over the state it started from
// (see abi.ImportUpgradeAccept).
func upgradeAccept(ctx context.Context, _ api.Module, stack []uint64) {
	inst := instanceOf(ctx)
	if inst == nil || !inst.inStartFrom {
		ret(stack, abi.StatusState)
		return
	}
	inst.accepted = true
	ret(stack, abi.Success)
}

// guestOutput turns a guest's stdout and stderr into log lines attributed
// to its room, cut at abi.MaxLogLine so a guest cannot make the host buffer
// without bound.
type guestOutput struct {
	logger *slog.Logger
	class  string
	mu     sync.Mutex
	room   abi.RoomInfo
	muted  bool // a probe's output (Class.Handoff): nobody's room, and its refusals are expected
}

func (o *guestOutput) setRoom(h Host) {
	if h == nil {
		return
	}
	o.mu.Lock()
	o.room = h.RoomInfo()
	o.mu.Unlock()
}

func (o *guestOutput) stream(name string) io.Writer { return &lineWriter{out: o, stream: name} }

type lineWriter struct {
	out    *guestOutput
	stream string
	buf    []byte
}

func (w *lineWriter) Write(p []byte) (int, error) {
	n := len(p)
	for len(p) > 0 {
		i := bytes.IndexByte(p, '\n')
		if i < 0 {
			room := abi.MaxLogLine - len(w.buf)
			w.buf = append(w.buf, p[:min(len(p), max(room, 0))]...)
			break
		}
		w.buf = append(w.buf, p[:min(i, max(abi.MaxLogLine-len(w.buf), 0))]...)
		w.flush()
		p = p[i+1:]
	}
	return n, nil
}

func (w *lineWriter) flush() {
	w.out.mu.Lock()
	room, muted := w.out.room, w.out.muted
	w.out.mu.Unlock()
	if muted {
		w.buf = w.buf[:0]
		return
	}
	w.out.logger.Info("guest output", "stream", w.stream, "class", room.Class, "room", room.Name, "line", string(w.buf))
	w.buf = w.buf[:0]
}
