package cluster

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/wasmkeep/wasmkeep/host/store"
)

// A node may act only while its lease is valid by its own clock: until
// the send time of its last acknowledged lease write plus TTL minus
// Safety. The send time, not the answer's arrival: a peer may have seen
// the write land at any moment after it was sent, and it counts its
// TTL + Grace of silence from the first time it saw that version, so the
// holder's validity must end before any peer's count can, however slow
// the answer was. Safety and Grace cover the clocks' drift: with rates
// within ±δ of each other, (TTL−Safety)·(1+δ) < (TTL+Grace)·(1−δ) keeps a
// holder's end before its fence (δ up to 14% at the defaults).

// leaseState is the node's own lease as the node knows it.
type leaseState struct {
	// writing: a write of the lease is in flight (beginLeaseWrite).
	writing bool
	// etag is the lease's ETag after the last write of this node that it
	// knows landed; known is false after a write whose answer was lost or
	// refused, until a read tells what is there.
	etag  string
	known bool
	body  Lease // the body of that write
	// validUntil is when the node must stop acting, nextRenew when it
	// renews; both on the node's clock.
	validUntil, nextRenew int64
	// sent are the writes whose answer was lost since the last one
	// acknowledged: a read that finds one of their nonces acknowledges
	// it.
	sent []sentLease
	// closing: a clean stop is writing the lease released; no renewal
	// may go out meanwhile.
	closing bool
	// watchETag and watchSince: while joining behind a lease of an
	// earlier process that looks alive, its version and when this node
	// first saw it.
	watchETag  string
	watchSince int64
}

type sentLease struct {
	body Lease
	at   int64 // send time, on the node's clock
}

// maxSent bounds the unacknowledged writes remembered; one older than
// that which did land is not recognized, and the node then gives up its
// lease as lost (the safe side).
const maxSent = 32

// leaseRetry is the wait after a lease write or read that failed.
func (n *Node) leaseRetry() time.Duration { return n.cfg.TTL / 20 }

// RenewLease is the lease duty: it creates or takes over the lease while
// joining, then renews it every TTL/3, and finds out when the lease was
// fenced or taken (Lost). It returns how long to wait before calling it
// again; 0 with Ended true means it is done.
func (n *Node) RenewLease(ctx context.Context) time.Duration {
	if !n.beginLeaseWrite() {
		return n.leaseRetry() // WriteDraining's write is in flight
	}
	defer n.endLeaseWrite()
	n.mu.Lock()
	now := n.clock.Now()
	n.lapseLocked(now)
	switch n.phase {
	case joining:
		n.mu.Unlock()
		return n.join(ctx)
	case stopped, lost:
		n.mu.Unlock()
		return 0
	}
	if n.lease.closing {
		n.mu.Unlock()
		return n.leaseRetry()
	}
	if now < n.lease.nextRenew {
		defer n.mu.Unlock()
		return time.Duration(n.lease.nextRenew - now)
	}
	n.mu.Unlock()
	d, _ := n.renew(ctx)
	return d
}

// errLeaseUnread: a renewal was not sent, the lease's state being unknown
// here (a write refused or unanswered) and its read failing.
var errLeaseUnread = errors.New("cluster: this node's lease could not be read")

// beginLeaseWrite claims the one write of the lease that may be in
// flight at a time (an answer to one arriving after another landed would
// set the lease back to a version already overwritten), unless another
// has it. No lock is held across the write: a server's duty would wait on
// a stuck one, and the simulation's scheduler cannot run a task blocked
// on a lock.
func (n *Node) beginLeaseWrite() bool {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.lease.writing {
		return false
	}
	n.lease.writing = true
	return true
}

func (n *Node) endLeaseWrite() {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.lease.writing = false
}

