// Package clusternode makes a node a member of a cluster: it implements
// the room manager's placement (host/rooms.Placement) and the HTTP
// surface's membership (host/server.ClusterMember) over the cluster core
// (package cluster), and runs the core's duties. It is the one place that
// sees both sides: host does not import cluster, and the core does no I/O
// of its own accord. cmd/wasmkeep builds a Member and gives it to
// host/node.
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
	"github.com/wasmkeep/wasmkeep/cluster"
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
	// Bucket holds the leases and records (the node's bucket).
	Bucket store.Bucket
	// Clock is the node's one clock.
	Clock clock.Clock
	// SweepInterval is how often the owner sweep runs
	// (DefaultSweepInterval).
	SweepInterval time.Duration
	// Metrics receives the member's metrics (docs/metrics.md).
	Metrics *metrics.Set
	Logger  *slog.Logger
}

// seenFresh bounds how long a routing read may stand in for the read of
// the acquisition that follows it: within it, a wake costs one GET and one
// conditional PUT; past it, the acquisition reads again.
const seenFresh = 2 * time.Second

// Member is a node's membership of a cluster.
type Member struct {
	cfg  Config
	core *cluster.Node
	log  *slog.Logger

	mgr atomic.Pointer[rooms.Manager]

	mu   sync.Mutex
	seen map[rooms.Key]seenAt
	// The owner sweep's (sweep.go), under sweepMu: its passes, where the
	// last re-read of parked records stopped, and the undecodable records
	// logged (under mu).
	sweepMu            sync.Mutex
	sweeps             int
	rereadDue          bool // a re-read of the parked records is due (and was cut short, if it ran)
	rereadFrom         cluster.Room
	reportedUnreadable map[rooms.Key]bool
	// ownerClosed are the rooms whose sockets this node closed, until
	// their last socket is gone (under mu): a move, a drain and the sweep
	// may each find the same sockets still closing, and only the first
	// close is counted.
	ownerClosed map[rooms.Key]bool
	// advancing are the moves being taken a step now (under mu): one
	// caller at a time, so that the one that ends a move reports how.
	advancing map[rooms.Key]bool
	// beforeMoveCloses, if set, runs between the end of a move and the
	// close of the room's sockets (tests run a sweep there).
	beforeMoveCloses func(rooms.Key)

	ctx    context.Context
	cancel context.CancelFunc
	loops  sync.WaitGroup
	lost   chan struct{}
	ended  sync.Once
	left   sync.Once

	draining atomic.Bool
	stopping atomic.Bool // Leave began: no hold is parked any more

	// peers makes the member's signed calls to other nodes.
	peers *server.Cluster
	met   memberMetrics
}

type seenAt struct {
	seen cluster.Seen
	at   int64
}

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
		Node: cfg.Node, Address: cfg.Address, TTL: cfg.TTL, FirstGeneration: floor,
		Bucket: cfg.Bucket, Clock: monotonic{cfg.Clock},
		Rand: mrand.New(mrand.NewPCG(binary.LittleEndian.Uint64(seed[:8]), binary.LittleEndian.Uint64(seed[8:]))),
	})
	if err != nil {
		return nil, err
	}
	m := &Member{cfg: cfg, core: core, log: cfg.Logger.With("node", cfg.Node), seen: map[rooms.Key]seenAt{}, advancing: map[rooms.Key]bool{}, reportedUnreadable: map[rooms.Key]bool{}, ownerClosed: map[rooms.Key]bool{},
		lost: make(chan struct{}), peers: &server.Cluster{Node: cfg.Node, Secret: cfg.Secret}}
	m.met = newMemberMetrics(cfg.Metrics, m)
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

// Join starts the member's duties (the lease, the peers' leases, pending
// releases and the resolver) and its watch of the lease, for the room
// manager mgr. It does not wait for the lease: until it is valid, every
// room routes to Wait.
func (m *Member) Join(mgr *rooms.Manager) {
	m.mgr.Store(mgr)
	m.ctx, m.cancel = context.WithCancel(context.Background())
	sleeper := cluster.ClockSleeper(m.cfg.Clock)
	for _, duty := range m.core.Duties() {
		m.loops.Add(1)
		go func() {
			defer m.loops.Done()
			_ = m.core.Run(m.ctx, sleeper, duty)
		}()
	}
	m.loops.Add(3)
	go func() {
		defer m.loops.Done()
		m.watch(sleeper)
	}()
	go func() {
		defer m.loops.Done()
		m.sweepLoop(sleeper, m.sweepInterval())
	}()
	go func() {
		defer m.loops.Done()
		m.moveLoop(sleeper)
	}()
}

