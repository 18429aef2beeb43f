//go:build unix

package main

import (
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestRoomsWatch: `rooms --watch` writes the table again every --interval,
// one after the other when its output is not a terminal, shows changes
// between refreshes, and ends with exit code 0 on SIGINT.
func TestRoomsWatch(t *testing.T) {
	t.Parallel()
	counter := guestFile(t, "./examples/counter")
	n := serveNode(t, t.TempDir())
	n.ok("class", "put", "counter", counter)
	expectHTTP(t, 200, "POST", n.url+"/actor/counter/a")

	w := spawn(t, "", nil, "rooms", "--server", n.url, "--watch", "--interval", "200ms")
	const header = "CLASS    NAME  STATE"
	frames := func() []string {
		// Each frame: its title line, a blank line, the table, a blank line.
		return strings.Split(strings.TrimSpace(w.stdout.String()), "\n\nEvery ")
	}
	w.waitOutput(header, time.Minute)
	first := frames()[0]
	if !strings.HasPrefix(first, "Every 200ms: wasmkeep rooms --server "+n.url) || !strings.Contains(first, "counter  a     resident") {
		t.Fatalf("first frame:\n%s", first)
	}

	// A room hibernated meanwhile shows so in a later frame.
	n.ok("rooms", "hibernate", "counter", "a")
	deadline := time.Now().Add(time.Minute)
	for !strings.Contains(frames()[len(frames())-1], "counter  a     hibernated") {
		if time.Now().After(deadline) || !w.running() {
			t.Fatalf("no frame shows the room hibernated:\n%s", w.stdout.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
	w.signal(syscall.SIGINT)
	if code := w.wait(stopDeadline); code != 0 {
		t.Fatalf("rooms --watch exited with %d on SIGINT, want 0; stderr:\n%s", code, w.stderr.String())
	}
	out := w.stdout.String()
	if got := strings.Count(out, "CLASS    NAME"); got < 2 {
		t.Fatalf("%d tables, want at least 2:\n%s", got, out)
	}
	if strings.Contains(out, "\x1b[") {
		t.Fatalf("escape sequences in output that is not a terminal:\n%q", out)
	}

	// --interval must be positive.
	if r := wk(t, nil, "rooms", "--server", n.url, "--watch", "--interval", "0s"); r.code != 2 || !strings.Contains(r.stderr, "--interval must be more than 0, not 0s") {
		t.Fatalf("--interval 0s: %v", r)
	}
}
