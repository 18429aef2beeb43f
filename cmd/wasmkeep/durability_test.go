//go:build unix

package main

import (
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// TestKilledNodeKeepsEveryAcknowledgedState kills a node (SIGKILL, no
// chance to hibernate) while 8 clients increment 4 counters of a class
// uploaded with the default flags (durable per event, answers held until
// their state is written, writes of concurrent events shared); after a
// restart every counter is at least the highest value any client saw for
// it, and no value was answered twice (which a lost acknowledged increment
// followed by a new one would show). Several rounds, each killed at a
// random moment. CI runs it on the data directory and on versitygw.
func TestKilledNodeKeepsEveryAcknowledgedState(t *testing.T) {
	counter := guestFile(t, "./examples/counter")
	data := t.TempDir()
	seed := uint64(time.Now().UnixNano())
	t.Logf("seed %d", seed)
	r := rand.New(rand.NewPCG(seed, 1))
	const rooms, clients = 4, 8
	seen := make([]int, rooms)              // highest value a client saw per room
	answered := make([]map[int]bool, rooms) // every value answered per room
	for i := range answered {
		answered[i] = map[int]bool{}
	}
	rounds := 4
	if testing.Short() {
		rounds = 2
	}
	total := 0
	for round := range rounds {
		n := serveNode(t, data)
		if round == 0 {
			n.ok("class", "put", "counter", counter)
		}
		// Everything acknowledged before the kill survived it.
		for i := range rooms {
			got := getCount(t, n.url, i)
			if got < seen[i] {
				t.Fatalf("round %d: room %d is at %d after the kill, a client saw %d", round, i, got, seen[i])
			}
			seen[i] = got
		}
		var mu sync.Mutex
		stop := make(chan struct{})
		var wg sync.WaitGroup
		for w := range clients {
			wg.Go(func() {
				client := &http.Client{Timeout: 10 * time.Second}
				for k := 0; ; k++ {
					select {
					case <-stop:
						return
					default:
					}
					room := (w + k) % rooms
					resp, err := client.Post(fmt.Sprintf("%s/actor/counter/r%d", n.url, room), "text/plain", nil)
					if err != nil {
						return // the node is gone
					}
					body, err := io.ReadAll(resp.Body)
					resp.Body.Close()
					if err != nil || resp.StatusCode != 200 {
						return
					}
					v, err := strconv.Atoi(string(body))
					if err != nil {
						t.Errorf("reply %q", body)
						return
					}
					mu.Lock()
					if answered[room][v] {
						t.Errorf("room %d answered %d twice: an acknowledged increment was lost", room, v)
					}
					answered[room][v] = true
					seen[room] = max(seen[room], v)
					total++
					mu.Unlock()
				}
			})
		}
		// Let some increments through, then kill at a random moment.
		deadline := time.Now().Add(30 * time.Second)
		target := 200 + r.IntN(600)
		for {
			mu.Lock()
			done := total
			mu.Unlock()
			if done >= target*(round+1) || time.Now().After(deadline) {
				break
			}
			time.Sleep(time.Millisecond)
		}
		n.signal(syscall.SIGKILL)
		close(stop)
		wg.Wait()
		n.wait(10 * time.Second)
	}
	n := serveNode(t, data)
	for i := range rooms {
		if got := getCount(t, n.url, i); got < seen[i] {
			t.Fatalf("room %d is at %d after the last kill, a client saw %d", i, got, seen[i])
		}
	}
	t.Logf("%d increments acknowledged over %d kills; final counts %v", total, rounds, seen)
}

func getCount(t *testing.T, base string, room int) int {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, "GET", fmt.Sprintf("%s/actor/counter/r%d", base, room), nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != 200 {
		t.Fatalf("room %d: %d %s", room, resp.StatusCode, body)
	}
	v, err := strconv.Atoi(strings.TrimSpace(string(body)))
	if err != nil {
		t.Fatalf("room %d: %q", room, body)
	}
	return v
}
