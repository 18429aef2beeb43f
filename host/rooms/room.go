package rooms

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/wasmkeep/wasmkeep/abi"
	"github.com/wasmkeep/wasmkeep/calls"
	"github.com/wasmkeep/wasmkeep/host/engine"
	"github.com/wasmkeep/wasmkeep/host/phoenix"
	"github.com/wasmkeep/wasmkeep/host/rooms/life"
	"github.com/wasmkeep/wasmkeep/host/snapshot"
	"github.com/wasmkeep/wasmkeep/host/store"
	"github.com/wasmkeep/wasmkeep/internal/clock"
)

// Conn is a host-owned socket as the room layer uses it.
type Conn interface {
	// SendFrame queues a frame made by the manager's Framer; it never
	// blocks, and one frame may be queued to many sockets.
	SendFrame(f Frame) error
	// Send queues one message (kind is abi.MessageText, valid UTF-8, or
	// abi.MessageBinary); it copies data and never blocks.
	Send(kind int, data []byte) error
	// Close queues a close frame behind what is already queued.
	Close(code abi.CloseCode, reason string)
	// Cork holds queued messages back until Uncork, so a burst of events'
	// sends to one socket goes out in one write.
	Cork()
	Uncork()
}

// Frame is a message encoded once, for any number of sockets.
type Frame any

// Framer encodes a message into a Frame. It must copy data.
type Framer func(kind int, data []byte) (Frame, error)

// Message is one message of a socket (Kind is abi.MessageText or
// abi.MessageBinary): what Socket.Messages delivers, and the Frame of the
// default Framer, for socket layers (and tests) that encode on send.
type Message struct {
	Kind int
	Data []byte
}

func defaultFramer(kind int, data []byte) (Frame, error) {
	return Message{Kind: kind, Data: slices.Clone(data)}, nil
}

// Socket is a room's view of one of its sockets. The socket layer reports
// what happens on the wire to it; the room decides what the guest sees.
type Socket struct {
	room *Room
	conn Conn
	open []byte        // the encoded abi.SocketOpen, replayed if the guest forgets it
	ch   *channelState // the Phoenix protocol state of a channel socket; nil for raw ones
	id   uint32        // handed out when the open event runs; worker-owned
	// corked is true while the worker holds the socket's writes for the
	// rest of a burst of events; worker-owned.
	corked bool
	// closing: the room or the node has closed it, and its close event is
	// still to come; it no longer counts as open. Worker-owned.
	closing bool
	// inflight counts the socket's message events in the room's mailbox,
	// the one being handled included (at most maxInflight); drained is
	// made by a reader that waits for it to fall and closed by the worker
	// when it does. Both are guarded by the room's mu. A counter and a
	// channel made only for a wait, rather than a channel of tokens made
	// for every socket: an idle socket keeps one small object fewer, and
	// one that would have been made in the middle of its room's cold
	// start, holding a page of the Go heap in use after the room is gone.
	inflight uint8
	drained  chan struct{}
}

// ID is the socket's id within its room (0 until its open event ran).
func (s *Socket) ID() uint32 { return s.id }

type eventKind uint8

const (
	evRequest eventKind = iota
	evSocketOpen
	evSocketMessage
	evSocketClose
	evChannel
	evCheckpoint // write the state now without hibernating (export)
	evHibernate
	evWake         // make the room resident without an event for its guest (pin)
	evDelete       // delete the room: its instance, sockets and stored state (Manager.Delete)
	evDrop         // drop the instance unwritten, ending the hold for why (Manager.Drop)
	evCloseSockets // close every socket of the room with code and reason (Manager.CloseSockets)
	evCall         // a call from another room (Manager.ServeCall)
	evCommitted    // a group commit's write ended, or its window passed (commit.go)
	evAlarm        // the room's alarm is due (Manager.ServeCall of an alarm's delivery)
)

// unrefused reports whether a full mailbox still takes the event: closes
// and the node's own requests, bounded by the sockets and rooms that exist.
func (k eventKind) unrefused() bool {
	return k == evSocketClose || k == evHibernate || k == evDelete || k == evDrop || k == evCloseSockets || k == evCommitted
}

var eventNames = [...]string{"request", "socket_open", "socket_message", "socket_close", "channel", "", "", "", "", "", "", "call", "", "alarm"}

type event struct {
	kind    eventKind
	sock    *Socket
	msgKind int
	data    []byte
	batch   []Message // evSocketMessage: several messages, in place of msgKind and data
	code    abi.CloseCode
	reason  string

	ctx   context.Context // a request's; skipped if done before it runs
	reply chan result

	delivery phoenix.Delivery // a channel event

	call   *calls.Call // evCall and evAlarm, answered on answer
	answer chan calls.Result

	why  life.EndReason // evHibernate
	done chan error
}

type result struct {
	resp *abi.Response
	err  error
}

// effect is something an event asked for outside the guest, applied only
// once the event returned without crashing.
type effect struct {
	op       effectOp
	kind     uint8 // opSend: the message's kind
	at, end  int   // opSend: the message's bytes in Room.sent
	sock     *Socket
	frame    Frame
	code     abi.CloseCode
	reason   string
	except   uint32
	msg      *abi.ChannelMessage
	presence *abi.Presence
}

type effectOp uint8

const (
	opSend effectOp = iota
	opClose
	opBroadcast
	opChanPush
	opChanBroadcast
	opChanClose
	opPresenceTrack
	opPresenceUntrack
)

