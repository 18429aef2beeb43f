package cluster

import (
	"cmp"
	"context"
	"errors"
	"slices"
	"time"

	"github.com/wasmkeep/wasmkeep/host/store"
)

// Settle is the duty that retries pending releases and resolves
// acquisitions whose answer was lost. It returns how long to wait before
// calling it again; 0 with Ended true means it is done.
func (n *Node) Settle(ctx context.Context) time.Duration {
	d := n.settleReleases(ctx)
	return min(d, n.resolve(ctx))
}

// idle is how long the settle duty waits with nothing due.
func (n *Node) idle() int64 { return int64(n.cfg.TTL / 20) }

// settleReleases attempts every pending release that is due, and returns
// the wait until the next one.
func (n *Node) settleReleases(ctx context.Context) time.Duration {
	n.mu.Lock()
	now := n.clock.Now()
	n.lapseLocked(now)
	if n.phase == stopped || n.phase == lost {
		n.mu.Unlock()
		return 0
	}
	var due []*pendingRelease
	for _, p := range n.pending {
		if !p.inflight && p.at <= now {
			p.inflight = true
			due = append(due, p)
		}
	}
	n.mu.Unlock()
	slices.SortFunc(due, func(a, b *pendingRelease) int { return compareHolds(a.hold, b.hold) })
	for _, p := range due {
		n.attemptRelease(ctx, p)
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	now, next := n.clock.Now(), n.idle()
	for _, p := range n.pending {
		if !p.inflight {
			next = min(next, max(p.at-now, 0))
		}
	}
	return time.Duration(next)
}

// resolve reads the record of every unresolved acquisition that is due
// and settles it: released if it landed, dropped once the record moved
// or stayed unchanged for ResolveWindow.
func (n *Node) resolve(ctx context.Context) time.Duration {
	n.mu.Lock()
	now := n.clock.Now()
	if n.phase == stopped || n.phase == lost {
		n.mu.Unlock()
		return 0
	}
	var due []*unresolvedAcquire
	for _, u := range n.unresolved {
		if !u.inflight && u.at <= now {
			u.inflight = true
			due = append(due, u)
		}
	}
	n.mu.Unlock()
	slices.SortFunc(due, func(a, b *unresolvedAcquire) int {
		return cmp.Or(CompareRooms(a.room, b.room), cmp.Compare(a.nonce, b.nonce))
	})
	for _, u := range due {
		n.resolveOne(ctx, u)
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	now, next := n.clock.Now(), n.idle()
	for _, u := range n.unresolved {
		if !u.inflight {
			next = min(next, max(u.at-now, 0))
		}
	}
	return time.Duration(next)
}

func (n *Node) resolveOne(ctx context.Context, u *unresolvedAcquire) {
	// The read shows the record as it was at some moment after it was
	// sent, however late its answer: only a read sent after the write
	// could still land shows that it never will.
	sent := n.clock.Now()
	body, etag, err := n.bucket.Get(ctx, RecordKey(u.room))

	n.mu.Lock()
	defer n.mu.Unlock()
	u.inflight = false
	if n.unresolved[u.nonce] != u {
		return
	}
	now := n.clock.Now()
	exists := !errors.Is(err, store.ErrNotFound)
	var rec Record
	if exists && err == nil {
		rec, err = DecodeRecord(body)
	}
	if exists && err != nil {
		// Unread, or unreadable: proves nothing; read it again.
		u.tries++
		u.at = now + n.jitterLocked(n.retry(u.tries))
		return
	}
	switch {
	case exists && rec.Nonce == u.nonce && n.parkedAtLocked(u.room, u.gen):
		// It landed, and a hold at its generation is parked here: that
		// hold is the record's, and the parked entry releases it.
		delete(n.unresolved, u.nonce)
		n.counts.ResolvedLanded++
	case exists && rec.Nonce == u.nonce:
		// It landed and nothing moved it since: not a hold (its
		// acquirer was told it failed), so release it. A parked entry
		// of the version it replaced can never be released any more.
		delete(n.unresolved, u.nonce)
		n.dropParkedBehindLocked(u.room, u.from)
		n.addPendingLocked(Hold{Room: u.room, Generation: u.gen, Version: etag}, now)
		n.counts.ResolvedLanded++
	case exists == (u.from != "") && (!exists || etag == u.from):
		// Unchanged: the write has not landed, and still may.
		if n.cfg.Broken.ResolverEndsUnchanged || sent-u.since >= int64(n.cfg.ResolveWindow) {
			delete(n.unresolved, u.nonce)
			n.counts.ResolvedExpired++
			return
		}
		u.tries++
		u.at = now + n.jitterLocked(n.retry(u.tries))
	default:
		// The record moved on from the version the write was
		// conditioned on, so the write can no longer land (nor a
		// release of a parked entry at that version).
		delete(n.unresolved, u.nonce)
		n.dropParkedBehindLocked(u.room, u.from)
		n.counts.ResolvedMoved++
	}
}
