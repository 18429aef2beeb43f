//go:build !linux

package memtest

import "syscall"

// dialControl does nothing where IP_BIND_ADDRESS_NO_PORT does not exist.
func dialControl(_, _ string, _ syscall.RawConn) error { return nil }
