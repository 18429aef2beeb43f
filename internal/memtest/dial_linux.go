package memtest

import (
	"syscall"

	"golang.org/x/sys/unix"
)

// dialControl sets IP_BIND_ADDRESS_NO_PORT on a socket bound to a given
// local address before it connects: without it, bind picks a port that is
// free for every destination, and a few tens of thousands of sockets from
// one address exhaust the range; with it, the port is picked at connect,
// free for this destination only.
func dialControl(_, _ string, c syscall.RawConn) error {
	var serr error
	err := c.Control(func(fd uintptr) {
		serr = unix.SetsockoptInt(int(fd), unix.IPPROTO_IP, unix.IP_BIND_ADDRESS_NO_PORT, 1)
	})
	if err != nil {
		return err
	}
	return serr
}