// Room is one actor's host-side state. Fields below "worker-owned" are
// touched only by the goroutine draining the mailbox.
type Room struct {
	key Key
	m   *Manager

	mu      sync.Mutex
	queue   []*event
	head    int
	running bool
	// lingering: the worker (running) has emptied the mailbox and waits a
	// little for the next event rather than exit; no event is running.
	lingering bool
	space     chan struct{} // closed when a full queue frees up

	lastActive       atomic.Int64
	memory           atomic.Uint32 // linear memory of the resident instance, bytes
	socketCount      atomic.Int32
	isResident       atomic.Bool
	everStored       atomic.Bool
	hibernatePending atomic.Bool
	openRequests     atomic.Int32 // HTTP requests waiting for the room's answer (facts.go)
	pinned           atomic.Bool  // kept in memory by an operator (Manager.Pin)
	// version is the module version of the resident instance (a string,
	// for listings on other goroutines); upgraded: load moved the room to
	// a new version, whose state wake writes at once; resetForUpgrade:
	// load reset it for an upgrade (UpgradeAll reads and clears it).
	version         atomic.Pointer[string]
	upgraded        bool
	resetForUpgrade atomic.Bool
	// retryAt is the monotonic time before which neither the idle sweep
	// nor an eviction tries again to hibernate a room whose snapshot write
	// failed; 0 when its last write succeeded.
	retryAt atomic.Int64

	// worker-owned
	batchBuf []byte // MessageBatch encoding, reused
	inst     Instance
	hold     Hold
	held     bool
	man      *snapshot.Manifest // the latest snapshot's manifest, while resident
	manBody  []byte             // man as stored (encoded), for keepInstance
	pages    []uint64           // the page hashes of the memory as man has it
	image    uint64             // the image (host/images) inst was restored from or saved to, or 0
	etag     string             // its version in the bucket (manifests.go)
	// firstVersion is the version of the first manifest the room's
	// current hold wrote, "" before it wrote one (manifests.go).
	firstVersion string
	segSeq       uint64 // names this room's segments within a hold's generation
	durable      bool   // the class asks for a checkpoint after every event
	changed      bool
	sockets      map[uint32]*Socket
	nextSocket   uint32
	known        map[uint32]bool        // ids the guest believes open
	gone         map[uint32]life.Closed // how sockets the guest believes open went away (nil until one does: put)
	skipClose    map[uint32]bool
	effects      []effect
	sent         []byte    // the payloads of the effects' sends, copied out of the guest; reused
	output       int       // what the event's effects hold, counted against Config.MaxEventOutput
	corked       []*Socket // sockets corked in the current burst of events
	kick         chan struct{}
	linger       clock.Timer // while a worker runs; worker-owned

	// writeFailures counts the snapshot writes that failed in a row: the
	// step of the back-off (retryAt). Worker-owned.
	writeFailures int

	// The output gate (commit.go), worker-owned: out holds what events
	// sent that waits for a write; commit is the write in flight;
	// wantCommit: an event since the last commit point asked for its
	// state to be durable (pendingEvents of them); no write starts before
	// windowEnds (the commit window), and commitDue is when a window's
	// timer fires.
	out           outbox
	spareOut      outbox // buffers of a released outbox, for the next
	commit        *commitJob
	wantCommit    bool
	pendingEvents int
	windowEnds    int64
	commitDue     int64
	// callIn is the call being handled, whose chain and deadline the
	// calls its guest makes carry. Worker-owned.
	callIn *calls.Call
	// caller is the room's calls under way (order: worker-owned).
	caller Caller

	// The room's alarm (alarms.go), worker-owned: alarm as the guest set
	// it, storedAlarm as the latest commit stored it; alarmChanged: the
	// event being handled changed it; alarmSeq names the hold's alarms;
	// onlyStored: the wake under way is an alarm's, which starts no room.
	alarm, storedAlarm alarmState
	alarmChanged       bool
	alarmSeq           uint64
	onlyStored         bool

	// evCtx is the context of the event being handled (eventCtx), for the
	// store calls its guest calls need (checkpoints, deletes). Worker-owned.
	evCtx context.Context

	// Channels (channels.go): joins the guest accepted, joins that ended
	// while it could not hear of it, the join being handled, presence. The
	// maps are nil until their first entry (put).
	joins        map[joinKey]bool
	goneJoins    map[joinKey]string
	joinPayloads map[joinKey][]byte // accepted joins' Join records, replayed after a rollback
	joining      *joinKey
	presence     map[string]*phoenix.Presence
}

func newRoom(m *Manager, key Key) *Room {
	r := &Room{
		key:        key,
		m:          m,
		sockets:    map[uint32]*Socket{},
		nextSocket: 1,
		kick:       make(chan struct{}, 1),
	}
	r.lastActive.Store(m.clock.Now())
	return r
}

// put sets m[k] = v, making the map on its first entry. The room's maps
// other than its sockets stay nil until used (a raw socket's room never
// uses its channels' maps): an empty map is an object of its own, and one
// made while the room starts cold, beside the start's garbage, keeps a
// page of the Go heap in use for as long as the room lives.
func put[K comparable, V any](m *map[K]V, k K, v V) {
	if *m == nil {
		*m = make(map[K]V)
	}
	(*m)[k] = v
}

func (r *Room) residentNow() bool { return r.isResident.Load() }

// busy reports whether the room has an event running or waiting. A worker
// lingering for the next event is not busy: a hibernation request reaches
// it like any event.
func (r *Room) busy() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return (r.running && !r.lingering) || r.head < len(r.queue)
}

