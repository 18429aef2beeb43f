package node

import (
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/wasmkeep/wasmkeep/abi"
	"github.com/wasmkeep/wasmkeep/host/rooms"
	"github.com/wasmkeep/wasmkeep/host/store"
	"github.com/wasmkeep/wasmkeep/internal/memtest"
	"github.com/wasmkeep/wasmkeep/internal/testenv"
	"github.com/wasmkeep/wasmkeep/internal/wstest"
)

// TestMaxResidentUnderConcurrency has 16 clients at once send requests to
// 2,000 new counter rooms with --max-resident 100. Evictions used to fall
// behind the wakes with nothing slowing the wakes down: thousands of rooms
// resident and gigabytes of memory. Now a wake takes one of the 100 places
// and waits for an eviction when there is none: at no moment are more
// than 100 rooms resident, and every request is answered (a refusal after
// --wake-wait would be a 503, which the clients retry).
//
// WASMKEEP_RESIDENT_NAMES sets another number of names (docs/PERFORMANCE.md
// measures 10,000). Under -race, 500 names (still four evictions for
// every place), where 2,000 took half a minute; CI runs the 2,000 again
// without it.
func TestMaxResidentUnderConcurrency(t *testing.T) {
	const clients, limit = 16, 100
	names := 2000
	if raceEnabled {
		names = 500
	}
	if v := os.Getenv("WASMKEEP_RESIDENT_NAMES"); v != "" {
		var err error
		if names, err = strconv.Atoi(v); err != nil || names < 1 {
			t.Fatalf("WASMKEEP_RESIDENT_NAMES=%q: want a count", v)
		}
	}
	n := startNode(t, Config{Rooms: rooms.Config{MaxResident: limit}})
	putClass(t, n, "counter", "./examples/counter")
	memtest.ResetPeakRSS(t)

	// A sampler sees the resident count as listings do; the manager also
	// keeps the exact peak.
	var sampled atomic.Int64
	done := make(chan struct{})
	var sampler sync.WaitGroup
	sampler.Add(1)
	go func() {
		defer sampler.Done()
		for {
			select {
			case <-done:
				return
			case <-time.After(time.Millisecond):
			}
			if r := int64(n.Rooms.Counts().Resident); r > sampled.Load() {
				sampled.Store(r)
			}
		}
	}()

	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: clients}}
	defer client.CloseIdleConnections()
	var next, refused atomic.Int64
	errs := make(chan error, clients)
	start := time.Now()
	var wg sync.WaitGroup
	for range clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := next.Add(1); i <= int64(names); i = next.Add(1) {
				for {
					resp, err := client.Post(fmt.Sprintf("%s/actor/counter/n%d", n.URL(), i), "text/plain", nil)
					if err != nil {
						errs <- err
						return
					}
					body, _ := io.ReadAll(resp.Body)
					resp.Body.Close()
					if resp.StatusCode == http.StatusServiceUnavailable && resp.Header.Get("Retry-After") != "" {
						refused.Add(1)
						continue
					}
					if resp.StatusCode != http.StatusOK || string(body) != "1" {
						errs <- fmt.Errorf("room n%d: %d %q", i, resp.StatusCode, body)
						return
					}
					break
				}
			}
		}()
	}
	wg.Wait()
	close(done)
	sampler.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	elapsed := time.Since(start)
	c := n.Rooms.Counts()
	t.Logf("%d clients, %d new rooms in %s: peak resident %d (sampled %d) of --max-resident %d, %d refusals retried, peak RSS %.0f MiB",
		clients, names, elapsed.Round(time.Millisecond), c.PeakResident, sampled.Load(), limit, refused.Load(), float64(memtest.PeakRSS(t))/(1<<20))
	if c.PeakResident > limit || sampled.Load() > limit {
		t.Fatalf("peak resident %d (sampled %d), over --max-resident %d", c.PeakResident, sampled.Load(), limit)
	}
	if c.Resident > limit {
		t.Fatalf("%d rooms resident after the run", c.Resident)
	}
}

