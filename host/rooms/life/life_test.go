package life

import (
	"reflect"
	"testing"
	"time"
)

func TestAfterCall(t *testing.T) {
	for _, c := range []struct {
		call    Call
		durable bool
		want    Plan
	}{
		{Call{}, false, Plan{Apply: true}},
		{Call{}, true, Plan{Write: true, Apply: true}},
		{Call{Checkpoint: true}, false, Plan{Write: true, Apply: true}},
		{Call{Crashed: true, Checkpoint: true}, true, Plan{Rollback: true}},
		{Call{Crashed: true, Delete: true}, false, Plan{Rollback: true}},
		{Call{Delete: true, Checkpoint: true}, true, Plan{Delete: true, Apply: true}},
	} {
		if got := AfterCall(c.call, c.durable); got != c.want {
			t.Errorf("AfterCall(%+v, durable %v) = %+v, want %+v", c.call, c.durable, got, c.want)
		}
	}
	if !NeedsWrite(true, true) || !NeedsWrite(false, false) || NeedsWrite(false, true) {
		t.Error("NeedsWrite")
	}
}

func TestPlaces(t *testing.T) {
	p := Places{Max: 2}
	first, second, third := p.Take(), p.Take(), p.Take()
	if !first || !second || third {
		t.Fatalf("two places of two, then none: %v %v %v, %+v", first, second, third, p)
	}
	p.Woke()
	p.GiveBack() // the second wake failed
	if !p.Take() {
		t.Fatalf("a place given back: %+v", p)
	}
	p.Woke()
	p.Waiting = 3
	if got := p.Evictions(1); got != 2 { // 2 resident + 3 waiting - 2 max - 1 leaving
		t.Fatalf("evictions for 3 waiting, 1 leaving: %d", got)
	}
	p.Left()
	if p.Resident != 1 || p.Peak != 2 {
		t.Fatalf("after a room left: %+v", p)
	}
}

func TestVictimsAndIdle(t *testing.T) {
	now := int64(100 * time.Second)
	cands := []Candidate[string]{
		{ID: "recent", LastActive: now - int64(time.Second)},
		{ID: "old", LastActive: now - int64(time.Hour)},
		{ID: "busy", LastActive: 0, Busy: true},
		{ID: "pinned", LastActive: 0, Pinned: true},
		{ID: "leaving", LastActive: 0, Leaving: true},
		{ID: "backing-off", LastActive: 0, RetryAt: now + 1},
		{ID: "retry-due", LastActive: now - int64(time.Minute), RetryAt: now},
	}
	if got := Victims(cands, 2, now); !reflect.DeepEqual(got, []string{"old", "retry-due"}) {
		t.Errorf("2 victims: %q", got)
	}
	if got := Victims(cands, 10, now); !reflect.DeepEqual(got, []string{"old", "retry-due", "recent"}) {
		t.Errorf("all victims: %q", got)
	}
	if got := Victims(cands, 0, now); got != nil {
		t.Errorf("no victims asked: %q", got)
	}
	if got := Idle(cands, now, int64(time.Minute)); !reflect.DeepEqual(got, []string{"old", "retry-due"}) {
		t.Errorf("idle past a minute: %q", got)
	}
}

func TestRetry(t *testing.T) {
	for failures, want := range map[int]time.Duration{1: time.Second, 2: 2 * time.Second, 3: 4 * time.Second, 9: 256 * time.Second, 10: 5 * time.Minute, 1000: 5 * time.Minute} {
		if got := time.Duration(Retry(failures)); got != want {
			t.Errorf("Retry(%d) = %s, want %s", failures, got, want)
		}
	}
}

func TestReconcile(t *testing.T) {
	known := map[uint32]bool{1: true, 2: true, 3: true, 5: true}
	open := map[uint32]bool{2: true, 4: true, 6: true}
	gone := map[uint32]Closed{1: {1000, "bye"}}
	skip := map[uint32]bool{5: true}
	fallback := Closed{1012, "closed while the room was not running"}
	got := Reconcile(known, func(id uint32) bool { return open[id] }, []uint32{6, 2, 4}, gone, skip, fallback)
	want := Missed{
		Closes: []MissedClose{{1, Closed{1000, "bye"}}, {3, fallback}},
		Opens:  []uint32{4, 6},
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("Reconcile = %+v, want %+v", got, want)
	}
}

func TestEndReasonParks(t *testing.T) {
	for r := EndIdle; r <= EndLapse; r++ {
		want := r == EndIdle || r == EndEvict
		if got := r.Parks(1); got != want {
			t.Errorf("%s with an open socket parks: %v, want %v", r, got, want)
		}
		if r.Parks(0) {
			t.Errorf("%s with no open socket parks", r)
		}
		if r.String() == "unknown" {
			t.Errorf("reason %d has no name", r)
		}
	}
}
