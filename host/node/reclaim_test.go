package node

import (
	"testing"
	"time"
)

// TestReclaimPolicy drives the reclaim policy tick by tick: each step is
// a tick at a time with the count of closed instances then (and of the
// instances the room layer keeps), whether a reclaim is due, and, when it
// is, what it cost.
func TestReclaimPolicy(t *testing.T) {
	type step struct {
		at     time.Duration
		closes uint64
		due    bool
		cost   time.Duration
	}
	tick := reclaimTick
	cases := []struct {
		name  string
		steps []step
		kept  []int // per step, if set: the instances the room layer keeps
	}{
		{"a few closes are not worth it", []step{
			{tick, 5, false, 0}, {2 * tick, 15, false, 0}, {3 * tick, 15, false, 0}, {time.Minute, 15, false, 0},
		}, nil},
		{"a burst, reclaimed once it pauses", []step{
			{tick, 10, false, 0}, {2 * tick, 40, false, 0}, {3 * tick, 90, false, 0},
			{4 * tick, 90, true, 10 * time.Millisecond},
			{5 * tick, 90, false, 0}, {time.Minute, 90, false, 0},
		}, nil},
		{"a stream that never pauses, reclaimed after the longest wait", []step{
			{tick, 20, false, 0}, {2 * tick, 40, false, 0},
			{tick + reclaimMaxWait - time.Millisecond, 60, false, 0},
			{tick + reclaimMaxWait, 80, true, time.Millisecond},
		}, nil},
		{"a second between reclaims at least", []step{
			{tick, 20, false, 0}, {2 * tick, 20, true, time.Millisecond},
			{3 * tick, 40, false, 0}, {4 * tick, 40, false, 0},
			{2*tick + time.Second, 40, true, time.Millisecond},
		}, nil},
		{"one in the middle of a burst leaves room for the one after it", []step{
			{tick, 20, false, 0}, {2 * tick, 20, true, 300 * time.Millisecond},
			{3 * tick, 300, false, 0}, {6 * tick, 800, false, 0},
			{7 * tick, 800, true, 300 * time.Millisecond},
		}, nil},
		{"costly reclaims wait until the node has paid for them", []step{
			{tick, 20, false, 0}, {2 * tick, 20, true, 0},
			{3 * tick, 40, false, 0},
			{2*tick + time.Second, 40, true, 2 * time.Second},
			// The budget is 1 s short: 50 s to earn it back.
			{2*tick + 3*time.Second, 60, false, 0},
			{2*tick + 51*time.Second, 60, false, 0},
			{2*tick + 53*time.Second, 60, true, 0},
		}, nil},
		// Fewer than DefaultReclaimCloses expire, some while others are
		// still kept.
		{"the kept instances of a burst, reclaimed once they all went", []step{
			{tick, 100, false, 0}, {2 * tick, 100, true, time.Millisecond},
			{3 * time.Second, 106, false, 0}, {3*time.Second + tick, 112, false, 0},
			{3*time.Second + 2*tick, 112, true, time.Millisecond},
			{time.Minute, 112, false, 0},
		}, []int{12, 12, 6, 0, 0, 0}},
		{"kept instances taken back by wakes are not worth it", []step{
			{tick, 0, false, 0}, {2 * tick, 0, false, 0}, {time.Minute, 0, false, 0},
		}, []int{3, 0, 0}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			p := newReclaimPolicy(DefaultReclaimCloses, 0)
			for i, s := range c.steps {
				now := int64(s.at)
				kept := 0
				if c.kept != nil {
					kept = c.kept[i]
				}
				if got := p.due(now, s.closes, kept); got != s.due {
					t.Fatalf("step %d (%v, %d closes): due %v, want %v", i, s.at, s.closes, got, s.due)
				}
				if s.due {
					p.done(now, int64(s.cost), s.closes)
				}
			}
		})
	}
}
