package node

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/wasmkeep/wasmkeep/host/engine"
	"github.com/wasmkeep/wasmkeep/internal/wstest"
)

// TestSocketHandlerTraps: a guest that traps in a socket's open or close
// event. The subtests share one node (and one compilation of the class),
// each with its own room; crash counts are taken as differences.
func TestSocketHandlerTraps(t *testing.T) {
	n := startNode(t, Config{DataDir: t.TempDir()})
	putHibernateClass(t, n, "hostile", "./testdata/guests/hostile") // a crash goes back to the last hibernation
	crashes := func(t *testing.T) float64 { return metric(t, n, `wasmkeep_room_crashes_total{cause="trap"}`) }
	echo := func(t *testing.T, c *wstest.Client, msg string) {
		t.Helper()
		c.Send(msg)
		if got := c.ReadText(); got != msg {
			t.Fatalf("echo of %q: %q", msg, got)
		}
	}

	// A trap in the open event closes that socket with 1011 and rolls the
	// room back to its last snapshot; its other sockets and its requests
	// carry on.
	t.Run("open", func(t *testing.T) {
		room := n.URL() + "/actor/hostile/open"
		base := crashes(t)
		expect(t, 200, "POST", room, nil)
		hibernate(t, n, "hostile", "open") // snapshot at 1
		expect(t, 200, "POST", room, nil)  // 2, not in the snapshot

		b := wstest.Dial(t, room)
		echo(t, b, "before")
		a := wstest.Dial(t, room+"/trap-open")
		a.ExpectClose(1011)
		if got := crashes(t) - base; got != 1 {
			t.Fatalf("%v crashes, want 1", got)
		}
		if got := expect(t, 200, "GET", room, nil); got != "1" {
			t.Fatalf("after the trap in open the room should be back at its snapshot (1), got %q", got)
		}
		// The socket opened before the crash is still the room's: waking
		// replayed its open (the snapshot predates it), and it echoes.
		echo(t, b, "after")
		c := wstest.Dial(t, room)
		echo(t, c, "new")
		if got := expect(t, 200, "POST", room, nil); got != "2" {
			t.Fatalf("counting after the crash: %q, want 2", got)
		}
		row, _ := roomRowOf(t, n, "hostile", "open")
		if row.State != "resident" || row.Sockets != 2 {
			t.Fatalf("room after the crash: %+v, want resident with 2 sockets", row)
		}
		if got := crashes(t) - base; got != 1 {
			t.Fatalf("%v crashes after recovery, want still 1", got)
		}
	})

	// The trapping socket is the room's only one, so the room is dropped
	// from memory once it sleeps: the close must not come back at every
	// wake.
	t.Run("close of the only socket", func(t *testing.T) {
		room := n.URL() + "/actor/hostile/lone"
		base := crashes(t)
		a := wstest.Dial(t, room+"?trap-close=1")
		echo(t, a, "a")
		expect(t, 200, "POST", room, nil)
		hibernate(t, n, "hostile", "lone") // snapshot at 1, knowing a
		a.Close(1000)
		waitFor(t, "the close of a to wake and crash the room", func() bool { return crashes(t) > base })
		waitFor(t, "the room to be resident without sockets", func() bool {
			row, _ := roomRowOf(t, n, "hostile", "lone")
			return row.State == "resident" && row.Sockets == 0
		})
		for i := range 4 {
			hibernate(t, n, "hostile", "lone")
			if got := expect(t, 200, "GET", room, nil); got != "1" {
				t.Fatalf("wake %d: %q, want 1", i, got)
			}
		}
		// The wake that skipped the close delivered nothing else, so the
		// hibernation after it wrote no new snapshot: the first wake after
		// the room was dropped from memory replays the close once more
		// (and skips it again). Never more than that.
		if got := crashes(t) - base; got > 2 {
			t.Fatalf("%v crashes: the trapping close is replayed at wakes", got)
		}
	})

	// A trap in the close event is survived, whether the room was resident
	// when the socket closed or was woken by the close; the other socket is
	// fine, and the close is not replayed at every later wake, across
	// hibernations and a restart.
	t.Run("close", func(t *testing.T) {
		room := n.URL() + "/actor/hostile/h"
		a := wstest.Dial(t, room+"?trap-close=1")
		b := wstest.Dial(t, room)
		echo(t, a, "a")
		echo(t, b, "b")
		expect(t, 200, "POST", room, nil)
		hibernate(t, n, "hostile", "h")   // snapshot at 1, knowing a and b
		expect(t, 200, "POST", room, nil) // 2, resident
		base := crashes(t)
		a.Close(1000) // while resident
		waitFor(t, "the close of a to crash the room", func() bool { return crashes(t) > base })
		if got := expect(t, 200, "GET", room, nil); got != "1" {
			t.Fatalf("after the trap in close the room should be back at its snapshot (1), got %q", got)
		}
		echo(t, b, "b still here")
		// The close crashed the live room, and again when the wake
		// replayed it to the rolled-back guest; then it was skipped.
		settled := crashes(t)
		t.Logf("crashes from the close of a resident room's socket: %v", settled-base)
		if row, _ := roomRowOf(t, n, "hostile", "h"); row.State != "resident" || row.Sockets != 1 {
			t.Fatalf("room after the crash: %+v, want resident with 1 socket", row)
		}
		for i := range 3 {
			hibernate(t, n, "hostile", "h")
			if got := expect(t, 200, "GET", room, nil); got != "1" {
				t.Fatalf("wake %d: %q, want 1", i, got)
			}
			echo(t, b, "b after a wake")
		}
		if got := crashes(t); got != settled {
			t.Fatalf("crashes went from %v to %v over later wakes: the trapping close is replayed", settled, got)
		}

		c := wstest.Dial(t, room+"?trap-close=1")
		echo(t, c, "c")
		hibernate(t, n, "hostile", "h") // snapshot knowing b and c
		before := crashes(t)
		c.Close(1000) // while hibernated: the close wakes the room
		waitFor(t, "the close of c to wake and crash the room", func() bool { return crashes(t) > before })
		if got := expect(t, 200, "POST", room, nil); got != "2" {
			t.Fatalf("after the trap in a close that woke the room: %q, want 2", got)
		}
		echo(t, b, "b after c")
		settled = crashes(t)
		for i := range 3 {
			hibernate(t, n, "hostile", "h")
			if got := expect(t, 200, "GET", room, nil); got != "2" {
				t.Fatalf("wake %d after c: %q, want 2", i, got)
			}
			echo(t, b, "b after a wake")
		}
		if got := crashes(t); got != settled {
			t.Fatalf("crashes went from %v to %v over later wakes: the trapping close is replayed", settled, got)
		}

		// A restart closes b (1012); the room hears of it when it wakes
		// and has nothing left to replay.
		dir := n.cfg.DataDir
		stopped := make(chan error, 1)
		go func() { stopped <- n.Stop(t.Context()) }()
		b.ExpectClose(1012)
		if err := <-stopped; err != nil {
			t.Fatal(err)
		}
		n.http = nil
		n = startNode(t, Config{DataDir: dir})
		room = n.URL() + "/actor/hostile/h"
		if got := expect(t, 200, "GET", room, nil); got != "2" {
			t.Fatalf("after a restart: %q, want 2", got)
		}
		if got := crashes(t); got != 0 {
			t.Fatalf("%v crashes after the restart: a trapping close was replayed", got)
		}
		echo(t, wstest.Dial(t, room), "d")
	})
}

