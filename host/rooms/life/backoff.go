package life

// Snapshot writes that fail are tried again after a back-off that doubles
// from MinRetry to MaxRetry, so a store outage costs one attempt (and one
// log line) per room and step, not one per sweep. Durations here are
// nanoseconds, as the monotonic clock readings callers pass: the package
// does not import time.
const (
	MinRetry int64 = 1e9      // 1 s
	MaxRetry int64 = 5 * 60e9 // 5 minutes
)

// Retry is the delay, in nanoseconds, before the next attempt after
// failures failed writes in a row (failures ≥ 1).
func Retry(failures int) int64 {
	return min(MinRetry<<min(max(failures-1, 0), 20), MaxRetry)
}
