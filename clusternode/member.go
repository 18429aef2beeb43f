// Package clusternode adapts a cluster member (cluster/member) to a
// server: it implements the room manager's placement (host/rooms.Placement)
// and the HTTP surface's membership (host/server.ClusterMember) by
// translating their types to the member's and back, gives the member the
// room manager and the signed peer calls through the member's own
// interfaces, and has cluster/runner run its duties. It decides nothing:
// every rule of the cluster is the core's (package cluster) or the
// member's, which the simulation runs too. host does not import cluster;
// this package is the one place that sees both sides.
package clusternode

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	mrand "math/rand/v2"
	"sync"
	"sync/atomic"
	"time"

	"github.com/VictoriaMetrics/metrics"

	"github.com/wasmkeep/wasmkeep/abi"
	"github.com/wasmkeep/wasmkeep/alarms"
	"github.com/wasmkeep/wasmkeep/calls"
	"github.com/wasmkeep/wasmkeep/cluster"
	cm "github.com/wasmkeep/wasmkeep/cluster/member"
	"github.com/wasmkeep/wasmkeep/cluster/runner"
	"github.com/wasmkeep/wasmkeep/host/rooms"
	"github.com/wasmkeep/wasmkeep/host/rooms/life"
	"github.com/wasmkeep/wasmkeep/host/server"
	"github.com/wasmkeep/wasmkeep/host/store"
	"github.com/wasmkeep/wasmkeep/internal/clock"
)

// Config is a member's settings.
type Config struct {
	// Node is the node's name (its lease is nodes/<Node>). Required.
	Node string
	// Address is where peers reach this node's rooms listener
	// (host:port). Required.
	Address string
	// Secret signs this node's calls to its peers. Required.
	Secret []byte
	// TTL is the lease time (cluster.DefaultTTL).
	TTL time.Duration
	// FailoverWait bounds how long a request for a room whose node
	// stopped answering waits (cm.DefaultFailoverWait).
	FailoverWait time.Duration
	// Bucket holds the leases and records (the node's bucket).
	Bucket store.Bucket
	// Clock is the node's one clock.
	Clock clock.Clock
	// SweepInterval is how often the owner sweep runs
	// (cm.DefaultSweepInterval).
	SweepInterval time.Duration
	// Metrics receives the member's metrics (docs/metrics.md).
	Metrics *metrics.Set
	Logger  *slog.Logger
}

// DefaultSweepInterval is how often the owner sweep runs.
const DefaultSweepInterval = cm.DefaultSweepInterval

// DefaultFailoverWait is how long a request for a room of a node that
// stopped answering waits for the room to be free.
const DefaultFailoverWait = cm.DefaultFailoverWait

// parallelReleases bounds the parked records a drain pass releases at
// once.
const parallelReleases = 16

// Member is a node's membership of a cluster, adapted to the server.
type Member struct {
	cfg  Config
	core *cluster.Node
	mem  *cm.Member
	mgr  atomic.Pointer[rooms.Manager]

	run  *runner.Runner
	left sync.Once

	// peers makes the member's signed calls to other nodes.
	peers *server.Cluster
	met   memberMetrics

	// alarms delivers the alarms of the node's rooms (a duty of the
	// member's); its deliveries run under deliveriesCtx, which Leave ends.
	alarms         *alarms.Duty
	deliveries     sync.WaitGroup
	deliveriesCtx  context.Context
	stopDeliveries context.CancelFunc
}

// Alarms is the duty that delivers the alarms of the node's rooms.
func (m *Member) Alarms() *alarms.Duty { return m.alarms }