func (m *Member) sweepInterval() time.Duration {
	if m.cfg.SweepInterval > 0 {
		return m.cfg.SweepInterval
	}
	return DefaultSweepInterval
}

// watch follows the lease: when it stops being valid every socket here
// closes with 1012 and every resident room is dropped unwritten (no hold
// may act any more); when it is lost (fenced, or taken by another process
// of this node) the member ends and Lost is closed: the process must exit.
func (m *Member) watch(s cluster.Sleeper) {
	period := m.ttl() / 20
	wasValid, joined := false, false
	for {
		valid := m.core.LeaseValid()
		switch {
		case valid && !joined:
			joined = true
			m.log.Info("cluster: joined", "instance", m.core.Instance(), "address", m.cfg.Address)
		case wasValid && !valid && !m.core.Ended():
			m.core.CheckLapse() // parked records become pending releases before the sockets close
			m.met.lapses.Inc()
			m.log.Error("cluster: this node's lease is not valid any more; closing its sockets and dropping its rooms")
			m.dropEverything("lapse")
		}
		wasValid = valid
		if m.core.Lost() {
			m.log.Error("cluster: this node was fenced (or its name taken by another process); it must exit")
			m.dropEverything("fenced")
			m.ended.Do(func() { close(m.lost) })
			return
		}
		if m.core.Ended() || s.Sleep(m.ctx, period) != nil {
			return
		}
	}
}

// dropEverything ends all this node does for its rooms: instances dropped
// unwritten, sockets closed with 1012 so clients reconnect (and reach the
// room's next node).
func (m *Member) dropEverything(why string) {
	mgr := m.mgr.Load()
	if mgr == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), m.ttl())
	defer cancel()
	if err := mgr.DropAll(ctx); err != nil {
		m.log.Warn("cluster: dropping rooms after the lease ended", "err", err)
	}
	m.closeOwnerSockets(ctx, mgr.RoomsWithSockets(), why, "the node lost its right to run the room")
}

// closeOwnerSockets closes the sockets of keys here with 1012 for reason,
// and counts each room for why unless they were closed already since its
// sockets opened. Counted before the closes go out, so that a client (or
// a test) that sees its socket closed finds the close counted.
func (m *Member) closeOwnerSockets(ctx context.Context, keys []rooms.Key, why, reason string) {
	m.mu.Lock()
	counted := 0
	for _, k := range keys {
		if !m.ownerClosed[k] {
			m.ownerClosed[k] = true
			counted++
		}
	}
	m.mu.Unlock()
	m.met.ownerCloses(why, counted)
	mgr := m.mgr.Load()
	for _, k := range keys {
		if err := mgr.CloseSockets(ctx, k, abi.CloseServiceRestart, reason); err != nil {
			m.log.Warn("cluster: closing a room's sockets", "room", k.String(), "err", err)
		}
	}
}

// Lost is closed when the member ended by itself: the node was fenced, or
// another process took its name. The process must exit.
func (m *Member) Lost() <-chan struct{} { return m.lost }

// Leave stops cleanly: no room is taken any more, every hold is released
// (the rooms were hibernated before), and the lease is written released.
// The duties stop after it.
func (m *Member) Leave(ctx context.Context) {
	if m.cancel == nil {
		return
	}
	m.left.Do(func() {
		m.stopping.Store(true)
		m.draining.Store(false)
		m.core.Stop(ctx, cluster.ClockSleeper(m.cfg.Clock))
		m.cancel()
		m.loops.Wait()
		m.log.Info("cluster: left", "instance", m.core.Instance())
	})
}

func (m *Member) ttl() time.Duration {
	if m.cfg.TTL > 0 {
		return m.cfg.TTL
	}
	return cluster.DefaultTTL
}

func roomOf(k rooms.Key) cluster.Room { return cluster.Room{Class: k.Class, Name: k.Name} }

