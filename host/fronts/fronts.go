// Package fronts runs a node's fronts: classes uploaded to serve HTTP
// under path prefixes (host/classes keeps which front holds which) on
// every node, in front of the rooms they reach with calls.
//
// A front keeps no state and has no rooms. Each node runs each front in a
// small pool of instances (Config.Instances, 4 by default), started from
// the class's current version as requests need them and never
// hibernated or snapshotted. An instance serves one request at a time, so
// a pool serves as many at once as it has instances; the requests that
// find every instance busy wait, first come first served, at most
// Config.Queue of them (256 by default) per front, and the next is
// refused with ErrBusy (HTTP 503 with Retry-After), as a room's full
// mailbox refuses a request. An instance's memory lasts as long as the
// instance and serves many requests, but any request may land on any
// instance of any node, and an instance may be replaced at any time: what
// must last belongs in a room. An instance that asks for a call once idle
// (idle_call: a Go guest's garbage collection) gets it once its request's
// response has gone, before it takes another request.
//
// An instance that crashes (a trap, the event time limit, the memory
// limit) is dropped: the request it served gets a *CrashError (HTTP 500
// with the reason), and the next request that needs an instance starts a
// new one. Each request reads the class's current version (through the
// registry's cache, RecordTTL): once an upload makes another version
// current, the pool's idle instances of the old one are closed and the
// next requests start new ones, and the busy ones are closed when their
// request ends. A front that is removed, or no longer a front, has its
// pool closed by the sweep (every SweepInterval).
//
// A front's calls are those of a room (rooms.Manager.StartCall) whose
// chain is the front alone (calls.Room with an empty name): each waits at
// most the call timeout, at most calls.MaxInFlight per instance, and the
// calls of one request to one room run there in the order made. Its
// socket functions answer StatusNoSocket (those naming a socket) or
// StatusState (broadcasts), checkpoint and state_delete StatusState (the
// engine's rule for a front), room_info the class and an empty name.
package fronts

import (
	"context"
	"errors"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/VictoriaMetrics/metrics"

	"github.com/wasmkeep/wasmkeep/abi"
	"github.com/wasmkeep/wasmkeep/calls"
	"github.com/wasmkeep/wasmkeep/host/classes"
	"github.com/wasmkeep/wasmkeep/host/engine"
	"github.com/wasmkeep/wasmkeep/host/rooms"
	"github.com/wasmkeep/wasmkeep/internal/clock"
	"github.com/wasmkeep/wasmkeep/internal/limits"
)

// Config holds the fronts' settings; a zero field means its Default*
// constant (internal/limits has the convention).
type Config struct {
	// Instances is how many instances of one front a node runs at most,
	// each serving one request at a time (DefaultInstances).
	Instances int
	// Queue bounds the requests of one front that wait for an instance
	// (DefaultQueue); past it a request fails with ErrBusy.
	Queue int
	// Logger receives the fronts' log lines and their guests' (default
	// slog.Default()).
	Logger *slog.Logger
	// Clock is the node's clock (default clock.Real()): the deadlines of
	// calls are on it, so it must be the room manager's.
	Clock clock.Clock
}

// Defaults of Config.
const (
	// DefaultInstances serves a few requests of a front at once on each
	// node while costing the memory of a few instances: a front mostly
	// waits on calls, and the waits do not hold a CPU.
	DefaultInstances = 4
	// DefaultQueue holds a burst of a front's requests: behind 256 others
	// a request that takes a few milliseconds still answers within a
	// second or so; past it a 503 with Retry-After tells the client (or
	// its balancer) to come back rather than pile on.
	DefaultQueue = 256
)

func (c Config) withDefaults() Config {
	limits.Default(&c.Instances, DefaultInstances)
	limits.Default(&c.Queue, DefaultQueue)
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	if c.Clock == nil {
		c.Clock = clock.Real()
	}
	return c
}

// SweepInterval is how often the pools are checked against the fronts'
// prefixes and versions: a removed front's instances are closed, and a
// pool's idle instances of a version no longer current.
const SweepInterval = 10 * time.Second

