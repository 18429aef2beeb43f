package sim

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"time"

	"github.com/wasmkeep/wasmkeep/host/store"
)

// Faults are the probabilities of what can happen to one bucket request
// (besides its machine's link being slow or cut), and the times they
// take.
type Faults struct {
	// LostRequest: never applied; answered ErrUnknownOutcome.
	LostRequest float64
	// LostAnswer: applied; answered ErrUnknownOutcome.
	LostAnswer float64
	// Late (writes only): answered ErrUnknownOutcome, applied later, up
	// to LateMax after it was sent.
	Late float64
	// Conflict (writes only): a 409, not applied.
	Conflict float64
	// Slow: applied at once, answered (truly) up to Timeout later.
	Slow float64

	// Latency bounds each leg of a normal request (to the bucket and
	// back); Timeout is when a client gives up on one (its attempt
	// timeout); LateMax is the latest a write lands after it was sent.
	Latency, Timeout, LateMax time.Duration
}

// Scaled is f with every rate times k.
func (f Faults) Scaled(k float64) Faults {
	f.LostRequest *= k
	f.LostAnswer *= k
	f.Late *= k
	f.Conflict *= k
	f.Slow *= k
	return f
}

// DefaultFaults are the simulation's rates: about one request in ten goes
// wrong.
var DefaultFaults = Faults{
	LostRequest: 0.02, LostAnswer: 0.02, Late: 0.02, Conflict: 0.02, Slow: 0.03,
	Latency: 20 * time.Millisecond, Timeout: 8 * time.Second, LateMax: 12 * time.Second,
}

// Network is the simulated bucket: one store.Mem that every process's
// requests reach through a link of its machine, each request meeting a
// fault with the probabilities of Faults. It runs on a Scheduler: a
// request blocks its task until its answer, and applies (if it does) at a
// moment of its own, which may be after the answer, or after the task's
// process is gone.
type Network struct {
	s      *Scheduler
	rng    *rand.Rand
	mem    *store.Mem
	faults Faults
	// detail writes each write's body into the trace.
	detail bool
	// Injected counts the requests that met a fault.
	Injected uint64
	// applied is told of each write that applied.
	applied func(key string, body []byte, etag string)
	// faulted is told of each request of the process named name that met
	// a fault, and how long its caller waits for the answer: the time a
	// liveness bound excuses.
	faulted func(name string, wait int64)
}

// NewNetwork returns a network to mem on s, its faults drawn from rng.
func NewNetwork(s *Scheduler, rng *rand.Rand, mem *store.Mem, faults Faults) *Network {
	return &Network{s: s, rng: rng, mem: mem, faults: faults}
}

// Link is a machine's way to the bucket: slow from SlowFrom, then cut
// from CutFrom until CutUntil (virtual times).
type Link struct{ SlowFrom, CutFrom, CutUntil int64 }

// Bucket returns the store.Bucket of a process named name on link. Call
// it from tasks of s only.
func (n *Network) Bucket(name string, link *Link) store.Bucket {
	return &bucket{n: n, name: name, link: link}
}

// bucket is one process's view of the shared bucket: every call blocks
// the calling task while its request and answer travel, and may meet a
// fault.
type bucket struct {
	n    *Network
	name string
	link *Link
}

var _ store.Bucket = (*bucket)(nil)

type op struct {
	kind   store.OpKind
	key    string
	body   []byte
	cond   store.Cond
	after  string
	limit  int
	paging bool
}

type answer struct {
	body  []byte
	etag  string
	keys  []string
	page  []store.Entry
	more  bool
	err   error
	ready bool
}

// plan is what becomes of one request: applied at applyAt (if apply),
// answered at answerAt with answerErr (if not nil) instead of its result.
type plan struct {
	apply             bool
	applyAt, answerAt int64
	answerErr         error
	fault             string
}

func (b *bucket) plan(o op) plan {
	f, now, rng := b.n.faults, b.n.s.Now(), b.n.rng
	leg := func() int64 { return 1 + rng.Int64N(int64(f.Latency)) }
	between := func(lo, hi int64) int64 { return lo + rng.Int64N(max(hi-lo, 1)) }
	timeout := int64(f.Timeout)
	write := o.kind == store.OpPut || o.kind == store.OpDelete
	m := b.link
	if m.CutFrom <= now && now < m.CutUntil {
		return plan{answerAt: now + between(timeout/4, timeout), answerErr: store.ErrUnknownOutcome, fault: "cut"}
	}
	if m.SlowFrom <= now && now < m.CutFrom {
		at := now + leg()
		return plan{apply: true, applyAt: at, answerAt: between(at+int64(3*time.Second), now+timeout), fault: "slow link"}
	}
	x := rng.Float64()
	switch {
	case x < f.LostRequest:
		return plan{answerAt: now + between(timeout/10, timeout), answerErr: store.ErrUnknownOutcome, fault: "lost request"}
	case x < f.LostRequest+f.LostAnswer:
		at := now + leg()
		return plan{apply: true, applyAt: at, answerAt: between(at+1, now+timeout), answerErr: store.ErrUnknownOutcome, fault: "lost answer"}
	case write && x < f.LostRequest+f.LostAnswer+f.Late:
		ans := now + between(timeout/10, timeout)
		return plan{apply: true, applyAt: between(ans, now+int64(f.LateMax)), answerAt: ans, answerErr: store.ErrUnknownOutcome, fault: "late"}
	case write && x < f.LostRequest+f.LostAnswer+f.Late+f.Conflict:
		return plan{answerAt: now + leg(), answerErr: store.ErrConflict, fault: "conflict"}
	case x < f.LostRequest+f.LostAnswer+f.Late+f.Conflict+f.Slow:
		at := now + leg()
		return plan{apply: true, applyAt: at, answerAt: between(at+int64(time.Second), now+timeout), fault: "slow"}
	}
	at := now + leg()
	return plan{apply: true, applyAt: at, answerAt: at + leg()}
}