// renew writes the lease's next renewal now, carrying the node's draining
// as it is now; its caller holds the lease's one write in flight
// (beginLeaseWrite). It returns how long
// until the next renewal is due, and why the write did not land, if it
// did not.
func (n *Node) renew(ctx context.Context) (time.Duration, error) {
	n.mu.Lock()
	known := n.lease.known
	n.mu.Unlock()
	if !known && !n.readOwnLease(ctx) {
		return n.leaseRetry(), errLeaseUnread
	}
	n.mu.Lock()
	if n.phase != active && n.phase != stopping || n.lease.closing {
		n.mu.Unlock()
		return n.leaseRetry(), ErrNotActive
	}
	body := n.lease.body
	body.Renewal++
	body.Draining = n.draining
	body.Nonce = n.nonceLocked()
	s := n.sendLocked(body)
	etag := n.lease.etag
	n.mu.Unlock()

	newETag, err := n.bucket.Put(ctx, LeaseKey(n.cfg.Node), EncodeLease(body), store.IfMatch(etag))

	n.mu.Lock()
	now := n.clock.Now()
	n.lapseLocked(now)
	if err == nil {
		defer n.mu.Unlock()
		if n.phase == active || n.phase == stopping {
			n.ackLocked(s, newETag, now)
		}
		return time.Duration(max(n.lease.nextRenew-now, 0)), nil
	}
	n.counts.RenewalsFailed++
	refused := errors.Is(err, store.ErrPrecondition)
	if refused || errors.Is(err, store.ErrUnknownOutcome) {
		n.lease.known = false
	}
	n.mu.Unlock()
	if refused {
		// A fence, another process, or an earlier write of ours whose
		// answer was lost: read the lease now to tell, so that a
		// fenced node stops at the renewal that failed.
		n.readOwnLease(ctx)
	}
	return n.leaseRetry(), err
}

// sendLocked notes a lease write about to be sent.
func (n *Node) sendLocked(body Lease) sentLease {
	s := sentLease{body: body, at: n.clock.Now()}
	if len(n.lease.sent) == maxSent {
		n.lease.sent = n.lease.sent[1:]
	}
	n.lease.sent = append(n.lease.sent, s)
	return s
}

// ackLocked records that the lease write s landed as etag.
func (n *Node) ackLocked(s sentLease, etag string, now int64) {
	from := s.at
	if n.cfg.Broken.ValidityFromAnswer {
		from = now
	}
	n.lease.etag, n.lease.known, n.lease.body = etag, true, s.body
	n.lease.sent = n.lease.sent[:0]
	if n.lease.closing {
		return // a clean stop has ended the node's validity for good
	}
	valid := n.cfg.TTL - n.cfg.Safety
	if n.cfg.Broken.ValidityPastGrace {
		valid = n.cfg.TTL + n.cfg.Grace
	}
	n.lease.validUntil = max(n.lease.validUntil, from+int64(valid))
	n.lease.nextRenew = s.at + int64(n.cfg.TTL/3)
	n.counts.Renewals++
}

// readOwnLease reads the node's lease after a write that was refused or
// unanswered, and says whether the node can go on renewing it. It finds a
// lost write that landed (by its nonce), a fence, or another process.
func (n *Node) readOwnLease(ctx context.Context) bool {
	body, etag, err := n.bucket.Get(ctx, LeaseKey(n.cfg.Node))
	n.mu.Lock()
	defer n.mu.Unlock()
	now := n.clock.Now()
	if n.phase == lost || n.phase == stopped {
		return false
	}
	if errors.Is(err, store.ErrNotFound) {
		n.loseLocked()
		return false
	}
	if err != nil {
		return false
	}
	l, err := DecodeLease(body)
	if err != nil || l.Instance != n.cfg.Instance || l.State == LeaseFenced {
		n.loseLocked()
		return false
	}
	if l.State == LeaseReleased {
		n.endLocked(stopped)
		return false
	}
	if l.Nonce == n.lease.body.Nonce {
		n.lease.etag, n.lease.known = etag, true
		return true
	}
	for _, s := range n.lease.sent {
		if s.body.Nonce == l.Nonce {
			n.ackLocked(s, etag, now)
			return true
		}
	}
	// Ours by name, but no write this process remembers: give it up.
	n.loseLocked()
	return false
}

