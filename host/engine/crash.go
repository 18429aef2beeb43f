package engine

import "errors"

// Crash causes: what ended an instance's event, as the metrics of rooms
// and fronts label their crashes.
const (
	CauseTrap    = "trap"
	CauseTimeout = "timeout"
	CauseMemory  = "memory"
	CauseExit    = "exit"
)

// CrashCauses are every cause CrashCause gives.
var CrashCauses = []string{CauseTrap, CauseTimeout, CauseMemory, CauseExit}

// CrashCause names the cause of err, an error an event (or a start) of
// an instance ended with: ErrTimeout, ErrMemoryLimit and ErrExit have
// causes of their own, and anything else is a trap.
func CrashCause(err error) string {
	switch {
	case errors.Is(err, ErrTimeout):
		return CauseTimeout
	case errors.Is(err, ErrMemoryLimit):
		return CauseMemory
	case errors.Is(err, ErrExit):
		return CauseExit
	}
	return CauseTrap
}
