//go:build !linux

package loadgen

import (
	"errors"
	"time"
)

// processCPU is only implemented on Linux: elsewhere runs report no CPU
// figures.
func processCPU(pid int) (time.Duration, error) {
	return 0, errors.New("process CPU times are read from /proc (Linux only)")
}
