package engine

import (
	"bytes"
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"math"
	"os"
	"strings"
	"sync/atomic"
	"time"

	"github.com/tetratelabs/wazero"
	"github.com/tetratelabs/wazero/api"
	"github.com/tetratelabs/wazero/sys"

	"github.com/wasmkeep/wasmkeep/abi"
	"github.com/wasmkeep/wasmkeep/host/engine/wasmrw"
	"github.com/wasmkeep/wasmkeep/host/snapshot"
)

const (
	chunkSize = snapshot.ChunkSize
	pageSize  = snapshot.PageSize
)

// Host is what an instance's host functions act on: the room it runs as.
// Byte slices passed to Host methods alias guest memory and are valid only
// during the call; implementations copy what they keep. The engine has
// validated what it passes: a message's kind is abi.MessageText or
// abi.MessageBinary, and text is valid UTF-8.
type Host interface {
	SocketSend(id uint32, kind int, data []byte) abi.Status
	SocketClose(id uint32, code abi.CloseCode, reason string) abi.Status
	// SocketList appends the ids of the room's open sockets to dst.
	SocketList(dst []uint32) []uint32
	// Broadcast returns how many sockets the message was queued to.
	Broadcast(kind int, data []byte, except uint32) int
	RoomInfo() abi.RoomInfo
	Log(level int, msg string)

	// Channels (Phoenix). Records are decoded and checked by the engine.
	ChannelPush(socket uint32, m *abi.ChannelMessage) abi.Status
	// ChannelBroadcast returns how many sockets the message went to.
	ChannelBroadcast(except uint32, m *abi.ChannelMessage) int
	ChannelClose(socket uint32, topic string) abi.Status
	PresenceTrack(socket uint32, p *abi.Presence) abi.Status
	PresenceUntrack(socket uint32, p *abi.Presence) abi.Status
}

// Errors an event call can end with. After any of them the instance is
// dead: the caller must drop it and restore the room from its last snapshot.
var (
	// ErrTrap: the guest trapped (unreachable, out-of-bounds access, a Go
	// panic, a stack overflow...).
	ErrTrap = errors.New("engine: guest trapped")
	// ErrTimeout: the event ran past the event timeout.
	ErrTimeout = errors.New("engine: guest exceeded the event time limit")
	// ErrMemoryLimit: the guest needed more memory than the room limit.
	ErrMemoryLimit = errors.New("engine: guest exceeded the memory limit")
	// ErrExit: the guest called proc_exit.
	ErrExit = errors.New("engine: guest exited")
	// ErrClosed: the instance was already closed.
	ErrClosed = errors.New("engine: instance closed")
)

// Instance is one room's module instance.
type Instance struct {
	class  *Class
	mod    api.Module
	mem    api.Memory
	ctx    context.Context
	cancel context.CancelFunc

	// The guest's exports are looked up on first use (function): wazero
	// gives each function looked up a call stack of its own (10 KiB at
	// least), and an instance calls few of them: a wake never calls start
	// or initialize, a room may never see some events.
	fnAlloc api.Function
	fnEvent [numEvents]api.Function
	globals []api.Global
	stack   [4]uint64
	// interrupt is the global the guest checks at every loop header
	// (wasmrw.InterruptExport), nil if its class has none. Only
	// interruptCall sets it, once: an instance it is set in is dead.
	interrupt api.MutableGlobal

	// offset turns the host monotonic clock into this guest's clock.
	offset atomic.Int64
	out    *guestOutput

	host Host

	callStart atomic.Int64 // host nanotime when the running call began; 0 when idle
	// waiting: the guest waits on a call to another room (call_wait) or
	// on a fetch (fetch_wait), which the event's time limit does not
	// count.
	waiting  atomic.Bool
	timedOut atomic.Bool
	dead     bool
	// counted: handed out to a room, so a use of its class (Class.uses).
	counted bool

	// inbox is the guest region the host writes event payloads to, from
	// its last wasmkeep_alloc call; the ABI lets the host reuse it for any
	// payload that fits until it asks for another.
	inbox, inboxCap uint32

	restoredPages []uint64 // page hashes as restored, for the first snapshot after
	// trackedPages are the page hashes of the last snapshot, since which
	// the memory's writes are tracked (pagesSince).
	trackedPages []uint64

	// checkpoint is set by the guest's checkpoint() during an event: the
	// room makes its state durable before the event's output goes out.
	checkpoint bool
	// deleteState is set by the guest's state_delete() during an event.
	deleteState bool
	// idleWanted is set by the guest's idle_call() during an event, until
	// Idle makes the call.
	idleWanted bool

	// State of the request being handled.
	inRequest bool
	response  []byte
	responded bool

	// State of the call being handled (Call), and of the calls the
	// event made, by handle.
	inCall, replied, replyTooLarge bool
	callReply                      []byte
	calls                          handles[callSlot]
	// The fetches the event made, by handle.
	fetches handles[fetchSlot]

	// State of a front's request (FrontRequest): an upgrade it may hand
	// to a room. front: the instance is a front's, which has no state to
	// make durable or delete.
	mayHandOver, front bool
	handOver           *abi.HandOver

	// State of an upgrade's handoff (Upgrade).
	inUpgrade, handedOver bool
	handoff               []byte
	inStartFrom, accepted bool

	// State of the join or channel message being handled.
	inChannel EventKindReply
	reply     ChannelReply

	sockets []uint32 // scratch for socket_list
}