// call sends o from the calling task and blocks it until the answer.
func (b *bucket) call(ctx context.Context, o op) answer {
	t := TaskOf(ctx)
	if t == nil {
		panic("sim: a bucket call outside a task")
	}
	if err := ctx.Err(); err != nil {
		return answer{err: err}
	}
	n := b.n
	p := b.plan(o)
	var a answer
	if p.fault != "" {
		n.Injected++
		if n.faulted != nil {
			n.faulted(b.name, p.answerAt-n.s.Now())
		}
	}
	if p.apply {
		n.s.At(p.applyAt, "apply "+b.name+" "+o.kind.String()+" "+o.key, func() {
			a = n.apply(o)
			a.ready = true
			if n.detail {
				n.s.Note("%s %s %s %s %s: etag %q err %v", b.name, o.kind, o.key, o.cond, o.body, a.etag, a.err)
			} else {
				n.s.line(a.etag, errWord(a.err))
			}
		})
	}
	if p.fault != "" {
		n.s.line(b.name, o.key, p.fault)
	}
	t.bucketFrom, t.inBucket = n.s.Now(), true
	t.BlockUntil(p.answerAt)
	t.bucketTime += n.s.Now() - t.bucketFrom
	t.inBucket = false
	if p.answerErr != nil {
		return answer{err: fmt.Errorf("sim: %s %q: %w (%s)", o.kind, o.key, p.answerErr, p.fault)}
	}
	if !a.ready {
		panic("sim: answered before applied")
	}
	return a
}

// apply runs o on the bucket.
func (n *Network) apply(o op) answer {
	ctx := context.Background()
	var a answer
	switch o.kind {
	case store.OpGet:
		a.body, a.etag, a.err = n.mem.Get(ctx, o.key)
	case store.OpPut:
		a.etag, a.err = n.mem.Put(ctx, o.key, o.body, o.cond)
		if a.err == nil && n.applied != nil {
			n.applied(o.key, o.body, a.etag)
		}
	case store.OpDelete:
		a.err = n.mem.Delete(ctx, o.key, o.cond.IfMatch)
	case store.OpList:
		if o.paging {
			a.page, a.more, a.err = n.mem.ListPage(ctx, o.key, o.after, o.limit)
		} else {
			a.keys, a.err = n.mem.List(ctx, o.key)
		}
	}
	return a
}

// Get implements store.Bucket.
func (b *bucket) Get(ctx context.Context, key string) ([]byte, string, error) {
	a := b.call(ctx, op{kind: store.OpGet, key: key})
	return a.body, a.etag, a.err
}

// Put implements store.Bucket.
func (b *bucket) Put(ctx context.Context, key string, body []byte, cond store.Cond) (string, error) {
	a := b.call(ctx, op{kind: store.OpPut, key: key, body: append([]byte(nil), body...), cond: cond})
	return a.etag, a.err
}

// Delete implements store.Bucket.
func (b *bucket) Delete(ctx context.Context, key string, ifMatch string) error {
	return b.call(ctx, op{kind: store.OpDelete, key: key, cond: store.Cond{IfMatch: ifMatch}}).err
}

// List implements store.Bucket.
func (b *bucket) List(ctx context.Context, prefix string) ([]string, error) {
	a := b.call(ctx, op{kind: store.OpList, key: prefix})
	return a.keys, a.err
}

// ListPage implements store.Bucket.
func (b *bucket) ListPage(ctx context.Context, prefix, after string, limit int) ([]store.Entry, bool, error) {
	a := b.call(ctx, op{kind: store.OpList, key: prefix, after: after, limit: limit, paging: true})
	return a.page, a.more, a.err
}

// errWord is the trace's word for an answer.
func errWord(err error) string {
	switch {
	case err == nil:
		return "ok"
	case errors.Is(err, store.ErrNotFound):
		return "not-found"
	case errors.Is(err, store.ErrPrecondition):
		return "precondition"
	}
	return err.Error()
}
