package wasmkeep

import (
	"math"
	"runtime"
	"runtime/metrics"
)

// A room's linear memory is its state: a snapshot stores every page that
// differs from the class's initial memory, a wake from the store decodes
// and writes back every one of them, and a resident room holds them all.
// WebAssembly memory never shrinks, and Go's collector never clears a
// page it frees, so a page the heap once reached stays in every later
// snapshot. What decides a Go room's size is how far its heap grows
// between collections, not what it keeps.
//
// Left to itself, the runtime lets the heap grow to 4 MiB before its
// first collection, and in a room its collections are slow: the
// background mark worker only runs while a handler blocks, which handlers
// rarely do, so the marking is left to the allocations of the events that
// follow and drags over thousands of them, each made several times
// slower (a Go chat room: a mark phase of 26 ms spread over some 2,000
// messages, for 0.33 ms of marking). A collection started with runtime.GC
// runs to its end at once, in 0.3 to 0.6 ms for a chat room.
//
// So the SDK collects by itself. Every so many events it reads how much
// the heap has allocated since its last collection (a reading costs about
// 2 µs in a room, more than many events do, so the SDK reads as seldom as
// the room's rate of allocation allows: when a quarter of the budget
// would have been allocated at the rate since its last reading, between
// every 8 and every 256 events, and sooner once the events' payloads and
// responses come to a quarter of the budget, since a room that starts to
// move many bytes usually starts to allocate them too); past the
// budget (the larger of SetCollectBudget's minimum and half of what
// survived the last collection) it asks the host for an idle call
// (abi.ImportIdleCall), which comes once the room's queued events have
// been handled and their output has gone, and collects there: no event
// waits for it. The freed memory is then used again rather than fresh
// pages, and the runtime's own trigger is seldom reached. Should the call
// not come (the room hibernated first, which forgets the request, or a
// host that does not make it), the SDK asks again at its next look, and
// past four budgets it collects before the event returns.

// DefaultCollectBudget is the least a room's heap allocates between two of
// the SDK's collections unless SetCollectBudget says otherwise.
const DefaultCollectBudget = 512 << 10

// The bounds of how many events pass between two readings of the
// allocation counter, and how many before the first.
const (
	minCheckEvery   = 8
	maxCheckEvery   = 256
	firstCheckAfter = 32
)

// collectNowAfter is how many budgets a room may allocate, waiting for
// its idle call, before it collects within an event.
const collectNowAfter = 4

var (
	collectMin      uint64 = DefaultCollectBudget // 0: the SDK never collects
	collectBudget   uint64 = DefaultCollectBudget
	collectEvents   int
	collectSeen     uint64 // bytes of payloads and responses since the last reading
	checkEvery      = firstCheckAfter
	allocatedAtLast uint64 // the allocation counter at the last collection
	allocatedAtLook uint64 // and at the last reading
	collections     uint64
	heapSamples     = []metrics.Sample{
		{Name: "/gc/heap/allocs:bytes"},
		{Name: "/gc/heap/live:bytes"},
	}
)

// SetCollectBudget sets how many bytes a room's heap may allocate between
// two of the collections the SDK runs itself (at least: a room whose heap
// keeps more collects after allocating half of what it keeps). A smaller
// budget keeps the room's memory, and with it its snapshots and wakes,
// smaller, for more collections; zero or less turns the SDK's collections
// off and leaves collecting to the Go runtime alone, whose collections
// are slow in a room (see the package documentation). Call it from an
// init function; it is part of the room's memory, so it survives
// hibernation.
func SetCollectBudget(bytes int) {
	collectMin = uint64(max(bytes, 0))
	collectBudget = collectMin
	collectEvents, checkEvery = 0, firstCheckAfter
}

// Collections reports how many collections the SDK has run in this room;
// the Go runtime's own are counted, with these, in runtime.MemStats.NumGC.
func Collections() uint64 { return collections }

// collectIfDue runs at the end of every event. It is small enough to be
// inlined: most events only count.
func collectIfDue() {
	if collectEvents++; collectEvents >= checkEvery || collectSeen >= collectBudget/4 {
		look()
	}
}

// look reads the allocation counter and decides.
func look() {
	collectSeen = 0
	if collectMin == 0 {
		collectEvents, checkEvery, collectBudget = 0, math.MaxInt, math.MaxUint64
		return
	}
	metrics.Read(heapSamples[:1])
	allocated := heapSamples[0].Value.Uint64()
	perEvent := (allocated - allocatedAtLook) / uint64(collectEvents)
	collectEvents, allocatedAtLook = 0, allocated
	checkEvery = int(min(max(collectBudget/4/max(perEvent, 1), minCheckEvery), maxCheckEvery))
	since := allocated - allocatedAtLast
	switch {
	case since < collectBudget:
	case since < collectNowAfter*collectBudget && hostIdleCall() == 0:
		// Asked: the host calls onIdle once the room is idle.
	default:
		collect()
	}
}

// collectIdle is the idle call's collection, unless one within an event
// made it needless meanwhile.
func collectIdle() {
	metrics.Read(heapSamples[:1])
	if heapSamples[0].Value.Uint64()-allocatedAtLast >= collectBudget/2 {
		collect()
	}
}

func collect() {
	runtime.GC()
	collections++
	metrics.Read(heapSamples)
	allocatedAtLast = heapSamples[0].Value.Uint64()
	allocatedAtLook = allocatedAtLast
	collectBudget = max(collectMin, heapSamples[1].Value.Uint64()/2)
}
