package rooms

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/wasmkeep/wasmkeep/abi"
	"github.com/wasmkeep/wasmkeep/host/rooms/life"
	"github.com/wasmkeep/wasmkeep/host/store"
	"github.com/wasmkeep/wasmkeep/internal/limits"
)

// Kept instances of idle-hibernated rooms (warm.go).

// idle hibernates room c/name as the idle sweep does, and waits for it.
func (h *harness) idle(name string) {
	h.t.Helper()
	if err := h.m.HandOver(context.Background(), Key{"c", name}, life.EndIdle); err != nil {
		h.t.Fatal(err)
	}
	h.settle(name)
}

// kept returns room c/name's kept instance, nil if it has none.
func (h *harness) kept(name string) *fakeInstance {
	h.t.Helper()
	h.m.mu.Lock()
	r := h.m.rooms[Key{"c", name}]
	h.m.mu.Unlock()
	if r == nil {
		return nil
	}
	h.m.warm.mu.Lock()
	defer h.m.warm.mu.Unlock()
	k, ok := h.m.warm.by[r]
	if !ok {
		return nil
	}
	return k.inst.(*fakeInstance)
}

// poke sets the counter of a kept instance behind the room's back: a wake
// that answers it resumed that instance, one that answers the stored
// counter restored.
func poke(i *fakeInstance, v uint64) {
	i.add(offCounter, v-i.get(offCounter))
}

func TestWarmResumesTheKeptInstance(t *testing.T) {
	h := newHarness(t, Config{})
	h.expect("a", "POST", "/", "1")
	h.idle("a")
	k := h.kept("a")
	if k == nil {
		t.Fatal("no instance kept after an idle hibernation")
	}
	if st := h.state("a"); st != StateHibernated {
		t.Fatalf("a room with a kept instance is listed %s", st)
	}
	if c := h.m.Counts(); c.Resident != 0 {
		t.Fatalf("a kept instance counts as resident: %+v", c)
	}
	poke(k, 41)
	h.expect("a", "GET", "/", "41") // resumed, not restored
	if k.closed.Load() {
		t.Fatal("the resumed instance was closed")
	}
	if got := h.counter(`wasmkeep_room_resumes_total`); got != 1 {
		t.Fatalf("resumes: %v", got)
	}
	if got := h.counter(`wasmkeep_room_restores_total`); got != 0 {
		t.Fatalf("restores: %v", got)
	}
	// The resumed room goes on as a restored one would: its next
	// snapshot is a delta against the manifest it was kept with.
	h.expect("a", "POST", "/", "42")
	h.idle("a")
	h.expect("a", "GET", "/", "42")
}

func TestWarmOnlyIdleHibernationsKeep(t *testing.T) {
	h := newHarness(t, Config{})
	for _, why := range []life.EndReason{life.EndAdmin, life.EndEvict, life.EndDrain, life.EndMove} {
		if _, err := h.request("a", "POST", "/"); err != nil {
			t.Fatal(err)
		}
		h.settle("a")
		if err := h.m.HandOver(context.Background(), Key{"c", "a"}, why); err != nil {
			t.Fatal(err)
		}
		h.settle("a")
		if h.kept("a") != nil {
			t.Fatalf("an instance was kept after a hibernation for %s", why)
		}
	}
}

func TestWarmExpires(t *testing.T) {
	h := newHarness(t, Config{WarmFor: 3 * time.Second})
	h.expect("a", "POST", "/", "1")
	h.idle("a")
	k := h.kept("a")
	if k == nil {
		t.Fatal("no instance kept")
	}
	h.clock.Advance(2 * time.Second)
	if h.kept("a") == nil || k.closed.Load() {
		t.Fatal("expired before WarmFor")
	}
	h.clock.Advance(time.Second)
	// The expiry closes the instance, then forgets the room: a room with
	// no socket is not kept known after its instance expired.
	h.waitFor("the kept instance to expire and its room to be forgotten", func() bool {
		h.m.mu.Lock()
		_, known := h.m.rooms[Key{"c", "a"}]
		h.m.mu.Unlock()
		return !known && k.closed.Load()
	})
	if got := h.counter(`wasmkeep_rooms_warm_dropped_total{reason="expired"}`); got != 1 {
		t.Fatalf("expired: %v", got)
	}
	h.expect("a", "GET", "/", "1") // restored
	if got := h.counter(`wasmkeep_room_restores_total`); got != 1 {
		t.Fatalf("restores: %v", got)
	}
}

