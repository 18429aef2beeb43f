package phoenix

import (
	"math"
	"testing"
)

func TestBucket(t *testing.T) {
	b := newBucket(2, 3) // a token every 500 ms, three at once
	at := func(now int64, want bool) {
		t.Helper()
		if got := b.allow(now); got != want {
			t.Fatalf("allow(%d) = %v, want %v", now, got, want)
		}
	}
	start := int64(1e12) // any origin works
	at(start, true)
	at(start, true)
	at(start, true)
	at(start, false)
	at(start+499_999_999, false)
	at(start+500_000_000, true)
	at(start+500_000_000, false)
	at(start+10*sec, true)
	at(start+10*sec, true)
	at(start+10*sec, true)
	at(start+10*sec, false)
	// Refused attempts do not push the next token further away.
	for i := 0; i < 100; i++ {
		at(start+10*sec+1, false)
	}
	at(start+10*sec+500_000_000, true)
}

func TestBucketSustainedRate(t *testing.T) {
	b := newBucket(100, 10)
	allowed := 0
	for now := int64(0); now < 10*sec; now += sec / 1000 { // 1000 tries a second for 10 s
		if b.allow(now) {
			allowed++
		}
	}
	if allowed < 1000 || allowed > 1010 {
		t.Fatalf("allowed %d in 10 s at 100/s with a burst of 10", allowed)
	}
}

func TestBucketEdges(t *testing.T) {
	for _, rate := range []float64{0, -1, math.Inf(1), math.NaN()} {
		b := newBucket(rate, 1)
		for i := 0; i < 1000; i++ {
			if !b.allow(0) {
				t.Fatalf("rate %v refused", rate)
			}
		}
	}
	// Tiny rates and huge bursts do not overflow.
	b := newBucket(1e-30, math.MaxInt)
	if !b.allow(0) || !b.allow(math.MaxInt64/2) {
		t.Fatal("tiny rate refused its burst")
	}
	b = newBucket(1e30, 0)
	for i := 0; i < 1000; i++ {
		if !b.allow(int64(i)) {
			t.Fatalf("huge rate refused at %d", i)
		}
	}
	// Time going backwards only makes the bucket stricter.
	b = newBucket(1, 1)
	if !b.allow(10*sec) || b.allow(5*sec) || b.allow(10*sec) || !b.allow(11*sec) {
		t.Fatal("backwards time")
	}
}
