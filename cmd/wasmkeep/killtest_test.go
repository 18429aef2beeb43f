//go:build unix

package main

import (
	"bytes"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/wasmkeep/wasmkeep/host/server"
	"github.com/wasmkeep/wasmkeep/internal/kvmodel"
	"github.com/wasmkeep/wasmkeep/internal/testwasm"
)

// envKillSeed replays TestKillConsistency's random choices (values, keys,
// kill points); the timing of the kills is the machine's.
const envKillSeed = "WASMKEEP_KILL_SEED"

// kvState is one state of a kv room.
type kvState = kvmodel.State

// killRoom is what the test knows of one room during a round. Only its
// writer touches it while the node runs.
type killRoom struct {
	cur *kvState
	// history holds the states the room had at acknowledged points since
	// the round began: first the state it was restored to, then one per
	// acknowledged write.
	history []*kvState
	// pending is the state after a write whose answer never came (the
	// node was killed): the room may have reached and even stored it.
	pending *kvState
}

// TestKillConsistency: a real `wasmkeep serve` hibernates kv rooms all the
// time (50 ms idle timeout, 4 resident of 16) while writers drive them; it
// is killed with SIGKILL at a random point, several times, and restarted on
// the same data directory. After every restart each room must answer
// GET /state with 200 and a state it really had at an acknowledged point of
// the round before (or the one unacknowledged write in flight at the kill):
// never garbage, an error, or a state older than the round's start. A last
// clean stop must keep every room's latest state exactly.
func TestKillConsistency(t *testing.T) {
	t.Parallel()
	seed := uint64(time.Now().UnixNano())
	if s := os.Getenv(envKillSeed); s != "" {
		v, err := strconv.ParseUint(s, 10, 64)
		if err != nil {
			t.Fatalf("%s=%q: %v", envKillSeed, s, err)
		}
		seed = v
	}
	t.Logf("seed %d (replay with %s=%d)", seed, envKillSeed, seed)
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("seed %d (replay with %s=%d)", seed, envKillSeed, seed)
		}
	})
	rng := rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))

	rounds := 8
	if testing.Short() || raceEnabled {
		rounds = 3
	}
	const (
		nRooms   = 16
		nWriters = 4
		nKeys    = 6
	)
	data := t.TempDir()
	args := []string{"--data", data, "--idle-timeout", "50ms", "--max-resident", "4", "--log-level", "warn"}
	// Generous: an upload compiles the module, slow in a -race node, and
	// requests fail at once when the node is killed.
	client := &http.Client{Timeout: commandDeadline}
	wasm := testwasm.Build(t, "./testdata/guests/kv")

	empty := kvmodel.Empty
	rooms := make([]killRoom, nRooms)
	for i := range rooms {
		rooms[i] = killRoom{cur: empty, history: []*kvState{empty}}
	}
	roomURL := func(p *proc, i int) string { return fmt.Sprintf("%s/actor/kv/r%02d", p.url, i) }

	var hibernations float64
	for round := range rounds + 1 {
		p := startNode(t, nodeOpts{args: args})
		if round == 0 {
			status, body, err := send(client, "PUT", p.url+"/admin/classes/kv", wasm)
			if err != nil || status != http.StatusCreated {
				t.Fatalf("uploading kv: %d %s %v", status, body, err)
			}
		}
		// Every room is back, in a state it had.
		restoredAt := make([]string, nRooms)
		for i := range rooms {
			r := &rooms[i]
			status, body, err := send(client, "GET", roomURL(p, i)+"/state", nil)
			if err != nil || status != 200 {
				t.Fatalf("round %d: room r%02d after the restart: %d %q %v", round, i, status, body, err)
			}
			var got *kvState
			for k, s := range r.history {
				if s.Dump() == body {
					got, restoredAt[i] = s, fmt.Sprintf("%d/%d", k, len(r.history)-1)
				}
			}
			if got == nil && r.pending != nil && r.pending.Dump() == body {
				got, restoredAt[i] = r.pending, "pending"
			}
			if got == nil {
				inFlight := "none"
				if r.pending != nil {
					inFlight = r.pending.Dump()
				}
				t.Fatalf("round %d: room r%02d came back in a state it never had at an acknowledged point:\n%s\nits states this round were (oldest first):\n%s\nin flight at the kill:\n%s",
					round, i, body, dumps(r.history), inFlight)
			}
			*r = killRoom{cur: got, history: []*kvState{got}}
		}
		if round > 0 {
			t.Logf("round %d: restored states (index in the round's history of acknowledged states): %v", round, restoredAt)
		}
		if round == rounds {
			// A clean stop keeps every room's latest state exactly.
			p.signal(syscall.SIGTERM)
			if code := p.wait(stopDeadline); code != 0 {
				t.Fatalf("after SIGTERM: exit code %d, want 0", code)
			}
			p = startNode(t, nodeOpts{args: args})
			for i := range rooms {
				if got := expectHTTP(t, 200, "GET", roomURL(p, i)+"/state"); got != rooms[i].cur.Dump() {
					t.Fatalf("room r%02d after a clean stop:\n%s\nwant:\n%s", i, got, rooms[i].cur.Dump())
				}
			}
			break
		}

		// Writers, each with its own rooms, until the node dies.
		target := int64(30 + rng.IntN(400))
		var acks atomic.Int64
		killNow := make(chan struct{})
		var wg sync.WaitGroup
		for w := range nWriters {
			wrng := rand.New(rand.NewPCG(rng.Uint64(), rng.Uint64()))
			wg.Go(func() {
				for {
					i := w + nWriters*wrng.IntN(nRooms/nWriters)
					r := &rooms[i]
					key := "k" + strconv.Itoa(wrng.IntN(nKeys))
					method, body, value := "DELETE", []byte(nil), (*string)(nil)
					if wrng.IntN(4) != 0 {
						v := killValue(wrng)
						method, body, value = "PUT", []byte(v), &v
					}
					next := r.cur.With(key, value)
					r.pending = next
					status, answer, err := send(client, method, roomURL(p, i)+"/k/"+key, body)
					if err != nil {
						return // killed
					}
					if status != 200 || answer != strconv.FormatUint(next.Version, 10) {
						t.Errorf("round %d: %s r%02d/k/%s: %d %q, want 200 %d", round, method, i, key, status, answer, next.Version)
						return
					}
					r.cur, r.pending = next, nil
					r.history = append(r.history, next)
					if acks.Add(1) == target {
						close(killNow)
					}
					if wrng.IntN(8) == 0 {
						status, answer, err := send(client, "GET", roomURL(p, i)+"/state", nil)
						if err != nil {
							return
						}
						if status != 200 || answer != r.cur.Dump() {
							t.Errorf("round %d: GET r%02d/state: %d\n%s\nwant:\n%s", round, i, status, answer, r.cur.Dump())
							return
						}
					}
				}
			})
		}
		writersDone := make(chan struct{})
		go func() { wg.Wait(); close(writersDone) }()
		select {
		case <-killNow:
		case <-writersDone:
			t.Fatalf("round %d: every writer stopped before %d writes", round, target)
		}
		hibernations += scrapeHibernations(t, client, p.url)
		p.signal(syscall.SIGKILL)
		p.wait(stopDeadline)
		<-writersDone
		if t.Failed() {
			return
		}
		t.Logf("round %d: killed after %d acknowledged writes", round, acks.Load())
	}
	if hibernations == 0 {
		t.Fatal("no room ever hibernated before a kill: the test did not test anything")
	}
	t.Logf("%v hibernations (idle and evict) counted before the kills", hibernations)
}

