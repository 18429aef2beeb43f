//go:build !linux

package socket

import (
	"errors"
	"syscall"
)

// epollSupported: ReadAuto and ReadEpoll mean ReadGoroutine here.
const epollSupported = false

// poller is Linux only; elsewhere a hub has none.
type poller struct{}

func newPoller(*Hub) (*poller, error) { return nil, errors.New("socket: epoll is Linux only") }

func (*poller) add(*Conn) syscall.RawConn { return nil }
func (*poller) remove(syscall.RawConn)    {}
func (*poller) close()                    {}
func (*Conn) fill() error                 { return errAgain }
