package sim

import (
	"container/heap"
	"context"
	"fmt"
	"hash"
	"hash/fnv"
	"io"
	"math/rand/v2"
	"runtime"
	"strconv"
)

// Scheduler runs tasks one at a time in virtual time. A task is a
// goroutine that holds the baton while it runs; it gives it back when it
// blocks (a bucket call, a sleep) or ends, and the scheduler hands it to
// the next event in (virtual time, tie, sequence) order, the tie drawn
// from the seed. So every interleaving is the seed's, and a hash of the
// events processed shows that a seed replays exactly.
type Scheduler struct {
	rng   *rand.Rand
	now   int64
	seq   uint64
	queue events
	baton chan struct{}
	trace io.Writer
	hash  hash.Hash64
	steps int
	all   []*Task
	buf   []byte
}

// NewScheduler returns a scheduler at virtual time 0 whose ties are
// broken by rng; each event is written to trace, if not nil.
func NewScheduler(rng *rand.Rand, trace io.Writer) *Scheduler {
	return &Scheduler{rng: rng, baton: make(chan struct{}), trace: trace, hash: fnv.New64a()}
}

// Now is the virtual time in nanoseconds.
func (s *Scheduler) Now() int64 { return s.now }

// Hash is the hash of every event processed so far.
func (s *Scheduler) Hash() uint64 { return s.hash.Sum64() }

// Steps counts the events processed.
func (s *Scheduler) Steps() int { return s.steps }

// Note adds a line to the trace (and its hash) at the current time.
func (s *Scheduler) Note(format string, args ...any) { s.line(fmt.Sprintf(format, args...)) }

// line adds one line, the time first, without fmt: the hash takes a line
// for every step.
func (s *Scheduler) line(parts ...string) {
	b := strconv.AppendInt(s.buf[:0], s.now, 10)
	for _, p := range parts {
		b = append(append(b, ' '), p...)
	}
	b = append(b, '\n')
	s.hash.Write(b)
	if s.trace != nil {
		s.trace.Write(b)
	}
	s.buf = b
}

// Group is the tasks of one process: they crash and pause together.
type Group struct {
	Name        string
	dead        bool
	pausedUntil int64
	tasks       []*Task
}

// Task is a goroutine the scheduler runs.
type Task struct {
	s     *Scheduler
	name  string
	group *Group
	wake  chan bool // true: the task's process is dead, exit
	done  bool
	// parked is the event that will resume the task from its current
	// block, for Unpark to replace by an earlier one.
	parked *event
	// bucketTime is the virtual time the task spent in bucket calls;
	// inBucket says it is in one now, since bucketFrom.
	bucketTime, bucketFrom int64
	inBucket               bool
}

type taskKey struct{}

// TaskOf is the task a context was given to, or nil.
func TaskOf(ctx context.Context) *Task {
	t, _ := ctx.Value(taskKey{}).(*Task)
	return t
}

type event struct {
	at       int64
	tie, seq uint64
	task     *Task  // resume it
	fn       func() // or run this on the scheduler
	label    string
	// stale: replaced by an earlier wake (Unpark); skipped.
	stale bool
}

type events []*event

func (q events) Len() int { return len(q) }
func (q events) Less(i, j int) bool {
	a, b := q[i], q[j]
	if a.at != b.at {
		return a.at < b.at
	}
	if a.tie != b.tie {
		return a.tie < b.tie
	}
	return a.seq < b.seq
}
func (q events) Swap(i, j int) { q[i], q[j] = q[j], q[i] }
func (q *events) Push(x any)   { *q = append(*q, x.(*event)) }
func (q *events) Pop() any {
	old := *q
	e := old[len(old)-1]
	*q = old[:len(old)-1]
	return e
}

func (s *Scheduler) push(e *event) {
	s.seq++
	e.seq, e.tie = s.seq, s.rng.Uint64()
	heap.Push(&s.queue, e)
}

// At runs fn on the scheduler at virtual time at (not before now).
func (s *Scheduler) At(at int64, label string, fn func()) {
	s.push(&event{at: max(at, s.now), fn: fn, label: label})
}

// Spawn starts f as a task of g, at the current time. f's context carries
// the task, for the bucket and the sleeper to block it.
func (s *Scheduler) Spawn(g *Group, name string, f func(ctx context.Context)) {
	t := &Task{s: s, name: g.Name + "/" + name + "#" + strconv.Itoa(len(s.all)), group: g, wake: make(chan bool)}
	g.tasks = append(g.tasks, t)
	s.all = append(s.all, t)
	ctx := context.WithValue(context.Background(), taskKey{}, t)
	go func() {
		defer func() {
			t.done = true
			s.baton <- struct{}{}
		}()
		if dead := <-t.wake; dead {
			return
		}
		f(ctx)
	}()
	s.push(&event{at: s.now, task: t, label: t.name})
}

// Forever is a time no event reaches: a task blocked until then waits
// for Unpark, or for ever.
const Forever = int64(1<<63 - 1)

// BlockUntil parks the calling task until virtual time at, or until an
// Unpark, whichever comes first. If its process died meanwhile the task
// ends there (runtime.Goexit): a crashed process runs nothing more, and
// what it held in memory is gone with it.
func (t *Task) BlockUntil(at int64) {
	s := t.s
	e := &event{at: max(at, s.now), task: t, label: t.name}
	t.parked = e
	s.push(e)
	s.baton <- struct{}{}
	if dead := <-t.wake; dead {
		runtime.Goexit()
	}
}

// Unpark wakes t now from the block it is in (a peer's answer that
// arrived before the caller's timeout). The caller must know that t is
// still in the block it means to end: the scheduler cannot tell one block
// from the next.
func (s *Scheduler) Unpark(t *Task) {
	if t.done || t.parked == nil || t.parked.stale {
		return
	}
	t.parked.stale = true
	e := &event{at: s.now, task: t, label: t.name + " woken"}
	t.parked = e
	s.push(e)
}

// Kill ends every task of g: each exits at its next wake, which is now.
func (s *Scheduler) Kill(g *Group) {
	g.dead = true
	for _, t := range g.tasks {
		if !t.done {
			s.push(&event{at: s.now, task: t, label: t.name + " killed"})
		}
	}
}

// Pause stops g's tasks from running until virtual time until (a process
// stopped by the kernel, or a long collection): their clocks go on.
func (s *Scheduler) Pause(g *Group, until int64) { g.pausedUntil = max(g.pausedUntil, until) }

// Step processes the next event at or before end and reports whether
// there was one, and the group of the task it ran (nil for an event of
// the scheduler's own).
func (s *Scheduler) Step(end int64) (*Group, bool) {
	for s.queue.Len() > 0 {
		e := heap.Pop(&s.queue).(*event)
		if e.at > end {
			heap.Push(&s.queue, e)
			return nil, false
		}
		if e.stale || e.task != nil && e.task.done {
			continue
		}
		s.now = e.at
		if t := e.task; t != nil && !t.group.dead && t.group.pausedUntil > s.now {
			later := &event{at: t.group.pausedUntil, task: t, label: e.label}
			if t.parked == e {
				t.parked = later
			}
			s.push(later)
			continue
		}
		s.steps++
		s.line(e.label)
		if e.fn != nil {
			e.fn()
			return nil, true
		}
		e.task.wake <- e.task.group.dead
		<-s.baton
		return e.task.group, true
	}
	return nil, false
}

// Close ends every task still alive, so that no goroutine outlives the
// run.
func (s *Scheduler) Close() {
	for _, t := range s.all {
		if !t.done {
			t.group.dead = true
			t.wake <- true
			<-s.baton
		}
	}
	s.all = nil
}