func holdOf(h rooms.Hold) cluster.Hold {
	return cluster.Hold{Room: roomOf(h.Key), Generation: h.Generation, Version: h.Version}
}

// Route implements rooms.Placement. A Here decided on a read keeps that
// read for the acquisition that follows.
func (m *Member) Route(ctx context.Context, key rooms.Key) (rooms.Route, error) {
	if m.draining.Load() {
		// An event for a room parked on a draining node: its record is
		// released before the event goes to a peer, which would find it
		// naming this live node (seed 000 §3).
		if parked, _ := m.core.ReleaseParked(ctx, roomOf(key)); parked {
			m.met.parkedRelease("drain")
		}
	}
	w, err := m.core.Route(ctx, roomOf(key))
	if err != nil {
		return rooms.Route{}, err
	}
	switch w.Kind {
	case cluster.Here:
		if w.Seen.Room != (cluster.Room{}) {
			m.mu.Lock()
			m.seen[key] = seenAt{w.Seen, m.cfg.Clock.Now()}
			m.mu.Unlock()
		}
		return rooms.Route{Kind: rooms.RouteHere}, nil
	case cluster.Elsewhere:
		return rooms.Route{Kind: rooms.RouteElsewhere, Node: w.Node, Address: w.Address}, nil
	}
	return rooms.Route{Kind: rooms.RouteWait, Node: w.Node}, nil
}

// Acquire implements rooms.Placement: Take over the routing read when it
// is fresh, else read and take.
func (m *Member) Acquire(ctx context.Context, key rooms.Key) (rooms.Hold, error) {
	m.mu.Lock()
	s, ok := m.seen[key]
	delete(m.seen, key)
	m.mu.Unlock()
	var h cluster.Hold
	var err error
	if ok && m.cfg.Clock.Now()-s.at < int64(seenFresh) {
		h, err = m.core.Take(ctx, s.seen)
		if errors.Is(err, cluster.ErrContended) {
			h, err = m.core.Acquire(ctx, roomOf(key)) // the read went stale: once more
		}
	} else {
		h, err = m.core.Acquire(ctx, roomOf(key))
	}
	m.met.acquisition(err)
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
func (m *Member) Valid(h rooms.Hold) bool { return m.core.Valid(holdOf(h)) }

// End implements rooms.Placement. A room that hibernated idle, or was
// evicted, with sockets open here parks its hold (seed 000 §1): the record
// keeps naming this node, so the room's next event, wherever it lands,
// wakes it here where its sockets are. Every other end releases it, as
// does a park the core refuses (the lease not valid, draining, the room
// moving) or one while this node stops.
func (m *Member) End(ctx context.Context, h rooms.Hold, why life.EndReason, open int) {
	parks := why.Parks(open)
	stopping := m.stopping.Load()
	if parks && !m.draining.Load() && !stopping && m.core.Park(holdOf(h)) {
		return
	}
	// Read after the park: one refused because a move began meanwhile
	// leaves the sockets to the move.
	moving := m.isMoving(h.Key)
	m.met.release(why)
	m.core.Release(ctx, holdOf(h))
	if parks && !moving && !stopping {
		// A park refused (draining, the lease not valid) leaves open
		// sockets on a room this node no longer holds: a drain pass
		// that ran before the room went idle would not close them,
		// and another node may take the room while they stay. They
		// close (1012) now, off the room's worker, which the close
		// waits on. A move and a stop close them themselves.
		m.loops.Add(1)
		go func() {
			defer m.loops.Done()
			m.closeOwnerSockets(m.baseCtx(), []rooms.Key{h.Key}, "drain", "the room's node may not keep it")
		}()
	}
}

// SocketsGone implements rooms.Placement: the room's last open socket
// here went, so a parked record of it is released (on the room's worker,
// which a wake also runs on: the two never interleave).
func (m *Member) SocketsGone(key rooms.Key) {
	m.mu.Lock()
	delete(m.ownerClosed, key) // a socket that opens from now on was not closed
	m.mu.Unlock()
	ctx, cancel := context.WithTimeout(m.baseCtx(), m.ttl())
	defer cancel()
	if parked, _ := m.core.ReleaseParked(ctx, roomOf(key)); parked {
		m.met.parkedRelease("last_socket")
	}
}

// CloseLost implements rooms.Placement: a close whose guest could not be
// told changes nothing here (SocketsGone follows when it was the last).
func (m *Member) CloseLost(rooms.Key) {}

// baseCtx is the member's context once joined, else a background one.
func (m *Member) baseCtx() context.Context {
	if m.ctx != nil {
		return m.ctx
	}
	return context.Background()
}

// Fence implements rooms.Placement: below the record's generation no hold
// can still write a snapshot that counts (every earlier hold ended before
// the record moved on); a room without a record has had no cluster hold,
// and the sweep deletes nothing of it.
//
// A room parked here costs no read (seed 000 §5): its parked hold's
// generation bounds every hold that may still write (the ones before it
// ended before the record named it), and is at most the record's.
func (m *Member) Fence(ctx context.Context, key rooms.Key) (uint64, error) {
	if h, parked := m.core.Parked(roomOf(key)); parked {
		return h.Generation, nil
	}
	seen, err := m.core.Look(ctx, roomOf(key))
	if err != nil || !seen.Exists {
		return 0, err
	}
	return seen.Record.Generation, nil
}

var _ rooms.Placement = (*Member)(nil)

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
	out.Drained = s.Draining && len(s.Holds) == 0 && len(s.Parked) == 0 && len(s.Pending) == 0 && len(s.Unresolved) == 0
	for _, p := range s.Peers {
		out.Peers = append(out.Peers, server.ClusterPeer{Node: p.Node, Instance: p.Instance, Address: p.Address,
			State: p.State.String(), Draining: p.Draining, SilentMS: p.Silent.Milliseconds()})
	}
	return out
}

