package node

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"time"

	"github.com/wasmkeep/wasmkeep/host/rooms"
	"github.com/wasmkeep/wasmkeep/host/rooms/life"
	"github.com/wasmkeep/wasmkeep/host/secrets"
	"github.com/wasmkeep/wasmkeep/host/server"
	"github.com/wasmkeep/wasmkeep/internal/clock"
)

// secretsCheckEvery is how often a node looks again whether it can open
// the app's secrets: what a secret put through another node (under a key
// this one lacks) takes at most to stop it.
const secretsCheckEvery = 10 * time.Second

// secretsGate keeps whether the node can open every secret of the app. A
// node that cannot (the app has secrets and the node no key, or not the
// key that sealed one) runs no room: wakes are refused, requests are
// answered 503 with the reason, /readyz says it, and a cluster member
// drains so that its rooms move to nodes that can.
type secretsGate struct {
	store  *secrets.Store
	log    *slog.Logger
	member server.ClusterMember // nil outside a cluster

	mu      sync.Mutex
	problem error
	drained bool // by this gate, which takes it back once the problem ends
}

// Problem is nil while the node can open the app's secrets, else why not.
func (g *secretsGate) Problem() error {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.problem
}

// check looks at the secrets once, and logs and acts on a change: a new
// problem is logged once and drains a cluster member, its end is logged
// and undoes the drain.
func (g *secretsGate) check(ctx context.Context, rs *rooms.Manager) {
	err := g.store.Check(ctx)
	if err != nil && !errors.Is(err, secrets.ErrNoKey) && !errors.Is(err, secrets.ErrWrongKey) {
		// The store could not be read: no news about the keys.
		g.log.Warn("checking the app's secrets failed; tried again later", "err", err)
		return
	}
	g.mu.Lock()
	was := g.problem
	g.problem = err
	g.mu.Unlock()
	switch {
	case err != nil && was == nil:
		g.log.Error("this node cannot open the app's secrets: it runs no room until it can", "err", err)
		if g.member != nil {
			if derr := g.member.Drain(true); derr == nil {
				g.mu.Lock()
				g.drained = true
				g.mu.Unlock()
			}
		}
		if rs != nil {
			if err := rs.HibernateAll(ctx, life.EndAdmin); err != nil {
				g.log.Warn("hibernating the rooms of a node that cannot open the secrets failed", "err", err)
			}
		}
	case err == nil && was != nil:
		g.log.Info("this node can open the app's secrets again: it runs rooms")
		g.mu.Lock()
		undrain := g.drained
		g.drained = false
		g.mu.Unlock()
		if undrain && g.member != nil {
			_ = g.member.Drain(false)
		}
	}
}

// run checks every secretsCheckEvery of clk until ctx ends.
func (g *secretsGate) run(ctx context.Context, clk clock.Clock, rs *rooms.Manager) {
	t := clk.NewTicker(secretsCheckEvery)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C():
			cctx, cancel := context.WithTimeout(ctx, secretsCheckEvery)
			g.check(cctx, rs)
			cancel()
		}
	}
}

// engineSecrets is the engine's SecretSource over a secrets store.
type engineSecrets struct{ store *secrets.Store }

func (e engineSecrets) Secret(ctx context.Context, name string) ([]byte, bool, error) {
	v, err := e.store.Get(ctx, name)
	switch {
	case errors.Is(err, secrets.ErrNotFound):
		return nil, false, nil
	case err != nil:
		return nil, false, err
	}
	return v, true, nil
}
