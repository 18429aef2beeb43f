package sim

import (
	"context"
	"errors"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/wasmkeep/wasmkeep/cluster"
	"github.com/wasmkeep/wasmkeep/cluster/member"
)

// callWorld is a world of two machines whose processes have no duties
// running: n1 calls n2.
func callWorld(t *testing.T, host Variants) (*World, *process, *process) {
	t.Helper()
	w := newWorld(Config{Seed: 1, Nodes: 2, World: host})
	var ps []*process
	for _, m := range w.machines {
		p := &process{machine: m, name: m.name + ".1", holds: map[cluster.Room]cluster.Hold{}}
		p.clock = &nodeClock{s: w.s, ppm: m.ppm}
		p.group = &Group{Name: p.name}
		node, err := cluster.New(cluster.Config{Node: m.name, Bucket: w.net.Bucket(p.name, &m.link), Clock: p.clock, Rand: rand.New(rand.NewPCG(1, 2))})
		if err != nil {
			t.Fatal(err)
		}
		p.member, err = member.New(member.Config{Core: node, Rooms: fakeRooms{w, p}, Peers: fakePeers{w, p}, Clock: p.clock, Sleeper: sleeper{p}})
		if err != nil {
			t.Fatal(err)
		}
		m.proc = p
		w.procs[p.group] = p
		ps = append(ps, p)
	}
	return w, ps[0], ps[1]
}

func TestPeerCalls(t *testing.T) {
	sec := int64(time.Second)
	for _, tc := range []struct {
		name string
		host Variants
		// setup runs before the call, during runs on the scheduler while
		// the target handles it (which takes a second).
		setup, during func(w *World, from, to *process)
		err           error
		answered      bool
		// within bounds when the caller got its answer.
		within int64
	}{
		{name: "answered", answered: true, within: 2 * sec},
		{name: "cut", setup: func(w *World, from, to *process) { from.machine.cutUntil[1], to.machine.cutUntil[0] = sec, sec },
			err: errUnreachable, within: int64(dialTimeout) + sec/10},
		{name: "nobody there", setup: func(w *World, from, to *process) { to.machine.proc = nil }, err: errUnreachable, within: sec / 100},
		{name: "hung", setup: func(w *World, from, to *process) { w.s.Pause(to.group, Forever) }, err: errTimeout, within: int64(headerTimeout) + sec},
		{name: "paused", setup: func(w *World, from, to *process) { w.s.Pause(to.group, 5*sec) }, answered: true, within: 7 * sec},
		{name: "reset", during: func(w *World, from, to *process) { w.kill(to, "crash") }, err: errReset, within: sec},
		{name: "answer lost", during: func(w *World, from, to *process) { from.machine.cutUntil[1], to.machine.cutUntil[0] = 10*sec, 10*sec },
			err: errTimeout, within: int64(headerTimeout) + sec},
		{name: "no timeout", host: Variants{ForwardWithoutTimeout: true}, setup: func(w *World, from, to *process) { w.s.Pause(to.group, Forever) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			w, from, to := callWorld(t, tc.host)
			defer w.s.Close()
			if tc.setup != nil {
				tc.setup(w, from, to)
			}
			if tc.during != nil {
				w.s.At(sec/2, "during", func() { tc.during(w, from, to) })
			}
			var r reply
			var err error
			at := int64(-1)
			w.s.Spawn(from.group, "caller", func(ctx context.Context) {
				r, err = w.call(ctx, from, to.machine, "test", func(ctx context.Context, q *process) reply {
					sleeper{q}.Sleep(ctx, time.Second)
					return reply{answered: true}
				})
				at = w.s.Now()
			})
			runAll(w.s, int64(10*time.Minute))
			if tc.within == 0 {
				if at >= 0 {
					t.Fatalf("the call returned at %v (%v, %v); want it waiting for ever", time.Duration(at), r, err)
				}
				return
			}
			if at < 0 || at > tc.within {
				t.Fatalf("the call returned at %v; want by %v", time.Duration(at), time.Duration(tc.within))
			}
			if !errors.Is(err, tc.err) || tc.err == nil && err != nil || r.answered != tc.answered {
				t.Errorf("the call returned %+v, %v; want answered %v, error %v", r, err, tc.answered, tc.err)
			}
		})
	}
}
