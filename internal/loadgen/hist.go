package loadgen

import (
	"math"
	"math/bits"
	"time"
)

// Histogram counts durations (in nanoseconds) in log-linear buckets: values
// below 128 exactly, larger ones in buckets 1/64 of their power of two wide,
// so that a quantile is reported within 1/128 of the value it stands for.
// Rows of buckets are allocated as values reach them: a socket's histogram
// costs a few KiB. Not safe for concurrent use: each receiving socket has
// its own, merged at the end.
type Histogram struct {
	rows  [][]uint64 // rows[0]: values 0–127; rows[e], e ≥ 1: [64<<e, 128<<e) in 64 buckets
	count uint64
	sum   float64
	min   int64
	max   int64
}

const (
	subBits  = 7
	rowZero  = 1 << subBits       // values counted exactly
	rowWidth = 1 << (subBits - 1) // buckets in each later row
)

// bucket returns where v is counted.
func bucket(v uint64) (row, idx int) {
	if v < rowZero {
		return 0, int(v)
	}
	e := bits.Len64(v) - subBits
	return e, int(v>>uint(e)) - rowWidth
}

// span returns the smallest and largest value of a bucket.
func span(row, idx int) (lo, hi uint64) {
	if row == 0 {
		return uint64(idx), uint64(idx)
	}
	lo = uint64(idx+rowWidth) << uint(row)
	return lo, lo + 1<<uint(row) - 1
}

// Record counts one duration; negative ones count as 0.
func (h *Histogram) Record(d time.Duration) {
	v := max(int64(d), 0)
	row, idx := bucket(uint64(v))
	for len(h.rows) <= row {
		h.rows = append(h.rows, nil)
	}
	if h.rows[row] == nil {
		n := rowWidth
		if row == 0 {
			n = rowZero
		}
		h.rows[row] = make([]uint64, n)
	}
	h.rows[row][idx]++
	if h.count == 0 || v < h.min {
		h.min = v
	}
	if v > h.max {
		h.max = v
	}
	h.count++
	h.sum += float64(v)
}

// Merge adds o's counts to h.
func (h *Histogram) Merge(o *Histogram) {
	if o.count == 0 {
		return
	}
	for len(h.rows) < len(o.rows) {
		h.rows = append(h.rows, nil)
	}
	for r, row := range o.rows {
		if row == nil {
			continue
		}
		if h.rows[r] == nil {
			h.rows[r] = make([]uint64, len(row))
		}
		for i, n := range row {
			h.rows[r][i] += n
		}
	}
	if h.count == 0 || o.min < h.min {
		h.min = o.min
	}
	h.max = max(h.max, o.max)
	h.count += o.count
	h.sum += o.sum
}

// Count returns the number of durations recorded.
func (h *Histogram) Count() uint64 { return h.count }

// Max returns the largest duration recorded, exactly.
func (h *Histogram) Max() time.Duration { return time.Duration(h.max) }

// Mean returns the mean duration.
func (h *Histogram) Mean() time.Duration {
	if h.count == 0 {
		return 0
	}
	return time.Duration(math.Round(h.sum / float64(h.count)))
}

// Quantile returns the q-quantile (0 < q ≤ 1) by nearest rank: the value of
// the ceil(q·n)-th smallest duration, as the middle of its bucket (exact
// below 128 ns, within 1/128 above) and never outside the recorded minimum
// and maximum. It is 0 when nothing was recorded.
func (h *Histogram) Quantile(q float64) time.Duration {
	if h.count == 0 {
		return 0
	}
	rank := uint64(math.Ceil(q * float64(h.count)))
	rank = min(max(rank, 1), h.count)
	var seen uint64
	for r, row := range h.rows {
		for i, n := range row {
			seen += n
			if seen >= rank {
				lo, hi := span(r, i)
				v := int64(lo + (hi-lo)/2)
				return time.Duration(min(max(v, h.min), h.max))
			}
		}
	}
	return time.Duration(h.max)
}
