//go:build unix

package node

import (
	"syscall"
	"time"
)

// processCPU is the CPU time the process has used, user and system, or
// false if the OS does not tell.
func processCPU() (time.Duration, bool) {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0, false
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano()), true
}
