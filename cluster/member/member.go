// Package member is the host side of a node's membership of a cluster,
// written once: what a node does with the rooms, sockets and events the
// core (package cluster) decides about. It routes events (with the
// failover wait, one re-route after an unreachable node and the hop
// rule), ends holds (park or release), releases a parked record when its
// room's last socket goes, drains, moves rooms, sweeps the sockets of
// rooms another node took, and reacts to lapses and to a lost lease.
//
// A server runs it through package clusternode, which adapts it to the
// room manager and the HTTP surface; the simulation in cluster/sim runs
// the very same Member over fakes of its interfaces, on its scheduler,
// with faults. Like the core it starts no goroutine and reads no clock
// but the one it is given: its background work is duties (Duties), run
// by the server's runner (cluster/runner) or the simulation's scheduler,
// and it reaches the node's rooms and its peers only through the small
// interfaces below.
package member

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/wasmkeep/wasmkeep/alarms"
	"github.com/wasmkeep/wasmkeep/cluster"
)

// Rooms is what the member asks of the node's rooms and their sockets:
// the room manager in a server, a fake in the simulation.
type Rooms interface {
	// WithSockets lists the rooms with sockets open on this node.
	WithSockets() []cluster.Room
	// Sockets counts room's sockets open on this node, closing ones
	// included.
	Sockets(room cluster.Room) int
	// CloseSockets closes room's sockets on this node with 1012
	// (service restart: clients reconnect) and reason. It returns at
	// once: the closes happen off the caller, which may be the room's
	// own worker (End runs there).
	CloseSockets(room cluster.Room, reason string)
	// HandOver writes a resident room's state and ends its hold (End
	// follows, not parking), for a drain or a move, and waits for it. A
	// room that is not resident is nothing to hand over: nil.
	HandOver(ctx context.Context, room cluster.Room, why HandOverReason) error
	// DropAll drops every resident room without writing it: the holds
	// they ran on are gone (a lapse, a lost lease).
	DropAll(ctx context.Context)
}

// HandOverReason is why a room is handed over.
type HandOverReason uint8

// The reasons of a hand-over.
const (
	HandOverDrain HandOverReason = iota
	HandOverMove
)

// Peers is what the member asks of other nodes.
type Peers interface {
	// AskTake asks node, at address, to take room and wake it: the
	// target's side of a move. nil once it holds the room.
	AskTake(ctx context.Context, node, address string, room cluster.Room) error
}

// Observer is told what the member did, for metrics (a server) or
// statistics and checks (the simulation). Its methods must not block nor
// call back into the member.
type Observer interface {
	Observe(Event)
}

// EventKind is what an Event tells.
type EventKind uint8

// The events of a member.
const (
	// Released: a hold ended and was released (Why: the hold's end).
	Released EventKind = iota
	// ParkedReleased: a parked record was released (Why: last_socket,
	// drain, move).
	ParkedReleased
	// OwnerClosed: this node closed the sockets of Rooms rooms it does not
	// run any more (Why: sweep, drain, move, lapse, fenced); Room is set
	// when there is one.
	OwnerClosed
	// Acquired: an acquisition ended (Err is its error, nil if it took
	// the room).
	Acquired
	// Lapsed: the lease ran out; sockets closed, rooms dropped.
	Lapsed
	// Lost: the lease was fenced or taken; the process must exit.
	Lost
	// MoveBegun, MoveStep and MoveEnded follow a move (Node: the target;
	// MoveEnded's By: the node that holds the room after it, "" if it
	// ended unfinished, Err why). MoveStep's Why is the step's kind.
	MoveBegun
	MoveStep
	MoveEnded
	// Drained: a drain found nothing left naming this node.
	Drained
	// Waited: an event waited for its room's node (Why: here,
	// elsewhere, timeout).
	Waited
	// Routed: an event for Room is sent to Node (Elsewhere).
	Routed
	// Unreadable: a record the sweep read cannot be decoded.
	Unreadable
)

// Event is one thing the member did.
type Event struct {
	Kind  EventKind
	Room  cluster.Room
	Why   string
	Node  string
	By    string
	Rooms int
	Err   error
}

// Defaults of a Config.
const (
	// DefaultFailoverWait keeps an event for a room of a dead node within
	// a client's patience; the room is free after the failover bound
	// (docs/cluster.md), which is longer.
	DefaultFailoverWait = 5 * time.Second
	// DefaultSweepInterval is how often the owner sweep runs.
	DefaultSweepInterval = time.Minute
)