func TestWarmMemoryBound(t *testing.T) {
	// Room for one fake instance (its memory and the overhead), not two.
	h := newHarness(t, Config{WarmMemory: fakeMemory + keptOverhead})
	h.expect("a", "POST", "/", "1")
	h.expect("b", "POST", "/", "1")
	h.idle("a")
	a := h.kept("a")
	h.idle("b")
	if a == nil || !a.closed.Load() || h.kept("a") != nil {
		t.Fatal("the oldest kept instance stayed past WarmMemory")
	}
	if h.kept("b") == nil {
		t.Fatal("the newest instance was not kept")
	}
	if n, cost := h.m.warmCounts(); n != 1 || cost != fakeMemory+keptOverhead {
		t.Fatalf("kept %d instances for %d bytes", n, cost)
	}
	if got := h.counter(`wasmkeep_rooms_warm_dropped_total{reason="memory"}`); got != 1 {
		t.Fatalf("dropped for memory: %v", got)
	}

	off := newHarness(t, Config{WarmMemory: limits.Off})
	off.expect("a", "POST", "/", "1")
	off.idle("a")
	if off.kept("a") != nil {
		t.Fatal("an instance was kept with WarmMemory off")
	}
}

// TestWarmRestoresAnotherWritersState: a manifest that is not the one the
// instance was kept with (here another room's state, as another node or an
// import would leave) is restored, and the kept instance closed.
func TestWarmRestoresAnotherWritersState(t *testing.T) {
	h := newHarness(t, Config{})
	ctx := context.Background()
	h.expect("b", "POST", "/", "1")
	h.expect("b", "POST", "/", "2")
	h.expect("b", "POST", "/", "3")
	h.idle("b")
	h.expect("a", "POST", "/", "1")
	h.idle("a")
	k := h.kept("a")
	if k == nil {
		t.Fatal("no instance kept")
	}
	poke(k, 41)
	// b's state becomes a's behind the node's back.
	keys, err := h.bucket.List(ctx, Key{"c", "b"}.prefix())
	if err != nil {
		t.Fatal(err)
	}
	for _, key := range keys {
		body, _, err := h.bucket.Get(ctx, key)
		if err != nil {
			t.Fatal(err)
		}
		to := Key{"c", "a"}.prefix() + strings.TrimPrefix(key, Key{"c", "b"}.prefix())
		if _, err := h.bucket.Put(ctx, to, body, store.Cond{}); err != nil {
			t.Fatal(err)
		}
	}
	h.expect("a", "GET", "/", "3")
	if !k.closed.Load() {
		t.Fatal("the stale kept instance was not closed")
	}
	if got := h.counter(`wasmkeep_rooms_warm_dropped_total{reason="changed"}`); got != 1 {
		t.Fatalf("dropped as changed: %v", got)
	}
	if got := h.counter(`wasmkeep_room_resumes_total`); got != 0 {
		t.Fatalf("resumes: %v", got)
	}
}

func TestWarmDeleteDropsTheKeptInstance(t *testing.T) {
	h := newHarness(t, Config{})
	h.expect("a", "POST", "/", "1")
	h.idle("a")
	k := h.kept("a")
	if err := h.m.Delete(context.Background(), Key{"c", "a"}); err != nil {
		t.Fatal(err)
	}
	if k == nil || !k.closed.Load() || h.kept("a") != nil {
		t.Fatal("a deleted room's kept instance stayed")
	}
	h.expect("a", "POST", "/", "1") // started fresh
}

// TestWarmResumedRoomHearsOfItsSockets: a socket that closed while the
// room slept reaches a resumed instance as it would a restored one.
func TestWarmResumedRoomHearsOfItsSockets(t *testing.T) {
	h := newHarness(t, Config{})
	s, _ := h.open("a")
	h.settle("a")
	h.idle("a")
	k := h.kept("a")
	if k == nil {
		t.Fatal("no instance kept for a room with a socket")
	}
	s.Closed(abi.CloseNormal, "bye")
	h.waitFor("the close to reach the room", func() bool {
		h.m.mu.Lock()
		r := h.m.rooms[Key{"c", "a"}]
		h.m.mu.Unlock()
		return r == nil || (!r.busy() && r.socketCount.Load() == 0)
	})
	if got := h.counter(`wasmkeep_room_resumes_total`); got != 1 {
		t.Fatalf("resumes: %v", got)
	}
	if got := k.get(offCloses); got != 1 {
		t.Fatalf("the resumed instance heard of %d closes, want 1", got)
	}
}

func TestWarmStopClosesKeptInstances(t *testing.T) {
	h := newHarness(t, Config{})
	h.expect("a", "POST", "/", "1")
	h.idle("a")
	k := h.kept("a")
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := h.m.Shutdown(ctx); err != nil {
		t.Fatal(err)
	}
	if k == nil || !k.closed.Load() {
		t.Fatal("a kept instance outlived the stop")
	}
}