// send does one request and returns its status and body; err is a
// transport failure (the node is gone).
func send(c *http.Client, method, url string, body []byte) (int, string, error) {
	req, err := http.NewRequest(method, url, bytes.NewReader(body))
	if err != nil {
		return 0, "", err
	}
	if strings.Contains(url, "/admin/") {
		req.Header.Set(server.AdminHeader, "1") // as the CLI does
	}
	resp, err := c.Do(req)
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b), err
}

// scrapeHibernations sums the node's idle and eviction hibernations.
func scrapeHibernations(t *testing.T, c *http.Client, base string) float64 {
	t.Helper()
	status, body, err := send(c, "GET", base+"/metrics", nil)
	if err != nil || status != 200 {
		t.Fatalf("GET /metrics: %d %v", status, err)
	}
	var sum float64
	for _, line := range strings.Split(body, "\n") {
		for _, name := range []string{`wasmkeep_room_hibernations_total{reason="idle"} `, `wasmkeep_room_hibernations_total{reason="evict"} `} {
			if v, ok := strings.CutPrefix(line, name); ok {
				f, err := strconv.ParseFloat(v, 64)
				if err != nil {
					t.Fatalf("metric %q", line)
				}
				sum += f
			}
		}
	}
	return sum
}

func dumps(states []*kvState) string {
	var b strings.Builder
	for _, s := range states {
		b.WriteString("---\n" + s.Dump())
	}
	return b.String()
}

// killValue is a short value, or now and then one of a few KiB.
func killValue(rng *rand.Rand) string {
	const alphabet = "abcdefghijklmnopqrstuvwxyz0123456789"
	n := 1 + rng.IntN(24)
	if rng.IntN(10) == 0 {
		n = 1000 + rng.IntN(8000)
	}
	b := make([]byte, n)
	for i := range b {
		b[i] = alphabet[rng.IntN(len(alphabet))]
	}
	return string(b)
}