// Config is a member's settings and parts.
type Config struct {
	// Core is the node's cluster core, made with AckLapses set.
	Core *cluster.Node
	// Rooms and Peers are the node's rooms and its calls to peers.
	Rooms Rooms
	Peers Peers
	// Clock is the core's clock; Sleeper waits on it.
	Clock   cluster.Clock
	Sleeper cluster.Sleeper
	// TTL is the core's lease time (cluster.DefaultTTL).
	TTL time.Duration
	// FailoverWait bounds how long an event waits for a room whose node
	// stopped answering (DefaultFailoverWait).
	FailoverWait time.Duration
	// SweepInterval is how often the owner sweep runs
	// (DefaultSweepInterval).
	SweepInterval time.Duration
	// Parallel runs do(i) for 0 ≤ i < n, some at once, and returns when
	// all are done: a server's bounded goroutines (cluster/runner); nil
	// runs them one after the other, as the simulation does.
	Parallel func(n int, do func(i int))
	// Observer is told what the member does (may be nil).
	Observer Observer
	// Logger takes the member's log (slog.Default when nil).
	Logger *slog.Logger
	// Alarms delivers the alarms of the node's rooms (package alarms),
	// routed as calls are (Call): its pass is one of the member's duties,
	// run while the lease is valid. nil: no alarms.
	Alarms *alarms.Duty
	// Broken breaks the member's rules on purpose, for the simulation.
	Broken Variants
}

// Member is a node's membership of a cluster, on the host's side.
type Member struct {
	cfg   Config
	core  *cluster.Node
	rooms Rooms
	log   *slog.Logger

	mu   sync.Mutex
	seen map[cluster.Room]seenAt
	// seenPruned is when seen last lost its stale reads (keepSeen).
	seenPruned int64
	// ownerClosed are the rooms whose sockets this node closed, until
	// their last socket is gone: a move, a drain and the sweep may each
	// find the same sockets still closing, and only the first close is
	// counted.
	ownerClosed map[cluster.Room]bool
	// advancing are the moves being taken a step now: one caller at a
	// time, so that the one that ends a move reports how.
	advancing map[cluster.Room]bool
	// untold: the drain the DrainUntold variant keeps from the core.
	untold bool
	// drainedSaid: the drain under way has been reported drained.
	drainedSaid bool
	// lapses is the core's count of lapses when the watch last looked;
	// wasValid and joined what it saw then.
	lapses          uint64
	wasValid        bool
	joined, lostNow bool
	lost            chan struct{}

	// The owner sweep's (sweep.go), under sweepMu but for sweeps, its
	// count of passes, which anyone may read while a pass waits on the
	// bucket.
	sweepMu            sync.Mutex
	sweeps             atomic.Int64
	rereadDue          bool
	rereadFrom         cluster.Room
	reportedUnreadable map[cluster.Room]bool
	lastOpen           []cluster.Room // SweepReleasesParkedInPass's listing

	// beforeMoveCloses, if set, runs between the end of a move and the
	// close of the room's sockets (tests run a sweep there).
	beforeMoveCloses func(cluster.Room)
}

type seenAt struct {
	seen cluster.Seen
	at   int64
}

