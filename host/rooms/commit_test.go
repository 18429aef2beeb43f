package rooms

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/wasmkeep/wasmkeep/abi"
	"github.com/wasmkeep/wasmkeep/host/rooms/life"
	"github.com/wasmkeep/wasmkeep/host/store"
)

// heldWrites is a bucket whose room manifest writes, while it holds them,
// wait for the test: each held write sends the test a channel on which
// the test answers it (nil: it goes through; an error: it fails unrun).
type heldWrites struct {
	store.Bucket
	mu      sync.Mutex
	holding bool
	waiting chan chan error
}

// holdWrites makes the harness's room manifest writes wait for the test.
func holdWrites(h *harness) *heldWrites {
	w := &heldWrites{Bucket: h.m.bucket, holding: true, waiting: make(chan chan error, 16)}
	h.m.bucket = w
	return w
}

func (w *heldWrites) Put(ctx context.Context, key string, body []byte, cond store.Cond) (string, error) {
	w.mu.Lock()
	hold := w.holding && strings.HasSuffix(key, "/manifest")
	w.mu.Unlock()
	if hold {
		answer := make(chan error)
		w.waiting <- answer
		if err := <-answer; err != nil {
			return "", err
		}
	}
	return w.Bucket.Put(ctx, key, body, cond)
}

// stop lets every later write through.
func (w *heldWrites) stop() {
	w.mu.Lock()
	w.holding = false
	w.mu.Unlock()
}

// answer is a request's answer, as requestAsync delivers it.
type answer struct {
	body string
	err  error
}

// requestAsync sends a request to room c/name and delivers its answer on
// the channel returned.
func (h *harness) requestAsync(name, method, path string) <-chan answer {
	ch := make(chan answer, 1)
	go func() {
		body, err := h.request(name, method, path)
		ch <- answer{body, err}
	}()
	return ch
}

// unanswered fails the test if any of chs has an answer.
func unanswered(t *testing.T, what string, chs ...<-chan answer) {
	t.Helper()
	for _, ch := range chs {
		select {
		case a := <-ch:
			t.Fatalf("%s: answered %q, %v while the write its state waits for was under way", what, a.body, a.err)
		default:
		}
	}
}

// durableRoomWithSocket is a harness whose class is durable per event,
// with a socket open in its room c/r.
func durableRoomWithSocket(t *testing.T) (*harness, *Socket, *fakeConn) {
	t.Helper()
	h := newHarness(t, Config{})
	h.classes.durable["c"] = true
	a, ca := h.open("r")
	h.waitFor("the open", func() bool { return len(ca.sent()) == 1 })
	return h, a, ca
}

// TestOutputWaitsForItsWrite: under per-event durability an event's
// answer and its sends leave only once the write of its state landed;
// the events behind the write run meanwhile, and one write covers them
// all and lets their outputs go together.
func TestOutputWaitsForItsWrite(t *testing.T) {
	h, a, ca := durableRoomWithSocket(t)
	w := holdWrites(h)

	first := h.requestAsync("r", "POST", "/")
	release := <-w.waiting // the first event's write is under way
	unanswered(t, "the first request", first)

	var later []<-chan answer
	for range 5 {
		later = append(later, h.requestAsync("r", "POST", "/"))
	}
	if err := a.Message(abi.MessageText, []byte("hello")); err != nil {
		t.Fatal(err)
	}
	h.waitFor("the events behind the write to run", func() bool {
		return h.counter(`wasmkeep_room_events_total{kind="request"}`) == 6 &&
			h.counter(`wasmkeep_room_events_total{kind="socket_message"}`) == 1
	})
	unanswered(t, "the first request", first)
	unanswered(t, "a request behind the first", later...)
	if got := ca.sent(); len(got) != 1 {
		t.Fatalf("the socket was sent %q before the message's state was durable", got)
	}

	release <- nil
	if a := <-first; a.err != nil || a.body != "1" {
		t.Fatalf("the first request: %q, %v; want 1", a.body, a.err)
	}
	release = <-w.waiting // one write for the five requests and the message
	unanswered(t, "a request behind the first", later...)
	if got := ca.sent(); len(got) != 1 {
		t.Fatalf("the socket was sent %q before the message's state was durable", got)
	}
	w.stop()
	release <- nil
	var got []string
	for _, ch := range later {
		a := <-ch
		if a.err != nil {
			t.Fatal(a.err)
		}
		got = append(got, a.body)
	}
	slices.Sort(got)
	if want := []string{"2", "3", "4", "5", "6"}; !slices.Equal(got, want) {
		t.Fatalf("the requests behind the first: %q, want %q", got, want)
	}
	h.waitFor("the echo", func() bool { return slices.Contains(ca.sent(), "hello") })
	// The open's write, the first request's, and one for the rest.
	if n := h.counter(`wasmkeep_room_commits_total`); n != 3 {
		t.Fatalf("%v writes, want 3: the events behind a write share the next one", n)
	}
}

