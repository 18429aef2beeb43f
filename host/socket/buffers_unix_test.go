//go:build unix

package socket

import (
	"context"
	"errors"
	"net"
	"syscall"
	"testing"
)

// buffers sets a socket's kernel receive and send buffers before it
// connects or listens: sockets accepted from a listener inherit them, and
// the TCP handshake then offers a window that fits. (Shrinking the receive
// buffer of a connected socket makes the kernel drop segments the peer was
// told would fit, and the retransmissions take 200 ms.)
func buffers(rcv, snd int) func(network, address string, c syscall.RawConn) error {
	return func(_, _ string, c syscall.RawConn) error {
		var err error
		cerr := c.Control(func(fd uintptr) {
			err = errors.Join(
				syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_RCVBUF, rcv),
				syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_SNDBUF, snd))
		})
		if cerr != nil {
			return cerr
		}
		return err
	}
}

// newTightServer is newServer whose sockets have kernel buffers of size
// bytes, so that a client that does not read leaves the server's writes
// waiting after a few KiB instead of megabytes (and the other way round).
func newTightServer(t testing.TB, size int, cfg Config, h Handler) *testServer {
	t.Helper()
	return newBufferedServer(t, size, size, cfg, h)
}

// newBufferedServer is newServer whose sockets have kernel buffers of rcv
// and snd bytes.
func newBufferedServer(t testing.TB, rcv, snd int, cfg Config, h Handler) *testServer {
	t.Helper()
	lc := net.ListenConfig{Control: buffers(rcv, snd)}
	ln, err := lc.Listen(context.Background(), "tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	return newServerOn(t, ln, cfg, h)
}

// dialTight is dial with kernel buffers of size bytes.
func dialTight(t testing.TB, url string, size int) *client {
	t.Helper()
	return dialBuffered(t, url, size, size)
}

// dialBuffered is dial with kernel buffers of rcv and snd bytes.
func dialBuffered(t testing.TB, url string, rcv, snd int) *client {
	t.Helper()
	return dialFrom(t, url, &net.Dialer{Control: buffers(rcv, snd)})
}
