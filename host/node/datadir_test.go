package node

import (
	"context"
	"fmt"
	"os"
	"strings"
	"testing"
)

// TestOneNodePerDataDir: a second node on a data directory in use is
// refused, with an error naming the first, which goes on serving; once
// the first has stopped, a node starts there and has its state.
func TestOneNodePerDataDir(t *testing.T) {
	dir := t.TempDir()
	first := startNode(t, Config{DataDir: dir})
	putClass(t, first, "counter", "./examples/counter")
	expect(t, 200, "POST", first.URL()+"/actor/counter/c", nil)

	second, err := Start(context.Background(), Config{DataDir: dir, Listen: "127.0.0.1:0", Logger: quietLogger()})
	if err == nil {
		_ = second.Stop(context.Background())
		t.Fatal("a second node started on a data directory in use")
	}
	host, _ := os.Hostname()
	if want := fmt.Sprintf("data directory %s is in use by wasmkeep pid %d on host %s (started ", dir, os.Getpid(), host); !strings.HasPrefix(err.Error(), want) {
		t.Fatalf("second node: %v\nwant an error starting %q", err, want)
	}
	if got := expect(t, 200, "POST", first.URL()+"/actor/counter/c", nil); got != "2" {
		t.Fatalf("the first node after the refusal: %q, want 2", got)
	}

	stop(t, first)
	third := startNode(t, Config{DataDir: dir})
	if got := expect(t, 200, "POST", third.URL()+"/actor/counter/c", nil); got != "3" {
		t.Fatalf("a node started after the first stopped: %q, want 3", got)
	}
}
