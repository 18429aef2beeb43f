package rooms

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/wasmkeep/wasmkeep/abi"
	"github.com/wasmkeep/wasmkeep/host/engine"
	"github.com/wasmkeep/wasmkeep/host/store"
)

// The room lifecycle on a fake guest, a manual clock and an in-memory
// bucket: no wasm, and no real time but the few milliseconds a worker
// goroutine takes to run.

func TestIdleTimeoutHibernates(t *testing.T) {
	h := newHarness(t, Config{IdleTimeout: 10 * time.Second})
	h.expect("a", "POST", "/", "1")
	if st := h.state("a"); st != StateResident {
		t.Fatalf("after a request: %s", st)
	}
	// The sweep runs every quarter of the idle timeout, at most every
	// second: 9 s of quiet is not enough, 10 s is.
	for range 9 {
		h.clock.Advance(time.Second)
	}
	if st := h.state("a"); st != StateResident {
		t.Fatalf("after 9 s idle: %s, want resident", st)
	}
	h.clock.Advance(time.Second)
	h.waitFor("the idle room to hibernate", func() bool { return h.state("a") == StateHibernated })
	h.expect("a", "GET", "/", "1") // woken with its state
	if got := h.counter(`wasmkeep_room_hibernations_total{reason="idle"}`); got != 1 {
		t.Fatalf("idle hibernations: %v", got)
	}
}

func TestActivityKeepsARoomAwake(t *testing.T) {
	h := newHarness(t, Config{IdleTimeout: 10 * time.Second})
	for range 5 {
		if _, err := h.request("a", "POST", "/"); err != nil {
			t.Fatal(err)
		}
		h.clock.Advance(6 * time.Second)
	}
	if st := h.state("a"); st != StateResident {
		t.Fatalf("a room used every 6 s with a 10 s idle timeout: %s", st)
	}
}

// TestEvictionLeastRecentlyUsed: past --max-resident the room used longest
// ago goes first, by its last event, not by when it woke.
func TestEvictionLeastRecentlyUsed(t *testing.T) {
	h := newHarness(t, Config{MaxResident: 2})
	h.expect("a", "POST", "/", "1")
	h.clock.Advance(time.Second)
	h.expect("b", "POST", "/", "1")
	h.clock.Advance(time.Second)
	h.expect("a", "GET", "/", "1") // a is now the more recent
	h.clock.Advance(time.Second)
	h.expect("c", "POST", "/", "1")
	if got := []RoomState{h.state("a"), h.state("b"), h.state("c")}; !slices.Equal(got, []RoomState{StateResident, StateHibernated, StateResident}) {
		t.Fatalf("a, b, c: %v; want b evicted", got)
	}
	h.expect("b", "GET", "/", "1") // woken again, with its state; a goes
	if st := h.state("a"); st != StateHibernated {
		t.Fatalf("a after b woke again: %s", st)
	}
	if c := h.m.Counts(); c.PeakResident != 2 {
		t.Fatalf("peak resident %d, want 2", c.PeakResident)
	}
}

// TestPinnedRoomsStay: neither the idle timeout nor eviction hibernates a
// pinned room; an unpinned one goes as usual.
func TestPinnedRoomsStay(t *testing.T) {
	h := newHarness(t, Config{MaxResident: 2, IdleTimeout: 10 * time.Second})
	h.expect("p", "POST", "/", "1")
	if err := h.m.Pin(context.Background(), Key{"c", "p"}, true); err != nil {
		t.Fatal(err)
	}
	h.clock.Advance(time.Second)
	h.expect("b", "POST", "/", "1")
	h.clock.Advance(time.Second)
	h.expect("c", "POST", "/", "1") // evicts b, not the older pinned p
	if st := h.state("b"); st != StateHibernated {
		t.Fatalf("b: %s, want evicted", st)
	}
	h.clock.Advance(time.Minute)
	h.waitFor("c to hibernate when idle", func() bool { return h.state("c") == StateHibernated })
	if st := h.state("p"); st != StateResident {
		t.Fatalf("pinned p after the idle timeout: %s", st)
	}
	if err := h.m.Pin(context.Background(), Key{"c", "p"}, false); err != nil {
		t.Fatal(err)
	}
	h.clock.Advance(time.Minute)
	h.waitFor("p to hibernate once unpinned", func() bool { return h.state("p") == StateHibernated })
}

