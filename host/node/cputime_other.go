//go:build !unix

package node

import "time"

// processCPU: this OS's CPU time is not read here; reclaims are charged
// their wall time.
func processCPU() (time.Duration, bool) { return 0, false }
