package rooms

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/VictoriaMetrics/metrics"

	"github.com/wasmkeep/wasmkeep/abi"
	"github.com/wasmkeep/wasmkeep/host/engine"
	"github.com/wasmkeep/wasmkeep/host/images"
	"github.com/wasmkeep/wasmkeep/host/rooms/life"
	"github.com/wasmkeep/wasmkeep/host/snapshot"
	"github.com/wasmkeep/wasmkeep/host/store"
	"github.com/wasmkeep/wasmkeep/internal/clock"
	"github.com/wasmkeep/wasmkeep/internal/limits"
)

// A fake guest, so that the room lifecycle is tested without wasm: its
// whole state lives in a small linear memory that the real snapshot code
// captures and restores, so hibernation, rollback and durability act on
// it as they do on a real guest's.
//
//	POST /            increments the counter; answers it
//	GET  /            answers the counter
//	POST /trap        increments the counter, then traps
//	POST /checkpoint  increments the counter, asks for a checkpoint and
//	                  sends "checkpoint <counter>" to every socket
//	POST /delete      asks for its state to be deleted
//	POST /broadcast   sends the body to every socket; answers "ok"
//	socket open       counts it (opens), sends "open <id>"
//	socket message    "trap" traps; "close" closes the socket with 4000;
//	                  "wait" waits for the class's gate to open; "idle"
//	                  asks for an idle call, "idle, checkpoint" checkpoints
//	                  too, "idle, then wait" waits after asking, "idle,
//	                  then trap" asks for one that traps; these and any
//	                  other message are echoed and counted
//	socket close      counts it (closes)
//	idle call         counts it (idles), after calling the class's onIdle
//	GET /idles        answers the count of idle calls
//
// Memory: the counter, then the counts of opens, messages, closes and
// idle calls, as little-endian u64 at offsets 0, 8, 16, 24 and 32.

const (
	offCounter = 8 * iota
	offOpens
	offMessages
	offCloses
	offIdles
)

// fakeMemory is two 64 KiB chunks, the least a snapshot takes.
const fakeMemory = 2 * snapshot.ChunkSize

type fakeClass struct {
	hash string
	base []byte        // the initial memory: zeros
	gate chan struct{} // what a "wait" message waits for
	// floods counts the sends a "flood" message made before one failed,
	// floodStatus is the failure.
	floods, floodStatus atomic.Int32
	// onIdle, if set, runs at the start of every idle call.
	onIdle atomic.Pointer[func(*fakeInstance)]
}

func newFakeClass(name string) *fakeClass {
	return &fakeClass{hash: "sha256:fake-" + name, base: make([]byte, fakeMemory), gate: make(chan struct{})}
}

func (c *fakeClass) Start(_ context.Context, host engine.Host) (Instance, error) {
	return &fakeInstance{class: c, host: host, mem: make([]byte, fakeMemory)}, nil
}

func (c *fakeClass) Hash() string { return c.hash }

func (c *fakeClass) Restore(_ context.Context, man *snapshot.Manifest, segs map[string]*snapshot.Segment, host engine.Host) (Instance, error) {
	if man.ModuleHash != c.hash {
		return nil, fmt.Errorf("snapshot of %s restored on %s", man.ModuleHash, c.hash)
	}
	inst := &fakeInstance{class: c, host: host, mem: make([]byte, man.MemorySize())}
	pages, err := man.Restore(inst.mem, segs, nil, nil)
	if err != nil {
		return nil, err
	}
	inst.restored = pages
	return inst, nil
}

// RestoreImage reads the image into a memory of the fake's own: the
// lifecycle's use of images is what these tests see, not the mapping.
func (c *fakeClass) RestoreImage(_ context.Context, man *snapshot.Manifest, img *images.Image, host engine.Host) (Instance, error) {
	if man.ModuleHash != c.hash {
		return nil, fmt.Errorf("snapshot of %s restored on %s", man.ModuleHash, c.hash)
	}
	inst := &fakeInstance{class: c, host: host, mem: make([]byte, man.MemorySize()), fromImage: true}
	if _, err := img.File.ReadAt(inst.mem, 0); err != nil {
		return nil, err
	}
	inst.restored = slices.Clone(img.Pages)
	return inst, nil
}

type fakeInstance struct {
	fromImage               bool // restored by RestoreImage
	class                   *fakeClass
	host                    engine.Host
	mem                     []byte
	restored                []uint64
	checkpoint, deleteState bool
	idleWanted, trapInIdle  bool
	// closed is read by tests while the manager's sweeper may close the
	// instance.
	closed atomic.Bool
}

var errFakeTrap = fmt.Errorf("fake guest: %w", engine.ErrTrap)