// New builds the member of cfg. Its lease is written once Join runs its
// duties.
func New(ctx context.Context, cfg Config) (*Member, error) {
	if cfg.Node == "" || cfg.Address == "" || len(cfg.Secret) == 0 || cfg.Bucket == nil || cfg.Clock == nil {
		return nil, errors.New("clusternode: a member needs a node name, an address, a cluster secret, a bucket and a clock")
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.Metrics == nil {
		cfg.Metrics = metrics.NewSet()
	}
	// A room's first record is written above every generation a single
	// node on this bucket handed out, and above the wall-clock
	// generations of the versions before the stored counter.
	floor, err := rooms.GenerationFloor(ctx, cfg.Bucket)
	if err != nil {
		return nil, err
	}
	floor = max(floor, uint64(cfg.Clock.Wall().UnixMicro()))
	var seed [16]byte
	if _, err := rand.Read(seed[:]); err != nil {
		return nil, err
	}
	core, err := cluster.New(cluster.Config{
		Node: cfg.Node, Address: cfg.Address, TTL: cfg.TTL, FirstGeneration: floor, AckLapses: true,
		Bucket: cfg.Bucket, Clock: monotonic{cfg.Clock},
		Rand: mrand.New(mrand.NewPCG(binary.LittleEndian.Uint64(seed[:8]), binary.LittleEndian.Uint64(seed[8:]))),
	})
	if err != nil {
		return nil, err
	}
	m := &Member{cfg: cfg, core: core, peers: &server.Cluster{Node: cfg.Node, Secret: cfg.Secret}}
	m.met = newMemberMetrics(cfg.Metrics, m)
	m.alarms, err = alarms.NewDuty(alarms.Config{Bucket: cfg.Bucket, Logger: cfg.Logger,
		Route: func(ctx context.Context, c *calls.Call) calls.Result {
			return m.mem.Call(ctx, c, false, m.serveCall, m.sendCall)
		},
		Now: cfg.Clock.Now, Wall: func() int64 { return cfg.Clock.Wall().UnixMilli() },
		Go: func(_ string, f func(context.Context)) {
			m.deliveries.Go(func() { f(m.deliveriesCtx) })
		},
		Observer: rooms.AlarmMetrics(cfg.Metrics, func() int { return m.alarms.Pending() }),
	})
	if err != nil {
		return nil, err
	}
	m.deliveriesCtx, m.stopDeliveries = context.WithCancel(context.Background())
	m.mem, err = cm.New(cm.Config{
		Core: core, Rooms: roomsOf{m}, Peers: peersOf{m.peers}, Clock: monotonic{cfg.Clock},
		Sleeper: cluster.ClockSleeper(cfg.Clock), TTL: cfg.TTL, FailoverWait: cfg.FailoverWait,
		SweepInterval: cfg.SweepInterval, Parallel: runner.Parallel(parallelReleases),
		Observer: m.met, Logger: cfg.Logger.With("node", cfg.Node), Alarms: m.alarms,
	})
	if err != nil {
		return nil, err
	}
	return m, nil
}

// monotonic is the node's clock as the core reads it.
type monotonic struct{ c clock.Clock }

func (m monotonic) Now() int64 { return m.c.Now() }

// Name is the node's name.
func (m *Member) Name() string { return m.cfg.Node }

// Instance is this process's instance name.
func (m *Member) Instance() string { return m.core.Instance() }

// Core is the cluster core the member runs (tests and status).
func (m *Member) Core() *cluster.Node { return m.core }

// Member is the cluster member this adapts (tests).
func (m *Member) Member() *cm.Member { return m.mem }

// Join starts the member's duties for the room manager mgr. It does not
// wait for the lease: until it is valid, every room routes to Wait.
func (m *Member) Join(mgr *rooms.Manager) {
	m.mgr.Store(mgr)
	m.run = runner.Start(m.core, cluster.ClockSleeper(m.cfg.Clock), m.mem.Duties())
}

// Lost is closed when the member ended by itself: the node was fenced, or
// another process took its name. The process must exit.
func (m *Member) Lost() <-chan struct{} { return m.mem.LostC() }

// Leave stops cleanly (cm.Member.Leave), then the duties stop.
func (m *Member) Leave(ctx context.Context) {
	if m.run == nil {
		return
	}
	m.left.Do(func() {
		m.stopDeliveries()
		m.deliveries.Wait()
		m.mem.Leave(ctx)
		m.run.Stop()
	})
}

// Sweep runs one pass of the owner sweep (tests).
func (m *Member) Sweep(ctx context.Context) { m.mem.Sweep(ctx) }

func roomOf(k rooms.Key) cluster.Room { return cluster.Room{Class: k.Class, Name: k.Name} }

func keyOf(r cluster.Room) rooms.Key { return rooms.Key{Class: r.Class, Name: r.Name} }

func holdOf(h rooms.Hold) cluster.Hold {
	return cluster.Hold{Room: roomOf(h.Key), Generation: h.Generation, Version: h.Version}
}

// Route implements rooms.Placement.
func (m *Member) Route(ctx context.Context, key rooms.Key) (rooms.Route, error) {
	w, err := m.mem.Route(ctx, roomOf(key))
	if err != nil {
		return rooms.Route{}, err
	}
	switch w.Kind {
	case cluster.Here:
		return rooms.Route{Kind: rooms.RouteHere}, nil
	case cluster.Elsewhere:
		return rooms.Route{Kind: rooms.RouteElsewhere, Node: w.Node, Address: w.Address}, nil
	}
	return rooms.Route{Kind: rooms.RouteWait, Node: w.Node}, nil
}

// Acquire implements rooms.Placement: a refusal that another node may
// serve the room wraps rooms.ErrElsewhere.
func (m *Member) Acquire(ctx context.Context, key rooms.Key) (rooms.Hold, error) {
	h, err := m.mem.Acquire(ctx, roomOf(key))
	switch {
	case err == nil:
	case errors.Is(err, cluster.ErrHeld), errors.Is(err, cluster.ErrDraining), errors.Is(err, cluster.ErrNotActive),
		errors.Is(err, cluster.ErrContended), errors.Is(err, cluster.ErrBusy), errors.Is(err, cluster.ErrMoving):
		return rooms.Hold{}, fmt.Errorf("%w: %w", rooms.ErrElsewhere, err)
	default:
		return rooms.Hold{}, err
	}
	return rooms.Hold{Key: key, Generation: h.Generation, Version: h.Version}, nil
}

// Valid implements rooms.Placement.
func (m *Member) Valid(h rooms.Hold) bool { return m.mem.Valid(holdOf(h)) }

// End implements rooms.Placement: life.EndReason.Parks says whether the
// room went idle with sockets open; the member decides the rest.
func (m *Member) End(ctx context.Context, h rooms.Hold, why life.EndReason, open int) {
	m.mem.End(ctx, holdOf(h), why.String(), why.Parks(open))
}

// SocketsGone implements rooms.Placement.
func (m *Member) SocketsGone(key rooms.Key) {
	ctx, cancel := context.WithTimeout(context.Background(), m.mem.TTL())
	defer cancel()
	m.mem.SocketsGone(ctx, roomOf(key))
}

// CloseLost implements rooms.Placement: a close whose guest could not be
// told changes nothing here (SocketsGone follows when it was the last).
func (m *Member) CloseLost(rooms.Key) {}

// Fence implements rooms.Placement.
func (m *Member) Fence(ctx context.Context, key rooms.Key) (uint64, error) {
	return m.mem.Fence(ctx, roomOf(key))
}

var _ rooms.Placement = (*Member)(nil)

// Dispatch implements server.ClusterMember.
func (m *Member) Dispatch(ctx context.Context, key rooms.Key, forwarded bool, forward func(ctx context.Context, node, address string) bool) server.ClusterRoute {
	d := m.mem.Dispatch(ctx, roomOf(key), forwarded, forward)
	switch d.Outcome {
	case cm.Serve:
		return server.ClusterRoute{Serve: true}
	case cm.Forwarded:
		return server.ClusterRoute{Answered: true}
	}
	return server.ClusterRoute{Err: d.Err, Moved: d.Refusal == cm.RefusedMoved, Refused: d.Reason() + "; retry"}
}

// Status implements server.ClusterMember.
func (m *Member) Status() server.ClusterNode {
	s := m.core.Status()
	out := server.ClusterNode{Node: s.Node, Instance: s.Instance, Address: m.cfg.Address, Phase: s.Phase,
		LeaseValid: s.LeaseValid, ValidForMS: s.ValidFor.Milliseconds(), Draining: s.Draining,
		Holds: clusterRooms(s.Holds), Parked: clusterRooms(s.Parked), Pending: clusterRooms(s.Pending), Peers: []server.ClusterPeer{}}
	for _, mv := range s.Moving {
		out.Moving = append(out.Moving, server.ClusterMoving{Class: mv.Room.Class, Name: mv.Room.Name, To: mv.To,
			ForMS: time.Duration(m.cfg.Clock.Now() - mv.Since).Milliseconds()})
	}
	out.Drained = m.mem.Drained()
	for _, p := range s.Peers {
		out.Peers = append(out.Peers, server.ClusterPeer{Node: p.Node, Instance: p.Instance, Address: p.Address,
			State: p.State.String(), Draining: p.Draining, SilentMS: p.Silent.Milliseconds()})
	}
	return out
}

// Ready implements server.ClusterMember from the core's own state: the
// node can take traffic once its lease is written and while it is valid,
// unless it drains or stops.
func (m *Member) Ready() error { return m.mem.Ready() }

func clusterRooms(hs []cluster.Hold) []server.ClusterRoom {
	out := make([]server.ClusterRoom, 0, len(hs))
	for _, h := range hs {
		out = append(out, server.ClusterRoom{Class: h.Room.Class, Name: h.Room.Name, Generation: h.Generation})
	}
	return out
}

// Drain implements server.ClusterMember.
func (m *Member) Drain(on bool) error {
	if m.mgr.Load() == nil {
		return errors.New("clusternode: not joined")
	}
	// In the lease before the operator is answered, not at the next
	// renewal: a move here right after `cluster drain --off` reads it.
	ctx, cancel := context.WithTimeout(context.Background(), m.mem.TTL()/3)
	defer cancel()
	m.mem.Drain(ctx, on)
	return nil
}

// SecretsUnavailable is the hook of a node that cannot open the app's
// secrets: it runs no event, so it drains (seed 000 §3). (The secrets
// themselves come later.)
func (m *Member) SecretsUnavailable() error {
	m.cfg.Logger.Error("cluster: the app's secrets cannot be opened on this node; draining it")
	return m.Drain(true)
}

// Move implements server.ClusterMember.
func (m *Member) Move(ctx context.Context, key rooms.Key, to string) (by string, err error) {
	if m.mgr.Load() == nil {
		return "", errors.New("clusternode: not joined")
	}
	by, err = m.mem.Move(ctx, roomOf(key), to)
	if errors.Is(err, cm.ErrMoveUnderWay) {
		err = fmt.Errorf("%w: %w", server.ErrMoveUnderWay, err)
	}
	return by, err
}

// Take implements server.ClusterMember: the room wakes here.
func (m *Member) Take(ctx context.Context, key rooms.Key) error {
	mgr := m.mgr.Load()
	if mgr == nil {
		return errors.New("clusternode: not joined")
	}
	return mgr.Wake(ctx, key)
}

// FenceNode implements server.ClusterMember.
func (m *Member) FenceNode(ctx context.Context, node string) error {
	_, err := m.mem.FenceByHand(ctx, node)
	return err
}

// Peer implements server.ClusterMember.
func (m *Member) Peer(ctx context.Context, node string) (server.ClusterPeer, bool) {
	l, ok := m.core.ReadPeer(ctx, node)
	if !ok {
		return server.ClusterPeer{}, false
	}
	return server.ClusterPeer{Node: l.Node, Instance: l.Instance, Address: l.Address, State: l.State.String(), Draining: l.Draining}, true
}

// Gone implements server.ClusterMember.
func (m *Member) Gone(node string) bool { return m.core.PeerGone(node) }

// Where implements server.ClusterMember: the member places the rooms.
func (m *Member) Where(ctx context.Context, keys []rooms.Key, reads int) map[rooms.Key]server.RoomPlace {
	rs := make([]cluster.Room, len(keys))
	for i, k := range keys {
		rs[i] = roomOf(k)
	}
	out := make(map[rooms.Key]server.RoomPlace, len(keys))
	for r, p := range m.mem.Where(ctx, rs, reads) {
		place := server.PlaceFree
		switch p.Kind {
		case cm.Held:
			place = server.PlaceHeld
		case cm.Parked:
			place = server.PlaceParked
		}
		out[keyOf(r)] = server.RoomPlace{Place: place, Node: p.Node}
	}
	return out
}

var _ server.ClusterMember = (*Member)(nil)

// roomsOf is the room manager as the member's Rooms.
type roomsOf struct{ m *Member }

func (r roomsOf) WithSockets() []cluster.Room {
	mgr := r.m.mgr.Load()
	if mgr == nil {
		return nil
	}
	keys := mgr.RoomsWithSockets()
	out := make([]cluster.Room, len(keys))
	for i, k := range keys {
		out[i] = roomOf(k)
	}
	return out
}

func (r roomsOf) Sockets(room cluster.Room) int {
	if mgr := r.m.mgr.Load(); mgr != nil {
		return mgr.SocketCount(keyOf(room))
	}
	return 0
}

func (r roomsOf) CloseSockets(room cluster.Room, reason string) {
	if mgr := r.m.mgr.Load(); mgr != nil {
		mgr.CloseSocketsLater(keyOf(room), abi.CloseServiceRestart, reason)
	}
}

func (r roomsOf) HandOver(ctx context.Context, room cluster.Room, why cm.HandOverReason) error {
	mgr := r.m.mgr.Load()
	if mgr == nil {
		return nil
	}
	end := life.EndDrain
	if why == cm.HandOverMove {
		end = life.EndMove
	}
	if err := mgr.HandOver(ctx, keyOf(room), end); err != nil && !errors.Is(err, rooms.ErrUnknownRoom) {
		return err
	}
	return nil
}

func (r roomsOf) DropAll(ctx context.Context) {
	mgr := r.m.mgr.Load()
	if mgr == nil {
		return
	}
	ctx, cancel := context.WithTimeout(ctx, r.m.mem.TTL())
	defer cancel()
	if err := mgr.DropAll(ctx); err != nil {
		r.m.cfg.Logger.Warn("cluster: dropping rooms after the lease ended", "node", r.m.cfg.Node, "err", err)
	}
}

// peersOf is the signed peer calls as the member's Peers.
type peersOf struct{ c *server.Cluster }

func (p peersOf) AskTake(ctx context.Context, node, address string, room cluster.Room) error {
	return p.c.AskTake(ctx, node, address, keyOf(room))
}
