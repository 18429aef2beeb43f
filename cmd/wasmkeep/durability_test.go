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
// chance to hibernate) while clients increment counters of a class
// uploaded with --durability event, right after they have seen replies;
// after a restart every counter is at least the highest value any client
// saw for it. Several rounds, each killed at a random moment.
func TestKilledNodeKeepsEveryAcknowledgedState(t *testing.T) {
	counter := guestFile(t, "./examples/counter")
	data := t.TempDir()
	seed := uint64(time.Now().UnixNano())
	t.Logf("seed %d", seed)
	r := rand.New(rand.NewPCG(seed, 1))
	const rooms = 8
	seen := make([]int, rooms) // highest value a client saw per room
	rounds := 4
	if testing.Short() {
		rounds = 2
	}
	for round := range rounds {
		n := serveNode(t, data)
		if round == 0 {
			n.ok("class", "put", "--durability", "event", "counter", counter)
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
		for w := range 4 {
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
					seen[room] = max(seen[room], v)
					mu.Unlock()
				}
			})
		}
		// Let some increments through, then kill at a random moment.
		deadline := time.Now().Add(30 * time.Second)
		target := 20 + r.IntN(60)
		for {
			mu.Lock()
			total := 0
			for _, v := range seen {
				total += v
			}
			mu.Unlock()
			if total >= target*(round+1) || time.Now().After(deadline) {
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
	t.Logf("final counts %v", seen)
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