// join creates the lease, or takes over the lease of an earlier process
// of this node once that process is known to be gone: released, fenced,
// or silent for its TTL + Grace by this node's clock.
func (n *Node) join(ctx context.Context) time.Duration {
	body, etag, err := n.bucket.Get(ctx, LeaseKey(n.cfg.Node))

	n.mu.Lock()
	now := n.clock.Now()
	if n.phase != joining {
		n.mu.Unlock()
		return 0
	}
	cond, renewal := store.IfNoneMatch(), uint64(1)
	switch {
	case errors.Is(err, store.ErrNotFound):
	case err != nil:
		n.mu.Unlock()
		return n.leaseRetry()
	default:
		l, err := DecodeLease(body)
		if err == nil && l.Instance == n.cfg.Instance {
			// A write of this process whose answer was lost.
			for _, s := range n.lease.sent {
				if s.body.Nonce == l.Nonce {
					n.ackLocked(s, etag, now)
					n.phase = active
					defer n.mu.Unlock()
					return time.Duration(max(n.lease.nextRenew-now, 0))
				}
			}
			n.loseLocked()
			n.mu.Unlock()
			return 0
		}
		if err != nil || l.State == LeaseLive {
			// Wait until the earlier process has been silent long
			// enough; an undecodable lease is waited out at this
			// node's own ttl.
			ttl := n.cfg.TTL
			if err == nil {
				ttl = l.TTL
			}
			if n.lease.watchETag != etag {
				n.lease.watchETag, n.lease.watchSince = etag, now
			}
			if wait := n.lease.watchSince + int64(ttl+n.cfg.Grace) - now; wait > 0 {
				n.mu.Unlock()
				return min(time.Duration(wait), n.cfg.TTL/3)
			}
		}
		cond = store.IfMatch(etag)
		if err == nil {
			renewal = l.Renewal + 1
		}
	}
	l := Lease{Node: n.cfg.Node, Instance: n.cfg.Instance, Address: n.cfg.Address, Renewal: renewal, TTL: n.cfg.TTL, Draining: n.draining, Nonce: n.nonceLocked()}
	s := n.sendLocked(l)
	n.mu.Unlock()

	newETag, err := n.bucket.Put(ctx, LeaseKey(n.cfg.Node), EncodeLease(l), cond)

	n.mu.Lock()
	defer n.mu.Unlock()
	now = n.clock.Now()
	if err != nil || n.phase != joining {
		// Lost, refused or unanswered: the next read tells.
		return n.leaseRetry()
	}
	n.ackLocked(s, newETag, now)
	n.phase = active
	return time.Duration(max(n.lease.nextRenew-now, 0))
}

// lapseLocked ends every hold once the lease has run out: their records
// become pending releases (the node may renew again later, but a hold
// granted before a lapse never acts again).
func (n *Node) lapseLocked(now int64) {
	if len(n.holds)+len(n.parked) == 0 || now < n.lease.validUntil || (n.phase != active && n.phase != stopping) {
		return
	}
	for _, h := range n.holds {
		n.addPendingLocked(h, now)
	}
	clear(n.holds)
	n.counts.ParkedLapsed += uint64(len(n.parked))
	n.pendParkedLocked(now)
	n.counts.Lapses++
	n.lapseUnacked = n.cfg.AckLapses
}

// pendParkedLocked makes every parked record a pending release (a lapse,
// a clean stop).
func (n *Node) pendParkedLocked(now int64) {
	if !n.cfg.Broken.LapseForgetsParked {
		for _, h := range n.parked {
			n.addPendingLocked(h, now)
		}
	}
	clear(n.parked)
}

// loseLocked: the lease is fenced or another process's. The node acts no
// more and keeps nothing: what its records name is freed by the fence (or
// the other process), not by writes of a process that no longer owns its
// name.
func (n *Node) loseLocked() { n.endLocked(lost) }

// endLocked moves the node to its final phase p, forgetting every hold,
// release and acquisition.
func (n *Node) endLocked(p phase) {
	n.phase = p
	n.lease.validUntil = 0
	clear(n.holds)
	clear(n.parked)
	clear(n.pending)
	clear(n.unresolved)
	clear(n.moves) // a move does not outlive its owner's process
}

// SetDraining marks the node draining (or not): it takes no room while
// draining, and its next lease write tells its peers: WriteDraining, or
// the lease duty's next call, which finds its renewal due. Handing its
// rooms over is the caller's (each hold is then released).
func (n *Node) SetDraining(draining bool) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.draining != draining {
		n.draining = draining
		n.lease.nextRenew = 0
	}
}

// writeDrainingTries bounds WriteDraining's writes: one whose answer was
// lost (the next try reads the lease to find out), and one more.
const writeDrainingTries = 3

