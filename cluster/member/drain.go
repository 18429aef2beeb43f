package member

import (
	"context"
	"errors"
	"time"
)

// A drain (an operator's `cluster drain`) hands every room of this node
// over: the core takes and parks no room any more, and each drain pass
// releases every parked record, closes every socket here (1012: without
// parking, a socket left here would wake its room here, which a draining
// node may not), and hands every resident room over (its state written,
// its hold released). The whole parked set is released on every pass,
// not only the first: a park that checked "not draining" just before the
// drain began may land after the first pass. The node is drained once
// nothing names it: no hold, no parked record, no pending release, no
// acquisition in flight or unresolved.

// Drain starts handing this node's rooms over (on) or takes rooms again
// (off), and writes the change into the lease at once, so that peers
// (a move's source, routing) see it before the next renewal. It returns
// then: the drain passes are a duty (DrainPass), and Drained tells when
// it is done.
func (m *Member) Drain(ctx context.Context, on bool) {
	m.mu.Lock()
	if m.cfg.Broken.DrainUntold {
		m.untold = on
	}
	m.drainedSaid = false
	m.mu.Unlock()
	if !m.cfg.Broken.DrainUntold {
		m.core.SetDraining(on)
		if err := m.core.WriteDraining(ctx, m.cfg.Sleeper); err != nil {
			// The next renewal carries it.
			m.log.Warn("cluster: writing the lease after a drain's change; the next renewal carries it", "draining", on, "err", err)
		}
	}
	if on {
		m.log.Info("cluster: draining")
	}
}

// draining reports whether this node drains.
func (m *Member) draining() bool {
	if m.cfg.Broken.DrainUntold {
		m.mu.Lock()
		defer m.mu.Unlock()
		return m.untold
	}
	return m.core.Draining()
}

// Drained reports whether this node drains and nothing is left that names
// it.
func (m *Member) Drained() bool {
	if !m.draining() {
		return false
	}
	if m.cfg.Broken.DrainedWithParked {
		s := m.core.Status()
		return len(s.Holds) == 0 && len(s.Pending) == 0 && len(s.Unresolved) == 0
	}
	return m.core.Drained()
}

// DrainPass is the duty of drains: while this node drains and is not
// drained, one pass every TTL/20.
func (m *Member) DrainPass(ctx context.Context) time.Duration {
	period := m.cfg.TTL / 20
	if !m.draining() || m.core.Ended() {
		return period
	}
	if !m.cfg.Broken.DrainedWithParked {
		m.releaseAllParked(ctx, "drain")
	}
	m.closeOwnerSockets(m.rooms.WithSockets(), "drain", "the node is draining")
	for _, h := range m.core.Status().Holds {
		if err := m.rooms.HandOver(ctx, h.Room, HandOverDrain); err != nil && ctx.Err() == nil {
			m.log.Warn("cluster: handing a room over", "room", h.Room.String(), "err", err)
		}
	}
	if m.Drained() {
		if m.firstTime(&m.drainedSaid) {
			m.log.Info("cluster: drained")
			m.observe(Event{Kind: Drained})
		}
	}
	return period
}

// releaseAllParked releases every parked record here, for why, through
// Config.Parallel: 50,000 of them one after the other would hold the
// hand-overs of the resident rooms for minutes on a slow bucket.
func (m *Member) releaseAllParked(ctx context.Context, why string) {
	parked := m.core.ParkedRooms()
	m.parallel(len(parked), func(i int) {
		if ctx.Err() != nil {
			return
		}
		if released, _ := m.core.ReleaseParked(ctx, parked[i].Room); released {
			m.observe(Event{Kind: ParkedReleased, Room: parked[i].Room, Why: why})
		}
	})
}

// parallel runs do for 0 ≤ i < n through Config.Parallel, or one after
// the other without it.
func (m *Member) parallel(n int, do func(i int)) {
	if m.cfg.Parallel != nil {
		m.cfg.Parallel(n, do)
		return
	}
	for i := range n {
		do(i)
	}
}

// ErrNotJoined: the member was asked to act before it joined.
var ErrNotJoined = errors.New("member: not joined")