func (i *fakeInstance) get(off int) uint64 { return binary.LittleEndian.Uint64(i.mem[off:]) }
func (i *fakeInstance) add(off int, d uint64) {
	binary.LittleEndian.PutUint64(i.mem[off:], i.get(off)+d)
}

// Call answers with the payload it was given: the fake guest echoes.
func (i *fakeInstance) Alarm([]byte) error { return nil }

func (i *fakeInstance) Call(payload []byte) ([]byte, error) {
	c, err := abi.DecodeCall(payload)
	return append([]byte{}, c.Payload...), err
}

func (i *fakeInstance) Request(payload []byte) ([]byte, error) {
	req, err := abi.DecodeRequest(payload)
	if err != nil {
		return nil, err
	}
	answer := func(status int, body string) []byte {
		return abi.AppendResponse(nil, &abi.Response{Status: status, Body: []byte(body)})
	}
	switch req.Method + " " + req.Path {
	case "POST /":
		i.add(offCounter, 1)
	case "GET /":
	case "GET /idles":
		return answer(200, strconv.FormatUint(i.get(offIdles), 10)), nil
	case "POST /trap":
		i.add(offCounter, 1)
		return nil, errFakeTrap
	case "POST /checkpoint":
		i.add(offCounter, 1)
		i.checkpoint = true
		i.host.Broadcast(abi.MessageText, []byte(fmt.Sprint("checkpoint ", i.get(offCounter))), 0)
	case "POST /delete":
		i.deleteState = true
		return answer(200, "deleted"), nil
	case "POST /broadcast":
		i.host.Broadcast(abi.MessageText, req.Body, 0)
		return answer(200, "ok"), nil
	default:
		return answer(404, "not found"), nil
	}
	return answer(200, strconv.FormatUint(i.get(offCounter), 10)), nil
}

func (i *fakeInstance) SocketOpen(id uint32, _ []byte) error {
	i.add(offOpens, 1)
	i.host.SocketSend(id, abi.MessageText, []byte(fmt.Sprint("open ", id)))
	return nil
}

func (i *fakeInstance) SocketMessage(id uint32, kind int, data []byte) error {
	switch string(data) {
	case "trap":
		return errFakeTrap
	case "close":
		i.host.SocketClose(id, 4000, "bye")
		return nil
	case "flood": // 1,000-byte sends until one fails
		n, st := 0, abi.Success
		for ; st == abi.Success; n++ {
			st = i.host.SocketSend(id, abi.MessageBinary, make([]byte, 1000))
		}
		i.class.floods.Store(int32(n - 1))
		i.class.floodStatus.Store(int32(st))
		return nil
	case "send, then trap":
		i.host.SocketSend(id, kind, []byte("never sent"))
		return errFakeTrap
	case "wait":
		<-i.class.gate
	case "idle":
		i.idleWanted = true
	case "idle, checkpoint":
		i.idleWanted, i.checkpoint = true, true
	case "idle, then wait":
		i.idleWanted = true
		<-i.class.gate
	case "idle, then trap":
		i.idleWanted, i.trapInIdle = true, true
	}
	i.add(offMessages, 1)
	i.host.SocketSend(id, kind, data)
	return nil
}

func (i *fakeInstance) SocketMessages(uint32, []byte) error {
	return errors.New("fake guest: no batch export")
}

func (i *fakeInstance) SocketClose(uint32, abi.CloseCode, string) error {
	i.add(offCloses, 1)
	return nil
}

func (i *fakeInstance) Join(uint32, []byte) (engine.ChannelReply, error) {
	return engine.ChannelReply{}, nil
}

func (i *fakeInstance) ChannelMessage(uint32, []byte) (engine.ChannelReply, error) {
	return engine.ChannelReply{}, nil
}

func (i *fakeInstance) Leave(uint32, []byte) error { return nil }

func (i *fakeInstance) Handles(k engine.Event) bool { return k != engine.EventSocketMessages }

func (i *fakeInstance) CheckpointRequested() bool {
	c := i.checkpoint
	i.checkpoint = false
	return c
}

func (i *fakeInstance) DeleteRequested() bool {
	d := i.deleteState
	i.deleteState = false
	return d
}

func (i *fakeInstance) IdleRequested() bool { return i.idleWanted }

func (i *fakeInstance) Idle() error {
	i.idleWanted = false
	if f := i.class.onIdle.Load(); f != nil {
		(*f)(i)
	}
	if i.trapInIdle {
		return errFakeTrap
	}
	i.add(offIdles, 1)
	return nil
}

func (i *fakeInstance) MemorySize() uint32 { return uint32(len(i.mem)) }