// TestCrashRollsBack: a trap discards the instance and what the event
// did; the next event wakes the room from its last snapshot.
func TestCrashRollsBack(t *testing.T) {
	h := newHarness(t, Config{})
	h.expect("a", "POST", "/", "1")
	if err := h.m.Hibernate(context.Background(), Key{"c", "a"}); err != nil {
		t.Fatal(err)
	}
	h.expect("a", "POST", "/", "2") // not written
	_, err := h.request("a", "POST", "/trap")
	var crash *CrashError
	if !errors.As(err, &crash) {
		t.Fatalf("a trapping request: %v, want a CrashError", err)
	}
	h.expect("a", "GET", "/", "1")
	if got := h.counter(`wasmkeep_room_crashes_total{cause="trap"}`); got != 1 {
		t.Fatalf("crashes: %v", got)
	}
}

// TestCrashErrorForClients: a crash's message, which its client gets with
// HTTP 500, gives the cause without the engine's package prefix.
func TestCrashErrorForClients(t *testing.T) {
	err := &CrashError{Cause: fmt.Errorf("%w: wasm error: unreachable", engine.ErrTrap)}
	if got := err.Error(); strings.Contains(got, "engine:") || !strings.HasSuffix(got, ": guest trapped: wasm error: unreachable") {
		t.Errorf("CrashError = %q", got)
	}
	if !errors.Is(err, engine.ErrTrap) {
		t.Error("a CrashError no longer unwraps to its cause")
	}
}

// TestSocketCrashClosesOnlyThatSocket: a trap in a socket's event closes
// that socket with 1011; the room's other socket goes on.
func TestSocketCrashClosesOnlyThatSocket(t *testing.T) {
	h := newHarness(t, Config{})
	a, ca := h.open("r")
	b, cb := h.open("r")
	h.waitFor("both opens", func() bool { return len(ca.sent()) == 1 && len(cb.sent()) == 1 })
	if err := a.Message(abi.MessageText, []byte("trap")); err != nil {
		t.Fatal(err)
	}
	h.waitFor("the trapping socket to close", func() bool { return ca.closeCode() == abi.CloseInternalError })
	if err := b.Message(abi.MessageText, []byte("still here")); err != nil {
		t.Fatal(err)
	}
	// The room rolled back past both opens: it is told of b again first.
	h.waitFor("b's echo", func() bool { return slices.Contains(cb.sent(), "still here") })
	if cb.closeCode() != 0 {
		t.Fatalf("the other socket closed with %d", cb.closeCode())
	}
}

// TestCrashSendsNothing: what an event sent before it crashed never
// leaves the host.
func TestCrashSendsNothing(t *testing.T) {
	h := newHarness(t, Config{})
	a, ca := h.open("r")
	h.waitFor("the open", func() bool { return len(ca.sent()) == 1 })
	if err := a.Message(abi.MessageText, []byte("send, then trap")); err != nil {
		t.Fatal(err)
	}
	h.waitFor("the socket to close", func() bool { return ca.closeCode() == abi.CloseInternalError })
	if got := ca.sent(); len(got) != 1 {
		t.Fatalf("the socket got %q; want only its open", got)
	}
}

// TestBatchesAreTheRoomsOwn: a burst of messages, held in place (up to 16)
// or not, reaches the guest whole and in order after the caller has reused
// the slice it handed over.
func TestBatchesAreTheRoomsOwn(t *testing.T) {
	h := newHarness(t, Config{})
	a, ca := h.open("r")
	h.waitFor("the open", func() bool { return len(ca.sent()) == 1 })
	var want []string
	for _, n := range []int{3, inlineMessages, inlineMessages + 1, 40} {
		msgs := make([]Message, n)
		for i := range msgs {
			m := fmt.Sprintf("batch of %d: %d", n, i)
			msgs[i] = Message{Kind: abi.MessageText, Data: []byte(m)}
			want = append(want, m)
		}
		if err := a.Messages(msgs); err != nil {
			t.Fatal(err)
		}
		for i := range msgs {
			msgs[i] = Message{Kind: abi.MessageBinary, Data: []byte("reused")}
		}
	}
	h.waitFor("every echo", func() bool { return len(ca.sent()) == 1+len(want) })
	if got := ca.sent()[1:]; !slices.Equal(got, want) {
		t.Fatalf("the guest echoed %q;\nwant %q", got, want)
	}
}

