package member

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/wasmkeep/wasmkeep/calls"
	"github.com/wasmkeep/wasmkeep/cluster"
)

// A move (an operator's `cluster move`) hands one room held or parked
// here over to a named peer; cluster/moves.go gives the core's side.
// The move is recorded first (from then on the room takes no hold and
// parks nothing here, and its events go to the target), the room's state
// is written and its record released (a parked one's as it stands), and
// the target is asked to take it; once another node holds the room, its
// sockets here close with 1012 and reconnect there. A release that did
// not land leaves the move under way: the move duty (MovePass) looks
// again every TTL/10, asks the target once the record is free, and gives
// the move up past the core's look (LookFor).

// ErrMoveUnderWay: a move was begun and goes on in the background: its
// record's release has not landed yet, or its target has not taken it.
var ErrMoveUnderWay = errors.New("member: the move goes on in the background")

// ErrNotHeldHere: a move was asked of a node that does not hold the room.
var ErrNotHeldHere = errors.New("member: the room is not held on this node")

// Move moves room to node to and reports the node that holds the room
// once the move is done: to, or one that one of the room's events reached
// first. An error wrapping ErrMoveUnderWay says the move goes on in the
// background. Asked again for the same move, Move takes it one step
// further.
func (m *Member) Move(ctx context.Context, room cluster.Room, to string) (by string, err error) {
	if to == m.core.Name() {
		return "", fmt.Errorf("member: %s already runs on %s", room, to)
	}
	if !m.BeginAdvance(room) {
		return "", fmt.Errorf("%w: another request is taking this move a step now", ErrMoveUnderWay)
	}
	defer m.EndAdvance(room)
	// Recorded before the room's state is looked at, so that neither a
	// park nor a wake can come in between (the core refuses both while
	// the room moves).
	mv, err := m.core.BeginMove(ctx, room, to)
	if errors.Is(err, cluster.ErrMoveBusy) {
		if cur, ok := m.core.Moving(room); ok && cur.To == to {
			return m.AdvanceMove(ctx, room) // the same move, asked again
		}
	}
	if err != nil {
		if errors.Is(err, cluster.ErrNotHeld) {
			return "", fmt.Errorf("%w: %s", ErrNotHeldHere, room)
		}
		return "", fmt.Errorf("member: moving %s: %w", room, err)
	}
	m.observe(Event{Kind: MoveBegun, Room: room, Node: to})
	if parked, landed := m.core.ReleaseParked(ctx, room); parked {
		// The owner acts on a parked room too.
		m.observe(Event{Kind: ParkedReleased, Room: room, Why: "move"})
		m.log.Info("cluster: moving a parked room", "room", room.String(), "to", to, "released", landed)
		if !landed && m.cfg.Broken.MoveAfterUnlandedRelease {
			m.core.EndMove(mv)
			return m.finishMove(room, mv, to)
		}
	} else if err := m.rooms.HandOver(ctx, room, HandOverMove); err != nil {
		if ctx.Err() != nil {
			// The hand-over is queued on the room's worker and goes
			// on; so does the move, which waits for its release.
			return "", fmt.Errorf("%w: the room is being handed over (%v)", ErrMoveUnderWay, err)
		}
		m.core.EndMove(mv)
		m.observe(Event{Kind: MoveEnded, Room: room, Node: to, Err: err})
		return "", fmt.Errorf("member: handing %s over: %w", room, err)
	} else {
		m.log.Info("cluster: moving a room", "room", room.String(), "to", to)
	}
	if m.cfg.Broken.AlarmIndexDroppedOnMove && m.cfg.Alarms != nil {
		m.cfg.Alarms.ForgetRoom(ctx, calls.Room{Class: room.Class, Name: room.Name})
	}
	return m.AdvanceMove(ctx, room)
}

// BeginAdvance marks room's move as being taken a step by its caller,
// unless another caller is at it (false): Move and the move duty do, and
// a test that takes a step itself (AdvanceMove, then EndAdvance).
func (m *Member) BeginAdvance(room cluster.Room) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.advancing[room] {
		return false
	}
	m.advancing[room] = true
	return true
}