func (i *fakeInstance) Snapshot(enc *snapshot.Encoder, prev *snapshot.Manifest, prevPages []uint64, roomState []byte, generation uint64, segmentID string, full bool) (*snapshot.Delta, error) {
	if i.closed.Load() {
		return nil, engine.ErrClosed
	}
	return enc.Snapshot(prev, &snapshot.Capture{
		Header:     snapshot.Header{ModuleHash: i.class.hash, ABI: abi.Version, RoomState: roomState},
		Memory:     i.mem,
		Base:       i.class.base,
		Generation: generation,
		SegmentID:  segmentID,
		PrevPages:  prevPages,
	}, full)
}

func (i *fakeInstance) RestoredPages() []uint64 { return i.restored }

func (i *fakeInstance) ReadMemory(f func([]byte) error) error {
	if i.closed.Load() {
		return engine.ErrClosed
	}
	return f(i.mem)
}

func (i *fakeInstance) Upgrade() ([]byte, error) { return nil, engine.ErrNoHandoff }

func (i *fakeInstance) StartFrom(string, []byte) error { return engine.ErrNotTakenOver }

func (i *fakeInstance) Close() { i.closed.Store(true) }

// fakeClasses is a class registry of fake classes, by name.
type fakeClasses struct {
	mu      sync.Mutex
	byName  map[string]*fakeClass
	durable map[string]bool
}

func (f *fakeClasses) Current(_ context.Context, name string) (Class, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	c := f.byName[name]
	if c == nil {
		return nil, fmt.Errorf("fake: no class %q", name)
	}
	return c, nil
}

func (f *fakeClasses) ByHash(_ context.Context, hash string) (Class, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, c := range f.byName {
		if c.hash == hash {
			return c, nil
		}
	}
	return nil, fmt.Errorf("fake: no module %s", hash)
}

func (f *fakeClasses) Upgrade(_ context.Context, name string) (UpgradePolicy, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	c := f.byName[name]
	if c == nil {
		return UpgradePolicy{}, fmt.Errorf("fake: no class %q", name)
	}
	return UpgradePolicy{Current: c.hash}, nil
}

// IsFront: the fake has no fronts.
func (*fakeClasses) IsFront(context.Context, string) (bool, error) { return false, nil }

func (f *fakeClasses) Durable(_ context.Context, name string) (bool, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.durable[name], nil
}

// fakeConn is a socket as the room layer sees it: it records what the room
// sent and how it closed it. What is sent while it is corked counts as sent
// once it is uncorked, as a real socket writes it then.
type fakeConn struct {
	mu      sync.Mutex
	frames  []string
	corked  bool
	pending []string      // sent while corked
	closed  abi.CloseCode // the close code, 0 while open
	reason  string
}

func (c *fakeConn) SendFrame(f Frame) error { return c.Send(0, f.(Message).Data) }

func (c *fakeConn) Send(_ int, data []byte) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.corked {
		c.pending = append(c.pending, string(data))
	} else {
		c.frames = append(c.frames, string(data))
	}
	return nil
}

func (c *fakeConn) Close(code abi.CloseCode, reason string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed == 0 {
		c.closed, c.reason = code, reason
	}
}

func (c *fakeConn) Cork() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.corked = true
}

func (c *fakeConn) Uncork() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.corked = false
	c.frames = append(c.frames, c.pending...)
	c.pending = c.pending[:0]
}

func (c *fakeConn) sent() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return slices.Clone(c.frames)
}

func (c *fakeConn) closeCode() abi.CloseCode {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.closed
}

// harness is a room manager on fake classes, an in-memory bucket (behind a
// fault injector) and a manual clock.
type harness struct {
	t       *testing.T
	m       *Manager
	clock   *clock.Manual
	bucket  *store.Faulty
	classes *fakeClasses
	metrics *metrics.Set
	place   *recordingPlacement
}

// recordingPlacement is a single node's placement that records what the
// manager tells it, and can be told that a hold is no longer valid.
type recordingPlacement struct {
	*Local
	mu      sync.Mutex
	calls   []string
	invalid map[Key]bool
	refuse  map[Key]error // Acquire's answer for the room, if set
}

func (p *recordingPlacement) record(format string, args ...any) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.calls = append(p.calls, fmt.Sprintf(format, args...))
}

// took returns the calls recorded since the last took.
func (p *recordingPlacement) took() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	c := p.calls
	p.calls = nil
	return c
}

// heard reports whether call was recorded (and not yet taken).
func (p *recordingPlacement) heard(call string) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return slices.Contains(p.calls, call)
}

func (p *recordingPlacement) setValid(k Key, valid bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.invalid[k] = !valid
}

func (p *recordingPlacement) Acquire(ctx context.Context, key Key) (Hold, error) {
	p.record("acquire %s", key)
	p.mu.Lock()
	err := p.refuse[key]
	p.mu.Unlock()
	if err != nil {
		return Hold{}, err
	}
	return p.Local.Acquire(ctx, key)
}

