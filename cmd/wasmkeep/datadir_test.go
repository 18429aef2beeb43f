//go:build unix

package main

import (
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// refusedWithin bounds how long a second node on a data directory in use
// may take to give up.
const refusedWithin = 5 * time.Second

// TestOneNodePerDataDir: while a node serves, other nodes started on its
// --data (serve or demo) exit non-zero within 5 s, saying which process
// holds the directory, and the first goes on serving without losing a
// write: each refusal comes in the middle of a stream of acknowledged
// increments, and a clean stop keeps them all. A node killed with SIGKILL
// leaves the directory free for the next.
func TestOneNodePerDataDir(t *testing.T) {
	t.Parallel()
	counter := guestFile(t, "./examples/counter")
	data := t.TempDir()
	first := serveNode(t, data)
	first.ok("class", "put", "counter", counter)
	host, err := os.Hostname()
	if err != nil {
		t.Fatal(err)
	}
	holder := func(p *proc) string {
		return fmt.Sprintf("wasmkeep: data directory %s is in use by wasmkeep pid %d on host %s (started ", data, p.cmd.Process.Pid, host)
	}

	client := &http.Client{Timeout: commandDeadline}
	acked := 0
	increment := func(p *proc) {
		t.Helper()
		status, body, err := send(client, "POST", p.url+"/actor/counter/c", nil)
		if err != nil || status != 200 || body != strconv.Itoa(acked+1) {
			t.Fatalf("POST %s/actor/counter/c: %d %q %v, want %d", p.url, status, body, err, acked+1)
		}
		acked++
	}
	for i, command := range []string{"serve", "serve", "demo", "serve"} {
		increment(first)
		start := time.Now()
		second := spawn(t, moduleRoot(t), nil, command, "--data", data, "--listen", freeAddr(t))
		select {
		case <-second.exited:
		case <-time.After(refusedWithin):
			t.Fatalf("attempt %d: wasmkeep %s on a data directory in use still runs after %v", i, command, refusedWithin)
		}
		code, log := second.cmd.ProcessState.ExitCode(), second.stderr.String()
		if code == 0 || !strings.Contains(log, holder(first)) || !strings.Contains(log, "; stop it or use another --data\n") {
			t.Fatalf("attempt %d: wasmkeep %s on a data directory in use: exit code %d after %v, stderr:\n%s\nwant a non-zero code and %q",
				i, command, code, time.Since(start).Round(time.Millisecond), log, holder(first))
		}
		increment(first)
	}
	if _, err := os.Stat(filepath.Join(data, "examples")); !os.IsNotExist(err) {
		t.Errorf("the refused demo built its examples into the data directory (%v)", err)
	}

	first.signal(syscall.SIGTERM)
	if code := first.wait(stopDeadline); code != 0 {
		t.Fatalf("after SIGTERM: exit code %d, want 0", code)
	}
	next := serveNode(t, data)
	increment(next) // every acknowledged increment is there

	// SIGKILL: no clean stop, and the hold file stays behind, naming the
	// dead node. It holds nothing.
	next.signal(syscall.SIGKILL)
	next.wait(stopDeadline)
	if b, err := os.ReadFile(filepath.Join(data, "node.lock")); err != nil || !strings.Contains(string(b), fmt.Sprintf(`"pid":%d,`, next.cmd.Process.Pid)) {
		t.Fatalf("node.lock after a SIGKILL: %q, %v", b, err)
	}
	last := serveNode(t, data)
	expectHTTP(t, 200, "POST", last.url+"/actor/counter/c")
}
