package cluster

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"strconv"
	"sync"
	"time"

	"github.com/wasmkeep/wasmkeep/host/store"
)

// Clock is the monotonic clock the node measures its lease and its peers'
// silences on: nanoseconds since an origin of its own, never going
// backwards. A clock.Clock serves; the simulation gives each node one
// with its own origin and rate. Readings of two nodes are never compared.
type Clock interface {
	Now() int64
}

const (
	// DefaultTTL is the lease time of a Config that sets none.
	DefaultTTL = 10 * time.Second
	// minTTL keeps the derived periods (ttl/3, the margins) above the
	// milliseconds a bucket request takes.
	minTTL = time.Second
)

// Config is one node's cluster settings. Zero durations mean the
// defaults given with each field.
type Config struct {
	// Node is the node's stable name (its lease is nodes/<Node>).
	// Required.
	Node string
	// Instance names this process; it must differ from every earlier
	// process of the node. Empty: drawn from Rand.
	Instance string
	// Address is where peers forward requests for rooms held here.
	Address string
	// TTL is the lease time (DefaultTTL). The lease is renewed every
	// TTL/3; peers take the node for dead when its lease has not changed
	// for TTL + their Grace.
	TTL time.Duration
	// Safety is taken off the lease's validity as this node counts it
	// (TTL/10): a margin for the rate at which clocks drift apart.
	Safety time.Duration
	// Grace is added to a peer's TTL before this node fences it (TTL/5).
	Grace time.Duration
	// ResolveWindow bounds how long an acquisition whose answer was lost
	// is watched while its record stays unchanged (2×TTL). It must exceed
	// the longest a write can take to land after it was sent (the
	// bucket's attempt timeout, retries included).
	ResolveWindow time.Duration
	// RouteCache is how long Route trusts a record it read that sends a
	// room to another node (TTL/10): a room relayed to at a thousand
	// requests a second costs a GET a RouteCache, not one a request. A
	// stale answer sends a request to the room's previous node, which
	// takes the room back if it is free, and refuses it (the client
	// retries) if a third node took it.
	RouteCache time.Duration
	// FirstGeneration is the generation before a room's first hold: the
	// first record of a room is written at FirstGeneration+1, so that
	// generations a room's snapshots were tagged with before it had a
	// record stay below those of its holds.
	FirstGeneration uint64
	// WatchEvery is how often the node lists its peers' leases (TTL/3):
	// a peer's silence is measured from the listing that first saw its
	// lease unchanged, and it is fenced at the first listing past TTL +
	// Grace. The simulation lists more often, to come closer to the edge
	// the lease's margins guard.
	WatchEvery time.Duration
	// AckLapses makes the node count its lease not valid after a lapse
	// until its host acknowledges it (AckLapse), once the host has closed
	// the sockets and dropped the rooms of the holds the lapse ended:
	// without it a renewal in the same step could make the node valid
	// again with those sockets still open. The cluster member sets it.
	AckLapses bool

	// Bucket is where leases and records live. It must bound each call
	// (an attempt timeout): the node never waits on its own.
	Bucket store.Bucket
	// Clock is the node's monotonic clock.
	Clock Clock
	// Rand draws the instance name, nonces and back-off jitter. Seed it
	// from crypto/rand in a server; the simulation seeds it from its seed.
	Rand *rand.Rand

	// Broken breaks rules on purpose, for the simulation to show that it
	// catches each break. Servers leave it zero.
	Broken Variants
}

// phase is where a node is in its life.
type phase uint8

const (
	// joining: no lease yet (creating it, or waiting for the previous
	// process of this node to be silent long enough to take it over).
	joining phase = iota
	// active: the node renews its lease and may hold rooms while it is
	// valid.
	active
	// stopping: a clean stop is releasing everything; no new holds.
	stopping
	// stopped: the lease was written released; the node does nothing.
	stopped
	// lost: the lease was fenced or taken by another process; the node
	// must stop acting and exit, and keeps nothing.
	lost
)

var phaseNames = [...]string{"joining", "active", "stopping", "stopped", "lost"}

func (p phase) String() string { return phaseNames[p] }

// Node is this process's membership of the cluster: its lease, its view
// of its peers, and the rooms it holds, releases and has yet to resolve.
//
// It does no I/O of its own accord and starts no goroutine: its duties
// (RenewLease, WatchPeers, Settle) are steps that make synchronous bucket
// calls and say when they want to run again, and a driver loop calls
// them (Run in a server; the simulation's scheduler in tests). Every
// method is safe for concurrent use; no lock is held across a bucket
// call.
type Node struct {
	cfg    Config
	bucket store.Bucket
	clock  Clock

	mu  sync.Mutex
	rng *rand.Rand

	phase    phase
	draining bool
	// lapseUnacked: a lapse ended holds or parked records, and the host
	// has not acknowledged it yet (Config.AckLapses).
	lapseUnacked bool

	lease leaseState

	holds      map[Room]Hold
	parked     map[Room]Hold   // holds put off at a hibernation with sockets open (parked.go)
	acquiring  map[Room]string // room → nonce of the acquisition in flight
	pending    map[pendingKey]*pendingRelease
	unresolved map[string]*unresolvedAcquire // by nonce
	peers      map[string]*peer
	routes     map[Room]cachedRoute // recent Elsewhere decisions
	moves      map[Room]Move        // rooms moving away (moves.go)

	counts Counters
}