// Errors of Serve.
var (
	// ErrBusy: every instance of the front is busy and Config.Queue
	// requests wait already.
	ErrBusy = errors.New("fronts: every instance of the front is busy, and its queue is full")
	// ErrStopping: the node is stopping.
	ErrStopping = errors.New("fronts: the node is stopping")
	// ErrNoResponse: the front returned without a response (or, for an
	// upgrade, a hand-over).
	ErrNoResponse = errors.New("fronts: the front gave no response")
)

// CrashError is the failure of a request whose instance crashed (or
// could not start: its initialization crashed).
type CrashError struct{ Cause error }

func (e *CrashError) Error() string {
	// A client reads this (HTTP 500): the cause without the engine's
	// package prefix, which is for logs.
	return "the front crashed handling this request (its instance is replaced): " + strings.TrimPrefix(e.Cause.Error(), "engine: ")
}

func (e *CrashError) Unwrap() error { return e.Cause }

// Registry is what fronts read of the classes: the class registry.
type Registry interface {
	Get(ctx context.Context, name string) (classes.Record, error)
	ByHash(ctx context.Context, hash string) (*engine.Class, error)
	IsFront(ctx context.Context, name string) (bool, error)
}

// Calls starts the calls fronts make: the room manager.
type Calls interface {
	StartCall(caller *rooms.Caller, c *calls.Call, outcomes map[string]*metrics.Counter) (*calls.Pending, *calls.Error)
	CallTimeout() time.Duration
}

var _ Calls = (*rooms.Manager)(nil)

// Fronts are a node's pools of front instances, one per front that has
// served a request here.
type Fronts struct {
	cfg   Config
	reg   Registry
	calls Calls
	met   *frontMetrics
	log   *slog.Logger

	mu     sync.Mutex
	pools  map[string]*pool
	closed bool
	// idle counts the idle calls under way (pool.done), which Close
	// waits for: the engine is closed after it.
	idle sync.WaitGroup

	stop chan struct{}
	done chan struct{}
}

// New makes a node's fronts, their metrics in set, and starts their
// sweep. Close them when the node stops.
func New(cfg Config, reg Registry, c Calls, set *metrics.Set) *Fronts {
	cfg = cfg.withDefaults()
	f := &Fronts{cfg: cfg, reg: reg, calls: c, log: cfg.Logger, pools: map[string]*pool{},
		stop: make(chan struct{}), done: make(chan struct{})}
	f.met = newFrontMetrics(set, f)
	go f.sweeper()
	return f
}

// Config is the fronts' configuration, defaults filled in.
func (f *Fronts) Config() Config { return f.cfg }

// Serve runs a request (an encoded abi.Request) on an instance of front,
// and returns the front's response or, for an upgrade (upgrade: the
// request asks for a WebSocket), the room the front hands the socket to.
// It waits for an instance while every one is busy, unless Config.Queue
// requests wait already (ErrBusy), and fails with a *CrashError when the
// instance crashed, ErrNoResponse, ErrStopping, ctx's error, or the
// registry's (classes.ErrUnknownClass: no such class any more).
func (f *Fronts) Serve(ctx context.Context, front string, req []byte, upgrade bool) (*abi.Response, *abi.HandOver, error) {
	start := f.cfg.Clock.Now()
	p, err := f.pool(front)
	if err != nil {
		f.met.requests[outcomeFailed].Inc()
		return nil, nil, err
	}
	s, err := p.acquire(ctx)
	if errors.Is(err, ErrBusy) {
		f.met.queueFull.Inc()
		return nil, nil, err
	}
	if err != nil {
		f.met.requests[outcomeFailed].Inc()
		return nil, nil, err
	}
	// The version once the request has its slot: one that waited while
	// an upload landed runs the new version, as those after it do.
	rec, err := f.reg.Get(ctx, front)
	if err != nil {
		p.release(s)
		f.met.requests[outcomeFailed].Inc()
		return nil, nil, err
	}
	resp, h, err := p.serve(ctx, s, rec.Hash, req, upgrade)
	p.done(s)
	var crash *CrashError
	switch {
	case err == nil && h != nil:
		f.met.requests[outcomeHandedOver].Inc()
	case err == nil:
		f.met.requests[outcomeAnswered].Inc()
	case errors.As(err, &crash):
		f.met.requests[outcomeCrashed].Inc()
	case errors.Is(err, ErrNoResponse):
		f.met.requests[outcomeNoResponse].Inc()
	default:
		f.met.requests[outcomeFailed].Inc()
		return nil, nil, err
	}
	f.met.seconds.Update(time.Duration(f.cfg.Clock.Now() - start).Seconds())
	return resp, h, err
}

