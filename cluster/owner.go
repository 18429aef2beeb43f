package cluster

import (
	"context"
	"errors"
	"fmt"

	"github.com/wasmkeep/wasmkeep/host/store"
)

// Acquire's refusals. Test with errors.Is; a *HeldError says who holds
// the room.
var (
	// ErrNotActive: the node's lease is not valid (joining, lapsed,
	// stopping, stopped or lost), so it takes no room.
	ErrNotActive = errors.New("cluster: this node's lease is not valid")
	// ErrDraining: the node is draining and takes no room.
	ErrDraining = errors.New("cluster: this node is draining")
	// ErrHeldHere: this node already holds the room.
	ErrHeldHere = errors.New("cluster: the room is already held here")
	// ErrBusy: another acquisition of the room is in flight here.
	ErrBusy = errors.New("cluster: the room is being acquired here")
	// ErrHeld: another instance holds the room (a *HeldError).
	ErrHeld = errors.New("cluster: the room is held elsewhere")
	// ErrContended: the record changed between its read and the write
	// (someone else took it, or a 409): read it again.
	ErrContended = errors.New("cluster: the room's record changed underneath")
	// ErrUnknown: the write's answer was lost; the resolver finds out
	// whether it landed and releases it if so. The room is not held.
	ErrUnknown = errors.New("cluster: the acquisition's outcome is unknown")
)

// HeldError is the refusal of a room whose record names another
// instance. Live says the holder's lease was live when last seen (forward
// to Address); otherwise the holder is neither known alive nor known dead
// yet (silent, not yet fenced): wait and try again.
type HeldError struct {
	Room                    Room
	Node, Instance, Address string
	Live                    bool
}

func (e *HeldError) Error() string {
	state := "not known to be alive or dead"
	if e.Live {
		state = "live at " + e.Address
	}
	return fmt.Sprintf("cluster: room %s is held by node %s (instance %s, %s)", e.Room, e.Node, e.Instance, state)
}

// Unwrap makes errors.Is(err, ErrHeld) true.
func (e *HeldError) Unwrap() error { return ErrHeld }

// Seen is a room's record as one read found it.
type Seen struct {
	Room    Room
	Exists  bool
	Record  Record
	Version string
}

// Look reads room's record (one GET): what routing decides on, and what
// Take writes over.
func (n *Node) Look(ctx context.Context, room Room) (Seen, error) {
	body, etag, err := n.bucket.Get(ctx, RecordKey(room))
	if errors.Is(err, store.ErrNotFound) {
		return Seen{Room: room}, nil
	}
	if err != nil {
		return Seen{}, err
	}
	rec, err := DecodeRecord(body)
	if err != nil {
		return Seen{}, fmt.Errorf("room %s: %w", room, err)
	}
	return Seen{Room: room, Exists: true, Record: rec, Version: etag}, nil
}

// Acquire reads room's record and takes it (Look, then Take): one GET and
// one conditional PUT.
func (n *Node) Acquire(ctx context.Context, room Room) (Hold, error) {
	seen, err := n.Look(ctx, room)
	if err != nil {
		return Hold{}, err
	}
	return n.Take(ctx, seen)
}