type instanceKey struct{}

func (c *Class) instantiate(ctx context.Context) (*Instance, error) {
	return c.instantiateOn(ctx, nil)
}

// instantiateOn makes a blank instance on spare, or on a new memory if
// spare is nil.
func (c *Class) instantiateOn(ctx context.Context, spare spareMemory) (*Instance, error) {
	inst := &Instance{class: c}
	inst.ctx, inst.cancel = context.WithCancel(context.WithValue(context.Background(), instanceKey{}, inst))
	inst.out = &guestOutput{logger: c.e.cfg.Logger, class: c.Hash}
	e := c.e
	cfg := wazero.NewModuleConfig().
		WithName("").
		WithStartFunctions(). // nothing runs at instantiation: cold starts and restores decide
		WithWalltime(e.walltime, sys.ClockResolution(time.Microsecond)).
		WithNanotime(func() int64 { return e.nanotime() + inst.offset.Load() }, 1).
		WithNanosleep(inst.sleep).
		WithRandSource(rand.Reader).
		WithStdout(inst.out.stream("stdout")).
		WithStderr(inst.out.stream("stderr"))
	mod, err := c.rt.InstantiateModule(c.withMemory(inst.ctx, spare), c.compiled, cfg)
	if err != nil {
		inst.cancel()
		return nil, err
	}
	inst.mod = mod
	inst.mem = mod.Memory()
	if inst.mem == nil {
		mod.Close(ctx)
		inst.cancel()
		return nil, errors.New("module has no memory")
	}
	inst.globals = make([]api.Global, len(c.globals))
	for i, name := range c.globals {
		inst.globals[i] = mod.ExportedGlobal(name)
		if inst.globals[i] == nil {
			mod.Close(ctx)
			inst.cancel()
			return nil, fmt.Errorf("rewritten module lacks export %s", name)
		}
	}
	if c.interrupt {
		g, ok := mod.ExportedGlobal(wasmrw.InterruptExport).(api.MutableGlobal)
		if !ok {
			mod.Close(ctx)
			inst.cancel()
			return nil, fmt.Errorf("rewritten module lacks the mutable global %s", wasmrw.InterruptExport)
		}
		inst.interrupt = g
	}
	e.track(inst)
	return inst, nil
}

// sleep backs the guest's nanosleep with a real sleep that an interrupted
// event cuts short (a sleeping guest is not running wasm, so wazero's own
// context check would not see the interruption).
func (i *Instance) sleep(ns int64) {
	if ns <= 0 {
		return
	}
	t := i.class.e.clock.NewTimer(time.Duration(ns))
	select {
	case <-t.C():
	case <-i.ctx.Done():
		t.Stop()
	}
}

