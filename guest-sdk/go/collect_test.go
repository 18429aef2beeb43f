//go:build !wasip1

package wasmkeep

import (
	"testing"

	"github.com/wasmkeep/wasmkeep/abi"
)

// sink keeps what a test handler allocates from being optimized away.
var sink []byte

// TestCollections: every collectCheckEvery events the SDK looks at what
// the heap allocated since its last collection; past the budget it asks
// for an idle call and collects there, and past collectNowAfter budgets,
// or when the host will not call, it collects before the event returns.
func TestCollections(t *testing.T) {
	h := setup(t)
	defer SetCollectBudget(DefaultCollectBudget)
	SetCollectBudget(DefaultCollectBudget)
	collect() // a known start: nothing allocated since, the budget set from what lives
	collectEvents = 0
	var each int
	HandleSocketMessage(func(Socket, Message) { sink = make([]byte, each) })
	events := func(n int) {
		for range n {
			onSocketMessage(1, abi.MessageText, nil, 0)
		}
	}
	step := func(what string, perEvent uint64, n int, wantAsks int, wantCollections uint64) {
		t.Helper()
		each = int(perEvent)
		events(n)
		if h.idleCalls != wantAsks || collections != wantCollections {
			t.Fatalf("%s: %d idle calls asked for and %d collections, want %d and %d", what, h.idleCalls, collections, wantAsks, wantCollections)
		}
	}
	base := collections
	small := collectBudget / collectCheckEvery / 4 // a look every collectCheckEvery events finds a quarter of the budget

	step("below the budget", small, 3*collectCheckEvery, 0, base)
	step("past it, one event short of a look", collectBudget/collectCheckEvery, collectCheckEvery-1, 0, base)
	step("at the look", 0, 1, 1, base) // 1¾ budgets: asked for
	onIdle()
	step("the idle call", 0, 0, 1, base+1)
	onIdle() // a second call, with nothing allocated since: nothing to do
	step("a needless idle call", 0, 0, 1, base+1)

	h.idleStatus = int32(abi.StatusUnsupported)
	step("a host that will not call", 2*collectBudget/collectCheckEvery, collectCheckEvery, 2, base+2)
	h.idleStatus = 0
	step("four budgets without the call", 5*collectBudget/collectCheckEvery, collectCheckEvery, 2, base+3)

	SetCollectBudget(0)
	step("off", 8*DefaultCollectBudget/collectCheckEvery, 2*collectCheckEvery, 2, base+3)
}