// enqueue adds ev to the mailbox. With wait, a full mailbox makes the
// caller wait for room; without, it fails with ErrOverloaded. Closes and
// hibernations are never refused: they are bounded by the sockets and rooms
// that exist.
func (r *Room) enqueue(ev *event, wait bool) error {
	if r.m.closed.Load() {
		return ErrStopping // the manager is closed: no worker may start
	}
	r.mu.Lock()
	for {
		var space chan struct{}
		switch {
		case ev.kind == evSocketMessage && ev.sock.inflight >= maxInflight:
			// Waits whatever wait says: see Socket.queueMessages.
			if ev.sock.drained == nil {
				ev.sock.drained = make(chan struct{})
			}
			space = ev.sock.drained
		case !ev.kind.unrefused() && len(r.queue)-r.head >= r.m.cfg.MailboxSize:
			if !wait {
				r.mu.Unlock()
				r.m.met.queueFull.Inc()
				return ErrOverloaded
			}
			if r.space == nil {
				r.space = make(chan struct{})
			}
			space = r.space
		}
		if space == nil {
			break
		}
		r.mu.Unlock()
		select {
		case <-space:
		case <-r.m.stop:
			return ErrStopping
		}
		r.mu.Lock()
	}
	if ev.kind == evSocketMessage {
		ev.sock.inflight++
	}
	r.queue = append(r.queue, ev)
	if !r.running {
		r.running = true
		r.m.workers.add(1)
		go r.run()
	} else {
		select {
		case r.kick <- struct{}{}: // wake a lingering worker
		default:
		}
	}
	r.mu.Unlock()
	return nil
}

// run drains the mailbox, one event at a time, and exits when it is empty:
// an idle room costs no goroutine.
func (r *Room) run() {
	burst := 0
	var handled *Socket // whose message event was just handled
	for {
		r.mu.Lock()
		if handled != nil {
			if handled.inflight--; handled.drained != nil {
				close(handled.drained)
				handled.drained = nil
			}
			handled = nil
		}
		if r.head == len(r.queue) {
			if r.commit != nil {
				// Nothing else to do: wait for the write (its outputs
				// go, and the next write starts if events ran
				// meanwhile), or for the next event, which runs
				// while the write is under way.
				r.mu.Unlock()
				r.uncorkAll()
				select {
				case <-r.commit.done:
					r.pollCommit()
				case <-r.kick:
				case <-r.m.stop:
					r.waitCommit() // bounded by the stop's context
				}
				continue
			}
			r.queue, r.head = r.queue[:0], 0
			r.lingering = true
			r.mu.Unlock()
			r.m.placesChanged() // no longer busy: a waiting wake may evict it
			r.uncorkAll()
			r.idle()
			burst = 0
			stopping := r.m.isStopping()
			if stopping && r.inst != nil {
				// A room that woke while the node began to stop (its
				// wake was under way): nothing else will hibernate it.
				_ = r.stopHibernate() // a failure is in Shutdown's error
			}
			// A room that is busy usually gets its next event within a
			// client's round trip: wait a little for it rather than exit,
			// so the goroutine (and the deep stack calls into wasm have
			// grown) is reused instead of started and grown again.
			if !stopping && r.waitForWork() {
				continue
			}
			// The timer goes with the worker: a room that has gone quiet
			// (most, hibernated with their sockets) keeps no timer, whose
			// few small objects, made in the middle of a burst of cold
			// starts, would each hold a page of the Go heap in use.
			r.linger = nil
			r.mu.Lock()
			if r.head < len(r.queue) {
				r.mu.Unlock()
				continue
			}
			r.running, r.lingering = false, false
			r.mu.Unlock()
			if !r.residentNow() && r.socketCount.Load() == 0 {
				r.m.forget(r)
			}
			r.m.workers.add(-1)
			return
		}
		ev := r.queue[r.head]
		r.queue[r.head] = nil
		r.head++
		r.lingering = false
		if r.space != nil && len(r.queue)-r.head < r.m.cfg.MailboxSize {
			close(r.space)
			r.space = nil
		}
		more := r.workQueued()
		r.mu.Unlock()
		if r.commit != nil {
			// Outputs waiting on a write that ended go before the next
			// event; past a bound, the next event waits for the write.
			if r.out.size > r.m.cfg.MaxEventOutput {
				r.waitCommit()
			}
			r.pollCommit()
		}
		r.handle(ev, more)
		if ev.kind == evSocketMessage {
			handled = ev.sock
		}
		// The events queued behind this one share its commit: the
		// commit point comes once the mailbox is empty, or every
		// maxBurst events (commit.go).
		if burst++; burst == maxBurst || !r.queued() {
			r.commitPoint()
		}
		// Corked sockets are let go at the end of a burst, or every
		// maxBurst events, which bounds what a burst adds to latency.
		if burst == maxBurst {
			r.uncorkAll()
			r.idle()
			burst = 0
		}
	}
}

// workQueued reports whether an event of a client or of the node waits
// in the mailbox: the worker's own wake-ups for its commits are not work
// (a hibernation that finds one behind it is not stale). The caller
// holds r.mu.
func (r *Room) workQueued() bool {
	for _, ev := range r.queue[r.head:] {
		if ev.kind != evCommitted {
			return true
		}
	}
	return false
}

// queued reports whether an event waits in the mailbox.
func (r *Room) queued() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.head < len(r.queue)
}