// Take writes the record seen was read at, naming this instance at the
// next generation, If-Match on seen's version (If-None-Match if there was
// none), when the record is free, names a dead instance, or names this
// instance's own ended hold. The hold it grants lasts until Release or a
// lapse of the lease.
func (n *Node) Take(ctx context.Context, seen Seen) (Hold, error) {
	room := seen.Room
	n.mu.Lock()
	seen = n.parkedSeenLocked(seen)
	if h, ok := n.parked[room]; ok && n.cfg.Broken.WakeReadopts && n.phase == active && n.validLocked(n.clock.Now()) {
		delete(n.parked, room)
		n.holds[room] = h
		n.mu.Unlock()
		return h, nil
	}
	gen, cond, err := n.claimLocked(seen)
	if errors.Is(err, errUnknownOwner) {
		n.mu.Unlock()
		n.learnOwner(ctx, seen.Record.Node, seen.Record.Instance)
		n.mu.Lock()
		// The room may have been taken and parked here while the
		// lease was read: the read is then older than the parked hold.
		seen = n.parkedSeenLocked(seen)
		gen, cond, err = n.claimLocked(seen)
	}
	if errors.Is(err, errUnknownOwner) {
		err = &HeldError{Room: room, Node: seen.Record.Node, Instance: seen.Record.Instance}
	}
	if err != nil {
		if errors.Is(err, ErrHeld) {
			n.counts.AcquireRefused++
			n.dropParkedLocked(room) // another holder: the parked record moved on
		}
		n.mu.Unlock()
		return Hold{}, err
	}
	nonce := n.nonceLocked()
	n.acquiring[room] = nonce
	n.mu.Unlock()

	body := EncodeRecord(Record{Node: n.cfg.Node, Instance: n.cfg.Instance, Generation: gen, Nonce: nonce})
	etag, err := n.bucket.Put(ctx, RecordKey(room), body, cond)

	n.mu.Lock()
	defer n.mu.Unlock()
	delete(n.acquiring, room)
	now := n.clock.Now()
	n.lapseLocked(now)
	if n.phase == lost || n.phase == stopped {
		return Hold{}, ErrNotActive // the fence or the released lease frees it
	}
	switch {
	case err == nil:
		h := Hold{Room: room, Generation: gen, Version: etag}
		if n.phase != active || !n.validLocked(now) {
			n.addPendingLocked(h, now) // granted too late to act on
			return Hold{}, ErrNotActive
		}
		if _, moving := n.moves[room]; moving {
			// A move began while this wrote: the room goes to the
			// target, so the hold is given back at once.
			n.addPendingLocked(h, now)
			n.dropParkedLocked(room)
			return Hold{}, ErrMoving
		}
		n.holds[room] = h
		n.counts.Acquired++
		if _, ok := n.parked[room]; ok {
			n.counts.ParkedWakes++
			n.dropParkedLocked(room) // the new hold replaces the parked one
		}
		return h, nil
	case errors.Is(err, store.ErrUnknownOutcome):
		n.unresolved[nonce] = &unresolvedAcquire{room: room, gen: gen, nonce: nonce, from: cond.IfMatch, since: now, at: now + n.retry(0)}
		n.counts.AcquireUnknown++
		if n.cfg.Broken.UnknownDropsParked {
			n.dropParkedLocked(room)
		}
		return Hold{}, fmt.Errorf("%w: %w", ErrUnknown, err)
	case errors.Is(err, store.ErrPrecondition), errors.Is(err, store.ErrConflict):
		n.counts.AcquireContended++
		return Hold{}, fmt.Errorf("%w: %w", ErrContended, err)
	}
	return Hold{}, err
}

// errUnknownOwner: the record names an instance the view knows neither
// alive nor dead.
var errUnknownOwner = errors.New("cluster: unknown owner")

// claimLocked decides whether this node may take the record seen, and at
// which generation and condition.
func (n *Node) claimLocked(seen Seen) (uint64, store.Cond, error) {
	now := n.clock.Now()
	n.lapseLocked(now)
	switch _, held := n.holds[seen.Room]; {
	case n.phase != active || !n.validLocked(now):
		return 0, store.Cond{}, ErrNotActive
	case n.draining:
		// A draining node takes no room; but a room another live node
		// holds is refused as held there, as by any node, so that
		// routing sends its events to that holder and not to the peer
		// that would take it were it free (which, holding nothing,
		// refuses a forwarded request: the hop rule).
		if err := n.heldElsewhereLocked(seen); err != nil {
			return 0, store.Cond{}, err
		}
		return 0, store.Cond{}, ErrDraining
	case held:
		return 0, store.Cond{}, ErrHeldHere
	}
	if _, busy := n.acquiring[seen.Room]; busy {
		return 0, store.Cond{}, ErrBusy
	}
	_, moving := n.moves[seen.Room]
	if !seen.Exists {
		if moving {
			return 0, store.Cond{}, ErrMoving
		}
		return n.cfg.FirstGeneration + 1, store.IfNoneMatch(), nil
	}
	if err := n.heldElsewhereLocked(seen); err != nil {
		return 0, store.Cond{}, err
	}
	if moving {
		return 0, store.Cond{}, ErrMoving
	}
	return seen.Record.Generation + 1, store.IfMatch(seen.Version), nil
}