// TestFailedWriteFailsWhatItHeld: a write that fails fails the outputs it
// held and those held behind it (500 for requests, 1011 for the socket
// whose message was lost), and the room goes back to what is durable:
// nothing lost was acknowledged.
func TestFailedWriteFailsWhatItHeld(t *testing.T) {
	h, a, ca := durableRoomWithSocket(t)
	h.expect("r", "POST", "/", "1")
	w := holdWrites(h)

	first := h.requestAsync("r", "POST", "/")
	release := <-w.waiting
	behind := h.requestAsync("r", "POST", "/")
	if err := a.Message(abi.MessageText, []byte("hello")); err != nil {
		t.Fatal(err)
	}
	h.waitFor("the events behind the write to run", func() bool {
		return h.counter(`wasmkeep_room_events_total{kind="request"}`) == 3 &&
			h.counter(`wasmkeep_room_events_total{kind="socket_message"}`) == 1
	})
	release <- errors.New("the store is down")
	for _, ch := range []<-chan answer{first, behind} {
		a := <-ch
		var crash *CrashError
		if !errors.As(a.err, &crash) || !errors.Is(a.err, ErrNotDurable) {
			t.Fatalf("a request whose state could not be written: %q, %v; want a CrashError for ErrNotDurable", a.body, a.err)
		}
	}
	h.waitFor("the sender's close", func() bool { return ca.closeCode() == abi.CloseInternalError })
	if got := ca.sent(); slices.Contains(got, "hello") {
		t.Fatalf("the socket was sent %q: the echo of a message whose state was lost", got)
	}
	w.stop()
	h.expect("r", "GET", "/", "1") // what was durable, and nothing else
	if n := h.counter(`wasmkeep_room_commit_errors_total`); n != 1 {
		t.Fatalf("commit errors: %v, want 1", n)
	}
}

// TestCommitUnderStoreFaults: under lost requests, lost answers and
// writes that land late, no acknowledged increment is ever lost: every
// value acknowledged is acknowledged once, and the room's durable count
// at the end is at least the largest of them.
func TestCommitUnderStoreFaults(t *testing.T) {
	for seed := range uint64(6) {
		numbered := seed%2 == 1 // the numbered manifests' layout (manifests.go)
		t.Run(fmt.Sprintf("%d numbered %v", seed, numbered), func(t *testing.T) {
			h := newHarness(t, Config{NumberedManifests: numbered})
			h.classes.durable["c"] = true
			rng := rand.New(rand.NewPCG(seed, 30))
			h.bucket.SetFaults(func(op store.Op) store.Fault {
				if op.Kind != store.OpPut || !strings.HasPrefix(op.Key, "rooms/") {
					return store.Fault{}
				}
				switch x := rng.Float64(); {
				case x < 0.05:
					return store.FailBefore(store.ErrUnknownOutcome)
				case x < 0.10:
					return store.LoseAnswer()
				case x < 0.15:
					return store.LandLate()
				}
				return store.Fault{}
			})
			acked := map[uint64]bool{}
			failed := 0
			for round := range 60 {
				var chs []<-chan answer
				for range 4 {
					chs = append(chs, h.requestAsync("r", "POST", "/"))
				}
				for _, ch := range chs {
					a := <-ch
					if a.err != nil {
						if !errors.Is(a.err, ErrNotDurable) && !errors.Is(a.err, ErrUnavailable) {
							t.Fatalf("an increment failed with %v", a.err)
						}
						failed++
						continue
					}
					v, err := strconv.ParseUint(a.body, 10, 64)
					if err != nil {
						t.Fatal(err)
					}
					if acked[v] {
						t.Fatalf("count %d acknowledged twice: an acknowledged increment was lost", v)
					}
					acked[v] = true
				}
				if round%7 == 3 {
					h.bucket.Land(context.Background())
				}
			}
			h.bucket.SetFaults(nil)
			h.bucket.Land(context.Background())
			if err := h.m.Drop(context.Background(), Key{"c", "r"}, life.EndAdmin); err != nil {
				t.Fatal(err)
			}
			got, err := h.request("r", "GET", "/")
			if err != nil {
				t.Fatal(err)
			}
			final, _ := strconv.ParseUint(got, 10, 64)
			for v := range acked {
				if v > final {
					t.Fatalf("count %d was acknowledged, but the store holds %d", v, final)
				}
			}
			if len(acked) == 0 || failed == 0 {
				t.Fatalf("%d acknowledged, %d failed: the faults did not bite", len(acked), failed)
			}
			t.Logf("%d increments acknowledged, %d failed, durable count %d", len(acked), failed, final)
		})
	}
}

