package rooms

import (
	"context"

	"github.com/wasmkeep/wasmkeep/abi"
	"github.com/wasmkeep/wasmkeep/host/engine"
	"github.com/wasmkeep/wasmkeep/host/images"
	"github.com/wasmkeep/wasmkeep/host/snapshot"
)

// The engine behind the two small interfaces rooms use, so that the
// lifecycle is tested with a fake guest and no wasm (rooms_test.go). The
// engine's *engine.Class and *engine.Instance implement them through
// EngineClasses.

// Class is a module version rooms start from or restore.
type Class interface {
	// Start makes a fresh instance: the guest initializes, once.
	Start(ctx context.Context, host engine.Host) (Instance, error)
	// Restore makes an instance from a snapshot: nothing of the guest
	// runs.
	Restore(ctx context.Context, man *snapshot.Manifest, segs map[string]*snapshot.Segment, host engine.Host) (Instance, error)
	// RestoreImage makes an instance from a snapshot whose memory is in
	// img (host/images), as Restore would from its segments; it fails
	// with engine.ErrNoImage where an image cannot be used.
	RestoreImage(ctx context.Context, man *snapshot.Manifest, img *images.Image, host engine.Host) (Instance, error)
	// Hash is the version's module hash.
	Hash() string
}

// Instance is one room's running guest; see engine.Instance, whose
// contract (errors, what a crash leaves) it keeps.
type Instance interface {
	Request(payload []byte) ([]byte, error)
	// Call delivers an encoded abi.Call and returns the reply (valid
	// until the instance's next event).
	Call(payload []byte) ([]byte, error)
	// Alarm runs the alarm handler with an encoded abi.AlarmEvent.
	Alarm(payload []byte) error
	SocketOpen(id uint32, payload []byte) error
	SocketMessage(id uint32, kind int, data []byte) error
	SocketMessages(id uint32, batch []byte) error
	SocketClose(id uint32, code abi.CloseCode, reason string) error
	Join(id uint32, payload []byte) (engine.ChannelReply, error)
	ChannelMessage(id uint32, payload []byte) (engine.ChannelReply, error)
	Leave(id uint32, payload []byte) error
	// Handles reports whether the guest exports a handler for k.
	Handles(k engine.Event) bool
	// CheckpointRequested and DeleteRequested report (and forget) what
	// the guest asked for during the event that just returned.
	CheckpointRequested() bool
	DeleteRequested() bool
	// IdleRequested reports whether the guest asked for a call once the
	// room is idle, and Idle makes it (engine.Instance's contract).
	IdleRequested() bool
	Idle() error
	MemorySize() uint32
	Snapshot(enc *snapshot.Encoder, prev *snapshot.Manifest, prevPages []uint64, roomState []byte, generation uint64, segmentID string, full bool) (*snapshot.Delta, error)
	// RestoredPages are the page hashes of a restored memory (nil after a
	// Start).
	RestoredPages() []uint64
	// ReadMemory calls f with the instance's memory (engine.Instance's
	// contract: not while it runs, and f keeps nothing).
	ReadMemory(f func(mem []byte) error) error
	// Upgrade asks the guest for the state its next version starts from,
	// and StartFrom starts a fresh instance from it (engine.Instance's
	// contract: engine.ErrNoHandoff, engine.ErrNotTakenOver).
	Upgrade() ([]byte, error)
	StartFrom(from string, state []byte) error
	Close()
}

// EngineRegistry is what EngineClasses adapts: the class registry.
type EngineRegistry interface {
	Current(ctx context.Context, name string) (*engine.Class, error)
	ByHash(ctx context.Context, hash string) (*engine.Class, error)
	Durable(ctx context.Context, name string) (bool, error)
	// UpgradeTarget is the class's current version, its upgrade policy
	// ("lazy", "now", "never") and whether rooms without a handoff are
	// reset.
	UpgradeTarget(ctx context.Context, name string) (current, policy string, reset bool, err error)
	IsFront(ctx context.Context, name string) (bool, error)
}

// EngineClasses makes a registry of engine classes the Classes of a room
// manager.
func EngineClasses(reg EngineRegistry) Classes { return engineClasses{reg} }

type engineClasses struct{ reg EngineRegistry }

func (c engineClasses) Current(ctx context.Context, name string) (Class, error) {
	cl, err := c.reg.Current(ctx, name)
	if err != nil {
		return nil, err
	}
	return engineClass{cl}, nil
}

func (c engineClasses) ByHash(ctx context.Context, hash string) (Class, error) {
	cl, err := c.reg.ByHash(ctx, hash)
	if err != nil {
		return nil, err
	}
	return engineClass{cl}, nil
}

func (c engineClasses) Durable(ctx context.Context, name string) (bool, error) {
	return c.reg.Durable(ctx, name)
}

func (c engineClasses) IsFront(ctx context.Context, name string) (bool, error) {
	return c.reg.IsFront(ctx, name)
}

func (c engineClasses) Upgrade(ctx context.Context, name string) (UpgradePolicy, error) {
	current, policy, reset, err := c.reg.UpgradeTarget(ctx, name)
	if err != nil {
		return UpgradePolicy{}, err
	}
	return UpgradePolicy{Current: current, Never: policy == "never", ResetWithoutHandoff: reset}, nil
}

type engineClass struct{ c *engine.Class }

func (c engineClass) Hash() string { return c.c.Hash }

func (c engineClass) Start(ctx context.Context, host engine.Host) (Instance, error) {
	inst, err := c.c.Start(ctx, host)
	if err != nil {
		return nil, err
	}
	return inst, nil
}

func (c engineClass) RestoreImage(ctx context.Context, man *snapshot.Manifest, img *images.Image, host engine.Host) (Instance, error) {
	inst, err := c.c.RestoreImage(ctx, man, img.File, img.Pages, host)
	if err != nil {
		return nil, err
	}
	return inst, nil
}

func (c engineClass) Restore(ctx context.Context, man *snapshot.Manifest, segs map[string]*snapshot.Segment, host engine.Host) (Instance, error) {
	inst, err := c.c.Restore(ctx, man, segs, host)
	if err != nil {
		return nil, err
	}
	return inst, nil
}

var _ Instance = (*engine.Instance)(nil)
