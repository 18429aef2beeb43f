package engine

import (
	"errors"
	"log/slog"

	"github.com/wasmkeep/wasmkeep/abi"
)

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

// IsCrash reports whether err ended an instance's event or start: a trap,
// a timeout, the memory limit or an exit. The instance is dead then.
func IsCrash(err error) bool {
	return errors.Is(err, ErrTrap) || errors.Is(err, ErrTimeout) || errors.Is(err, ErrMemoryLimit) || errors.Is(err, ErrExit)
}

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

// LogLevel is the slog level of a guest's log line at level (abi.LogDebug
// to abi.LogError, as the log import takes it).
func LogLevel(level int) slog.Level {
	switch {
	case level <= abi.LogDebug:
		return slog.LevelDebug
	case level == abi.LogWarn:
		return slog.LevelWarn
	case level >= abi.LogError:
		return slog.LevelError
	}
	return slog.LevelInfo
}
