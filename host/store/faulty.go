package store

import (
	"bytes"
	"context"
	"fmt"
	"math/rand/v2"
	"sync"
)

// OpKind names a [Bucket] method.
type OpKind uint8

// The Bucket methods, as seen by a [FaultFunc].
const (
	OpGet OpKind = iota + 1
	OpPut
	OpDelete
	OpList
)

// String returns the method's name in lower case.
func (k OpKind) String() string {
	switch k {
	case OpGet:
		return "get"
	case OpPut:
		return "put"
	case OpDelete:
		return "delete"
	case OpList:
		return "list"
	}
	return fmt.Sprintf("OpKind(%d)", uint8(k))
}

// Op describes one call, for a [FaultFunc] to decide on.
type Op struct {
	Kind OpKind
	// Key is the key, or the prefix for OpList.
	Key string
	// Cond is the condition of OpPut; for OpDelete, Cond.IfMatch is its
	// ifMatch.
	Cond Cond
}

// Fault is what a [FaultFunc] decides for one call. The zero Fault lets the
// call through.
type Fault struct {
	// Err, if not nil, is the error the call returns (wrapped).
	Err error
	// Applied makes the call run on the underlying bucket before Err
	// replaces its answer; otherwise Err is returned without running it.
	Applied bool
	// Late (a put only, with Err): the call is answered Err at once and
	// runs later, when the test calls [Faulty.Land]: a request that was
	// lost in the network and reached the store after its caller gave
	// up on it.
	Late bool
}

// FailBefore returns the Fault that fails a call with err without running
// it. Which err to pass is part of the scenario: ErrUnknownOutcome for a
// lost request (the caller cannot tell it from LoseAnswer), ErrConflict for
// S3's 409, any other error for a refusal the caller can trust.
func FailBefore(err error) Fault { return Fault{Err: err} }

// LoseAnswer returns the Fault that runs a call and then returns
// ErrUnknownOutcome instead of its answer.
func LoseAnswer() Fault { return Fault{Err: ErrUnknownOutcome, Applied: true} }

// LandLate returns the Fault that answers a put ErrUnknownOutcome at once
// and runs it at the next [Faulty.Land].
func LandLate() Fault { return Fault{Err: ErrUnknownOutcome, Late: true} }

// FaultFunc decides the fault for each call. [Faulty] never runs two
// FaultFuncs at once, so one may keep unsynchronized state such as a
// *rand.Rand.
type FaultFunc func(Op) Fault

// RandomFaults returns a FaultFunc that, for each call, draws one number
// from r: with probability lostRequest it fails the call with
// ErrUnknownOutcome without running it, with probability lostAnswer it
// runs the call and then returns ErrUnknownOutcome, and otherwise lets it
// through. Given a seeded r and the same sequence of calls it makes the
// same decisions.
func RandomFaults(r *rand.Rand, lostRequest, lostAnswer float64) FaultFunc {
	return func(Op) Fault {
		switch x := r.Float64(); {
		case x < lostRequest:
			return FailBefore(ErrUnknownOutcome)
		case x < lostRequest+lostAnswer:
			return LoseAnswer()
		}
		return Fault{}
	}
}

// Faulty is a [Bucket] that passes calls to another one and injects the
// faults its [FaultFunc] chooses. Tests and the cluster simulation use it
// to lose requests and answers.
type Faulty struct {
	b    Bucket
	mu   sync.Mutex
	f    FaultFunc
	late []latePut // puts answered and not yet run, oldest first
}

type latePut struct {
	key  string
	body []byte
	cond Cond
}

var _ Bucket = (*Faulty)(nil)

// WithFaults wraps b. A nil f injects nothing.
func WithFaults(b Bucket, f FaultFunc) *Faulty { return &Faulty{b: b, f: f} }

// SetFaults replaces the FaultFunc; nil injects nothing.
func (x *Faulty) SetFaults(f FaultFunc) {
	x.mu.Lock()
	x.f = f
	x.mu.Unlock()
}

// Unwrap returns the wrapped bucket.
func (x *Faulty) Unwrap() Bucket { return x.b }

// decide asks the FaultFunc about op.
func (x *Faulty) decide(op Op) Fault {
	x.mu.Lock()
	defer x.mu.Unlock()
	if x.f == nil {
		return Fault{}
	}
	return x.f(op)
}

// injected wraps the fault's error with the call it hit.
func injected(op Op, f Fault) error {
	when := "before"
	if f.Applied {
		when = "after"
	}
	return fmt.Errorf("%s %q: %w (fault injected %s the call)", op.Kind, op.Key, f.Err, when)
}

// Get implements [Bucket].
func (x *Faulty) Get(ctx context.Context, key string) ([]byte, string, error) {
	op := Op{Kind: OpGet, Key: key}
	f := x.decide(op)
	if f.Err != nil && !f.Applied {
		return nil, "", injected(op, f)
	}
	body, etag, err := x.b.Get(ctx, key)
	if f.Err != nil {
		return nil, "", injected(op, f)
	}
	return body, etag, err
}

// Put implements [Bucket].
func (x *Faulty) Put(ctx context.Context, key string, body []byte, cond Cond) (string, error) {
	op := Op{Kind: OpPut, Key: key, Cond: cond}
	f := x.decide(op)
	if f.Late {
		x.mu.Lock()
		x.late = append(x.late, latePut{key, bytes.Clone(body), cond})
		x.mu.Unlock()
		return "", injected(op, f)
	}
	if f.Err != nil && !f.Applied {
		return "", injected(op, f)
	}
	etag, err := x.b.Put(ctx, key, body, cond)
	if f.Err != nil {
		return "", injected(op, f)
	}
	return etag, err
}

// Land runs the puts that [LandLate] held back, in the order they were
// made, with their conditions as they were sent (so a put whose condition
// no longer holds lands as nothing), and returns how many it ran.
func (x *Faulty) Land(ctx context.Context) int {
	x.mu.Lock()
	late := x.late
	x.late = nil
	x.mu.Unlock()
	for _, p := range late {
		_, _ = x.b.Put(ctx, p.key, p.body, p.cond)
	}
	return len(late)
}

// Delete implements [Bucket].
func (x *Faulty) Delete(ctx context.Context, key string, ifMatch string) error {
	op := Op{Kind: OpDelete, Key: key, Cond: Cond{IfMatch: ifMatch}}
	f := x.decide(op)
	if f.Err != nil && !f.Applied {
		return injected(op, f)
	}
	err := x.b.Delete(ctx, key, ifMatch)
	if f.Err != nil {
		return injected(op, f)
	}
	return err
}

// List implements [Bucket].
func (x *Faulty) List(ctx context.Context, prefix string) ([]string, error) {
	op := Op{Kind: OpList, Key: prefix}
	f := x.decide(op)
	if f.Err != nil && !f.Applied {
		return nil, injected(op, f)
	}
	keys, err := x.b.List(ctx, prefix)
	if f.Err != nil {
		return nil, injected(op, f)
	}
	return keys, err
}

// ListPage implements [Bucket]; its faults are decided as a List's.
func (x *Faulty) ListPage(ctx context.Context, prefix, after string, limit int) ([]Entry, bool, error) {
	op := Op{Kind: OpList, Key: prefix}
	f := x.decide(op)
	if f.Err != nil && !f.Applied {
		return nil, false, injected(op, f)
	}
	page, more, err := x.b.ListPage(ctx, prefix, after, limit)
	if f.Err != nil {
		return nil, false, injected(op, f)
	}
	return page, more, err
}