// New returns the member of cfg.
func New(cfg Config) (*Member, error) {
	if cfg.Core == nil || cfg.Rooms == nil || cfg.Peers == nil || cfg.Clock == nil || cfg.Sleeper == nil {
		return nil, errors.New("member: a member needs a core, rooms, peers, a clock and a sleeper")
	}
	if cfg.TTL == 0 {
		cfg.TTL = cluster.DefaultTTL
	}
	if cfg.FailoverWait <= 0 {
		cfg.FailoverWait = DefaultFailoverWait
	}
	if cfg.SweepInterval <= 0 {
		cfg.SweepInterval = DefaultSweepInterval
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	return &Member{cfg: cfg, core: cfg.Core, rooms: cfg.Rooms, log: cfg.Logger,
		seen: map[cluster.Room]seenAt{}, ownerClosed: map[cluster.Room]bool{}, advancing: map[cluster.Room]bool{},
		reportedUnreadable: map[cluster.Room]bool{}, lost: make(chan struct{})}, nil
}

// Core is the cluster core the member runs (status, and the checks of
// the simulation, which reads it but acts on it only through the member).
func (m *Member) Core() *cluster.Node { return m.core }

// TTL is the lease time.
func (m *Member) TTL() time.Duration { return m.cfg.TTL }

func (m *Member) observe(e Event) {
	if m.cfg.Observer != nil {
		m.cfg.Observer.Observe(e)
	}
}

// Duties are every duty of the node: the core's (the lease, the peers,
// pending releases and the resolver) and the member's (the watch of the
// lease, drain passes, moves, the owner sweep). Each runs in a loop of
// its own (cluster.Node.Run): a server gives each a goroutine
// (cluster/runner), the simulation a task.
func (m *Member) Duties() []cluster.Duty {
	duties := append(m.core.Duties(), m.Watch, m.DrainPass, m.MovePass, m.SweepPass)
	if m.cfg.Alarms != nil {
		duties = append(duties, m.AlarmPass)
	}
	return duties
}

// AlarmPass is the duty of alarms: a pass of the node's alarm duty
// (alarms.Duty.Pass) while the lease is valid and the node neither drains
// nor stops; a node that may take no room delivers nothing (the others'
// scans find what it would have).
func (m *Member) AlarmPass(ctx context.Context) time.Duration {
	if !m.core.LeaseValid() || m.core.Stopping() || m.draining() {
		return alarms.DefaultTick
	}
	return m.cfg.Alarms.Pass(ctx)
}

// LostC is closed once the member ended by itself: the node was fenced,
// or another process took its name. The process must exit.
func (m *Member) LostC() <-chan struct{} { return m.lost }

// Watch is the duty that follows the lease. After a lapse every socket
// here closes with 1012 and every resident room is dropped unwritten
// (none of their holds may act any more); the core counts its lease not
// valid until then (cluster.Config.AckLapses). When the lease is lost
// (fenced, or taken by another process of this node) the same happens and
// LostC is closed: the process must exit.
func (m *Member) Watch(ctx context.Context) time.Duration {
	period := m.cfg.TTL / 20
	unacked := m.core.LapseUnacked()
	valid := m.core.LeaseValid()
	lapses := m.core.Counts().Lapses
	m.mu.Lock()
	lapsed := lapses != m.lapses || (m.wasValid && !valid && !m.core.Ended() && !m.core.Stopping())
	m.lapses, m.wasValid = lapses, valid
	joinedNow := valid && !m.joined
	m.joined = m.joined || valid
	m.mu.Unlock()
	if joinedNow {
		m.log.Info("cluster: joined", "instance", m.core.Instance())
	}
	if m.core.Lost() {
		if m.firstTime(&m.lostNow) {
			m.log.Error("cluster: this node was fenced (or its name taken by another process); it must exit")
			m.dropEverything(ctx, "fenced")
			m.observe(Event{Kind: Lost})
			close(m.lost)
		}
		return period
	}
	if lapsed || unacked {
		m.log.Error("cluster: this node's lease is not valid any more; closing its sockets and dropping its rooms")
		m.dropEverything(ctx, "lapse")
		m.core.AckLapse()
		m.observe(Event{Kind: Lapsed})
	}
	return period
}

// firstTime sets *flag, a field under m.mu, and reports whether it was
// not set before: what the member reports once.
func (m *Member) firstTime(flag *bool) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	first := !*flag
	*flag = true
	return first
}

// dropEverything ends all this node does for its rooms: instances dropped
// unwritten, sockets closed with 1012 so clients reconnect (and reach the
// room's next node).
func (m *Member) dropEverything(ctx context.Context, why string) {
	m.rooms.DropAll(ctx)
	m.closeOwnerSockets(m.rooms.WithSockets(), why, "the node lost its right to run the room")
}

// closeOwnerSockets closes the sockets of rooms here with 1012 for
// reason, and counts each room for why unless they were closed already
// since its sockets opened. Counted before the closes go out, so that a
// client (or a test) that sees its socket closed finds the close counted.
func (m *Member) closeOwnerSockets(rooms []cluster.Room, why, reason string) {
	m.mu.Lock()
	counted := 0
	for _, r := range rooms {
		if !m.ownerClosed[r] {
			m.ownerClosed[r] = true
			counted++
		}
	}
	m.mu.Unlock()
	if len(rooms) == 0 {
		return
	}
	e := Event{Kind: OwnerClosed, Why: why, Rooms: counted}
	if len(rooms) == 1 {
		e.Room = rooms[0]
	}
	m.observe(e)
	for _, r := range rooms {
		m.rooms.CloseSockets(r, reason)
	}
}

// Leave stops cleanly: every socket still open closes (1012), no room is
// taken any more, every hold and parked record is released, and the lease
// is written released. The duties end after it.
func (m *Member) Leave(ctx context.Context) {
	m.closeOwnerSockets(m.rooms.WithSockets(), "stop", "the node is stopping")
	m.core.Stop(ctx, m.cfg.Sleeper)
	m.log.Info("cluster: left", "instance", m.core.Instance())
}

// Ready says whether this node can take traffic: nil while it has joined
// with a valid lease and neither drains nor stops; otherwise why not
// (/readyz answers it).
func (m *Member) Ready() error {
	switch phase := m.core.Phase(); {
	case phase == "joining":
		return errors.New("joining: the lease is not written yet")
	case phase != "active":
		return errors.New(phase) // stopping, stopped, or lost (fenced)
	case !m.core.LeaseValid():
		return errors.New("the lease has lapsed: it could not be renewed in time")
	case m.draining():
		return errors.New("draining")
	}
	return nil
}

// FenceByHand is an operator's fence of node, whose process is dead or
// stopped for good: its lease is written fenced at once.
func (m *Member) FenceByHand(ctx context.Context, node string) (cluster.Lease, error) {
	l, err := m.core.FenceByHand(ctx, node)
	if err == nil {
		m.log.Warn("cluster: fenced a node by hand", "fenced", node, "instance", l.Instance, "state", l.State.String())
	}
	return l, err
}
