package cluster

import (
	"context"
	"time"
)

// A node never compares its clock with a peer's. It notes, on its own
// clock, when it first saw each version (ETag) of a peer's lease; a peer
// whose lease has kept one version for the TTL written in it plus this
// node's Grace is silent, and this node fences it: it writes the lease
// back as fenced, If-Match on that version. The fence lands only if the
// peer wrote nothing since, and the peer's own count of its validity ran
// out before (see lease.go), so from then on the records naming that
// instance are free to take, and its next renewal fails.
//
// An instance, once known to be dead, stays dead: a process never gets
// its lease back after a fence or a takeover, and a new process of the
// same node is a new instance.

// peer is what this node knows of one other node's lease.
type peer struct {
	etag  string
	lease Lease
	// known: lease is the decoded body of etag. An undecodable lease is
	// read again at every pass and never fenced.
	known bool
	// since is when this node first saw etag, on its own clock (the
	// arrival of the answer that showed it: the later, safe side).
	since int64
	// ended are the node's instances known to be dead.
	ended map[string]bool
	// unreachable is the lease version at which a forward to the node
	// last failed to connect (Unreachable); cleared by its next change.
	unreachable string
	// bodyETag is the version lease was read at, and readAt when: etag
	// may be newer (a change noted between reads, see watchPeer).
	bodyETag string
	readAt   int64
}

// WatchPeers is the membership duty: it lists the leases, reads the ones
// whose version changed, and fences peers silent for their TTL + Grace
// (only while this node's own lease is valid). It returns how long to
// wait before calling it again (TTL/3); 0 with Ended true means it is
// done.
func (n *Node) WatchPeers(ctx context.Context) time.Duration {
	n.mu.Lock()
	now := n.clock.Now()
	n.lapseLocked(now)
	for room, c := range n.routes {
		if now >= c.until {
			delete(n.routes, room)
		}
	}
	p := n.phase
	n.mu.Unlock()
	period := n.cfg.WatchEvery
	switch p {
	case stopped, lost:
		return 0
	case joining:
		return period
	}
	after := ""
	for {
		page, more, err := n.bucket.ListPage(ctx, leasePrefix, after, 0)
		if err != nil {
			return n.leaseRetry()
		}
		for _, e := range page {
			if node, ok := leaseNode(e.Key); ok && node != n.cfg.Node {
				n.watchPeer(ctx, node, e.ETag)
			}
		}
		if !more || len(page) == 0 {
			return period
		}
		after = page[len(page)-1].Key
	}
}

// watchPeer looks at one peer's lease, listed at etag: reads it if it
// changed, fences it if it has been silent too long.
//
// A lease that changed is read at most once per TTL: between reads, a
// change is noted (its version, and when it was first seen), which is all
// that telling a live peer from a silent one needs. What only a read shows
// (a fence by another node, a drain, a new address) is learned within a
// TTL, or at once where it matters: a record naming an instance the view
// does not know makes the node read that lease (learnOwner), a change
// after a silence longer than half a TTL (a fence, a takeover) is read at
// once, and a fence reads the lease it is about to write over. So an idle
// node's requests
// are its renewals, a listing every TTL/3, and a read of each peer's
// lease every TTL.
func (n *Node) watchPeer(ctx context.Context, node, etag string) {
	n.mu.Lock()
	now := n.clock.Now()
	p := n.peers[node]
	switch {
	case p == nil || !p.known:
		n.mu.Unlock()
		n.readPeer(ctx, node)
		return
	case p.etag != etag && (now-p.readAt >= int64(n.cfg.TTL) || now-p.since > int64(n.cfg.TTL)/2):
		// Due for a read, or a change after a silence longer than a
		// renewal period: a fence or a takeover, not a renewal.
		n.mu.Unlock()
		n.readPeer(ctx, node)
		return
	case p.etag != etag:
		p.etag, p.since = etag, now // a renewal, as far as liveness goes
		n.mu.Unlock()
		return
	}
	if p.lease.State != LeaseLive || now-p.since < int64(p.lease.TTL+n.cfg.Grace) || !n.validLocked(now) {
		n.mu.Unlock()
		return
	}
	if p.bodyETag != etag {
		// Silent, but the view has an older body than the version it
		// would fence: the fence must carry the latest renewal count
		// (peers order their reads by it). Read it; the next pass
		// fences it if it is still unchanged.
		n.mu.Unlock()
		n.readPeer(ctx, node)
		return
	}
	l := p.lease
	n.mu.Unlock()
	// A fence that fails was renewed meanwhile, fenced by another, or
	// unanswered: the next pass reads the lease again.
	_, _ = n.writeFence(ctx, node, etag, l)
}

