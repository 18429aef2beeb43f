package node

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/wasmkeep/wasmkeep/host/rooms"
	"github.com/wasmkeep/wasmkeep/internal/memtest"
	"github.com/wasmkeep/wasmkeep/internal/wstest"
)

// TestSocketsAcrossHibernations: 1,000 sockets over 100 echo rooms send
// pipelined, numbered messages while the rooms are hibernated and woken
// again and again (by a short idle timeout and by explicit hibernations in
// between); every socket gets every echo back, in order, and no socket is
// closed. Under -race or -short it runs 200 sockets over 20 rooms.
func TestSocketsAcrossHibernations(t *testing.T) {
	sockets, roomCount, rounds, inflight := 1000, 100, 6, 3
	if raceEnabled || testing.Short() {
		sockets, roomCount, rounds = 200, 20, 4
	}
	memtest.RaiseFileLimit(t, 0)
	n := startNode(t, Config{Rooms: rooms.Config{IdleTimeout: 30 * time.Millisecond}})
	putClass(t, n, "echo", "./testdata/guests/echo")

	clients := make([]*wstest.Client, sockets)
	var wg sync.WaitGroup
	errs := make(chan error, sockets)
	for i := range clients {
		c, err := wstest.DialErr(fmt.Sprintf("%s/actor/echo/r%d", n.URL(), i%roomCount), nil)
		if err != nil {
			t.Fatalf("dial %d: %v", i, err)
		}
		clients[i] = c
		t.Cleanup(func() { c.Conn().Close() })
	}
	// Every socket first gets its open greeting.
	for i, c := range clients {
		if _, data, err := c.Read(); err != nil || string(data[:5]) != "open " {
			t.Fatalf("socket %d greeting: %q %v", i, data, err)
		}
	}
	seed := uint64(time.Now().UnixNano())
	t.Logf("seed %d", seed)
	r := rand.New(rand.NewPCG(seed, 2))
	wakesBefore := metric(t, n, "wasmkeep_room_wakes_total")
	for round := range rounds {
		// Some rooms are put to sleep explicitly while messages fly.
		stop := make(chan struct{})
		hibernator := make(chan struct{})
		victims := r.Perm(roomCount)[:roomCount/2]
		go func() {
			defer close(hibernator)
			for _, v := range victims {
				select {
				case <-stop:
					return
				default:
				}
				_ = n.Rooms.Hibernate(context.Background(), rooms.Key{Class: "echo", Name: fmt.Sprint("r", v)})
			}
		}()
		for i, c := range clients {
			wg.Go(func() {
				for k := range inflight {
					if err := c.SendErr(fmt.Sprintf("s%d-r%d-m%d", i, round, k)); err != nil {
						errs <- fmt.Errorf("socket %d send: %v", i, err)
						return
					}
				}
				for k := range inflight {
					_, data, err := c.Read()
					want := fmt.Sprintf("s%d-r%d-m%d", i, round, k)
					if err != nil || string(data) != want {
						errs <- fmt.Errorf("socket %d round %d: got %q (%v), want %q", i, round, data, err, want)
						return
					}
				}
			})
		}
		wg.Wait()
		close(stop)
		<-hibernator
		select {
		case err := <-errs:
			t.Fatal(err)
		default:
		}
		// Let the idle timeout put the rest to sleep before the next round.
		waitFor(t, "every room hibernated", func() bool { return n.Rooms.Counts().Resident == 0 })
	}
	wakes := metric(t, n, "wasmkeep_room_wakes_total") - wakesBefore
	if wakes < float64(roomCount*(rounds-1)) {
		t.Fatalf("only %v wakes over %d rounds of %d rooms", wakes, rounds, roomCount)
	}
	if got := n.Hub.Count(); got != sockets {
		t.Fatalf("%d sockets open at the end, want %d", got, sockets)
	}
	t.Logf("%d sockets, %d rooms, %d rounds: %v wakes, every message echoed in order", sockets, roomCount, rounds, wakes)
}
