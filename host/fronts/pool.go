package fronts

import (
	"context"
	"fmt"
	"slices"
	"sync"

	"github.com/wasmkeep/wasmkeep/abi"
	"github.com/wasmkeep/wasmkeep/host/engine"
)

// pool is one front's instances on this node: at most Config.Instances
// slots, each serving one request at a time with its instance (started on
// the slot's first request, and again after a crash or a new version),
// and the requests waiting for a slot.
type pool struct {
	f    *Fronts
	name string

	mu sync.Mutex
	// hash is the version instances start from: the one the latest
	// request found current.
	hash string
	// idle are the slots not serving: those without an instance first,
	// so that a request takes one whose instance is running if any.
	idle []*slot
	// queue are the requests waiting for a slot, first come first: each
	// is handed one on its channel (nil once the pool is closed).
	queue  []chan *slot
	slots  int // made so far
	busy   int // slots serving a request
	live   int // instances running
	closed bool
}

// slot is one of a pool's places: the instance it runs, if any. Only the
// request that holds a slot uses it.
type slot struct {
	inst *engine.Instance
	host *host
	hash string
}

// acquire takes an idle slot, makes a new one while the pool has fewer
// than Config.Instances, or waits for one to be released: unless
// Config.Queue requests wait already (ErrBusy), the pool is closed
// (ErrStopping) or ctx ends.
func (p *pool) acquire(ctx context.Context) (*slot, error) {
	p.mu.Lock()
	switch {
	case p.closed:
		p.mu.Unlock()
		return nil, ErrStopping
	case len(p.idle) > 0:
		s := p.idle[len(p.idle)-1]
		p.idle = p.idle[:len(p.idle)-1]
		p.busy++
		p.mu.Unlock()
		return s, nil
	case p.slots < p.f.cfg.Instances:
		p.slots++
		p.busy++
		p.mu.Unlock()
		return &slot{}, nil
	case len(p.queue) >= p.f.cfg.Queue:
		p.mu.Unlock()
		return nil, ErrBusy
	}
	ch := make(chan *slot, 1)
	p.queue = append(p.queue, ch)
	p.mu.Unlock()
	select {
	case s := <-ch:
		if s == nil {
			return nil, ErrStopping
		}
		return s, nil
	case <-ctx.Done():
	}
	p.mu.Lock()
	if i := slices.Index(p.queue, ch); i >= 0 {
		p.queue = slices.Delete(p.queue, i, i+1)
		p.mu.Unlock()
		return nil, ctx.Err()
	}
	p.mu.Unlock()
	// A slot was handed over meanwhile: pass it on.
	if s := <-ch; s != nil {
		p.release(s)
	}
	return nil, ctx.Err()
}

// release gives a slot back: to the first request waiting, or to the idle
// ones. Its instance is closed if it runs a version no longer current, or
// the pool is closed.
func (p *pool) release(s *slot) {
	p.mu.Lock()
	var retire *engine.Instance
	if s.inst != nil && (p.closed || s.hash != p.hash) {
		retire = p.drop(s)
	}
	switch {
	case p.closed:
		p.busy--
	case len(p.queue) > 0:
		ch := p.queue[0]
		p.queue = p.queue[1:]
		ch <- s // buffered: the waiter takes it, or passes it on
	default:
		p.busy--
		if s.inst != nil {
			p.idle = append(p.idle, s)
		} else {
			p.idle = slices.Insert(p.idle, 0, s)
		}
	}
	p.mu.Unlock()
	if retire != nil {
		retire.Close()
	}
}

// drop takes s's instance from it, for the caller to close outside the
// lock, which it holds.
func (p *pool) drop(s *slot) *engine.Instance {
	inst := s.inst
	s.inst, s.host = nil, nil
	p.live--
	return inst
}

// done releases a slot whose request was served: at once, or, if the
// instance asked for a call once idle (a Go guest's garbage collection),
// after that call, made off the request so that its response has gone.
func (p *pool) done(s *slot) {
	if s.inst == nil || !s.inst.IdleRequested() {
		p.release(s)
		return
	}
	// Counted under the pool's lock: a close, which Fronts.Close waits
	// for the idle calls after, either comes first (no call then) or
	// finds it counted.
	p.mu.Lock()
	closed := p.closed
	if !closed {
		p.f.idle.Add(1)
	}
	p.mu.Unlock()
	if closed {
		p.release(s)
		return
	}
	p.f.met.idleCalls.Inc()
	go func() {
		defer p.f.idle.Done()
		if err := s.inst.Idle(); err != nil {
			p.crashed(s, err)
		}
		p.release(s)
	}()
}

