package node

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"

	"github.com/wasmkeep/wasmkeep/host/rooms"
	"github.com/wasmkeep/wasmkeep/host/store"
	"github.com/wasmkeep/wasmkeep/internal/testenv"
	"github.com/wasmkeep/wasmkeep/internal/wstest"
)

// TestStopWaitsForWakesUnderWay holds the wakes of rooms in their manifest
// reads, stops the node, and lets the wakes go once the stop has begun. A
// stop used to hibernate only the rooms resident when it started and then
// close the engine, unmapping the linear memories such wakes were
// restoring into (a SIGSEGV in the restore's copy, seen on stops of nodes
// with thousands of sockets) or dropping rooms they had just woken with
// their new state unwritten. Now the stop waits for them and hibernates
// what they woke: every message a client saw relayed is still in its
// room's history after a restart.
func TestStopWaitsForWakesUnderWay(t *testing.T) {
	t.Parallel()
	const roomCount = 20
	dir := t.TempDir()
	bucket, err := store.OpenDir(dir + "/store")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { bucket.Close() })
	gate := &gatedBucket{Bucket: bucket, release: make(chan struct{})}
	logs := &testenv.Buffer{}
	n := startNode(t, Config{DataDir: dir, Bucket: gate, Logger: slog.New(slog.NewTextHandler(logs, nil))})
	putClass(t, n, "chat", "./examples/chat")
	clients := make([]*wstest.Client, roomCount)
	for i := range clients {
		clients[i] = wstest.Dial(t, fmt.Sprintf("%s/actor/chat/r%d", n.URL(), i))
		clients[i].Send(fmt.Sprintf("before %d", i))
		if got := clients[i].ReadText(); got != fmt.Sprintf("before %d", i) {
			t.Fatalf("room %d: got %q", i, got)
		}
		if err := n.Rooms.Hibernate(context.Background(), rooms.Key{Class: "chat", Name: fmt.Sprint("r", i)}); err != nil {
			t.Fatal(err)
		}
	}

	gate.arm()
	for i, c := range clients {
		c.Send(fmt.Sprintf("during %d", i))
	}
	waitFor(t, "every room's wake to read its manifest", func() bool { return gate.waiting() == roomCount })
	stopped := make(chan error, 1)
	go func() { stopped <- n.Stop(context.Background()) }()
	waitFor(t, "the stop to wait for the wakes", func() bool {
		return strings.Contains(logs.String(), "waiting for rooms to finish their events")
	})
	gate.open()
	if err := <-stopped; err != nil {
		t.Fatalf("stop: %v", err)
	}
	n.http = nil
	if c := n.Rooms.Counts(); c.Resident != 0 {
		t.Fatalf("after the stop, %d rooms are still resident: their latest state was never written", c.Resident)
	}
	relayed := 0
	for i, c := range clients {
		if got := c.ReadText(); got == fmt.Sprintf("during %d", i) {
			relayed++
		}
	}
	if relayed != roomCount {
		t.Fatalf("%d of %d rooms relayed the message that woke them during the stop", relayed, roomCount)
	}

	n = startNode(t, Config{DataDir: dir})
	for i := range roomCount {
		c := wstest.Dial(t, fmt.Sprintf("%s/actor/chat/r%d", n.URL(), i))
		for _, want := range []string{"before", "during"} {
			if got := c.ReadText(); got != fmt.Sprintf("%s %d", want, i) {
				t.Fatalf("room %d after restart: history has %q, want %q", i, got, fmt.Sprintf("%s %d", want, i))
			}
		}
	}
}

// TestStopWhileRoomsWakeForCloses stops a node while hundreds of
// hibernated rooms wake for the closes of their sockets, the load under
// which the crash was seen: the stop must neither crash nor leave a room
// resident, and every room wakes after a restart. Three rounds of 400
// rooms; under -race (which slows each round threefold and changes the
// timing the rounds vary anyway) one round of 200 rooms and 400 sockets;
// CI runs the full test again without it.
func TestStopWhileRoomsWakeForCloses(t *testing.T) {
	const perRoom = 2
	roomCount, rounds := 400, 3
	if raceEnabled {
		roomCount, rounds = 200, 1
	}
	for round := range rounds {
		t.Run(fmt.Sprint("round", round), func(t *testing.T) {
			dir := t.TempDir()
			n := startNode(t, Config{DataDir: dir})
			putClass(t, n, "chat", "./examples/chat")
			clients := make([][]*wstest.Client, roomCount)
			for i := range clients {
				url := fmt.Sprintf("%s/actor/chat/r%d", n.URL(), i)
				for range perRoom {
					clients[i] = append(clients[i], wstest.Dial(t, url))
				}
				clients[i][0].Send(fmt.Sprintf("hello %d", i))
				for _, c := range clients[i] {
					if got := c.ReadText(); got != fmt.Sprintf("hello %d", i) {
						t.Fatalf("room %d: got %q", i, got)
					}
				}
			}
			hibernateEach(t, n, "chat", roomCount, func(i int) string { return fmt.Sprint("r", i) })
			// Every close wakes its room; the stop starts once wakes are
			// under way, and closes go on arriving during it.
			wakes := metric(t, n, "wasmkeep_room_wakes_total")
			var wg sync.WaitGroup
			for i := range clients {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for _, c := range clients[i] {
						c.Close(1000)
					}
				}()
			}
			waitFor(t, "the first wakes", func() bool { return metric(t, n, "wasmkeep_room_wakes_total") > wakes })
			stop(t, n)
			wg.Wait()
			if c := n.Rooms.Counts(); c.Resident != 0 {
				t.Fatalf("after the stop, %d rooms are still resident: their latest state was never written", c.Resident)
			}

			n = startNode(t, Config{DataDir: dir})
			for i := range roomCount {
				c := wstest.Dial(t, fmt.Sprintf("%s/actor/chat/r%d", n.URL(), i))
				if got := c.ReadText(); got != fmt.Sprintf("hello %d", i) {
					t.Fatalf("room %d after restart: history %q", i, got)
				}
				c.Close(1000)
			}
		})
	}
}

// gatedBucket holds every read of a room manifest while armed, until it
// is opened: the wakes that made them stay under way.
type gatedBucket struct {
	store.Bucket
	mu      sync.Mutex
	armed   bool
	held    int
	release chan struct{}
}

func (g *gatedBucket) arm() {
	g.mu.Lock()
	g.armed = true
	g.mu.Unlock()
}

func (g *gatedBucket) open() { close(g.release) }

func (g *gatedBucket) waiting() int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.held
}

func (g *gatedBucket) Get(ctx context.Context, key string) ([]byte, string, error) {
	g.mu.Lock()
	hold := g.armed && strings.HasSuffix(key, "/manifest")
	if hold {
		g.held++
	}
	g.mu.Unlock()
	if hold {
		<-g.release
	}
	return g.Bucket.Get(ctx, key)
}
