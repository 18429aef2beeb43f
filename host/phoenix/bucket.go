package phoenix

import "math"

// bucket is a token bucket of burst tokens refilled at rate per second,
// kept in the virtual-scheduling form (GCRA): instead of a token count it
// remembers tat, the time at which the bucket would be full again, so it is
// exact in integer nanoseconds and needs no refill step. An action at time
// now is allowed when tat-now is within tolerance, that is when at least
// one token is left, and then moves tat on by interval, the time one token
// takes to come back. The zero value allows everything.
type bucket struct {
	interval  int64 // ns per token; 0 disables the bucket
	tolerance int64 // (burst-1) * interval
	tat       int64 // when the bucket is full again; before the first use, unset
	used      bool
}

// maxSpan bounds interval and tolerance so that tat arithmetic cannot
// overflow for any realistic clock (about 73 years).
const maxSpan = math.MaxInt64 / 4

// newBucket returns a bucket of burst tokens refilled at rate per second;
// a rate that is not positive disables it. burst is at least 1.
func newBucket(rate float64, burst int) bucket {
	if !(rate > 0) || math.IsInf(rate, 1) {
		return bucket{}
	}
	if burst < 1 {
		burst = 1
	}
	interval := math.Ceil(1e9 / rate)
	if interval < 1 {
		interval = 1
	}
	interval = math.Min(interval, maxSpan)
	tolerance := math.Min(interval*float64(burst-1), maxSpan)
	return bucket{interval: int64(interval), tolerance: int64(tolerance)}
}

// allow takes a token at time now (monotonic ns) if one is left. Time is
// expected not to go backwards; if it does, the bucket counts the
// difference as still to wait for, so it can only be stricter.
func (b *bucket) allow(now int64) bool {
	if b.interval == 0 {
		return true
	}
	tat := b.tat
	if !b.used || tat < now {
		tat = now
	}
	if tat-now > b.tolerance {
		return false
	}
	b.tat = tat + b.interval
	b.used = true
	return true
}
