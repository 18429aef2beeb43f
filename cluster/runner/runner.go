// Package runner runs a cluster member in a server: each duty of the
// core and of the member in a goroutine of its own, sleeping on the
// node's clock, and the member's fan-outs on a bounded set of goroutines.
// It is the only part of the cluster that starts goroutines: the core and
// the member decide, and the simulation runs the same duties on its own
// scheduler instead.
package runner

import (
	"context"
	"sync"

	"github.com/wasmkeep/wasmkeep/cluster"
)

// Runner runs duties until they are stopped.
type Runner struct {
	cancel context.CancelFunc
	wg     sync.WaitGroup
}

// Start runs each of duties in a loop of its own (node.Run), sleeping on
// s, until node has ended or Stop is called.
func Start(node *cluster.Node, s cluster.Sleeper, duties []cluster.Duty) *Runner {
	ctx, cancel := context.WithCancel(context.Background())
	r := &Runner{cancel: cancel}
	for _, duty := range duties {
		r.wg.Go(func() { _ = node.Run(ctx, s, duty) })
	}
	return r
}

// Stop ends every duty and waits for them.
func (r *Runner) Stop() {
	r.cancel()
	r.wg.Wait()
}

// Parallel returns a member's Config.Parallel that runs at most limit of
// its calls at once.
func Parallel(limit int) func(n int, do func(i int)) {
	return func(n int, do func(i int)) {
		slots := make(chan struct{}, max(limit, 1))
		var wg sync.WaitGroup
		for i := range n {
			slots <- struct{}{}
			wg.Go(func() {
				defer func() { <-slots }()
				do(i)
			})
		}
		wg.Wait()
	}
}