// noteVersion makes hash the version new instances start from, and
// closes the idle instances of others.
func (p *pool) noteVersion(hash string) {
	p.mu.Lock()
	if p.hash == hash {
		p.mu.Unlock()
		return
	}
	p.hash = hash
	var retire []*engine.Instance
	for _, s := range p.idle {
		if s.inst != nil && s.hash != hash {
			retire = append(retire, p.drop(s))
		}
	}
	// Slots without an instance first, as release keeps them.
	slices.SortStableFunc(p.idle, func(a, b *slot) int {
		switch {
		case a.inst == nil && b.inst != nil:
			return -1
		case a.inst != nil && b.inst == nil:
			return 1
		}
		return 0
	})
	p.mu.Unlock()
	for _, inst := range retire {
		inst.Close()
	}
}

// serve runs a request on s, starting its instance of version hash first
// if it has none of it.
func (p *pool) serve(ctx context.Context, s *slot, hash string, req []byte, upgrade bool) (*abi.Response, *abi.HandOver, error) {
	p.noteVersion(hash)
	if s.inst != nil && s.hash != hash {
		p.mu.Lock()
		old := p.drop(s)
		p.mu.Unlock()
		old.Close()
	}
	if s.inst == nil {
		if err := p.start(ctx, s, hash); err != nil {
			return nil, nil, err
		}
	}
	s.host.caller.EndEvent() // the calls of one request are ordered among themselves
	raw, h, err := s.inst.FrontRequest(req, upgrade)
	switch {
	case err != nil:
		p.crashed(s, err)
		return nil, nil, &CrashError{Cause: err}
	case h != nil:
		return nil, h, nil
	case raw == nil:
		return nil, nil, ErrNoResponse
	}
	resp, err := abi.DecodeResponse(raw)
	if err != nil { // the engine checked it; this is a host bug
		return nil, nil, err
	}
	resp.Body = slices.Clone(resp.Body) // raw is the instance's, until its next request
	return &resp, nil, nil
}

// start starts an instance of version hash on s.
func (p *pool) start(ctx context.Context, s *slot, hash string) error {
	class, err := p.f.reg.ByHash(ctx, hash)
	if err != nil {
		return fmt.Errorf("fronts: loading version %s of front %s: %w", hash, p.name, err)
	}
	h := &host{p: p}
	inst, err := class.Start(ctx, h)
	if engine.IsCrash(err) {
		p.f.met.crashes[engine.CrashCause(err)].Inc()
		p.f.log.Warn("front crashed while initializing", "front", p.name, "err", err)
		return &CrashError{Cause: err}
	}
	if err != nil {
		return fmt.Errorf("fronts: starting an instance of front %s: %w", p.name, err)
	}
	p.mu.Lock()
	s.inst, s.host, s.hash = inst, h, hash
	p.live++
	p.mu.Unlock()
	p.f.met.starts.Inc()
	return nil
}

// crashed drops s's instance, which err (a crash) ended.
func (p *pool) crashed(s *slot, err error) {
	p.f.met.crashes[engine.CrashCause(err)].Inc()
	p.f.log.Warn("front crashed; its instance is replaced", "front", p.name, "cause", engine.CrashCause(err), "err", err)
	p.mu.Lock()
	inst := p.drop(s)
	p.mu.Unlock()
	inst.Close() // closed already by the engine; Close is idempotent
}

// close closes the pool: its idle instances now, its busy ones when
// their requests end; the requests waiting fail with ErrStopping.
func (p *pool) close() {
	p.mu.Lock()
	p.closed = true
	var retire []*engine.Instance
	for _, s := range p.idle {
		if s.inst != nil {
			retire = append(retire, p.drop(s))
		}
	}
	p.idle = nil
	for _, ch := range p.queue {
		ch <- nil
	}
	p.queue = nil
	p.mu.Unlock()
	for _, inst := range retire {
		inst.Close()
	}
}

// info describes the pool.
func (p *pool) info() Info {
	p.mu.Lock()
	defer p.mu.Unlock()
	return Info{Class: p.name, Version: p.hash, Instances: p.live, Busy: p.busy, Waiting: len(p.queue)}
}