// TestEventOutputIsBounded: an event's sends stop at MaxEventOutput (the
// call answering StatusTooLarge), what fitted goes out, and the next
// event has the whole bound again.
func TestEventOutputIsBounded(t *testing.T) {
	const limit = 10_000 // 8 sends of 1,000 bytes and 128 each fit, not 9
	h := newHarness(t, Config{MaxEventOutput: limit})
	a, ca := h.open("r")
	h.waitFor("the open", func() bool { return len(ca.sent()) == 1 })
	class := h.classes.byName["c"]
	for round := 1; round <= 2; round++ {
		if err := a.Message(abi.MessageText, []byte("flood")); err != nil {
			t.Fatal(err)
		}
		h.waitFor("the flood's sends", func() bool { return len(ca.sent()) == 1+8*round })
		if n, st := class.floods.Load(), abi.Status(class.floodStatus.Load()); n != 8 || st != abi.StatusTooLarge {
			t.Fatalf("round %d: %d sends, then %v; want 8, then %v", round, n, st, abi.StatusTooLarge)
		}
	}
	if err := a.Message(abi.MessageText, []byte("echo")); err != nil {
		t.Fatal(err)
	}
	h.waitFor("the echo", func() bool { return slices.Contains(ca.sent(), "echo") })
	if got := len(ca.sent()); got != 1+16+1 {
		t.Fatalf("the socket got %d messages; want 18", got)
	}
	if ca.closeCode() != 0 {
		t.Fatalf("the socket closed with %d", ca.closeCode())
	}
}

// gateManifests blocks writes of room manifests until release is closed,
// telling held when one is waiting.
func gateManifests(release <-chan struct{}, held chan<- struct{}) store.FaultFunc {
	return func(op store.Op) store.Fault {
		if op.Kind == store.OpPut && strings.HasSuffix(op.Key, "/manifest") {
			held <- struct{}{}
			<-release
		}
		return store.Fault{}
	}
}

// TestCheckpointHoldsOutputUntilDurable: an event that asks for a
// checkpoint gives no answer and sends nothing until its state is in the
// store.
func TestCheckpointHoldsOutputUntilDurable(t *testing.T) {
	h := newHarness(t, Config{})
	_, conn := h.open("a")
	h.waitFor("the open", func() bool { return len(conn.sent()) == 1 })
	release, held := make(chan struct{}), make(chan struct{}, 1)
	h.bucket.SetFaults(gateManifests(release, held))
	answer := make(chan string, 1)
	go func() {
		got, err := h.request("a", "POST", "/checkpoint")
		if err != nil {
			got = err.Error()
		}
		answer <- got
	}()
	<-held // the checkpoint's manifest write is under way
	select {
	case got := <-answer:
		t.Fatalf("answered %q before its state was durable", got)
	default:
	}
	if sent := conn.sent(); len(sent) != 1 {
		t.Fatalf("sent %q before the state was durable", sent)
	}
	close(release)
	if got := <-answer; got != "1" {
		t.Fatalf("checkpoint answered %q", got)
	}
	h.waitFor("the broadcast", func() bool { return slices.Contains(conn.sent(), "checkpoint 1") })
	if got := h.counter("wasmkeep_snapshot_writes_total"); got != 1 {
		t.Fatalf("snapshot writes: %v", got)
	}
}

// TestDurableWriteFailureUndoesTheEvent: under per-event durability a
// write that fails undoes the event like a crash: no output, no state.
func TestDurableWriteFailureUndoesTheEvent(t *testing.T) {
	h := newHarness(t, Config{})
	h.classes.durable["c"] = true
	h.expect("a", "POST", "/", "1")
	_, conn := h.open("a")
	h.waitFor("the open", func() bool { return len(conn.sent()) == 1 })
	h.bucket.SetFaults(func(op store.Op) store.Fault {
		if op.Kind == store.OpPut {
			return store.FailBefore(errors.New("disk full"))
		}
		return store.Fault{}
	})
	if _, err := h.request("a", "POST", "/"); !errors.Is(err, ErrNotDurable) {
		t.Fatalf("a write on a failing store: %v, want ErrNotDurable", err)
	}
	h.bucket.SetFaults(nil)
	h.expect("a", "GET", "/", "1")
	if sent := conn.sent(); len(sent) != 1 || sent[0] != "open 1" {
		// The rolled-back room restarts from the snapshot its open
		// wrote, which knows the socket: no second open, and no echo
		// of the undone event.
		t.Fatalf("socket got %q", sent)
	}
}