// TestWakeRefusedWhenNoPlaceFrees fills every place under --max-resident
// with pinned rooms: a wake then waits --wake-wait and is refused, with 503
// and Retry-After for a request and 1013 for a socket, until a place
// frees up.
func TestWakeRefusedWhenNoPlaceFrees(t *testing.T) {
	n := startNode(t, Config{Rooms: rooms.Config{MaxResident: 2, WakeWait: 200 * time.Millisecond}})
	putClass(t, n, "echo", "./testdata/guests/echo")
	for _, name := range []string{"a", "b"} {
		expect(t, 200, "GET", n.URL()+"/actor/echo/"+name, nil)
		expect(t, 200, "POST", n.URL()+"/admin/rooms/echo/"+name+"/pin", nil)
	}
	r := do(t, "GET", n.URL()+"/actor/echo/c", nil)
	if r.Status != http.StatusServiceUnavailable || r.Header.Get("Retry-After") == "" {
		t.Fatalf("a wake with every place pinned: %d (Retry-After %q) %s", r.Status, r.Header.Get("Retry-After"), r.Body)
	}
	ws := wstest.Dial(t, n.URL()+"/actor/echo/d")
	ws.ExpectClose(abi.CloseTryAgainLater)
	if got := metric(t, n, "wasmkeep_room_wakes_refused_total"); got != 2 {
		t.Fatalf("wasmkeep_room_wakes_refused_total = %v, want 2", got)
	}
	expect(t, 200, "POST", n.URL()+"/admin/rooms/echo/a/unpin", nil)
	expect(t, 200, "GET", n.URL()+"/actor/echo/c", nil)
	if c := n.Rooms.Counts(); c.Resident > 2 || c.PeakResident > 2 {
		t.Fatalf("resident %d, peak %d: over --max-resident 2", c.Resident, c.PeakResident)
	}
}

// TestFailedHibernationsBackOff makes every snapshot write of a room fail
// (a full disk, say): the idle sweep used to try again at every tick, with
// an error logged each time. Now each room backs off, 1 s after the first
// failure and doubling, with one log line per attempt; once the store
// takes writes again, the room hibernates at its next attempt.
func TestFailedHibernationsBackOff(t *testing.T) {
	t.Parallel()
	faulty := store.WithFaults(store.NewMem(), nil)
	logs := &testenv.Buffer{}
	n := startNode(t, Config{Bucket: faulty, Logger: slog.New(slog.NewTextHandler(logs, nil)),
		Rooms: rooms.Config{IdleTimeout: 20 * time.Millisecond}})
	putHibernateClass(t, n, "counter", "./examples/counter") // written at hibernation only
	full := fmt.Errorf("no space left on device")
	faulty.SetFaults(func(op store.Op) store.Fault {
		if op.Kind == store.OpPut && strings.HasPrefix(op.Key, "rooms/") {
			return store.FailBefore(full)
		}
		return store.Fault{}
	})
	attempts := func() int { return strings.Count(logs.String(), "room snapshot write failed") }
	start := time.Now()
	expect(t, 200, "POST", n.URL()+"/actor/counter/a", nil)
	waitFor(t, "a second attempt", func() bool { return attempts() >= 2 })
	if d := time.Since(start); d < 900*time.Millisecond {
		t.Fatalf("%d attempts within %s: the sweep retries at every tick (every 10 ms here) instead of backing off", attempts(), d)
	}
	if row, _ := roomRowOf(t, n, "counter", "a"); row.State != "resident" {
		t.Fatalf("a room whose snapshot cannot be written: %+v, want resident", row)
	}
	faulty.SetFaults(nil)
	waitFor(t, "the room to hibernate once the store takes writes", func() bool {
		row, _ := roomRowOf(t, n, "counter", "a")
		return row.State == "hibernated"
	})
	if got := metric(t, n, "wasmkeep_snapshot_write_errors_total"); got != float64(attempts()) {
		t.Fatalf("%v failed writes counted, %d logged", got, attempts())
	}
}