// Start creates a fresh room instance: the module's start function and its
// WASI initializer run, once, now.
func (c *Class) Start(ctx context.Context, host Host) (*Instance, error) {
	inst, err := c.handOut(ctx, nil)
	if err != nil {
		return nil, err
	}
	inst.host = host
	inst.out.setRoom(host)
	for _, name := range []string{wasmrwStartExport, abi.ExportInitialize} {
		fn := inst.mod.ExportedFunction(name)
		if fn == nil {
			continue
		}
		if err := inst.call(fn); err != nil {
			inst.Close()
			return nil, fmt.Errorf("initialize: %w", err)
		}
	}
	// Initializing rewrote many pages with what they already held; give
	// back those equal to the class image.
	inst.trimMemory()
	return inst, nil
}

// Restore creates a room instance from a snapshot: memory, globals and the
// guest clock come back; no start or initialize function runs. segs holds
// the segments the manifest references, by id.
func (c *Class) Restore(ctx context.Context, man *snapshot.Manifest, segs map[string]*snapshot.Segment, host Host) (*Instance, error) {
	var spare spareMemory
	takeSpare := func() spareMemory { spare = c.spareMemory(man); return spare }
	return c.restore(ctx, man, host, takeSpare, func(inst *Instance, view []byte) ([]uint64, error) {
		if spare != nil {
			// Most stored pages are there already: a prefault would
			// cost a system call for each run of them, and gain little.
			return man.RestoreWith(view, segs, snapshot.RestoreOptions{Dirty: c.isDirty, BasePages: c.basePages})
		}
		return man.Restore(view, segs, c.isDirty, c.basePages)
	})
}

// ErrNoImage: the instance's memory cannot map a file (it is not a mapped
// memory, or not on linux); restore from the segments instead.
var ErrNoImage = errors.New("engine: the memory cannot map an image")

// RestoreImage creates a room instance from a snapshot whose memory is
// the first man.MemorySize() bytes of img (host/images), with page hashes
// pages: the file is mapped copy-on-write over the memory, so nothing is
// decoded or copied now, a page is read in when the guest first touches
// it, and one it writes becomes the instance's own (the file is never
// changed through the mapping). Globals and the guest clock come back as
// in Restore. It fails with ErrNoImage where memories cannot map files.
func (c *Class) RestoreImage(ctx context.Context, man *snapshot.Manifest, img *os.File, pages []uint64, host Host) (*Instance, error) {
	if len(pages) != int(man.MemorySize()/pageSize) {
		return nil, fmt.Errorf("engine: %d page hashes for a memory of %d bytes", len(pages), man.MemorySize())
	}
	return c.restore(ctx, man, host, nil, func(inst *Instance, view []byte) ([]uint64, error) {
		if err := inst.mapImage(view, img); err != nil {
			return nil, err
		}
		return pages, nil
	})
}

// restore checks the snapshot against the class, takes a blank instance
// (on the memory takeSpare gives, if it is set and gives one), grows its
// memory to the snapshot's, has fill write it (returning its page
// hashes), and sets the globals and the clock.
func (c *Class) restore(ctx context.Context, man *snapshot.Manifest, host Host, takeSpare func() spareMemory, fill func(inst *Instance, view []byte) ([]uint64, error)) (*Instance, error) {
	if man.ModuleHash != c.Hash {
		return nil, fmt.Errorf("snapshot was taken with module %s, not %s", man.ModuleHash, c.Hash)
	}
	if len(man.Globals) != len(c.globals) {
		return nil, fmt.Errorf("snapshot has %d globals, module has %d", len(man.Globals), len(c.globals))
	}
	var spare spareMemory
	if takeSpare != nil {
		spare = takeSpare()
	}
	inst, err := c.handOut(ctx, spare)
	if err != nil {
		return nil, err
	}
	if err := inst.load(man, fill); err != nil {
		inst.Close()
		return nil, err
	}
	inst.host = host
	inst.out.setRoom(host)
	// The guest clock goes on from where it stopped, advanced by the wall
	// time that passed while the room slept (never backwards, even if the
	// wall clock was set back or the host restarted).
	slept := max(c.e.clock.Wall().UnixNano()-man.WallUnixNano, 0)
	inst.offset.Store(man.Nanotime + slept - c.e.nanotime())
	return inst, nil
}