// idle makes the call the guest asked for during the burst that just
// ended (Instance.Idle), now that the burst's output has been let go: the
// Go SDK collects its garbage there, where no event waits for it. The
// call changes the room's memory, so the state is written again at the
// next hibernation; a crash in it is a crash like an event's.
func (r *Room) idle() {
	if r.inst == nil || !r.inst.IdleRequested() {
		return
	}
	r.m.met.idleCalls.Inc()
	if err := r.inst.Idle(); err != nil {
		r.crashed(err)
		return
	}
	r.changed = true
	r.memory.Store(r.inst.MemorySize())
}

// maxBurst is how many events a room handles before it lets corked sockets
// write (and makes the guest's idle call); lingerFor is how long an idle
// worker waits for the next event.
const (
	maxBurst  = 64
	lingerFor = 2 * time.Millisecond
)

// waitForWork waits up to lingerFor for enqueue to signal new work.
func (r *Room) waitForWork() bool {
	if r.linger == nil {
		r.linger = r.m.clock.NewTimer(lingerFor)
	} else {
		r.linger.Reset(lingerFor)
	}
	select {
	case <-r.kick:
		r.linger.Stop()
		return true
	case <-r.linger.C():
		return false
	case <-r.m.stop: // a stop waits for every worker: do not linger
		r.linger.Stop()
		return false
	}
}

// workCtx is the context for store calls of the room's work that no
// caller waits on: the manager's, or Shutdown's during a stop.
func (r *Room) workCtx() context.Context {
	if c := r.m.stopCtx.Load(); c != nil {
		return *c
	}
	return r.m.ctx
}

// eventCtx is the context of an event's work: a request's own (its
// client's cancel reaches the store), else workCtx.
func (r *Room) eventCtx(ev *event) context.Context {
	if ev.ctx != nil {
		return ev.ctx
	}
	return r.workCtx()
}

// callCtx is the context of the event being handled, for the store calls
// its guest calls need.
func (r *Room) callCtx() context.Context {
	if r.evCtx != nil {
		return r.evCtx
	}
	return r.workCtx()
}