// TestADurableRoomsSocketIsOpenedOnce: under per-event durability the
// snapshot the open writes lists the socket, so a wake after hibernation
// does not open it again (it did: the socket was marked known only after
// that write, and the hibernation found nothing changed to write).
func TestADurableRoomsSocketIsOpenedOnce(t *testing.T) {
	h := newHarness(t, Config{})
	h.classes.durable["c"] = true
	s, conn := h.open("a")
	h.waitFor("the open", func() bool { return len(conn.sent()) == 1 })
	if err := h.m.Hibernate(context.Background(), Key{"c", "a"}); err != nil {
		t.Fatal(err)
	}
	if err := s.Message(abi.MessageText, []byte("hi")); err != nil {
		t.Fatal(err)
	}
	h.waitFor("the echo", func() bool { return len(conn.sent()) >= 2 })
	if sent := conn.sent(); sent[1] == "open 1" {
		t.Fatalf("the wake opened the socket again: %q", sent)
	}
}

// TestDeleteState: a room that asks for its state to be deleted starts
// fresh at its next event, and nothing of its snapshot is left in the
// store; a key under its prefix that is not the snapshot's (a cluster's
// ownership record) stays, or another node could take the room while this
// one holds it.
func TestDeleteState(t *testing.T) {
	h := newHarness(t, Config{})
	ctx := context.Background()
	if _, err := h.bucket.Put(ctx, "rooms/c/a/owner", []byte("held here"), store.Cond{}); err != nil {
		t.Fatal(err)
	}
	h.expect("a", "POST", "/", "1")
	h.expect("a", "POST", "/", "2")
	if err := h.m.Hibernate(ctx, Key{"c", "a"}); err != nil {
		t.Fatal(err)
	}
	h.expect("a", "POST", "/delete", "deleted")
	if keys, _ := h.bucket.List(ctx, "rooms/c/a/"); !slices.Equal(keys, []string{"rooms/c/a/owner"}) {
		t.Fatalf("after the delete the store holds %q, want only the ownership record", keys)
	}
	h.expect("a", "GET", "/", "0")
}

// TestStopHibernatesEveryRoom: a stop writes every resident room's state
// and leaves none resident.
func TestStopHibernatesEveryRoom(t *testing.T) {
	h := newHarness(t, Config{})
	for _, name := range []string{"a", "b", "c"} {
		h.expect(name, "POST", "/", "1")
	}
	if err := h.m.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	if c := h.m.Counts(); c.Resident != 0 || c.Stored != 3 {
		t.Fatalf("after the stop: %+v", c)
	}
	if _, err := h.request("a", "GET", "/"); !errors.Is(err, ErrStopping) {
		t.Fatalf("a request after the stop: %v", err)
	}
}

// TestUpgradeDuringStop: an upgrade asked for while the node stops (an
// admin's upload racing the stop) is refused with ErrStopping rather than
// starting a job that the stop does not wait for. The race detector
// catches the old failure: a background job started after the stop's
// wait began.
func TestUpgradeDuringStop(t *testing.T) {
	h := newHarness(t, Config{})
	h.expect("a", "POST", "/", "1")
	refused := make(chan error, 1)
	go func() {
		// No synchronisation with Shutdown other than the manager's own:
		// the loop ends at the first refusal.
		for i := 0; i < 100000; i++ {
			if err := h.m.UpgradeAll("c", 1); err != nil {
				refused <- err
				return
			}
		}
		refused <- nil
	}()
	if err := h.m.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	if err := <-refused; !errors.Is(err, ErrStopping) {
		t.Fatalf("an upgrade during the stop: %v, want ErrStopping", err)
	}
	for _, j := range h.m.UpgradeJobs() {
		if j.Class == "c" && j.Running() {
			t.Fatalf("a job left unfinished by the stop: %+v", j)
		}
	}
}

// stuckBucket is a store whose writes hang until their context ends.
type stuckBucket struct {
	store.Bucket
	stuck   chan struct{} // gets a value when a write starts hanging
	hanging atomic.Int32  // writes hanging now
}