// handOut takes a blank instance for a room, counted as a use of the
// class until it is closed: one made on spare if it is not nil, else one
// from the pool.
func (c *Class) handOut(ctx context.Context, spare spareMemory) (*Instance, error) {
	if err := c.use(); err != nil {
		if spare != nil {
			spare.release()
		}
		return nil, err
	}
	var inst *Instance
	var err error
	if spare != nil {
		inst, err = c.instantiateOn(ctx, spare)
		if err == nil {
			c.e.spareRestores.Add(1)
		}
	} else {
		inst, err = c.blank(ctx)
	}
	if err != nil {
		c.unuse()
		return nil, err
	}
	inst.counted = true
	return inst, nil
}

func (i *Instance) load(man *snapshot.Manifest, fill func(inst *Instance, view []byte) ([]uint64, error)) error {
	size, want := i.mem.Size(), man.MemorySize()
	switch {
	case want < size:
		return fmt.Errorf("snapshot memory (%d bytes) is smaller than the module's initial memory (%d)", want, size)
	case want > size:
		if _, ok := i.mem.Grow((want - size) / chunkSize); !ok {
			return fmt.Errorf("%w: snapshot memory of %d bytes", ErrMemoryLimit, want)
		}
	}
	view, ok := i.mem.Read(0, want)
	if !ok {
		return errors.New("memory view out of range")
	}
	pages, err := fill(i, view)
	if err != nil {
		return err
	}
	i.restoredPages = pages
	i.class.memoryHint.Store(uint64(want))
	for n, g := range i.globals {
		if !i.class.mutable[n] {
			if g.Get() != man.Globals[n] {
				return fmt.Errorf("immutable global %d differs from the snapshot", n)
			}
			continue
		}
		g.(api.MutableGlobal).Set(man.Globals[n])
	}
	return nil
}

// ReadMemory calls f with the instance's memory, for saving it
// (host/images). The instance must not run meanwhile, and f must not keep
// the slice.
func (i *Instance) ReadMemory(f func(mem []byte) error) error {
	if i.dead {
		return ErrClosed
	}
	view, ok := i.mem.Read(0, i.mem.Size())
	if !ok {
		return errors.New("memory view out of range")
	}
	return f(view)
}

// RestoredPages returns the page hashes of the memory as restored from its
// snapshot (nil for an instance started fresh); pass them, with the
// snapshot's manifest, to the first Snapshot after the restore.
func (i *Instance) RestoredPages() []uint64 { return i.restoredPages }

// Snapshot takes the instance's next snapshot after prev (nil for the
// room's first), whose page hashes are prevPages (nil: changed chunks are
// stored whole): see snapshot.Encoder.Snapshot. The instance must not be
// running.
func (i *Instance) Snapshot(enc *snapshot.Encoder, prev *snapshot.Manifest, prevPages []uint64, roomState []byte, generation uint64, segmentID string, full bool) (*snapshot.Delta, error) {
	if i.dead {
		return nil, ErrClosed
	}
	view, ok := i.mem.Read(0, i.mem.Size())
	if !ok {
		return nil, errors.New("memory view out of range")
	}
	i.class.memoryHint.Store(uint64(len(view)))
	c := &snapshot.Capture{
		Header: snapshot.Header{
			ModuleHash:   i.class.Hash,
			ABI:          uint32(i.class.ABI),
			Globals:      make([]uint64, len(i.globals)),
			Nanotime:     i.Nanotime(),
			WallUnixNano: i.class.e.clock.Wall().UnixNano(),
			RoomState:    roomState,
		},
		Memory:     view,
		Base:       i.class.initial,
		Generation: generation,
		SegmentID:  segmentID,
		PrevPages:  prevPages,
		Pages:      i.pagesSince(view, prevPages),
	}
	for n, g := range i.globals {
		c.Globals[n] = g.Get()
	}
	d, err := enc.Snapshot(prev, c, full)
	if err == nil {
		i.trackedPages = d.PageHashes
	}
	return d, err
}

