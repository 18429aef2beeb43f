//go:build !wasip1

package wasmkeep

import (
	"math"
	"testing"

	"github.com/wasmkeep/wasmkeep/abi"
)

// sink keeps what a test handler allocates from being optimized away.
var sink []byte

// TestCollections: the SDK reads what the heap allocated since its last
// collection as seldom as the room's rate of allocation allows; past the
// budget it asks for an idle call and collects there, and past
// collectNowAfter budgets, or when the host will not call, it collects
// before the event returns.
func TestCollections(t *testing.T) {
	h := setup(t)
	defer SetCollectBudget(DefaultCollectBudget)
	const budget = 1 << 20 // sizes below are multiples of 8 KiB: the heap allocates them exactly
	SetCollectBudget(budget)
	collect() // a known start: nothing allocated since
	if collectBudget != budget {
		t.Fatalf("the budget is %d after a collection: the test process keeps over %d bytes", collectBudget, 2*budget)
	}
	collectEvents, checkEvery = 0, firstCheckAfter
	var each int
	HandleSocketMessage(func(Socket, Message) { sink = make([]byte, each) })
	step := func(what string, perEvent uint64, events int, wantAsks int, wantCollections uint64, wantCheckEvery int) {
		t.Helper()
		each = int(perEvent)
		for range events {
			onSocketMessage(1, abi.MessageText, nil, 0)
		}
		if h.idleCalls != wantAsks || collections != wantCollections || checkEvery != wantCheckEvery {
			t.Fatalf("%s: %d idle calls asked for, %d collections, a look every %d events; want %d, %d and %d",
				what, h.idleCalls, collections, checkEvery, wantAsks, wantCollections, wantCheckEvery)
		}
	}
	base := collections

	step("a room that allocates nothing", 0, firstCheckAfter, 0, base, maxCheckEvery)
	// A quarter of the budget an event, suddenly: the next look finds
	// far more than collectNowAfter budgets and collects at once, and
	// looks again as soon as it may.
	step("a surge", budget/4, maxCheckEvery-1, 0, base, maxCheckEvery)
	step("its look", budget/4, 1, 0, base+1, minCheckEvery)
	// At 1/32 of the budget an event, a quarter of it in 8 events: a look
	// every 8, and the fourth finds the budget.
	step("steady, below the budget", budget/32, 3*8, 0, base+1, 8)
	step("steady, at the budget", budget/32, 8, 1, base+1, 8)
	onIdle()
	step("the idle call", 0, 0, 1, base+2, 8)
	onIdle() // a second call, with nothing allocated since: nothing to do
	step("a needless idle call", 0, 0, 1, base+2, 8)

	// Events that carry a quarter of the budget are looked at when they
	// have, not 8 events later.
	big := make([]byte, budget/8)
	for i := range 2 {
		p, n := deliver(big)
		onSocketMessage(1, abi.MessageText, p, n)
		if looked := collectEvents == 0; looked != (i == 1) {
			t.Fatalf("payloads of an eighth of the budget: a look after %d of them: %v", i+1, looked)
		}
	}
	checkEvery = 8

	h.idleStatus = int32(abi.StatusUnsupported)
	step("a host that will not call", budget/8, 8, 2, base+3, 8)

	SetCollectBudget(0)
	step("off", DefaultCollectBudget, 2*maxCheckEvery, 2, base+3, math.MaxInt)
}