// New returns the node of cfg, joining: its first RenewLease creates or
// takes over its lease.
func New(cfg Config) (*Node, error) {
	if cfg.Node == "" || cfg.Bucket == nil || cfg.Clock == nil || cfg.Rand == nil {
		return nil, errors.New("cluster: a node needs a name, a bucket, a clock and a random source")
	}
	if cfg.TTL == 0 {
		cfg.TTL = DefaultTTL
	}
	if cfg.TTL < minTTL {
		return nil, fmt.Errorf("cluster: lease ttl %v is under %v", cfg.TTL, minTTL)
	}
	if cfg.Safety == 0 {
		cfg.Safety = cfg.TTL / 10
	}
	if cfg.Grace == 0 {
		cfg.Grace = cfg.TTL / 5
	}
	if cfg.ResolveWindow == 0 {
		cfg.ResolveWindow = 2 * cfg.TTL
	}
	if cfg.WatchEvery == 0 {
		cfg.WatchEvery = cfg.TTL / 3
	}
	if cfg.RouteCache == 0 {
		cfg.RouteCache = cfg.TTL / 10
	}
	if cfg.Safety < 0 || cfg.Grace < 0 || cfg.Safety >= cfg.TTL/2 {
		return nil, fmt.Errorf("cluster: safety %v and grace %v do not fit a ttl of %v", cfg.Safety, cfg.Grace, cfg.TTL)
	}
	n := &Node{
		cfg: cfg, bucket: cfg.Bucket, clock: cfg.Clock, rng: cfg.Rand,
		holds:      map[Room]Hold{},
		parked:     map[Room]Hold{},
		acquiring:  map[Room]string{},
		pending:    map[pendingKey]*pendingRelease{},
		unresolved: map[string]*unresolvedAcquire{},
		peers:      map[string]*peer{},
		routes:     map[Room]cachedRoute{},
		moves:      map[Room]Move{},
	}
	if n.cfg.Instance == "" {
		n.cfg.Instance = n.nonceLocked()
	}
	return n, nil
}

// Name is the node's name.
func (n *Node) Name() string { return n.cfg.Node }

// Instance is this process's instance name.
func (n *Node) Instance() string { return n.cfg.Instance }

// nonceLocked draws a fresh nonce; n.mu is held (or n is not shared yet).
func (n *Node) nonceLocked() string {
	return strconv.FormatUint(n.rng.Uint64(), 36) + strconv.FormatUint(n.rng.Uint64(), 36)
}

// jitterLocked spreads d over [d/2, d) so that nodes retrying after one
// outage do not all come back at once.
func (n *Node) jitterLocked(d int64) int64 {
	if d < 2 {
		return d
	}
	return d/2 + n.rng.Int64N(d/2)
}

// Ended reports whether the node is done: stopped cleanly, or its lease
// lost (then the process must exit).
func (n *Node) Ended() bool {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.phase == stopped || n.phase == lost
}

// Lost reports whether the node's lease was fenced or taken by another
// process: it acts no more and the process should exit.
func (n *Node) Lost() bool {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.phase == lost
}

// CheckLapse ends every hold and parked record now if the lease has run
// out (they become pending releases), rather than at the next call that
// looks: a watcher that closes the node's sockets on a lapse calls it
// first, so that no parked record is released as if its last socket had
// merely closed.
func (n *Node) CheckLapse() {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.lapseLocked(n.clock.Now())
}

// LeaseValid reports whether the node may act now: its lease is valid by
// its own clock.
func (n *Node) LeaseValid() bool {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.validLocked(n.clock.Now())
}

// validLocked: the node's lease lets it act at now.
func (n *Node) validLocked(now int64) bool {
	return (n.phase == active || n.phase == stopping) && now < n.lease.validUntil && !n.lapseUnacked
}

// LapseUnacked reports whether a lapse ended holds or parked records that
// the host has not acknowledged yet (Config.AckLapses): until AckLapse,
// the node counts its lease not valid.
func (n *Node) LapseUnacked() bool {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.lapseLocked(n.clock.Now())
	return n.lapseUnacked
}

// AckLapse acknowledges the lapses so far: the host has closed the
// sockets and dropped the rooms of the holds they ended.
func (n *Node) AckLapse() {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.lapseUnacked = false
}

// Phase is where the node is in its life: joining, active, stopping,
// stopped or lost.
func (n *Node) Phase() string {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.phase.String()
}

// Draining reports whether the node drains: it takes and parks no room.
func (n *Node) Draining() bool {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.draining
}

// Stopping reports whether a clean stop has begun (or ended).
func (n *Node) Stopping() bool {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.phase == stopping || n.phase == stopped
}