// await queues one of the node's own events (ev.done is set here) and
// waits for the worker to finish it.
func (r *Room) await(ctx context.Context, ev *event) error {
	ev.done = make(chan error, 1)
	if err := r.enqueue(ev, false); err != nil {
		return err
	}
	select {
	case err := <-ev.done:
		return err
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (r *Room) requestHibernate(why life.EndReason, done chan error) {
	r.hibernatePending.Store(true)
	_ = r.enqueue(&event{kind: evHibernate, why: why, done: done}, false)
}

func (r *Room) handle(ev *event, more bool) {
	r.evCtx = r.eventCtx(ev)
	defer func() { r.evCtx = nil }()
	if ev.kind == evCommitted {
		r.pollCommit()
		r.commitPoint()
		return
	}
	if ev.kind == evCheckpoint {
		var err error
		if r.inst != nil && r.settle() && life.NeedsWrite(r.changed, r.etag != "") {
			err = r.writeSnapshot(r.eventCtx(ev))
		}
		ev.done <- err
		return
	}
	if ev.kind == evWake {
		ev.done <- r.ensureResident(r.eventCtx(ev))
		return
	}
	if ev.kind == evDelete {
		ev.done <- r.delete(ev.ctx)
		return
	}
	if ev.kind == evDrop {
		r.dropInstance(ev.why)
		ev.done <- nil
		return
	}
	if ev.kind == evCloseSockets {
		r.settle() // what the sockets were sent goes before their close
		for _, s := range r.sockets {
			if !s.closing {
				s.closing = true
				s.conn.Close(ev.code, ev.reason)
			}
		}
		ev.done <- nil
		return
	}
	if ev.kind == evHibernate {
		var err error
		// An idle or eviction request that finds work queued behind it is
		// stale: the room is in use again.
		switch {
		case ev.why == life.EndStop:
			err = r.stopHibernate()
		case !more || (ev.why != life.EndIdle && ev.why != life.EndEvict):
			err = r.hibernate(ev.why)
		}
		r.hibernatePending.Store(false)
		if r.inst != nil {
			r.m.placesChanged() // it stays: a waiting wake needs another room
		}
		if ev.done != nil {
			ev.done <- err
		}
		return
	}
	r.holdValid() // a hold no longer granted acts no more: the event wakes the room anew, or is refused
	r.lastActive.Store(r.m.clock.Now())
	if met := r.m.met.events[ev.kind]; met != nil {
		met.Add(max(len(ev.batch), 1))
	}
	r.caller.EndEvent() // calls are ordered within an event
	switch ev.kind {
	case evCall, evAlarm:
		r.handleCall(ev)
	case evRequest:
		r.handleRequest(ev)
	case evSocketOpen:
		r.handleOpen(ev)
	case evSocketMessage:
		r.handleMessage(ev)
	case evSocketClose:
		r.handleClose(ev)
	case evChannel:
		r.handleChannel(ev)
	}
	if ev.kind != evRequest { // a request's is recorded before its answer goes
		r.lastActive.Store(r.m.clock.Now())
	}
}

func (r *Room) handleRequest(ev *event) {
	res := r.request(ev)
	r.emitReply(func(err error) {
		if err != nil {
			res = result{err: &CrashError{Cause: err}}
		}
		// Active until the answer goes: whoever got it and then looks at
		// the room's idle time (a sweep, a test on a manual clock) counts
		// from here.
		r.lastActive.Store(r.m.clock.Now())
		ev.reply <- res
	})
}

// request runs a request event and returns its answer.
func (r *Room) request(ev *event) result {
	if err := ev.ctx.Err(); err != nil {
		return result{err: err}
	}
	if err := r.ensureResident(ev.ctx); err != nil {
		return result{err: err}
	}
	var raw []byte
	err := r.deliver(func(inst Instance) (err error) {
		raw, err = inst.Request(ev.data)
		return err
	})
	switch {
	case err != nil:
		return result{err: &CrashError{Cause: err}}
	case raw == nil:
		return result{err: ErrNoResponse}
	}
	resp, err := abi.DecodeResponse(raw)
	if err != nil { // the engine checked it; this is a host bug
		return result{err: err}
	}
	resp.Body = slices.Clone(resp.Body)
	return result{resp: &resp}
}

func (r *Room) handleOpen(ev *event) {
	s := ev.sock
	if err := r.ensureResident(r.eventCtx(ev)); err != nil {
		r.refuseSocket(s, err)
		return
	}
	s.id = r.nextSocket
	r.nextSocket++
	r.sockets[s.id] = s
	r.socketCount.Add(1)
	if err := r.deliver(r.openCall(s)); err != nil {
		r.dropSocket(s, abi.CloseInternalError, "room crashed")
	}
}

// openCall delivers s's open to the guest. The socket is known to the
// guest from the moment its open returned, before the checkpoint a durable
// class writes after the event: written after it, the snapshot would not
// list the socket, and the next wake would open it a second time. An open
// that is undone (a crash, a checkpoint that failed) forgets it with the
// rest (crashed: the room restarts from its last snapshot).
func (r *Room) openCall(s *Socket) func(Instance) error {
	return func(inst Instance) error {
		if err := inst.SocketOpen(s.id, s.open); err != nil {
			return err
		}
		r.known[s.id] = true
		return nil
	}
}

func (r *Room) handleMessage(ev *event) {
	s := ev.sock
	if r.sockets[s.id] != s {
		return // closed meanwhile, or its open failed
	}
	if err := r.ensureResident(r.eventCtx(ev)); err != nil {
		r.refuseSocket(s, err)
		return
	}
	if r.sockets[s.id] != s {
		return // waking found the room could not take it
	}
	// If the write its state waits for fails, the sender hears that its
	// messages were lost (commit.go).
	defer r.holdOrigin(s, "", phoenix.Ref{})
	if ev.batch == nil {
		if err := r.deliver(func(inst Instance) error { return inst.SocketMessage(s.id, ev.msgKind, ev.data) }); err != nil {
			r.dropSocket(s, abi.CloseInternalError, "room crashed")
		}
		return
	}
	if r.inst.Handles(engine.EventSocketMessages) {
		// One call for the batch: the guest's per-call cost (and the
		// event time limit's) is paid once.
		b := r.batchBuf[:0]
		for _, m := range ev.batch {
			b = abi.AppendBatchedMessage(b, m.Kind, m.Data)
		}
		r.batchBuf = b
		if cap(b) > maxKeptBatchBuf {
			r.batchBuf = nil
		}
		r.m.met.messageBatches.Inc()
		if err := r.deliver(func(inst Instance) error { return inst.SocketMessages(s.id, b) }); err != nil {
			r.dropSocket(s, abi.CloseInternalError, "room crashed")
		}
		return
	}
	for _, m := range ev.batch {
		if r.inst == nil { // the message before deleted the room's state: start it fresh
			if err := r.ensureResident(r.eventCtx(ev)); err != nil {
				r.refuseSocket(s, err)
				return
			}
		}
		if err := r.deliver(func(inst Instance) error { return inst.SocketMessage(s.id, m.Kind, m.Data) }); err != nil {
			r.dropSocket(s, abi.CloseInternalError, "room crashed")
			return
		}
	}
}

// maxKeptBatchBuf bounds the encoding buffer a room keeps between batches
// of messages.
const maxKeptBatchBuf = 64 << 10

func (r *Room) handleClose(ev *event) {
	s := ev.sock
	if s.id == 0 || r.sockets[s.id] != s {
		return // its open never ran
	}
	// The placement hears of the last socket going once its close was
	// delivered or could not be: told first, it would release a parked
	// record that the wake delivering the close then takes back.
	r.dropFromRoom(s)
	defer r.noteIfLast()
	if r.inst != nil && !r.known[s.id] {
		return // the guest never saw it open (its open crashed)
	}
	put(&r.gone, s.id, life.Closed{Code: ev.code, Reason: ev.reason})
	if r.inst == nil {
		// Waking delivers the close, if the guest's state knows the
		// socket; a close that cannot reach the guest is the placement's
		// to know of.
		if r.m.isStopping() || r.ensureResident(r.eventCtx(ev)) != nil {
			r.m.place.CloseLost(r.key)
		}
		return
	}
	if err := r.deliver(func(inst Instance) error { return inst.SocketClose(s.id, ev.code, ev.reason) }); err == nil {
		delete(r.known, s.id)
		delete(r.gone, s.id)
	}
}

// refuseSocket closes a socket whose room could not wake for it.
func (r *Room) refuseSocket(s *Socket, err error) {
	code, reason := abi.CloseInternalError, "room unavailable"
	switch {
	case errors.Is(err, ErrStopping):
		code = abi.CloseServiceRestart
	case errors.Is(err, ErrElsewhere):
		code, reason = abi.CloseServiceRestart, "the room runs on another node; reconnect"
	case errors.Is(err, ErrNodeFull):
		code, reason = abi.CloseTryAgainLater, "node is full, try again later"
	}
	r.dropSocket(s, code, reason)
}

// dropSocket closes a socket on the room's side: it leaves the room at once,
// so the guest never hears of it again (its close event finds it gone).
func (r *Room) dropSocket(s *Socket, code abi.CloseCode, reason string) {
	if s.id != 0 && r.sockets[s.id] == s {
		r.forgetSocket(s)
	}
	s.conn.Close(code, reason)
}

// forgetSocket takes a socket out of the room; the placement hears when
// the last one goes.
func (r *Room) forgetSocket(s *Socket) {
	r.dropFromRoom(s)
	r.noteIfLast()
}

// dropFromRoom takes a socket out of the room.
func (r *Room) dropFromRoom(s *Socket) {
	delete(r.sockets, s.id)
	r.socketCount.Add(-1)
}

// noteIfLast tells the placement when no socket of the room is left here.
func (r *Room) noteIfLast() {
	if len(r.sockets) == 0 {
		r.m.place.SocketsGone(r.key)
	}
}

// deliver runs one guest call and applies its effects if it returned. A
// crash discards them, drops the instance and leaves the room to restart
// from its last snapshot on its next event.
//
// When the class asks for it, or the guest called checkpoint(), the
// effects' output (and the caller's answer to a request) waits in the
// room's outbox until the state is durable (commit.go): no client ever
// sees output whose state could be lost. If that write fails, the event
// is undone like a crash.
func (r *Room) deliver(call func(Instance) error) error {
	return r.deliverThen(call, nil)
}

// deliverThen is deliver with a step that runs, on success, before the
// event's effects: the answer to a join, which must precede what the join
// handler sent.
func (r *Room) deliverThen(call func(Instance) error, first func()) error {
	r.clearEffects()
	r.alarmChanged = false
	err := call(r.inst)
	// A changed alarm is made durable with the event, whatever the
	// class's durability: it is written as a checkpoint is.
	checkpoint := r.inst.CheckpointRequested() || r.alarmChanged
	plan := life.AfterCall(life.Call{Crashed: err != nil, Checkpoint: checkpoint, Delete: r.inst.DeleteRequested()}, r.durable)
	if plan.Rollback {
		r.clearEffects()
		r.crashed(err)
		return err
	}
	r.changed = true
	r.memory.Store(r.inst.MemorySize())
	if plan.Delete {
		return r.deleteForGuest(first)
	}
	if plan.Write {
		// Its output is held from here until the state is durable.
		r.wantCommit = true
		r.pendingEvents++
	}
	if first != nil {
		first()
	}
	r.applyEffects()
	return nil
}

// send queues a frame on a socket now, corking it for the rest of the
// burst of events the worker is in. An event's output goes through
// emitFrame, which holds it while it must wait (commit.go).
func (r *Room) send(s *Socket, f Frame) {
	r.cork(s)
	_ = s.conn.SendFrame(f)
}

// cork corks a socket for the rest of the burst of events the worker is in.
func (r *Room) cork(s *Socket) {
	if !s.corked {
		s.corked = true
		s.conn.Cork()
		r.corked = append(r.corked, s)
	}
}

// uncorkAll lets the sockets corked during a burst write what they hold.
func (r *Room) uncorkAll() {
	for i, s := range r.corked {
		s.corked = false
		s.conn.Uncork()
		r.corked[i] = nil
	}
	r.corked = r.corked[:0]
}

func (r *Room) applyEffects() {
	for i := range r.effects {
		e := &r.effects[i]
		switch e.op {
		case opSend:
			r.emitSend(e.sock, e.kind, r.sent[e.at:e.end])
		case opClose:
			e.sock.closing = true
			r.emitClose(e.sock, e.code, e.reason)
		case opBroadcast:
			r.emitBroadcast(e.frame, e.except)
		default:
			r.applyChannelEffect(e)
		}
		*e = effect{}
	}
	r.clearEffects()
}

// clearEffects forgets the effects of an event, applied or undone. The
// buffer of their sends is kept for the next event unless a burst made it
// large.
func (r *Room) clearEffects() {
	r.effects = r.effects[:0]
	r.output = 0
	if cap(r.sent) > maxKeptSends {
		r.sent = nil
	}
	r.sent = r.sent[:0]
}

// maxKeptSends is the largest buffer of sends a room keeps between events.
const maxKeptSends = 64 << 10

// takeOutput counts an effect with n bytes of payload against the event's
// bound on its output (Config.MaxEventOutput), or says it would go past it.
// Without the bound a guest looping over socket_send could make the host
// hold any number of copies of its memory until the event returned.
func (r *Room) takeOutput(n int) bool {
	n += effectCost
	if n > r.m.cfg.MaxEventOutput-r.output {
		return false
	}
	r.output += n
	return true
}

// effectCost is what an effect costs besides its payload (its place in
// Room.effects, rounded up), so that empty effects cannot pile up for free.
const effectCost = 128

func (r *Room) crashed(err error) {
	cause := engine.CrashCause(err)
	r.m.met.crashes[cause].Inc()
	r.m.log.Warn("room crashed; it restarts from its last snapshot", "room", r.key.String(), "cause", cause, "err", err)
	// The events whose output waits for a write ran on the memory the
	// crash leaves behind: their state is lost with it.
	r.abandon(fmt.Errorf("%w: the room crashed before it was: %v", ErrNotDurable, err))
	r.known, r.joins = nil, nil
	r.alarm = r.storedAlarm
	r.dropInstance(life.EndCrash)
}

// ensureResident wakes the room if it sleeps: from its snapshot if it has
// one, else from its class's current version. Then it tells the guest about
// sockets that came or went while its state did not run (a restart of the
// node, or a rollback after a crash).
func (r *Room) ensureResident(ctx context.Context) error {
	for attempt := 0; r.inst == nil; attempt++ {
		if attempt == 3 {
			return fmt.Errorf("%w: the room crashed while catching up with its sockets", ErrUnavailable)
		}
		if err := r.wake(ctx); err != nil {
			return err
		}
		r.reconcile()
	}
	return nil
}

func (r *Room) wake(ctx context.Context) error {
	m := r.m
	if m.isStopping() {
		return ErrStopping
	}
	if m.cfg.Refuse != nil {
		if err := m.cfg.Refuse(); err != nil {
			return fmt.Errorf("%w: %w", ErrUnavailable, err)
		}
	}
	start := m.clock.Now()
	if err := m.takePlace(ctx, r); err != nil {
		return err
	}
	hold, err := m.place.Acquire(ctx, r.key)
	if err != nil {
		m.givePlace()
		m.met.wakeErrors.Inc()
		if errors.Is(err, ErrElsewhere) {
			return err
		}
		return fmt.Errorf("%w: %v", ErrUnavailable, err)
	}
	inst, restored, err := r.load(ctx, hold)
	if err != nil {
		m.givePlace()
		m.met.wakeErrors.Inc()
		m.place.End(ctx, hold, life.EndFailedRestore, r.openSockets())
		return err
	}
	if r.durable, err = m.classes.Durable(ctx, r.key.Class); err != nil {
		r.durable = false // a class removed meanwhile: its rooms still sleep as usual
	}
	r.inst, r.hold, r.held = inst, hold, true
	r.memory.Store(inst.MemorySize())
	r.changed = !restored || r.upgraded
	r.isResident.Store(true)
	if r.upgraded {
		// The snapshot names the new version from now on: a rollback
		// after a crash of the new code goes back to the upgraded state,
		// not through the upgrade again. A failed write leaves it for the
		// hibernation, as for any change.
		r.upgraded = false
		if err := r.writeSnapshot(ctx); err != nil {
			m.log.Warn("writing an upgraded room's state failed; it is written at its hibernation", "room", r.key.String(), "err", err)
		}
	}
	if restored {
		m.met.wakes.Inc()
		m.met.wakeSeconds.Update(m.since(start))
	} else {
		m.met.coldStarts.Inc()
	}
	m.becameResident(r)
	return nil
}

// runningVersion is the module version of the resident instance, "" when
// none is resident.
func (r *Room) runningVersion() string {
	if v := r.version.Load(); v != nil {
		return *v
	}
	return ""
}

func (r *Room) crashedAtStart(err error) {
	r.m.met.crashes[engine.CrashCause(err)].Inc()
	r.m.log.Warn("room crashed while initializing", "room", r.key.String(), "err", err)
}

// reconcile brings the guest's idea of its sockets in line with the node's:
// closes for sockets that went while the guest was not running, opens for
// sockets it has forgotten (it rolled back past their open).
func (r *Room) reconcile() {
	open := func(id uint32) bool { return r.sockets[id] != nil }
	missed := life.Reconcile(r.known, open, sortedIDs(r.sockets), r.gone, r.skipClose,
		life.Closed{Code: abi.CloseServiceRestart, Reason: "closed while the room was not running"})
	for _, c := range missed.Closes {
		if err := r.deliver(func(inst Instance) error { return inst.SocketClose(c.ID, c.Code, c.Reason) }); err != nil {
			if r.skipClose == nil {
				r.skipClose = map[uint32]bool{}
			}
			r.skipClose[c.ID] = true // never replay a close that crashes the room
			return
		}
		delete(r.known, c.ID)
		delete(r.gone, c.ID)
	}
	for _, id := range missed.Opens {
		s := r.sockets[id]
		if err := r.deliver(r.openCall(s)); err != nil {
			r.dropSocket(s, abi.CloseInternalError, "room crashed")
			return
		}
	}
	r.reconcileJoins()
}

// hibernate writes the room's snapshot (if it changed since the last one)
// and drops its instance.
func (r *Room) hibernate(why life.EndReason) error {
	if r.inst == nil || !r.settle() {
		return nil // a failed write rolled it back: nothing left to write
	}
	m := r.m
	start := m.clock.Now()
	if life.NeedsWrite(r.changed, r.etag != "") {
		err := r.writeSnapshot(r.workCtx())
		if errors.Is(err, errHoldLost) {
			r.dropInstance(life.EndDropped)
			return nil
		}
		if errors.Is(err, store.ErrPrecondition) {
			// Someone else wrote this room's snapshot: it is not ours to
			// run. Keeping on would fork its state, so drop the instance.
			m.met.snapshotConflict.Inc()
			m.log.Error("room snapshot changed underneath this node; dropping the instance", "room", r.key.String())
		} else if err != nil {
			m.met.snapshotErrors.Inc()
			r.backOff(err)
			return err
		}
	}
	r.writeFailures = 0
	r.retryAt.Store(0)
	r.saveImage(why)
	if r.keepInstance(why) {
		r.leaveMemory(why)
	} else {
		r.dropInstance(why)
	}
	m.met.hibernations[why.String()].Inc()
	m.met.hibernateSeconds.Update(m.since(start))
	return nil
}

// backOff schedules the next attempt at hibernating a room whose snapshot
// write failed; the room stays resident meanwhile.
func (r *Room) backOff(err error) {
	r.writeFailures++
	delay := time.Duration(life.Retry(r.writeFailures))
	r.retryAt.Store(r.m.clock.Now() + int64(delay))
	r.m.log.Error("room snapshot write failed; the room stays resident and is tried again later",
		"room", r.key.String(), "attempt", r.writeFailures, "retry_in", delay, "err", err)
}

// stopHibernate hibernates the room for a stop. If its state cannot be
// written the room is named in Shutdown's error and its instance dropped
// anyway: the node is stopping, and nothing may use the engine after the
// stop.
func (r *Room) stopHibernate() error {
	err := r.hibernate(life.EndStop)
	if err != nil {
		r.m.stopFailed(r.key, err)
		r.dropInstance(life.EndStop)
	}
	return err
}

// dropInstance discards the resident instance without writing its state,
// and ends the hold for why.
func (r *Room) dropInstance(why life.EndReason) {
	r.abandon(errDropped)
	if r.inst != nil {
		r.inst.Close()
	}
	r.leaveMemory(why)
}

// leaveMemory makes the room hibernated, its instance closed or kept
// (keepInstance), and ends the hold for why.
func (r *Room) leaveMemory(why life.EndReason) {
	r.inst, r.man, r.manBody, r.pages, r.image, r.sent = nil, nil, nil, nil, 0, nil
	r.version.Store(nil)
	r.endHold(why)
	r.isResident.Store(false)
	r.m.noLongerResident(r)
}

// endHold gives up the right to run the room, telling the placement why
// and how many of its sockets are open here: it decides to park the hold
// (the room should wake here) or release it.
func (r *Room) endHold(why life.EndReason) {
	if !r.held {
		return
	}
	r.held = false
	r.m.place.End(r.workCtx(), r.hold, why, r.openSockets())
}

// openSockets counts the room's sockets here that are open and not
// closing.
func (r *Room) openSockets() int {
	n := 0
	for _, s := range r.sockets {
		if !s.closing {
			n++
		}
	}
	return n
}

// holdValid checks the room's hold before an event or a snapshot write. A
// hold the placement no longer grants (a lapsed lease) must not act: the
// instance goes, unwritten, and the caller refuses what it was asked.
func (r *Room) holdValid() bool {
	if !r.held || r.m.place.Valid(r.hold) {
		return true
	}
	r.m.log.Warn("the room's hold is no longer valid; dropping its instance unwritten", "room", r.key.String())
	r.dropInstance(life.EndDropped)
	return false
}

// The engine.Host methods below run on the worker, inside a guest call.

// SocketSend implements engine.Host.
func (r *Room) SocketSend(id uint32, kind int, data []byte) abi.Status {
	s := r.sockets[id]
	if s == nil {
		return abi.StatusNoSocket
	}
	if s.ch != nil {
		return abi.StatusInvalid // a Phoenix socket takes channel pushes only
	}
	// The payload is copied into the event's buffer rather than framed
	// (an allocation a send): the socket layer encodes it into its own
	// queue when the effects are applied, after which the buffer is free.
	// The engine has checked the kind and the UTF-8 of a text message.
	if !r.takeOutput(len(data)) {
		return abi.StatusTooLarge
	}
	at := len(r.sent)
	r.sent = append(r.sent, data...)
	r.effects = append(r.effects, effect{op: opSend, kind: uint8(kind), at: at, end: len(r.sent), sock: s})
	return abi.Success
}

// SocketClose implements engine.Host.
func (r *Room) SocketClose(id uint32, code abi.CloseCode, reason string) abi.Status {
	s := r.sockets[id]
	if s == nil {
		return abi.StatusNoSocket
	}
	if !r.takeOutput(len(reason)) {
		return abi.StatusTooLarge
	}
	r.effects = append(r.effects, effect{op: opClose, sock: s, code: code, reason: reason})
	return abi.Success
}

// SocketList implements engine.Host.
func (r *Room) SocketList(dst []uint32) []uint32 {
	for id := range r.sockets {
		dst = append(dst, id)
	}
	slices.Sort(dst)
	return dst
}

// Broadcast implements engine.Host.
func (r *Room) Broadcast(kind int, data []byte, except uint32) int {
	n := 0
	for id, s := range r.sockets {
		if id != except && s.ch == nil {
			n++
		}
	}
	if n > 0 {
		if !r.takeOutput(len(data)) {
			return int(abi.StatusTooLarge)
		}
		f, err := r.m.cfg.Framer(kind, data)
		if err != nil {
			return int(abi.StatusTooLarge)
		}
		r.effects = append(r.effects, effect{op: opBroadcast, frame: f, except: except})
	}
	return n
}

// RoomInfo implements engine.Host.
func (r *Room) RoomInfo() abi.RoomInfo { return abi.RoomInfo{Class: r.key.Class, Name: r.key.Name} }

// Log implements engine.Host.
func (r *Room) Log(level int, msg string) {
	r.m.log.Log(context.Background(), engine.LogLevel(level), msg, "room", r.key.String(), "source", "guest")
}

var _ engine.Host = (*Room)(nil)