// CheckpointRequested reports (and forgets) whether the guest called
// checkpoint() during the event that just returned.
func (i *Instance) CheckpointRequested() bool {
	c := i.checkpoint
	i.checkpoint = false
	return c
}

// DeleteRequested reports (and forgets) whether the guest asked, during
// the event that just returned, for its state to be deleted.
func (i *Instance) DeleteRequested() bool {
	d := i.deleteState
	i.deleteState = false
	return d
}

// Nanotime is the guest's monotonic clock now.
func (i *Instance) Nanotime() int64 { return i.class.e.nanotime() + i.offset.Load() }

// MemorySize is the guest's linear memory size in bytes.
func (i *Instance) MemorySize() uint32 { return i.mem.Size() }

// Class returns the class the instance runs.
func (i *Instance) Class() *Class { return i.class }

// Close releases the instance. Safe to call more than once.
func (i *Instance) Close() {
	if i.mod == nil {
		return
	}
	i.dead = true
	i.class.e.untrack(i)
	i.cancel()
	i.mod.Close(context.Background())
	i.mod = nil
	if i.counted {
		i.counted = false
		i.class.unuse()
	}
}

// Dead reports whether the instance can no longer be used.
func (i *Instance) Dead() bool { return i.dead }

// Request delivers an encoded abi.Request and returns the encoded response
// the guest gave (nil if it gave none).
func (i *Instance) Request(payload []byte) ([]byte, error) {
	i.inRequest, i.responded, i.response = true, false, i.response[:0]
	defer func() { i.inRequest = false }()
	if err := i.event(EventRequest, 0, 0, 0, payload); err != nil {
		return nil, err
	}
	if !i.responded {
		return nil, nil
	}
	return i.response, nil
}

// EventKindReply says which event, if any, channel_reply answers now.
type EventKindReply uint8

const (
	noReply EventKindReply = iota
	joinReply
	messageReply
)

// ChannelReply is a guest's answer to a join or a channel message.
type ChannelReply struct {
	Given  bool   // the guest called channel_reply
	Status int    // abi.ReplyOK or abi.ReplyError
	Body   []byte // JSON, or bytes the guest gave that are not (channel_reply answered it StatusInvalid)
}

// Join delivers an encoded abi.Join for socket id and returns the guest's
// answer (not Given: the join is rejected).
func (i *Instance) Join(id uint32, payload []byte) (ChannelReply, error) {
	return i.channelEvent(EventJoin, joinReply, id, payload)
}

// ChannelMessage delivers an encoded abi.ChannelMessage for socket id and
// returns the guest's reply, if it gave one.
func (i *Instance) ChannelMessage(id uint32, payload []byte) (ChannelReply, error) {
	return i.channelEvent(EventChannelMessage, messageReply, id, payload)
}

// Leave delivers an encoded abi.Leave for socket id.
func (i *Instance) Leave(id uint32, payload []byte) error {
	return i.event(EventLeave, 1, uint64(id), 0, payload)
}

func (i *Instance) channelEvent(k Event, kind EventKindReply, id uint32, payload []byte) (ChannelReply, error) {
	i.inChannel, i.reply = kind, ChannelReply{Body: i.reply.Body[:0]}
	defer func() { i.inChannel = noReply }()
	if err := i.event(k, 1, uint64(id), 0, payload); err != nil {
		return ChannelReply{}, err
	}
	r := i.reply
	r.Body = bytes.Clone(r.Body)
	return r, nil
}

// ErrNoHandoff: the guest's upgrade handler returned without handing over
// its state.
var ErrNoHandoff = errors.New("engine: the room handed over no state")