// TestCommitWindow: with a commit window, a write starts no sooner than
// the window after the one before it started; the events in between wait
// for it.
func TestCommitWindow(t *testing.T) {
	h := newHarness(t, Config{CommitWindow: 100 * time.Millisecond})
	h.classes.durable["c"] = true
	h.expect("r", "POST", "/", "1") // the first write starts at once
	next := h.requestAsync("r", "POST", "/")
	h.waitFor("the second event", func() bool { return h.counter(`wasmkeep_room_events_total{kind="request"}`) == 2 })
	// The idle sweep's ticker, the window's timer and the worker's linger.
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := h.clock.WaitTimers(ctx, 3); err != nil {
		t.Fatal(err)
	}
	unanswered(t, "a request inside the window", next)
	if n := h.counter(`wasmkeep_room_commits_total`); n != 1 {
		t.Fatalf("%v writes inside the window, want 1", n)
	}
	// Once the window has passed the write starts. (A timer the first
	// write's deadline left may have been among those counted: time
	// moves on until the answer comes.)
	var a answer
	h.waitFor("the answer after the window", func() bool {
		h.clock.Advance(100 * time.Millisecond)
		select {
		case a = <-next:
			return true
		default:
			return false
		}
	})
	if a.err != nil || a.body != "2" {
		t.Fatalf("the request after the window: %q, %v", a.body, a.err)
	}
}

// TestIdleHibernationIsNotStaleBehindACommit: the worker's wake-up for a
// commit that landed is not work: an idle hibernation queued before it
// still hibernates the room (it was taken as stale, and the room stayed).
func TestIdleHibernationIsNotStaleBehindACommit(t *testing.T) {
	h, a, _ := durableRoomWithSocket(t)
	w := holdWrites(h)
	first := h.requestAsync("r", "POST", "/")
	release := <-w.waiting // a commit under way
	if err := a.Message(abi.MessageText, []byte("wait")); err != nil {
		t.Fatal(err)
	}
	h.waitFor("the guest to wait", func() bool { return h.counter(`wasmkeep_room_events_total{kind="socket_message"}`) == 1 })
	key := Key{"c", "r"}
	h.m.mu.Lock()
	r := h.m.rooms[key]
	h.m.mu.Unlock()
	handed := make(chan error, 1)
	go func() { handed <- h.m.HandOver(context.Background(), key, life.EndIdle) }()
	h.waitFor("the idle hibernation to be queued", func() bool { return queued(r) == 1 })
	w.stop()
	release <- nil // the write lands; its wake-up is queued behind the hibernation
	h.waitFor("the commit's wake-up to be queued", func() bool { return queued(r) == 2 })
	h.classes.byName["c"].gate <- struct{}{}
	if a := <-first; a.err != nil {
		t.Fatal(a.err)
	}
	if err := <-handed; err != nil {
		t.Fatal(err)
	}
	if st := h.state("r"); st != StateHibernated {
		t.Fatalf("after an idle hibernation with a commit's wake-up behind it: %s, want hibernated", st)
	}
}
