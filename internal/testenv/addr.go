package testenv

import (
	"math/rand/v2"
	"net"
	"os"
	"strconv"
	"strings"
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

// FreePortsOn is an address on host whose port and the n-1 after it
// nothing listened on a moment ago, for a process that binds consecutive
// ports (a demo cluster's nodes). The ports are below the kernel's range
// of ephemeral ports, which is where bind(0) and every outgoing
// connection take theirs: with the test's own connections in that range,
// the port after a free one found by bind(0) is often a connection's.
func FreePortsOn(t testing.TB, host string, n int) string {
	t.Helper()
	low := 32768 // Linux's default first ephemeral port
	if b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range"); err == nil {
		if f := strings.Fields(string(b)); len(f) == 2 {
			if v, err := strconv.Atoi(f[0]); err == nil && v > 2048+n {
				low = v
			}
		}
	}
	for range 200 {
		base := 1024 + rand.IntN(low-1024-n)
		var ls []net.Listener
		for p := base; p < base+n; p++ {
			l, err := net.Listen("tcp", net.JoinHostPort(host, strconv.Itoa(p)))
			if err != nil {
				break
			}
			ls = append(ls, l)
		}
		for _, l := range ls {
			l.Close()
		}
		if len(ls) == n {
			return net.JoinHostPort(host, strconv.Itoa(base))
		}
	}
	t.Fatalf("no %d free ports in a row on %s", n, host)
	return ""
}
