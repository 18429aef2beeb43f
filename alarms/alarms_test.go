package alarms

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/wasmkeep/wasmkeep/abi"
	"github.com/wasmkeep/wasmkeep/calls"
	"github.com/wasmkeep/wasmkeep/host/store"
	"github.com/wasmkeep/wasmkeep/internal/clock"
)

func TestKeyRoundTrip(t *testing.T) {
	e := Entry{Room: calls.Room{Class: "game", Name: "a/b c%"}, At: 1_796_686_062_781, Entry: EntryName(0x66213910fee79, 1)}
	got, err := ParseKey(e.Key())
	if err != nil || got != e {
		t.Fatalf("ParseKey(%q) = %+v, %v; want %+v", e.Key(), got, err, e)
	}
	early := e
	early.At = abi.MinAlarmMs
	if early.Key() >= e.Key() {
		t.Fatalf("keys do not sort by time: %q before %q", e.Key(), early.Key())
	}
	for _, bad := range []string{"alarms/", "alarms/1796686062781/game/a", "alarms/179668606278/game/a/1.1",
		"alarms/1796686062781/game/a/x.1", "alarms/1796686062781/game/a/1", "alarms/0000000000001/game/a/1.1",
		"rooms/1796686062781/game/a/1.1", "alarms/1796686062781/game/a/1.1/more"} {
		if _, err := ParseKey(bad); err == nil {
			t.Errorf("ParseKey(%q) succeeded", bad)
		}
	}
}

// fakeRouter answers deliveries with answer and records them.
type fakeRouter struct {
	answer func(*calls.Call) calls.Result
	got    []calls.Alarm
}

func (r *fakeRouter) Route(_ context.Context, c *calls.Call) calls.Result {
	r.got = append(r.got, *c.Alarm)
	return r.answer(c)
}

var t0 = time.UnixMilli(1_796_686_000_000)

// counts counts a duty's events by kind.
type counts map[EventKind]int

func (c counts) Observe(e Event) { c[e.Kind]++ }

func newTestDuty(t *testing.T, bucket store.Bucket, answer func(*calls.Call) calls.Result) (*Duty, *clock.Manual, *fakeRouter, counts) {
	t.Helper()
	clk := clock.NewManual(t0)
	r := &fakeRouter{answer: answer}
	seen := counts{}
	d, err := NewDuty(Config{Bucket: bucket, Route: r.Route, Now: clk.Now, Wall: func() int64 { return clk.Wall().UnixMilli() },
		Go: func(_ string, f func(context.Context)) { f(context.Background()) }, Observer: seen})
	if err != nil {
		t.Fatal(err)
	}
	return d, clk, r, seen
}

// step delivers what is due now, as Pass does, but without a scan.
func step(d *Duty) int {
	due := d.takeDue()
	for _, it := range due {
		d.deliver(context.Background(), it)
	}
	return len(due)
}

func ran(*calls.Call) calls.Result { return calls.Result{Reply: []byte(ReplyRan)} }

func TestScheduledAlarmDeliveredOnTime(t *testing.T) {
	s, clk, r, seen := newTestDuty(t, store.NewMem(), ran)
	e := Entry{Room: calls.Room{Class: "c", Name: "r"}, At: t0.Add(time.Second).UnixMilli(), Entry: "1.1"}
	s.Schedule(e)
	s.Schedule(e) // told twice: one alarm
	clk.Advance(999 * time.Millisecond)
	if n := step(s); n != 0 {
		t.Fatalf("%d delivered 1 ms early", n)
	}
	if d, ok := s.nextDue(); !ok || d != time.Millisecond {
		t.Fatalf("next due in %v, %v; want 1ms", d, ok)
	}
	clk.Advance(time.Millisecond)
	if n := step(s); n != 1 || len(r.got) != 1 || r.got[0] != (calls.Alarm{At: e.At, Entry: e.Entry}) {
		t.Fatalf("delivered %d: %+v", n, r.got)
	}
	if s.Pending() != 0 || seen[Fired] != 1 {
		t.Fatalf("pending %d, fired %d after it ran", s.Pending(), seen[Fired])
	}
}

