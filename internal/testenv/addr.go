package testenv

import (
	"net"
	"testing"
)

// FreeAddr is a loopback address with a port nothing listened on a moment
// ago: a dead peer for a test, or a port for a process to bind (someone
// else may take it first: bind with a retry).
func FreeAddr(t testing.TB) string {
	t.Helper()
	return FreeAddrOn(t, "127.0.0.1")
}

// FreeAddrOn is FreeAddr on host.
func FreeAddrOn(t testing.TB, host string) string {
	t.Helper()
	l, err := net.Listen("tcp", net.JoinHostPort(host, "0"))
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	return addr
}