func (p *recordingPlacement) Valid(h Hold) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return !p.invalid[h.Key]
}

func (p *recordingPlacement) End(ctx context.Context, h Hold, why life.EndReason, open int) {
	p.record("end %s %s open=%d", h.Key, why, open)
	p.Local.End(ctx, h, why, open)
}

func (p *recordingPlacement) SocketsGone(key Key) { p.record("sockets gone %s", key) }
func (p *recordingPlacement) CloseLost(key Key)   { p.record("close lost %s", key) }

func newHarness(t *testing.T, cfg Config) *harness {
	t.Helper()
	return newHarnessOn(t, cfg, store.WithFaults(store.NewMem(), nil))
}

// newHarnessOn is newHarness on a bucket another harness may share: a
// second node of the same store.
func newHarnessOn(t *testing.T, cfg Config, bucket *store.Faulty) *harness {
	t.Helper()
	h := &harness{
		t:       t,
		clock:   clock.NewManual(time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)),
		bucket:  bucket,
		classes: &fakeClasses{byName: map[string]*fakeClass{"c": newFakeClass("c")}, durable: map[string]bool{}},
		metrics: metrics.NewSet(),
	}
	cfg.Clock, cfg.Metrics = h.clock, h.metrics
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	if cfg.IdleTimeout == 0 {
		cfg.IdleTimeout = time.Hour
	}
	if cfg.SweepInterval == 0 {
		cfg.SweepInterval = limits.Off
	}
	h.place = &recordingPlacement{Local: NewLocal(1), invalid: map[Key]bool{}, refuse: map[Key]error{}}
	m, err := NewManager(context.Background(), cfg, h.classes, h.bucket, h.place)
	if err != nil {
		t.Fatal(err)
	}
	h.m = m
	// The idle sweep's ticker: time must not pass before it is armed.
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := h.clock.WaitTimers(ctx, 1); err != nil {
		t.Fatal("the idle sweep armed no ticker")
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := m.Shutdown(ctx); err != nil {
			t.Errorf("shutdown: %v", err)
		}
		if err := m.Close(ctx); err != nil {
			t.Errorf("close: %v", err)
		}
	})
	return h
}

// request sends a request to room c/name and returns the answer's body,
// or the error.
func (h *harness) request(name, method, path string) (string, error) {
	h.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	resp, err := h.m.Request(ctx, Key{"c", name}, abi.AppendRequest(nil, &abi.Request{Method: method, Path: path}))
	if err != nil {
		return "", err
	}
	return string(resp.Body), nil
}

// expect sends a request that must succeed with body want, and waits
// until the room's worker has finished with it (settle): the tests move
// the manual clock next, and a sweep or an eviction passes over a room
// that is still busy.
func (h *harness) expect(name, method, path, want string) {
	h.t.Helper()
	got, err := h.request(name, method, path)
	if err != nil || got != want {
		h.t.Fatalf("%s %s to %s: %q, %v; want %q", method, path, name, got, err, want)
	}
	h.settle(name)
}

// open attaches a fake socket to room c/name; its open event is queued.
func (h *harness) open(name string) (*Socket, *fakeConn) {
	h.t.Helper()
	conn := &fakeConn{}
	s, err := h.m.OpenSocket(Key{"c", name}, conn, &abi.SocketOpen{Path: "/"})
	if err != nil {
		h.t.Fatal(err)
	}
	return s, conn
}

// state is what a listing says of room c/name: resident, hibernated, or
// absent.
func (h *harness) state(name string) RoomState {
	h.t.Helper()
	list, err := h.m.List(context.Background())
	if err != nil {
		h.t.Fatal(err)
	}
	for _, r := range list {
		if r.Class == "c" && r.Name == name {
			return r.State
		}
	}
	return ""
}

// waitFor polls cond, failing after a generous real-time deadline: rooms
// work on their own goroutines, even on a manual clock.
func (h *harness) waitFor(what string, cond func() bool) {
	h.t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			h.t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(time.Millisecond)
	}
}

// settle waits until room c/name's worker has finished its events (it
// lingers or is gone): the sweep skips a busy room, so a test that moves
// the clock past a timeout must not do it while the worker still works.
func (h *harness) settle(name string) {
	h.t.Helper()
	h.waitFor("room "+name+" to finish its events", func() bool {
		h.m.mu.Lock()
		r := h.m.rooms[Key{"c", name}]
		h.m.mu.Unlock()
		return r == nil || !r.busy()
	})
}

// counter reads a metric of the manager's set, 0 if absent.
func (h *harness) counter(name string) float64 {
	h.t.Helper()
	return float64(h.metrics.GetOrCreateCounter(name).Get())
}

// queued is how many events wait in r's mailbox.
func queued(r *Room) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.queue) - r.head
}