// TestRetriesBackOffThenDrop: a handler that always fails is delivered
// again after 2 s, 4 s, ... MaxRetries times, each with its retry count,
// then once more to be dropped unrun.
func TestRetriesBackOffThenDrop(t *testing.T) {
	s, clk, r, seen := newTestDuty(t, store.NewMem(), func(c *calls.Call) calls.Result {
		if c.Alarm.Drop {
			return calls.Result{Reply: []byte(ReplyDropped)}
		}
		return calls.Fail(abi.StatusCrashed, "crashed")
	})
	s.Schedule(Entry{Room: calls.Room{Class: "c", Name: "r"}, At: t0.UnixMilli(), Entry: "1.1"})
	step(s)
	var waits []time.Duration
	for len(r.got) < MaxRetries+2 {
		d, ok := s.nextDue()
		if !ok {
			t.Fatalf("nothing due after %d deliveries", len(r.got))
		}
		waits = append(waits, d)
		clk.Advance(d)
		if step(s) != 1 {
			t.Fatal("nothing delivered when due")
		}
	}
	want := []time.Duration{2 * time.Second, 4 * time.Second, 8 * time.Second, 16 * time.Second, 32 * time.Second, 64 * time.Second, 64 * time.Second}
	if !slices.Equal(waits, want) {
		t.Fatalf("waits %v, want %v", waits, want)
	}
	for i, a := range r.got {
		wantRetry := uint32(min(i, MaxRetries))
		if a.Retry != wantRetry || a.Drop != (i == MaxRetries+1) {
			t.Fatalf("delivery %d: %+v", i, a)
		}
	}
	if s.Pending() != 0 || seen[Dropped] != 1 || seen[Retried] != MaxRetries+1 {
		t.Fatalf("pending %d, dropped %d, retried %d", s.Pending(), seen[Dropped], seen[Retried])
	}
}

// TestStaleEntryDeleted: an entry the room does not have is deleted from
// the index.
func TestStaleEntryDeleted(t *testing.T) {
	bucket := store.NewMem()
	e := Entry{Room: calls.Room{Class: "c", Name: "r"}, At: t0.UnixMilli(), Entry: "1.1"}
	if _, err := bucket.Put(context.Background(), e.Key(), []byte("x"), store.Cond{}); err != nil {
		t.Fatal(err)
	}
	s, _, _, _ := newTestDuty(t, bucket, func(*calls.Call) calls.Result { return calls.Result{Reply: []byte(ReplyStale)} })
	s.Schedule(e)
	step(s)
	if keys, _ := bucket.List(context.Background(), Prefix); len(keys) != 0 {
		t.Fatalf("index after a stale delivery: %q", keys)
	}
}

// TestScan: in a cluster a scan takes only the entries overdue by more
// than the grace (those no live node was told of), and delivers them at
// once; a node alone takes those due before its next scan, and delivers
// each at its time.
func TestScan(t *testing.T) {
	ctx := context.Background()
	bucket := store.NewMem()
	room := func(n string) calls.Room { return calls.Room{Class: "c", Name: n} }
	old := Entry{Room: room("old"), At: t0.Add(-DefaultGrace - time.Second).UnixMilli(), Entry: "1.1"}
	recent := Entry{Room: room("recent"), At: t0.Add(-time.Second).UnixMilli(), Entry: "1.1"}
	soon := Entry{Room: room("soon"), At: t0.Add(time.Second).UnixMilli(), Entry: "1.1"}
	later := Entry{Room: room("later"), At: t0.Add(DefaultScanInterval + time.Second).UnixMilli(), Entry: "1.1"}
	for _, e := range []Entry{old, recent, soon, later} {
		if _, err := bucket.Put(ctx, e.Key(), []byte("x"), store.Cond{}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := bucket.Put(ctx, Prefix+"junk", []byte("x"), store.Cond{}); err != nil {
		t.Fatal(err)
	}

	d, _, r, _ := newTestDuty(t, bucket, ran)
	if read, err := d.Scan(ctx); err != nil || read != 2 || d.Pending() != 1 {
		t.Fatalf("scan read %d, %v, queued %d; want 2 read (up to the first entry within the grace), 1 queued", read, err, d.Pending())
	}
	if step(d) != 1 || len(r.got) != 1 || r.got[0].At != old.At {
		t.Fatalf("delivered %+v, want only %+v at once", r.got, old)
	}

	alone, clk, r, _ := newTestDuty(t, bucket, ran)
	alone.cfg.Alone = true
	if read, err := alone.Scan(ctx); err != nil || read != 4 || alone.Pending() != 3 {
		t.Fatalf("alone, scan read %d, %v, queued %d; want 4 read (up to the first past the next scan), 3 queued", read, err, alone.Pending())
	}
	if step(alone) != 2 {
		t.Fatal("the entries due were not delivered at once")
	}
	clk.Advance(time.Second - time.Millisecond)
	if step(alone) != 0 {
		t.Fatal("an entry delivered before its time")
	}
	clk.Advance(time.Millisecond)
	if step(alone) != 1 || r.got[2].At != soon.At {
		t.Fatalf("delivered %+v", r.got)
	}
}