// readPeer reads one peer's lease into the view and returns it, if it
// could be read and decoded.
func (n *Node) readPeer(ctx context.Context, node string) (Lease, bool) {
	body, etag, err := n.bucket.Get(ctx, LeaseKey(node))
	n.mu.Lock()
	defer n.mu.Unlock()
	if err != nil {
		return Lease{}, false // a lease that is gone or unread proves nothing
	}
	now := n.clock.Now()
	l, err := DecodeLease(body)
	if err != nil {
		p := n.peerLocked(node)
		if p.etag != etag {
			p.etag, p.since = etag, now
		}
		p.known = false
		return Lease{}, false
	}
	n.notePeerLocked(node, etag, l, now)
	return l, true
}

func (n *Node) peerLocked(node string) *peer {
	p := n.peers[node]
	if p == nil {
		p = &peer{ended: map[string]bool{}}
		n.peers[node] = p
	}
	return p
}

// notePeerLocked records that node's lease was l at etag, read at now.
func (n *Node) notePeerLocked(node, etag string, l Lease, now int64) {
	p := n.peerLocked(node)
	if l.State != LeaseLive {
		p.ended[l.Instance] = true // for good, however old the read
	}
	// Against the version of the body the view holds, not the latest
	// version listed: a listing's answer may be older than a read's, and
	// a change noted from it orders nothing (watchPeer).
	if p.known && etag != p.bodyETag && l.Renewal <= p.lease.Renewal {
		// An answer older than what the view has (two reads in flight
		// at once): it would bring back a process that was replaced.
		// Another process it names was replaced since.
		if l.Instance != p.lease.Instance {
			p.ended[l.Instance] = true
		}
		return
	}
	if p.known && p.lease.Instance != l.Instance {
		p.ended[p.lease.Instance] = true // taken over: the earlier process is gone
	}
	if etag != p.etag {
		p.etag, p.since = etag, now
	}
	p.lease, p.known, p.bodyETag, p.readAt = l, true, etag, now
}

// deadLocked reports whether instance of node is known to be dead. Any
// other instance of this node's own name is: this process took the lease
// over from it (and, while this node's lease is valid, no later process
// can have taken it).
func (n *Node) deadLocked(node, instance string) bool {
	if node == n.cfg.Node {
		return instance != n.cfg.Instance
	}
	p := n.peers[node]
	return p != nil && p.ended[instance]
}

// liveLocked returns node's lease if the view has it naming instance,
// live.
func (n *Node) liveLocked(node, instance string) (Lease, bool) {
	p := n.peers[node]
	if p == nil || !p.known || p.lease.Instance != instance || p.lease.State != LeaseLive {
		return Lease{}, false
	}
	return p.lease, true
}

// learnOwner reads node's lease after a record naming instance of it was
// read, when the view knows nothing of that instance. A lease read after
// the record that names another instance (or this one ended) shows the
// instance dead: it held the lease before it wrote the record, and has
// lost it since.
func (n *Node) learnOwner(ctx context.Context, node, instance string) {
	l, ok := n.readPeer(ctx, node)
	if !ok || l.Instance == instance {
		return
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	n.peerLocked(node).ended[instance] = true
}
