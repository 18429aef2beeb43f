package engine

import (
	"context"
	"slices"
	"testing"
	"time"
)

// BenchmarkGoChatEvents runs a Go chat room (examples/chat) through many
// events of one kind, as a room that never hibernates would see them: chat
// messages (each kept in the history of 100 and broadcast) and GETs of
// its page (some 17 KB of garbage each). The room's idle calls are made
// as the node makes them, after the event that asked (here every event is
// a burst of its own), so ns/op is the guest's whole cost, collections
// included. It reports the percentiles of the events themselves, the idle
// calls a thousand events and what one took, and the pages a snapshot of
// the room stores after them: how big the room has grown.
//
// The idle call is looked for through an interface so that this file
// also builds at a commit that has none, for a before-and-after run.
//
//	go test -run '^$' -bench 'GoChatEvents/message' -benchtime 300000x -count 3 ./host/engine/
//	go test -run '^$' -bench 'GoChatEvents/page' -benchtime 30000x -count 3 ./host/engine/
func BenchmarkGoChatEvents(b *testing.B) {
	ctx := context.Background()
	e := newEngine(b, Config{})
	c, err := e.Compile(ctx, chatClasses[0].wasm(b))
	if err != nil {
		b.Fatal(err)
	}
	run := func(b *testing.B, event func(inst *Instance, i int)) {
		inst := startRoom(b, c)
		defer inst.Close()
		idler, _ := any(inst).(interface {
			IdleRequested() bool
			Idle() error
		})
		ds := make([]time.Duration, 0, b.N)
		var idles int
		var idleTime time.Duration
		for i := 0; b.Loop(); i++ {
			start := time.Now()
			event(inst, i)
			ds = append(ds, time.Since(start))
			if idler != nil && idler.IdleRequested() {
				start := time.Now()
				if err := idler.Idle(); err != nil {
					b.Fatal(err)
				}
				idleTime += time.Since(start)
				idles++
			}
		}
		slices.Sort(ds)
		for _, q := range []struct {
			name string
			at   int
		}{{"p50-ns", len(ds) / 2}, {"p99-ns", len(ds) * 99 / 100}, {"p999-ns", len(ds) * 999 / 1000}} {
			b.ReportMetric(float64(ds[q.at].Nanoseconds()), q.name)
		}
		b.ReportMetric(float64(idles)*1000/float64(len(ds)), "idles/1k")
		if idles > 0 {
			b.ReportMetric(float64(idleTime.Microseconds())/float64(idles), "µs/idle")
		}
		man, _ := takeSnapshot(b, inst, nil)
		_, stored, _ := man.Pages()
		b.ReportMetric(float64(stored), "stored-pages")
	}
	b.Run("message", func(b *testing.B) { run(b, func(inst *Instance, i int) { chatSay(b, inst, i) }) })
	b.Run("page", func(b *testing.B) { run(b, func(inst *Instance, _ int) { request(b, inst, getRoot) }) })
}