// WriteDraining writes the lease now, out of turn, unless the last write
// that landed carries the node's draining as SetDraining left it. A server
// calls it after SetDraining, before it answers the operator: the lease
// duty sleeps until its renewal is due (up to TTL/3), and a peer asked to
// move a room here right after `cluster drain --off` reads this lease to
// tell whether the node takes rooms (BeginMove). A renewal in flight is
// waited for, sleeping on s. It returns nil once the lease says so,
// ErrNotActive if the node is not active, or why the write did not land;
// the duty's next renewal carries the flag anyway.
func (n *Node) WriteDraining(ctx context.Context, s Sleeper) error {
	var err error // why the last try did not land
	for try, waits := 0, 0; ; try++ {
		if !n.beginLeaseWrite() {
			if waits++; waits > writeDrainingWaits || s.Sleep(ctx, n.cfg.TTL/100) != nil {
				return fmt.Errorf("cluster: writing the lease: a renewal is still in flight")
			}
			try--
			continue
		}
		done, result := n.writeDrainingStep(ctx, try, &err)
		n.endLeaseWrite()
		if done {
			return result
		}
	}
}

// writeDrainingStep is one try of WriteDraining, which holds the lease's
// write: done with its result, or a write or read made (its failure in
// *err) and another try due.
func (n *Node) writeDrainingStep(ctx context.Context, try int, err *error) (done bool, result error) {
	n.mu.Lock()
	active, draining, known := n.phase == active && !n.lease.closing, n.draining, n.lease.known
	carried := known && n.lease.body.Draining == draining
	n.mu.Unlock()
	switch {
	case !active:
		return true, ErrNotActive
	case carried:
		return true, nil
	case try == writeDrainingTries || ctx.Err() != nil:
		why := *err
		if why == nil {
			why = ctx.Err()
		}
		if why == nil {
			why = errors.New("the node's draining changed while it was written")
		}
		return true, fmt.Errorf("cluster: writing the lease (draining %v): %w", draining, why)
	case !known:
		// A write whose answer was lost (or refused): the read tells
		// whether it landed, before anything more is sent.
		if !n.readOwnLease(ctx) {
			*err = errLeaseUnread
		}
		return false, nil
	}
	if _, werr := n.renew(ctx); werr != nil {
		*err = werr
	}
	return false, nil
}

// writeDrainingWaits bounds how many times WriteDraining waits (TTL/100
// each) for a renewal in flight: a third of a lease time in all.
const writeDrainingWaits = 33

// Stop stops the node cleanly: it takes no more rooms, releases every
// hold, waits (up to a TTL, sleeping on s) for the releases to land, and
// writes its lease released, which frees whatever did not. The lease duty
// must go on running meanwhile.
func (n *Node) Stop(ctx context.Context, s Sleeper) {
	n.mu.Lock()
	switch n.phase {
	case joining:
		n.endLocked(stopped)
		n.mu.Unlock()
		return
	case stopped, lost:
		n.mu.Unlock()
		return
	}
	n.phase = stopping
	now := n.clock.Now()
	for _, h := range n.holds {
		n.addPendingLocked(h, now)
	}
	clear(n.holds)
	n.counts.ParkedStopped += uint64(len(n.parked))
	n.pendParkedLocked(now)
	deadline := now + int64(n.cfg.TTL)
	n.mu.Unlock()

	for {
		d := n.settleReleases(ctx)
		n.mu.Lock()
		left, now, p := len(n.pending), n.clock.Now(), n.phase
		n.mu.Unlock()
		if left == 0 || now >= deadline || p != stopping || s.Sleep(ctx, d) != nil {
			break
		}
	}
	// From here on the node acts on nothing, not even in the moment
	// between the released lease landing and its answer, and renews no
	// more.
	n.mu.Lock()
	n.lease.closing, n.lease.validUntil = true, 0
	n.mu.Unlock()
	for try := 0; try < 5; try++ {
		n.mu.Lock()
		if n.phase != stopping {
			n.mu.Unlock()
			return
		}
		known := n.lease.known
		n.mu.Unlock()
		if !known && !n.readOwnLease(ctx) {
			if s.Sleep(ctx, n.leaseRetry()) != nil {
				break
			}
			continue
		}
		n.mu.Lock()
		if n.phase != stopping {
			n.mu.Unlock()
			return
		}
		l := n.lease.body
		l.Renewal++
		l.State = LeaseReleased
		l.Nonce = n.nonceLocked()
		n.sendLocked(l)
		etag := n.lease.etag
		n.mu.Unlock()
		_, err := n.bucket.Put(ctx, LeaseKey(n.cfg.Node), EncodeLease(l), store.IfMatch(etag))
		if err == nil {
			break
		}
		n.mu.Lock()
		n.lease.known = false
		n.mu.Unlock()
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.phase == stopping {
		n.endLocked(stopped)
	}
}