func clusterRooms(hs []cluster.Hold) []server.ClusterRoom {
	out := make([]server.ClusterRoom, 0, len(hs))
	for _, h := range hs {
		out = append(out, server.ClusterRoom{Class: h.Room.Class, Name: h.Room.Name, Generation: h.Generation})
	}
	return out
}

// Drain implements server.ClusterMember: on, the node takes no room, and a
// background pass hands every room held here over (its sockets closed
// with 1012, its state written, its record released) until nothing names
// the node; off, it takes rooms again.
func (m *Member) Drain(on bool) error {
	if m.mgr.Load() == nil {
		return errors.New("clusternode: not joined")
	}
	m.core.SetDraining(on)
	if !on || !m.draining.CompareAndSwap(false, true) {
		if !on {
			m.draining.Store(false)
		}
		return nil
	}
	m.log.Info("cluster: draining")
	m.loops.Add(1)
	go func() {
		defer m.loops.Done()
		m.drain()
	}()
	return nil
}

// drain hands rooms over until the node is drained or undrained.
func (m *Member) drain() {
	mgr := m.mgr.Load()
	sleeper := cluster.ClockSleeper(m.cfg.Clock)
	for m.draining.Load() && !m.core.Ended() {
		// Every socket goes: without parking (the next step), a socket
		// left here would wake its room here, which a draining node
		// may not.
		// The whole parked set on every pass, before the hand-overs: a
		// park that checked "not draining" just before the drain began
		// may land after the first pass.
		m.releaseParked(m.ctx, "drain")
		m.closeOwnerSockets(m.ctx, mgr.RoomsWithSockets(), "drain", "the node is draining")
		for _, h := range m.core.Status().Holds {
			key := rooms.Key{Class: h.Room.Class, Name: h.Room.Name}
			if err := mgr.HandOver(m.ctx, key, life.EndDrain); err != nil && !errors.Is(err, rooms.ErrUnknownRoom) {
				m.log.Warn("cluster: handing a room over", "room", key.String(), "err", err)
			}
		}
		if m.Status().Drained {
			m.log.Info("cluster: drained")
			return
		}
		if sleeper.Sleep(m.ctx, m.ttl()/20) != nil {
			return
		}
	}
}

// parallelReleases bounds the parked records a drain pass releases at
// once: 50,000 of them one after the other would hold the hand-overs of
// the resident rooms for minutes on a slow bucket.
const parallelReleases = 16

