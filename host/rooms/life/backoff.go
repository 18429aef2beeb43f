package life

import "time"

// Snapshot writes that fail are tried again after a back-off that doubles
// from MinRetry to MaxRetry, so a store outage costs one attempt (and one
// log line) per room and step, not one per sweep.
const (
	MinRetry = time.Second
	MaxRetry = 5 * time.Minute
)

// Retry is the delay before the next attempt after failures failed writes
// in a row (failures ≥ 1).
func Retry(failures int) time.Duration {
	return min(MinRetry<<min(max(failures-1, 0), 20), MaxRetry)
}