func (b *stuckBucket) Put(ctx context.Context, key string, body []byte, cond store.Cond) (string, error) {
	if strings.HasPrefix(key, "rooms/") {
		b.hanging.Add(1)
		defer b.hanging.Add(-1)
		b.stuck <- struct{}{}
		<-ctx.Done()
		return "", ctx.Err()
	}
	return b.Bucket.Put(ctx, key, body, cond)
}

// TestContextsReachTheStore: a store that hangs cannot hold a stop past
// its deadline, nor a request past its client's cancel: the request
// returns at once (its answer waits on a write that covers other events
// too, so the write goes on), and the stop's context reaches every write.
func TestContextsReachTheStore(t *testing.T) {
	h := newHarness(t, Config{})
	stuck := &stuckBucket{Bucket: h.m.bucket, stuck: make(chan struct{}, 10)}
	h.m.bucket = stuck
	h.classes.durable["c"] = true

	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		_, err := h.m.Request(ctx, Key{"c", "d"}, abi.AppendRequest(nil, &abi.Request{Method: "POST", Path: "/"}))
		done <- err
	}()
	<-stuck.stuck // the durable write hangs
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Fatalf("a request whose durable write hangs, cancelled: %v", err)
	}

	h.classes.durable["c"] = false
	h.expect("a", "POST", "/", "1")
	stop, cancelStop := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancelStop()
	err := h.m.Shutdown(stop)
	if err == nil || !strings.Contains(err.Error(), "c/a") {
		t.Fatalf("a stop whose writes hang past its deadline: %v, want an error naming c/a", err)
	}
	h.waitFor("the stop's hanging write to give up at its deadline", func() bool { return stuck.hanging.Load() == 0 })
}

// TestOneSocketCannotFillItsRoom: while its room is busy, a socket gets
// at most two message events into the room's mailbox; its next message
// waits (and with it the socket's reader, so TCP slows the client down)
// instead of queueing ahead of everyone else's events and of its own
// outbound budget.
func TestOneSocketCannotFillItsRoom(t *testing.T) {
	h := newHarness(t, Config{})
	a, ca := h.open("r")
	h.waitFor("the open", func() bool { return len(ca.sent()) == 1 })
	if err := a.Message(abi.MessageText, []byte("wait")); err != nil { // the room is busy until the gate opens
		t.Fatal(err)
	}
	room := a.room
	// The worker has taken "wait" out of the mailbox and runs it: else
	// the flood's first message would queue behind it, not run after it.
	h.waitFor("the room to run the wait message", func() bool { return queued(room) == 0 })
	var calls atomic.Int32
	flooded := make(chan error, 1)
	go func() {
		for i := range 20 {
			calls.Add(1)
			if err := a.Message(abi.MessageText, []byte{byte('a' + i)}); err != nil {
				flooded <- err
				return
			}
		}
		flooded <- nil
	}()
	// The event running ("wait") holds one of the socket's two places:
	// the flood's first message takes the other, its second waits.
	h.waitFor("the flood to reach its second message", func() bool { return calls.Load() >= 2 })
	if got, q := calls.Load(), queued(room); got != 2 || q != 1 {
		t.Fatalf("with the room busy on one of its events, the socket made %d calls and has %d queued; want its second call waiting and one queued", got, q)
	}
	close(h.classes.byName["c"].gate)
	if err := <-flooded; err != nil {
		t.Fatal(err)
	}
	h.waitFor("every echo", func() bool { return len(ca.sent()) == 22 }) // the open, "wait", and 20
	for i, got := range ca.sent()[2:] {
		if want := string(rune('a' + i)); got != want {
			t.Fatalf("echo %d is %q, want %q: messages out of order", i, got, want)
		}
	}

	// Quiet again, the room and its socket keep nothing of the flood:
	// what a room keeps while idle is what a node pays per room for hours.
	h.waitFor("the worker to exit", func() bool {
		h.clock.Advance(lingerFor) // its wait for a next event ends
		room.mu.Lock()
		defer room.mu.Unlock()
		return !room.running
	})
	room.mu.Lock()
	defer room.mu.Unlock()
	if a.inflight != 0 || a.drained != nil {
		t.Errorf("the quiet socket has %d message events counted in flight and a wait channel %v; want none", a.inflight, a.drained != nil)
	}
	if room.linger != nil {
		t.Error("the quiet room keeps its worker's timer")
	}
	if room.joins != nil || room.goneJoins != nil || room.joinPayloads != nil || room.presence != nil || room.gone != nil {
		t.Error("a raw socket's room made maps it never used")
	}
}
