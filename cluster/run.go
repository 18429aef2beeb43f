package cluster

import (
	"context"
	"time"

	"github.com/wasmkeep/wasmkeep/internal/clock"
)

// Sleeper waits: the node's duties and Stop wait through one, so that a
// server sleeps on its clock and the simulation yields to its scheduler.
type Sleeper interface {
	// Sleep returns after d on the sleeper's clock, or with ctx's error.
	Sleep(ctx context.Context, d time.Duration) error
}

// ClockSleeper is the Sleeper of a server: c's timers.
func ClockSleeper(c clock.Clock) Sleeper { return clockSleeper{c} }

type clockSleeper struct{ c clock.Clock }

func (s clockSleeper) Sleep(ctx context.Context, d time.Duration) error {
	t := s.c.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C():
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Duty is one of a node's periodic steps: it does what is due and returns
// how long to wait before it is called again.
type Duty func(context.Context) time.Duration

// Duties are the node's three duties, each to be run by Run in a loop
// (a goroutine) of its own, so that a slow release never delays a lease
// renewal: RenewLease, WatchPeers and Settle.
func (n *Node) Duties() []Duty { return []Duty{n.RenewLease, n.WatchPeers, n.Settle} }

// minWait keeps a duty loop from spinning on a zero wait.
const minWait = time.Millisecond

// Run calls duty until the node has ended or ctx is done, sleeping on s
// between calls for as long as duty asks.
func (n *Node) Run(ctx context.Context, s Sleeper, duty Duty) error {
	for {
		d := duty(ctx)
		if n.Ended() {
			return nil
		}
		if err := s.Sleep(ctx, max(d, minWait)); err != nil {
			return err
		}
	}
}