// pool is front's pool, made on its first request.
func (f *Fronts) pool(front string) (*pool, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.closed {
		return nil, ErrStopping
	}
	p := f.pools[front]
	if p == nil {
		p = &pool{f: f, name: front}
		f.pools[front] = p
	}
	return p, nil
}

// Info is one front's pool on this node, for the dashboard.
type Info struct {
	Class string `json:"class"`
	// Version is the version the pool's instances start from: the one
	// its latest request found current.
	Version   string `json:"version"`
	Instances int    `json:"instances"`
	Busy      int    `json:"busy"`
	Waiting   int    `json:"waiting"`
}

// List describes the pools of this node, by class.
func (f *Fronts) List() []Info {
	f.mu.Lock()
	pools := make([]*pool, 0, len(f.pools))
	for _, p := range f.pools {
		pools = append(pools, p)
	}
	f.mu.Unlock()
	out := make([]Info, 0, len(pools))
	for _, p := range pools {
		out = append(out, p.info())
	}
	slices.SortFunc(out, func(a, b Info) int { return strings.Compare(a.Class, b.Class) })
	return out
}

// counts sums the instances and busy ones of every pool, for the gauges.
func (f *Fronts) counts() (instances, busy, waiting int) {
	for _, i := range f.List() {
		instances, busy, waiting = instances+i.Instances, busy+i.Busy, waiting+i.Waiting
	}
	return
}

// sweeper runs sweep every SweepInterval until Close.
func (f *Fronts) sweeper() {
	defer close(f.done)
	t := f.cfg.Clock.NewTicker(SweepInterval)
	defer t.Stop()
	for {
		select {
		case <-f.stop:
			return
		case <-t.C():
			f.sweep()
		}
	}
}

// sweep closes the pools of classes no longer fronts, and the idle
// instances of versions no longer current.
func (f *Fronts) sweep() {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() {
		select {
		case <-f.stop:
			cancel()
		case <-ctx.Done():
		}
	}()
	for _, i := range f.List() {
		front, err := f.reg.IsFront(ctx, i.Class)
		if err != nil {
			continue // the prefixes cannot be read: leave the pool as it is
		}
		if !front {
			f.mu.Lock()
			p := f.pools[i.Class]
			delete(f.pools, i.Class)
			f.mu.Unlock()
			if p != nil {
				f.log.Info("front gone: its instances are closed", "front", i.Class)
				p.close()
			}
			continue
		}
		if rec, err := f.reg.Get(ctx, i.Class); err == nil {
			f.mu.Lock()
			p := f.pools[i.Class]
			f.mu.Unlock()
			if p != nil {
				p.noteVersion(rec.Hash)
			}
		}
	}
}

// Close closes every instance and stops the sweep; requests waiting for
// an instance fail with ErrStopping, and so do later ones. An instance
// serving a request is closed when the request ends; one making its idle
// call, once the call returns, which Close waits for.
func (f *Fronts) Close() {
	f.mu.Lock()
	if f.closed {
		f.mu.Unlock()
		return
	}
	f.closed = true
	pools := f.pools
	f.pools = map[string]*pool{}
	f.mu.Unlock()
	close(f.stop)
	<-f.done
	for _, p := range pools {
		p.close()
	}
	f.idle.Wait()
}
