package node

import (
	"context"
	"fmt"
	"sort"
	"testing"
	"time"

	"github.com/wasmkeep/wasmkeep/abi"
	"github.com/wasmkeep/wasmkeep/host/classes"
	"github.com/wasmkeep/wasmkeep/host/rooms"
	"github.com/wasmkeep/wasmkeep/host/store"
)

// reportPercentiles adds p50 and p99 of ds to a benchmark's results.
func reportPercentiles(b *testing.B, ds []time.Duration) {
	if len(ds) == 0 {
		return
	}
	sort.Slice(ds, func(i, j int) bool { return ds[i] < ds[j] })
	b.ReportMetric(float64(ds[len(ds)/2].Microseconds()), "p50-µs")
	b.ReportMetric(float64(ds[len(ds)*99/100].Microseconds()), "p99-µs")
}

// bucketCalls counts the requests a node has made of its bucket, by
// operation.
type bucketCalls [4]uint64 // get, put, delete, list

func countBucket(n *Node) bucketCalls {
	m := n.Bucket.(*store.MeteredBucket)
	var c bucketCalls
	for i, op := range []store.OpKind{store.OpGet, store.OpPut, store.OpDelete, store.OpList} {
		c[i] = m.AllRequests(op)
	}
	return c
}

// add adds the calls made between before and now.
func (c *bucketCalls) add(before, now bucketCalls) {
	for i := range c {
		c[i] += now[i] - before[i]
	}
}

// report reports the bucket requests per operation timed.
func (c *bucketCalls) report(b *testing.B, n int) {
	for i, unit := range []string{"gets/op", "puts/op", "deletes/op", "lists/op"} {
		b.ReportMetric(float64(c[i])/float64(n), unit)
	}
}

// BenchmarkWake measures what a user waits for when a hibernated counter
// wakes on a node with the local directory store: read the snapshot,
// restore the instance, run the request. The hibernation before each wake
// is not timed.
//
//   - spaced: the pool of blank instances has refilled since the last wake,
//     as between wakes at a moderate rate;
//   - back-to-back: the next wake follows at once, so the pool may be empty
//     and a wake instantiates.
func BenchmarkWake(b *testing.B) {
	for _, spaced := range []bool{true, false} {
		name := "back-to-back"
		if spaced {
			name = "spaced"
		}
		b.Run(name, func(b *testing.B) {
			n := startNode(b, Config{Logger: quietLogger()})
			if _, err := n.Classes.Put(context.Background(), "counter", buildGuest(b, "./examples/counter"), classes.Options{}); err != nil {
				b.Fatal(err)
			}
			key := rooms.Key{Class: "counter", Name: "bench"}
			post := abi.AppendRequest(nil, &abi.Request{Method: "POST", Path: "/"})
			get := abi.AppendRequest(nil, &abi.Request{Method: "GET", Path: "/"})
			if _, err := n.Rooms.Request(context.Background(), key, post); err != nil {
				b.Fatal(err)
			}
			var ds []time.Duration
			var calls bucketCalls
			for b.Loop() {
				b.StopTimer()
				if err := n.Rooms.Hibernate(context.Background(), key); err != nil {
					b.Fatal(err)
				}
				if spaced {
					time.Sleep(5 * time.Millisecond) // the pool refills in well under this
				}
				b.StartTimer()
				start, before := time.Now(), countBucket(n)
				resp, err := n.Rooms.Request(context.Background(), key, get)
				if err != nil || string(resp.Body) != "1" {
					b.Fatalf("wake: %v %v", resp, err)
				}
				ds = append(ds, time.Since(start))
				calls.add(before, countBucket(n))
			}
			reportPercentiles(b, ds)
			calls.report(b, len(ds))
		})
	}
}

// BenchmarkHibernate measures writing a counter's snapshot to the local
// directory store (fsync included) and dropping its instance.
func BenchmarkHibernate(b *testing.B) {
	n := startNode(b, Config{Logger: quietLogger()})
	if _, err := n.Classes.Put(context.Background(), "counter", buildGuest(b, "./examples/counter"), classes.Options{}); err != nil {
		b.Fatal(err)
	}
	post := abi.AppendRequest(nil, &abi.Request{Method: "POST", Path: "/"})
	var ds []time.Duration
	var calls bucketCalls
	i := 0
	for b.Loop() {
		b.StopTimer()
		key := rooms.Key{Class: "counter", Name: fmt.Sprint("r", i)}
		i++
		if _, err := n.Rooms.Request(context.Background(), key, post); err != nil {
			b.Fatal(err)
		}
		b.StartTimer()
		start, before := time.Now(), countBucket(n)
		if err := n.Rooms.Hibernate(context.Background(), key); err != nil {
			b.Fatal(err)
		}
		ds = append(ds, time.Since(start))
		calls.add(before, countBucket(n))
	}
	reportPercentiles(b, ds)
	calls.report(b, len(ds))
}

// BenchmarkDurableEvent measures a request to a resident counter whose
// class makes every event durable (a snapshot write, fsync included, before
// the reply), next to the same class without.
func BenchmarkDurableEvent(b *testing.B) {
	for _, durability := range []string{"hibernate", "event"} {
		b.Run(durability, func(b *testing.B) {
			n := startNode(b, Config{Logger: quietLogger()})
			if _, err := n.Classes.Put(context.Background(), "counter", buildGuest(b, "./examples/counter"), classes.Options{Durability: durability}); err != nil {
				b.Fatal(err)
			}
			key := rooms.Key{Class: "counter", Name: "bench"}
			post := abi.AppendRequest(nil, &abi.Request{Method: "POST", Path: "/"})
			if _, err := n.Rooms.Request(context.Background(), key, post); err != nil {
				b.Fatal(err)
			}
			var ds []time.Duration
			for b.Loop() {
				start := time.Now()
				if _, err := n.Rooms.Request(context.Background(), key, post); err != nil {
					b.Fatal(err)
				}
				ds = append(ds, time.Since(start))
			}
			reportPercentiles(b, ds)
		})
	}
}