// Upgrade asks the guest for the state its next version starts from
// (abi.ExportOnUpgrade). The call runs without the room as its host: what
// the guest would send, close, checkpoint or delete is refused
// (StatusState), since an upgrade that fails must leave the room as it
// was. Its memory does change (the guest encodes its state), so a caller
// that keeps the instance after a failed upgrade is expected to drop it
// and restore the room again. ErrNoHandoff when the guest gave nothing.
func (i *Instance) Upgrade() ([]byte, error) {
	if i.dead {
		return nil, ErrClosed
	}
	if !i.class.has[EventUpgrade] {
		return nil, ErrNoHandoff
	}
	host := i.host
	i.host, i.inUpgrade, i.handedOver, i.handoff = nil, true, false, nil
	defer func() { i.host, i.inUpgrade = host, false }()
	if err := i.call(i.function(EventUpgrade)); err != nil {
		return nil, err
	}
	if !i.handedOver {
		return nil, ErrNoHandoff
	}
	state := i.handoff
	i.handoff = nil
	return state, nil
}

// IdleRequested reports whether the guest asked, during an event since
// the last Idle, for a call once its room is idle (abi.ImportIdleCall).
func (i *Instance) IdleRequested() bool { return i.idleWanted && !i.dead }

// Idle makes the call the guest asked for with abi.ImportIdleCall
// (abi.ExportOnIdle), with no room behind it as in Upgrade: what the guest
// would send, close, log, checkpoint or delete is refused (StatusState).
// Errors and what they leave are an event's. It does nothing when no call
// is wanted.
func (i *Instance) Idle() error {
	if !i.IdleRequested() {
		return nil
	}
	i.idleWanted = false
	host := i.host
	i.host = nil
	defer func() { i.host = host }()
	return i.call(i.function(EventIdle))
}

// ErrNotTakenOver: the new version returned from its start without taking
// over the state (abi.ImportUpgradeAccept).
var ErrNotTakenOver = errors.New("engine: the new version did not take over the state")

// StartFrom delivers the state an older version handed over, as the first
// event of a fresh instance (abi.ExportOnStartFrom), with no host behind
// it, as for Upgrade. ErrNotTakenOver when
// the guest does not accept it; the instance is then of no use (it may
// have started empty) and the caller drops it.
func (i *Instance) StartFrom(from string, state []byte) error {
	if !i.class.has[EventStartFrom] {
		return ErrNotTakenOver
	}
	host := i.host
	i.host, i.inStartFrom, i.accepted = nil, true, false
	defer func() { i.host, i.inStartFrom = host, false }()
	if err := i.event(EventStartFrom, 0, 0, 0, abi.AppendStartFrom(nil, &abi.StartFrom{From: from, State: state})); err != nil {
		return err
	}
	if !i.accepted {
		return ErrNotTakenOver
	}
	return nil
}

// SocketOpen delivers an encoded abi.SocketOpen for socket id.
func (i *Instance) SocketOpen(id uint32, payload []byte) error {
	return i.event(EventSocketOpen, 1, uint64(id), 0, payload)
}

// SocketMessage delivers one message of socket id.
func (i *Instance) SocketMessage(id uint32, kind int, data []byte) error {
	return i.event(EventSocketMessage, 2, uint64(id), uint64(kind), data)
}

// Handles reports whether the guest exports the handler for event kind k.
func (i *Instance) Handles(k Event) bool { return i.class.has[k] }

// function returns the guest's handler for k, looked up the first time.
// The instance must be alive and its class must handle k.
func (i *Instance) function(k Event) api.Function {
	if i.fnEvent[k] == nil {
		i.fnEvent[k] = i.mod.ExportedFunction(eventExports[k])
	}
	return i.fnEvent[k]
}

// SocketMessages delivers several messages of socket id in one call, as an
// abi MessageBatch record. Only for a class that handles
// EventSocketMessages.
func (i *Instance) SocketMessages(id uint32, batch []byte) error {
	return i.event(EventSocketMessages, 1, uint64(id), 0, batch)
}

// SocketClose tells the guest socket id is gone.
func (i *Instance) SocketClose(id uint32, code abi.CloseCode, reason string) error {
	return i.event(EventSocketClose, 2, uint64(id), uint64(code), []byte(reason))
}