// heldElsewhereLocked reports whether seen's record names an instance
// other than this process that is not known dead: a *HeldError if the
// view has it live, errUnknownOwner if the view knows it neither alive
// nor dead. It is nil for a record this node may write over: none, free,
// naming a hold of this process that ended, or a dead instance.
func (n *Node) heldElsewhereLocked(seen Seen) error {
	rec := seen.Record
	ours := rec.Node == n.cfg.Node && rec.Instance == n.cfg.Instance // a hold of this process that ended
	if !seen.Exists || rec.Free || ours || n.deadLocked(rec.Node, rec.Instance) || n.cfg.Broken.AcquireLive {
		return nil
	}
	if l, ok := n.liveLocked(rec.Node, rec.Instance); ok {
		return &HeldError{Room: seen.Room, Node: rec.Node, Instance: rec.Instance, Address: l.Address, Live: true}
	}
	return errUnknownOwner
}

// Valid reports whether h still lets this node act on its room: the hold
// is live and the lease valid. Ask before every event and every write the
// hold makes.
func (n *Node) Valid(h Hold) bool {
	n.mu.Lock()
	defer n.mu.Unlock()
	now := n.clock.Now()
	n.lapseLocked(now)
	cur, ok := n.holds[h.Room]
	return ok && cur == h && n.phase == active && n.validLocked(now)
}

// Release ends h: the node stops acting on the room at once and writes
// the record free (generation kept), If-Match on h's version. One that
// fails or has no answer stays pending and Settle retries it with
// back-off. A hold already ended (by a lapse) is left to its pending
// release.
func (n *Node) Release(ctx context.Context, h Hold) {
	n.mu.Lock()
	cur, ok := n.holds[h.Room]
	if !ok || cur != h {
		n.mu.Unlock()
		return
	}
	delete(n.holds, h.Room)
	p := n.addPendingLocked(h, n.clock.Now())
	p.inflight = true
	n.mu.Unlock()
	n.attemptRelease(ctx, p)
}

// attemptRelease writes p's record free once, and reports whether that
// write landed now (not if it found the record moved on, nor failed).
func (n *Node) attemptRelease(ctx context.Context, p *pendingRelease) (landed bool) {
	n.mu.Lock()
	body := EncodeRecord(Record{Free: true, Generation: p.hold.Generation, Nonce: n.nonceLocked()})
	n.mu.Unlock()
	cond := store.IfMatch(p.hold.Version)
	if n.cfg.Broken.ReleaseUnconditional {
		cond = store.Cond{}
	}
	_, err := n.bucket.Put(ctx, RecordKey(p.hold.Room), body, cond)

	n.mu.Lock()
	defer n.mu.Unlock()
	p.inflight = false
	k := pendingKey{p.hold.Room, p.hold.Version}
	if n.pending[k] != p {
		return err == nil // the node ended meanwhile
	}
	switch {
	case err == nil:
		delete(n.pending, k)
		n.counts.Released++
		return true
	case errors.Is(err, store.ErrPrecondition):
		// The record moved on from this version (this release landed
		// earlier unanswered, or another hold took it): nothing of it
		// is left to release.
		delete(n.pending, k)
		n.counts.ReleaseMoot++
	default:
		p.tries++
		p.at = n.clock.Now() + n.jitterLocked(n.retry(p.tries))
		n.counts.ReleaseRetries++
	}
	return false
}
