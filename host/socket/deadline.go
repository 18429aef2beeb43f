package socket

import "time"

// at turns a reading t of the hub's clock into a deadline for the network.
// The kernel's deadlines are on the real clock whatever clock the hub runs
// on, so t is taken as an offset from the hub clock's now. This file is the
// one place of the package that reads the real clock (internal/archtest).
func (h *Hub) at(t int64) time.Time {
	return time.Now().Add(time.Duration(t - h.now()))
}