// releaseParked releases every parked record here, for why.
func (m *Member) releaseParked(ctx context.Context, why string) {
	slots := make(chan struct{}, parallelReleases)
	var wg sync.WaitGroup
	for _, h := range m.core.ParkedRooms() {
		slots <- struct{}{}
		wg.Add(1)
		go func() {
			defer func() { <-slots; wg.Done() }()
			if parked, _ := m.core.ReleaseParked(ctx, h.Room); parked {
				m.met.parkedRelease(why)
			}
		}()
	}
	wg.Wait()
}

// SecretsUnavailable is the hook of a node that cannot open the app's
// secrets: it runs no event, so it drains (seed 000 §3). (The secrets
// themselves come later.)
func (m *Member) SecretsUnavailable() error {
	m.log.Error("cluster: the app's secrets cannot be opened on this node; draining it")
	return m.Drain(true)
}

func (m *Member) isMoving(key rooms.Key) bool {
	_, moving := m.core.Moving(roomOf(key))
	return moving
}

// isAdvancing reports whether a caller is taking key's move a step now:
// the move may be over, its sockets not closed yet.
func (m *Member) isAdvancing(key rooms.Key) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.advancing[key]
}

// ErrNotHeldHere: a move was asked of a node that does not hold the room.
var ErrNotHeldHere = errors.New("clusternode: the room is not held on this node")

// Move implements server.ClusterMember: the move is recorded (from then on
// the room takes no hold here, and its events go to the target), the
// room's state is written and its record released (a parked one's as it
// stands), and node to is asked to take it; once it has, the room's
// sockets here close with 1012 and reconnect there. by is the node that
// holds the room then: to, or one that one of its events reached first.
// A release that did not land (pending, or the record naming this node at
// a later generation) leaves the move under way: the move loop finishes
// it (server.ErrMoveUnderWay). Asked again for the same move, Move takes
// it one step further.
func (m *Member) Move(ctx context.Context, key rooms.Key, to string) (by string, err error) {
	mgr := m.mgr.Load()
	if mgr == nil {
		return "", errors.New("clusternode: not joined")
	}
	if to == m.cfg.Node {
		return "", fmt.Errorf("clusternode: %s already runs on %s", key, to)
	}
	if !m.beginAdvance(key) {
		return "", fmt.Errorf("%w: another request is taking this move a step now", server.ErrMoveUnderWay)
	}
	defer m.endAdvance(key)
	// Recorded before the room's state is looked at, so that neither a
	// park nor a wake can come in between (the core refuses both while
	// the room moves).
	mv, err := m.core.BeginMove(roomOf(key), to)
	if errors.Is(err, cluster.ErrMoveBusy) {
		if cur, ok := m.core.Moving(roomOf(key)); ok && cur.To == to {
			return m.advanceMove(ctx, key) // the same move, asked again
		}
	}
	if err != nil {
		if errors.Is(err, cluster.ErrNotHeld) {
			return "", fmt.Errorf("%w: %s", ErrNotHeldHere, key)
		}
		return "", fmt.Errorf("clusternode: moving %s: %w", key, err)
	}
	m.met.moves.Inc()
	if parked, landed := m.core.ReleaseParked(ctx, roomOf(key)); parked {
		// The owner acts on a parked room too.
		m.met.parkedRelease("move")
		m.log.Info("cluster: moving a parked room", "room", key.String(), "to", to, "released", landed)
	} else if err := mgr.HandOver(ctx, key, life.EndMove); err != nil && !errors.Is(err, rooms.ErrUnknownRoom) {
		if ctx.Err() != nil {
			// The hand-over is queued on the room's worker and goes
			// on; so does the move, which waits for its release.
			return "", fmt.Errorf("%w: the room is being handed over (%v)", server.ErrMoveUnderWay, err)
		}
		m.core.EndMove(mv)
		return "", fmt.Errorf("clusternode: handing %s over: %w", key, err)
	} else {
		m.log.Info("cluster: moving a room", "room", key.String(), "to", to)
	}
	return m.advanceMove(ctx, key)
}

// beginAdvance marks key's move as being taken a step by its caller,
// unless another caller is at it (false).
func (m *Member) beginAdvance(key rooms.Key) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.advancing[key] {
		return false
	}
	m.advancing[key] = true
	return true
}

func (m *Member) endAdvance(key rooms.Key) {
	m.mu.Lock()
	defer m.mu.Unlock()
	delete(m.advancing, key)
}