// event copies payload into guest memory and calls the handler for k with
// nlead leading arguments (a0, a1), then the payload's pointer and length.
func (i *Instance) event(k Event, nlead int, a0, a1 uint64, payload []byte) error {
	if i.dead {
		return ErrClosed
	}
	if !i.class.has[k] {
		return nil
	}
	fn := i.function(k)
	var ptr uint32
	if len(payload) > 0 {
		if uint64(len(payload)) > uint64(i.inboxCap) {
			// Ask for room to spare so that growing payloads do not
			// cost an allocation each.
			size := max(uint64(len(payload)), 2*uint64(i.inboxCap), minInbox)
			if size > math.MaxUint32 {
				return fmt.Errorf("payload of %d bytes", len(payload))
			}
			i.stack[0] = size
			if i.fnAlloc == nil {
				i.fnAlloc = i.mod.ExportedFunction(abi.ExportAlloc) // Compile checked it exists
			}
			if err := i.call(i.fnAlloc); err != nil {
				return err
			}
			i.inbox, i.inboxCap = uint32(i.stack[0]), uint32(size)
		}
		ptr = i.inbox
		if !i.mem.Write(ptr, payload) {
			i.Close()
			return fmt.Errorf("%w: %s returned %#x, outside memory for %d bytes", ErrTrap, abi.ExportAlloc, ptr, len(payload))
		}
	}
	i.stack[0], i.stack[1] = a0, a1
	i.stack[nlead], i.stack[nlead+1] = uint64(ptr), uint64(len(payload))
	return i.call(fn)
}

// call runs fn with i.stack; any failure kills the instance.
func (i *Instance) call(fn api.Function) error {
	i.callStart.Store(i.class.e.nanotime())
	err := fn.CallWithStack(i.ctx, i.stack[:])
	i.callStart.Store(0)
	i.calls.end()
	i.fetches.end()
	if err == nil && !i.timedOut.Load() {
		return nil
	}
	// A call interrupted just as it returned counts as timed out too: its
	// context is cancelled (sleeps would return at once) and its interrupt
	// global set, so the instance is of no more use.
	err = i.classify(err)
	i.Close()
	return err
}

// interruptCall ends the running call, on the watchdog's goroutine (or
// Engine.Close's): the guest traps at the next loop header it reaches
// (the interrupt global) or, for a class without the check, wazero closes
// the module at the next back-edge (its context); a sleep in the host
// returns (its context).
func (i *Instance) interruptCall() {
	i.timedOut.Store(true)
	if i.interrupt != nil {
		i.interrupt.Set(1)
	}
	i.cancel()
}

func (i *Instance) classify(err error) error {
	var exit *sys.ExitError
	switch {
	case i.timedOut.Load():
		return fmt.Errorf("%w (%s)", ErrTimeout, i.class.e.cfg.EventTimeout)
	case errors.As(err, &exit):
		if i.nearMemoryLimit() {
			return fmt.Errorf("%w (%d MiB)", ErrMemoryLimit, i.class.e.cfg.MaxMemoryPages/PagesPerMiB)
		}
		return fmt.Errorf("%w with code %d", ErrExit, exit.ExitCode())
	}
	if i.nearMemoryLimit() {
		return fmt.Errorf("%w (%d MiB): %s", ErrMemoryLimit, i.class.e.cfg.MaxMemoryPages/PagesPerMiB, firstLine(err))
	}
	return fmt.Errorf("%w: %s", ErrTrap, firstLine(err))
}

// nearMemoryLimit tells a memory-limit failure from other crashes: Go guests
// abort (rather than trap) when a grow fails, so the cause is read off the
// memory size.
func (i *Instance) nearMemoryLimit() bool {
	limit := uint64(i.class.e.cfg.MaxMemoryPages) * chunkSize
	return uint64(i.mem.Size())+8*chunkSize >= limit
}

func firstLine(err error) string {
	s, _, _ := strings.Cut(err.Error(), "\n")
	return s
}

const wasmrwStartExport = "__wk_start"

// minInbox is the smallest region the host asks wasmkeep_alloc for.
const minInbox = 4096

func isZero(b []byte) bool { return snapshot.IsZero(b) }
