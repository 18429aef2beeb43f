//go:build unix

package socket

import "syscall"

// tryWrite writes as much of p as the socket takes right now, without ever
// waiting: the descriptor is non-blocking (Go's poller made it so) and the
// callback always reports done, so RawConn.Write never parks. It returns
// the bytes written and an error only if the connection failed; a full
// kernel buffer is not an error. It fails without writing when the socket
// has no raw connection or its write deadline has passed.
func (c *Conn) tryWrite(p []byte) (int, error) {
	if c.raw == nil {
		return 0, errNoInline
	}
	n := 0
	var werr error
	err := c.raw.Write(func(fd uintptr) bool {
		for n < len(p) {
			m, e := syscall.Write(int(fd), p[n:])
			if m > 0 {
				n += m
			}
			if e == syscall.EINTR {
				continue
			}
			if e != nil {
				if e != syscall.EAGAIN {
					werr = e
				}
				break
			}
			if m <= 0 {
				break
			}
		}
		return true
	})
	if err != nil {
		return n, err
	}
	return n, werr
}