// movePassEvery is how often the move loop looks at the moves under way.
func (m *Member) movePassEvery() time.Duration { return m.ttl() / 10 }

// moveLoop finishes the moves under way (see cluster/moves.go): once a
// pending release lands the target is asked again, and once another live
// node holds the room its sockets here close. A move that a request is
// taking a step now is left to it.
func (m *Member) moveLoop(s cluster.Sleeper) {
	for !m.core.Ended() && s.Sleep(m.ctx, m.movePassEvery()) == nil {
		for _, mv := range m.core.Moves() {
			key := rooms.Key{Class: mv.Room.Class, Name: mv.Room.Name}
			if !m.beginAdvance(key) {
				continue
			}
			ctx, cancel := context.WithTimeout(m.ctx, m.ttl())
			if _, err := m.advanceMove(ctx, key); err != nil && !errors.Is(err, server.ErrMoveUnderWay) {
				m.log.Warn("cluster: a move ended unfinished", "room", key.String(), "to", mv.To, "err", err)
			}
			cancel()
			m.endAdvance(key)
		}
	}
}

// advanceMove takes key's move one step, its caller having marked it
// (beginAdvance): the node that holds the room once the move is done,
// server.ErrMoveUnderWay while it waits, another error if it ended
// unfinished.
func (m *Member) advanceMove(ctx context.Context, key rooms.Key) (by string, err error) {
	step, ok := m.core.LookMove(ctx, roomOf(key))
	if !ok {
		// Only the caller that marked it ends a move, save a stop or a
		// lost lease, which forget every move.
		return "", fmt.Errorf("clusternode: the move of %s ended: this node is %s", key, m.core.Status().Phase)
	}
	mv := step.Move
	switch step.Kind {
	case cluster.MoveWait:
		return "", fmt.Errorf("%w: %s", server.ErrMoveUnderWay, step.Why)
	case cluster.MoveGiveUp:
		// The room's sockets here belong to no hold of this node's any
		// more: they close, and their clients reconnect to wherever the
		// room runs next.
		if _, parked := m.core.Parked(roomOf(key)); !parked && !m.core.Acting(roomOf(key)) {
			m.closeMovedSockets(ctx, key, "the room's move ended unfinished")
		}
		return "", fmt.Errorf("clusternode: the move of %s to %s ended unfinished: %s", key, mv.To, step.Why)
	case cluster.MoveAsk:
		if err := m.peers.AskTake(ctx, mv.To, mv.Address, key); err != nil {
			// The next pass reads the record again: the target may have
			// taken the room with an event meanwhile, or will be asked
			// again.
			return "", fmt.Errorf("%w: node %s did not take the room yet: %w", server.ErrMoveUnderWay, mv.To, err)
		}
		m.core.EndMove(mv)
		by = mv.To
	case cluster.MoveTaken:
		by = step.Node
	}
	// The sockets go once another node holds the room: reconnecting,
	// they reach it there.
	if m.beforeMoveCloses != nil {
		m.beforeMoveCloses(key)
	}
	if by == mv.To {
		m.closeMovedSockets(ctx, key, "the room moved to another node")
		m.log.Info("cluster: moved a room", "room", key.String(), "to", mv.To)
	} else {
		m.closeMovedSockets(ctx, key, "the room was taken by another node")
		m.log.Info("cluster: a moving room was taken by another node first", "room", key.String(), "to", mv.To, "by", by)
	}
	return by, nil
}

// closeMovedSockets closes key's sockets here, if it has any, with 1012
// for reason, counted as a move's.
func (m *Member) closeMovedSockets(ctx context.Context, key rooms.Key, reason string) {
	if m.mgr.Load().SocketCount(key) > 0 {
		m.closeOwnerSockets(ctx, []rooms.Key{key}, "move", reason)
	}
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
	l, err := m.core.FenceByHand(ctx, node)
	if err != nil {
		return err
	}
	m.log.Warn("cluster: fenced a node by hand", "fenced", node, "instance", l.Instance, "state", l.State.String())
	return nil
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

// Unreachable implements server.ClusterMember.
func (m *Member) Unreachable(ctx context.Context, node string) { m.core.Unreachable(ctx, node) }

var _ server.ClusterMember = (*Member)(nil)
