package engine

import (
	"context"
	"errors"
)

// Handoff says what rooms of the class can do in an upgrade: offers, its
// rooms hand their state to a newer version; takes, it starts from an
// older version's. An SDK exports both functions whatever the room
// registered, so the exports alone cannot tell; Handoff asks two blank
// instances, with no room behind them and their output muted. A blank room
// that hands over nothing offers nothing (a room whose handler returns nil
// while it is empty is listed as offering none until it has state: the
// list is a hint, and a real upgrade asks the room itself). A start that
// accepts an empty state takes, and so does one that traps: it has a
// handler, which refused this state.
func (c *Class) Handoff(ctx context.Context) (offers, takes bool, err error) {
	if c.has[EventUpgrade] {
		inst, err := c.Start(ctx, nil)
		if err != nil {
			return false, false, err
		}
		inst.out.mute()
		_, err = inst.Upgrade()
		inst.Close()
		offers = err == nil
	}
	if c.has[EventStartFrom] {
		inst, err := c.Start(ctx, nil)
		if err != nil {
			return offers, false, err
		}
		inst.out.mute()
		err = inst.StartFrom("", nil)
		inst.Close()
		takes = !errors.Is(err, ErrNotTakenOver)
	}
	return offers, takes, nil
}

// mute drops the instance's output lines.
func (o *guestOutput) mute() {
	o.mu.Lock()
	o.muted = true
	o.mu.Unlock()
}
