package loadgen

import "time"

// pacer spaces one sender's messages evenly: message i is due at
// phase + i·interval after the start. Senders of one run get phases spread
// over one interval, so that the total rate is smooth rather than in bursts
// of one message per sender. A sender that falls behind (its window was
// full) catches up with what is due, never more.
type pacer struct {
	interval time.Duration // > 0
	phase    time.Duration // in [0, interval)
}

// newPacer returns the pacer of sender k of n when the run sends rate
// messages a second in total.
func newPacer(rate, k, n int) pacer {
	interval := time.Duration(float64(time.Second) * float64(n) / float64(rate))
	interval = max(interval, 1)
	return pacer{interval: interval, phase: time.Duration(int64(interval) * int64(k) / int64(n))}
}

// at returns when message i is due.
func (p pacer) at(i int64) time.Duration { return p.phase + time.Duration(i)*p.interval }

// due returns how many messages are due by elapsed: those with at(i) ≤
// elapsed.
func (p pacer) due(elapsed time.Duration) int64 {
	if elapsed < p.phase {
		return 0
	}
	return int64((elapsed-p.phase)/p.interval) + 1
}
