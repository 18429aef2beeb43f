package loadgen

import (
	"math"
	"math/rand/v2"
	"slices"
	"testing"
	"time"
)

// nearestRank is the q-quantile of sorted values by nearest rank: the
// ceil(q·n)-th smallest.
func nearestRank(sorted []time.Duration, q float64) time.Duration {
	rank := int(math.Ceil(q * float64(len(sorted))))
	return sorted[min(max(rank, 1), len(sorted))-1]
}

func TestQuantileExactBelow128(t *testing.T) {
	var h Histogram
	for v := 100; v >= 1; v-- { // order does not matter
		h.Record(time.Duration(v))
	}
	for _, c := range []struct {
		q    float64
		want time.Duration
	}{
		{0.001, 1}, {0.01, 1}, {0.5, 50}, {0.505, 51}, {0.9, 90}, {0.99, 99}, {0.999, 100}, {1, 100},
	} {
		if got := h.Quantile(c.q); got != c.want {
			t.Errorf("Quantile(%v) of 1..100 = %d, want %d", c.q, got, c.want)
		}
	}
	if h.Count() != 100 || h.Max() != 100 || h.Mean() != 51 { // 50.5, rounded
		t.Errorf("count %d, max %d, mean %d; want 100, 100, 51", h.Count(), h.Max(), h.Mean())
	}
	var empty Histogram
	if empty.Quantile(0.5) != 0 || empty.Max() != 0 || empty.Mean() != 0 {
		t.Error("an empty histogram reports non-zero figures")
	}
}

// TestQuantileWithinBucket: every quantile is within 1/128 of the exact
// nearest-rank value, over latencies from 1 µs to 10 s, and merging
// histograms gives the histogram of the union.
func TestQuantileWithinBucket(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	var all []time.Duration
	parts := make([]Histogram, 4)
	for i := range 50000 {
		// Log-uniform between 1 µs and 10 s, plus a few exact small ones.
		v := time.Duration(math.Exp(rng.Float64()*math.Log(1e7)) * 1e3)
		if i%1000 == 0 {
			v = time.Duration(i % 128)
		}
		all = append(all, v)
		parts[i%len(parts)].Record(v)
	}
	var h Histogram
	for i := range parts {
		h.Merge(&parts[i])
	}
	slices.Sort(all)
	if h.Count() != uint64(len(all)) || h.Max() != all[len(all)-1] {
		t.Fatalf("count %d, max %v; want %d, %v", h.Count(), h.Max(), len(all), all[len(all)-1])
	}
	for _, q := range []float64{0.0001, 0.01, 0.1, 0.25, 0.5, 0.75, 0.9, 0.99, 0.999, 0.9999, 1} {
		want := nearestRank(all, q)
		got := h.Quantile(q)
		if diff := math.Abs(float64(got - want)); diff > float64(want)/128+1 {
			t.Errorf("Quantile(%v) = %v, exact %v: off by %.3f%%", q, got, want, 100*diff/float64(want))
		}
	}
}

func TestBuckets(t *testing.T) {
	// Every value falls in a bucket whose span holds it, and buckets are
	// in order.
	prevRow, prevIdx := 0, -1
	for v := uint64(0); v < 1<<16; v++ {
		row, idx := bucket(v)
		lo, hi := span(row, idx)
		if v < lo || v > hi {
			t.Fatalf("value %d in bucket (%d, %d) spanning %d–%d", v, row, idx, lo, hi)
		}
		if row < prevRow || (row == prevRow && idx < prevIdx) {
			t.Fatalf("value %d in bucket (%d, %d), before the previous value's (%d, %d)", v, row, idx, prevRow, prevIdx)
		}
		prevRow, prevIdx = row, idx
		if row > 0 && float64(hi-lo+1)/float64(lo) > 1.0/64 {
			t.Fatalf("bucket of %d is %d wide from %d: more than 1/64", v, hi-lo+1, lo)
		}
	}
	for _, v := range []uint64{1 << 40, 1<<63 - 1, 1<<64 - 1} {
		row, idx := bucket(v)
		if lo, hi := span(row, idx); v < lo || v > hi {
			t.Fatalf("value %d in bucket spanning %d–%d", v, lo, hi)
		}
	}
}

func TestPayload(t *testing.T) {
	p := newPayload(64)
	h := header{run: 0xdeadbeef, stream: 7, seq: 1<<32 - 1, sent: 123456789012}
	encode(p, h)
	got, ok := decode(p)
	if !ok || got != h {
		t.Fatalf("decode(encode(%+v)) = %+v, %v", h, got, ok)
	}
	if string(p[40:]) != "xxxxxxxxxxxxxxxxxxxxxxxx" {
		t.Fatalf("padding %q", p[40:])
	}
	for _, bad := range []string{"", "open /?", "wkb1" + "zzzzzzzz" + string(p[12:]), string(p[:39])} {
		if _, ok := decode([]byte(bad)); ok {
			t.Errorf("decode(%q) accepted", bad)
		}
	}
}

// TestPacer: the senders of a run together are due rate·t messages by t,
// give or take one each, and never one before its time.
func TestPacer(t *testing.T) {
	for _, c := range []struct{ rate, senders int }{{1000, 1}, {1000, 10}, {7, 100}, {100000, 1000}, {3, 3}} {
		ps := make([]pacer, c.senders)
		for k := range ps {
			ps[k] = newPacer(c.rate, k, c.senders)
		}
		for _, el := range []time.Duration{0, time.Millisecond, 333 * time.Millisecond, time.Second, 10 * time.Second} {
			var due int64
			for _, p := range ps {
				n := p.due(el)
				due += n
				if n > 0 && p.at(n-1) > el {
					t.Fatalf("rate %d: message %d due at %v, counted due by %v", c.rate, n-1, p.at(n-1), el)
				}
				if p.at(n) <= el {
					t.Fatalf("rate %d: message %d due at %v, not counted due by %v", c.rate, n, p.at(n), el)
				}
			}
			want := float64(c.rate) * el.Seconds()
			if math.Abs(float64(due)-want) > float64(c.senders) {
				t.Errorf("rate %d over %d senders: %d due by %v, want %.0f ± %d", c.rate, c.senders, due, el, want, c.senders)
			}
		}
	}
}