// EndAdvance ends the mark of BeginAdvance.
func (m *Member) EndAdvance(room cluster.Room) {
	m.mu.Lock()
	defer m.mu.Unlock()
	delete(m.advancing, room)
}

// MovePass is the duty of moves: every TTL/10 it takes each move under
// way a step (a move that a request is taking a step now is left to it).
func (m *Member) MovePass(ctx context.Context) time.Duration {
	for _, mv := range m.core.Moves() {
		if ctx.Err() != nil || !m.BeginAdvance(mv.Room) {
			continue
		}
		if _, err := m.AdvanceMove(ctx, mv.Room); err != nil && !errors.Is(err, ErrMoveUnderWay) {
			m.log.Warn("cluster: a move ended unfinished", "room", mv.Room.String(), "to", mv.To, "err", err)
		}
		m.EndAdvance(mv.Room)
	}
	return m.cfg.TTL / 10
}

// AdvanceMove takes room's move one step, its caller having marked it
// (BeginAdvance): the node that holds the room once the move is done,
// ErrMoveUnderWay while it waits, another error if it ended unfinished.
func (m *Member) AdvanceMove(ctx context.Context, room cluster.Room) (by string, err error) {
	step, ok := m.core.LookMove(ctx, room)
	if !ok {
		// Only the caller that marked it ends a move, save a stop or a
		// lost lease, which forget every move.
		return "", fmt.Errorf("member: the move of %s ended: this node is %s", room, m.core.Status().Phase)
	}
	mv := step.Move
	m.observe(Event{Kind: MoveStep, Room: room, Node: mv.To, Why: step.Kind.String()})
	switch step.Kind {
	case cluster.MoveWait:
		return "", fmt.Errorf("%w: %s", ErrMoveUnderWay, step.Why)
	case cluster.MoveGiveUp:
		// The room's sockets here belong to no hold of this node's any
		// more: they close, and their clients reconnect to wherever the
		// room runs next.
		if _, parked := m.core.Parked(room); !parked && !m.core.Acting(room) && !m.cfg.Broken.GiveUpKeepsSockets {
			m.closeMovedSockets(room, "the room's move ended unfinished")
		}
		err := fmt.Errorf("member: the move of %s to %s ended unfinished: %s", room, mv.To, step.Why)
		m.observe(Event{Kind: MoveEnded, Room: room, Node: mv.To, Err: err})
		return "", err
	case cluster.MoveAsk:
		if err := m.cfg.Peers.AskTake(ctx, mv.To, mv.Address, room); err != nil {
			// The next pass reads the record again: the target may have
			// taken the room with an event meanwhile, or will be asked
			// again.
			return "", fmt.Errorf("%w: node %s did not take the room yet: %w", ErrMoveUnderWay, mv.To, err)
		}
		m.core.EndMove(mv)
		by = mv.To
	case cluster.MoveTaken:
		by = step.Node
	}
	return m.finishMove(room, mv, by)
}

// finishMove closes the sockets of a room another node holds now, by: its
// clients reconnect to it there.
func (m *Member) finishMove(room cluster.Room, mv cluster.Move, by string) (string, error) {
	if m.beforeMoveCloses != nil {
		m.beforeMoveCloses(room)
	}
	if by == mv.To {
		m.closeMovedSockets(room, "the room moved to another node")
		m.log.Info("cluster: moved a room", "room", room.String(), "to", mv.To)
	} else {
		m.closeMovedSockets(room, "the room was taken by another node")
		m.log.Info("cluster: a moving room was taken by another node first", "room", room.String(), "to", mv.To, "by", by)
	}
	m.observe(Event{Kind: MoveEnded, Room: room, Node: mv.To, By: by})
	return by, nil
}

// closeMovedSockets closes room's sockets here, if it has any, with 1012
// for reason, counted as a move's.
func (m *Member) closeMovedSockets(room cluster.Room, reason string) {
	if m.rooms.Sockets(room) > 0 {
		m.closeOwnerSockets([]cluster.Room{room}, "move", reason)
	}
}

// SetBeforeMoveCloses sets a function run between the end of a move and
// the close of the room's sockets (tests run a sweep there).
func (m *Member) SetBeforeMoveCloses(f func(cluster.Room)) { m.beforeMoveCloses = f }
