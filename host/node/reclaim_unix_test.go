//go:build unix

package node

import (
	"testing"
	"time"
)

// TestReclaimCostIsCPUTime: a reclaim is charged the CPU time the
// process spent during it, not the time that passed: two seconds that
// pass while it waits (on a machine whose cores other processes hold)
// cost next to nothing, and CPU it burns counts though no time passes on
// the clock.
func TestReclaimCostIsCPUTime(t *testing.T) {
	var clock int64
	now := func() int64 { return clock }
	waited := reclaimCost(func() { clock += int64(2 * time.Second) }, now)
	if waited >= 100*time.Millisecond {
		t.Errorf("a reclaim that waited 2 s was charged %v", waited)
	}
	const burn = 30 * time.Millisecond
	busy := reclaimCost(func() {
		start, _ := processCPU()
		for x := 0; ; x++ {
			if x%1024 == 0 {
				if c, _ := processCPU(); c-start >= burn {
					return
				}
			}
		}
	}, now)
	if busy < burn {
		t.Errorf("a reclaim that burned %v of CPU with no time passing was charged %v", burn, busy)
	}
}