// TestSleepForeverHitsTimeLimit: a guest blocked in the host's nanosleep is
// cut short by the event time limit like a busy loop: 500 "time limit",
// promptly, and the room rolls back to its snapshot.
func TestSleepForeverHitsTimeLimit(t *testing.T) {
	n := startNode(t, Config{Engine: engine.Config{EventTimeout: 300 * time.Millisecond}})
	putHibernateClass(t, n, "hostile", "./testdata/guests/hostile")
	room := n.URL() + "/actor/hostile/h"
	expect(t, 200, "POST", room, nil)
	hibernate(t, n, "hostile", "h")
	expect(t, 200, "POST", room, nil) // 2, not in the snapshot

	// Generous: the point is that it returns at all, not how fast.
	ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
	defer cancel()
	start := time.Now()
	status, body, err := doCtx(ctx, "POST", room+"/sleep-forever", nil)
	took := time.Since(start)
	if err != nil {
		t.Fatalf("/sleep-forever did not answer within the deadline (%v): %v", took, err)
	}
	t.Logf("/sleep-forever answered %d after %v (event timeout 300ms)", status, took)
	if status != 500 || !strings.Contains(body, "time limit") {
		t.Fatalf("/sleep-forever: %d %s", status, body)
	}
	if got := metric(t, n, `wasmkeep_room_crashes_total{cause="timeout"}`); got != 1 {
		t.Fatalf("crashes{cause=timeout} = %v, want 1", got)
	}
	if got := expect(t, 200, "GET", room, nil); got != "1" {
		t.Fatalf("after the timeout: %q, want the snapshot's 1", got)
	}
	// Another room was not held up.
	expect(t, 200, "POST", n.URL()+"/actor/hostile/other", nil)
}

// doCtx does a request bounded by ctx and returns the status and body.
func doCtx(ctx context.Context, method, url string, body []byte) (int, string, error) {
	req, err := http.NewRequestWithContext(ctx, method, url, bytes.NewReader(body))
	if err != nil {
		return 0, "", err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	return resp.StatusCode, string(data), err
}
