package storetest

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/anishathalye/porcupine"

	"github.com/wasmkeep/wasmkeep/host/store"
)

// ErrNotLinearizable is the error of [CheckLinearizable] when the history
// it recorded has no linearization.
var ErrNotLinearizable = errors.New("storetest: history is not linearizable")

// LinearOptions shapes a run of [CheckLinearizable]. The zero value of a field
// means the default its comment gives.
type LinearOptions struct {
	// Writers is the number of goroutines (16).
	Writers int
	// Keys are the keys the writers share (one key, "linear/k"). Writer w
	// works on Keys[(w+round)%len(Keys)].
	Keys []string
	// Rounds is the number of lockstep rounds (8): every writer reads
	// its key, waits for every other to have read, then writes; so
	// several writers of a key always try to replace one version.
	Rounds int
	// Free is the number of read-modify-writes each writer then does
	// without waiting for the others (8), so that reads overlap writes.
	Free int
	// Timeout bounds the checker (five minutes); a check that runs out is
	// an error.
	Timeout time.Duration
}

func (c LinearOptions) withDefaults() LinearOptions {
	if c.Writers == 0 {
		c.Writers = 16
	}
	if len(c.Keys) == 0 {
		c.Keys = []string{"linear/k"}
	}
	if c.Rounds == 0 {
		c.Rounds = 8
	}
	if c.Free == 0 {
		c.Free = 8
	}
	if c.Timeout == 0 {
		c.Timeout = 5 * time.Minute
	}
	return c
}

// CheckLinearizable has c.Writers goroutines do read-modify-writes on
// c.Keys through b, each a Get then a Put by If-Match on the ETag read
// (If-None-Match if the key was missing), records every call with its
// start and end, and checks the history against a register per key with
// compare-and-swap (porcupine). It returns nil if the history is
// linearizable, an error wrapping [ErrNotLinearizable] that shows where it
// is not, or the first error of a call that the contract does not allow.
//
// The keys should be missing when it starts. Every body written is unique
// (writer, sequence number, counter), so that ETags derived from the body
// (S3's) name one version each. A Put that ends in ErrUnknownOutcome may
// take effect at any time after it started, and is checked as such; a Put
// that ends in ErrConflict must not have taken effect.
func CheckLinearizable(ctx context.Context, b store.Bucket, c LinearOptions) error {
	c = c.withDefaults()
	r := &recorder{start: time.Now()}
	gate := newBarrier(c.Writers)
	errs := make([]error, c.Writers)
	var wg sync.WaitGroup
	for w := range c.Writers {
		wg.Go(func() {
			errs[w] = r.writer(ctx, b, c, gate, w)
			if errs[w] != nil {
				gate.abort()
			}
		})
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return err
	}
	// A last read of each key, after every write returned.
	for _, k := range c.Keys {
		if _, _, err := r.get(ctx, b, c.Writers, k); err != nil && !errors.Is(err, store.ErrNotFound) && !errors.Is(err, errSkip) {
			return err
		}
	}
	return check(r.history(), c.Timeout)
}

// linInput is a call: a Get, or a Put with its condition and body.
type linInput struct {
	key  string
	put  bool
	cond store.Cond
	body string
}

// linOutput is a call's result. A Put's ok, lost (ErrPrecondition),
// conflict (ErrConflict) or unknown (ErrUnknownOutcome); a Get's ok or
// missing (ErrNotFound), with the body and ETag it read.
type linOutput struct {
	result string
	body   string
	etag   string
}

// recorder keeps the history of one run.
type recorder struct {
	start time.Time
	mu    sync.Mutex
	ops   []porcupine.Operation
}

func (r *recorder) now() int64 { return time.Since(r.start).Nanoseconds() }

func (r *recorder) add(client int, in linInput, call int64, out linOutput, ret int64) {
	r.mu.Lock()
	r.ops = append(r.ops, porcupine.Operation{ClientId: client, Input: in, Call: call, Output: out, Return: ret})
	r.mu.Unlock()
}

func (r *recorder) history() []porcupine.Operation {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.ops)
}

// get reads key and records it; a failed read changes nothing and is left
// out of the history.
func (r *recorder) get(ctx context.Context, b store.Bucket, client int, key string) (body []byte, etag string, err error) {
	call := r.now()
	body, etag, err = b.Get(ctx, key)
	ret := r.now()
	switch {
	case errors.Is(err, store.ErrNotFound):
		r.add(client, linInput{key: key}, call, linOutput{result: "missing"}, ret)
		return nil, "", err
	case errors.Is(err, store.ErrUnknownOutcome), errors.Is(err, store.ErrConflict):
		return nil, "", errSkip
	case err != nil:
		return nil, "", fmt.Errorf("get %q: %w", key, err)
	}
	r.add(client, linInput{key: key}, call, linOutput{result: "ok", body: string(body), etag: etag}, ret)
	return body, etag, nil
}

// errSkip is the error of a Get that failed the way a faulty transport
// may make any call fail; the read-modify-write it began is given up.
var errSkip = errors.New("storetest: read failed, skipped")

// put writes and records; it returns an error only for an answer the
// contract does not allow.
func (r *recorder) put(ctx context.Context, b store.Bucket, client int, key string, body string, cond store.Cond) error {
	in := linInput{key: key, put: true, cond: cond, body: body}
	call := r.now()
	etag, err := b.Put(ctx, key, []byte(body), cond)
	ret := r.now()
	out := linOutput{result: "ok", etag: etag}
	switch {
	case err == nil:
	case errors.Is(err, store.ErrUnknownOutcome):
		// It may land at any time: its interval never ends.
		out.result, ret = "unknown", math.MaxInt64
	case errors.Is(err, store.ErrPrecondition):
		out.result = "lost"
	case errors.Is(err, store.ErrConflict):
		out.result = "conflict"
	default:
		return fmt.Errorf("put %q (%s): %w", key, cond, err)
	}
	r.add(client, in, call, out, ret)
	return nil
}

// rmw reads key and writes it back with its counter plus one, by If-Match
// on what it read.
func (r *recorder) rmw(ctx context.Context, b store.Bucket, w, seq int, key string, between func() bool) error {
	n, cond := 0, store.IfNoneMatch()
	body, etag, err := r.get(ctx, b, w, key)
	switch {
	case errors.Is(err, store.ErrNotFound):
	case errors.Is(err, errSkip):
		between() // keep the lockstep
		return nil
	case err != nil:
		return err
	default:
		if n, err = counterOf(body); err != nil {
			return fmt.Errorf("get %q: %w", key, err)
		}
		cond = store.IfMatch(etag)
	}
	if !between() {
		return nil
	}
	return r.put(ctx, b, w, key, fmt.Sprintf("%d w%d.%d", n+1, w, seq), cond)
}

func counterOf(body []byte) (int, error) {
	n, _, _ := strings.Cut(string(body), " ")
	v, err := strconv.Atoi(n)
	if err != nil {
		return 0, fmt.Errorf("body %q is no counter", body)
	}
	return v, nil
}

func (r *recorder) writer(ctx context.Context, b store.Bucket, c LinearOptions, gate *barrier, w int) error {
	seq := 0
	for round := range c.Rounds {
		if !gate.wait() {
			return nil
		}
		seq++
		if err := r.rmw(ctx, b, w, seq, c.Keys[(w+round)%len(c.Keys)], gate.wait); err != nil {
			return err
		}
	}
	for i := range c.Free {
		seq++
		if err := r.rmw(ctx, b, w, seq, c.Keys[(w+c.Rounds+i)%len(c.Keys)], func() bool { return true }); err != nil {
			return err
		}
	}
	return nil
}

// barrier lets n goroutines pass together, round after round, until one
// aborts it.
type barrier struct {
	mu      sync.Mutex
	cond    sync.Cond
	n       int
	waiting int
	round   int
	aborted bool
}

func newBarrier(n int) *barrier {
	b := &barrier{n: n}
	b.cond.L = &b.mu
	return b
}

// wait blocks until all n goroutines wait, and reports false if the
// barrier was aborted instead.
func (b *barrier) wait() bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	round := b.round
	b.waiting++
	if b.waiting == b.n {
		b.waiting = 0
		b.round++
		b.cond.Broadcast()
	}
	for b.round == round && !b.aborted {
		b.cond.Wait()
	}
	return !b.aborted
}

func (b *barrier) abort() {
	b.mu.Lock()
	b.aborted = true
	b.cond.Broadcast()
	b.mu.Unlock()
}

// check checks a history against registerModel.
func check(history []porcupine.Operation, timeout time.Duration) error {
	// Each write's body is unique, so an ETag names one body; learn which
	// from every answer that shows both.
	bodies := map[string]string{}
	for _, op := range history {
		in, out := op.Input.(linInput), op.Output.(linOutput)
		body := out.body
		if in.put {
			body = in.body
		}
		if out.result != "ok" {
			continue
		}
		if prev, ok := bodies[out.etag]; ok && prev != body {
			return fmt.Errorf("%w: ETag %s names two bodies, %q and %q", ErrNotLinearizable, out.etag, prev, body)
		}
		bodies[out.etag] = body
	}
	steps := make([]porcupine.Operation, len(history))
	interned := map[string]*string{}
	intern := func(body string) *string {
		p, ok := interned[body]
		if !ok {
			p = &body
			interned[body] = p
		}
		return p
	}
	for i, op := range history {
		in, out := op.Input.(linInput), op.Output.(linOutput)
		st := step{key: in.key, put: in.put, create: in.cond.IfNoneMatch, result: out.result}
		switch {
		case in.put:
			st.body = intern(in.body)
			if body, ok := bodies[in.cond.IfMatch]; ok && !in.cond.IfNoneMatch {
				st.match = intern(body)
			}
		case out.result == "ok":
			st.body = intern(out.body)
		}
		op.Input, op.Output = st, nil
		steps[i] = op
	}
	// The verbose check, which keeps partial linearizations to explain a
	// failure, is several times slower: run it only to explain one.
	switch porcupine.CheckOperationsTimeout(registerModel, steps, timeout) {
	case porcupine.Ok:
		return nil
	case porcupine.Unknown:
		return fmt.Errorf("storetest: the linearizability check of %d operations did not finish within %v", len(history), timeout)
	}
	_, info := porcupine.CheckOperationsVerbose(registerModel, steps, timeout)
	return fmt.Errorf("%w: %s", ErrNotLinearizable, explain(info, steps))
}

// step is an operation of the history as registerModel reads it. Bodies
// are interned: equal bodies are one pointer.
type step struct {
	key    string
	put    bool
	create bool    // a Put by If-None-Match
	match  *string // the body a Put's If-Match names, nil if none read had it
	body   *string // the body a Put wrote or a Get read; nil for missing
	result string  // as in linOutput
}

func (s step) String() string {
	body := "missing"
	if s.body != nil {
		body = strconv.Quote(*s.body)
	}
	if !s.put {
		return fmt.Sprintf("get %s → %s", s.key, body)
	}
	cond := "If-None-Match"
	switch {
	case s.create:
	case s.match != nil:
		cond = fmt.Sprintf("If-Match the ETag of %q", *s.match)
	default:
		cond = "If-Match an ETag never read"
	}
	return fmt.Sprintf("put %s %s (%s) → %s", s.key, body, cond, s.result)
}

// registerModel is a register per key with compare-and-swap. Its state is
// the body the key holds, a *string from step; nil is no object.
//
// A Put whose outcome is unknown applies if its condition holds where it
// is placed. Its effect may also never happen: that is the same as placing
// it after every other operation, which its endless interval allows and
// where its effect changes nothing, so the model need not branch.
var registerModel = porcupine.Model{
	Partition: func(history []porcupine.Operation) [][]porcupine.Operation {
		byKey := map[string][]porcupine.Operation{}
		var keys []string
		for _, op := range history {
			k := op.Input.(step).key
			if _, ok := byKey[k]; !ok {
				keys = append(keys, k)
			}
			byKey[k] = append(byKey[k], op)
		}
		out := make([][]porcupine.Operation, 0, len(keys))
		for _, k := range keys {
			out = append(out, byKey[k])
		}
		return out
	},
	Init: func() any { return (*string)(nil) },
	Step: func(state, input, _ any) (bool, any) {
		cur, s := state.(*string), input.(step)
		if !s.put {
			return s.body == cur, cur
		}
		holds := cur == nil
		if !s.create {
			holds = cur != nil && s.match == cur
		}
		switch s.result {
		case "ok":
			return holds, s.body
		case "lost":
			return !holds, cur
		case "conflict":
			return true, cur
		case "unknown":
			if holds {
				return true, s.body
			}
			return true, cur
		}
		return false, cur
	},
	DescribeOperation: func(input, _ any) string { return input.(step).String() },
}

// explain describes where a history stopped linearizing: the end of the
// longest linearizable prefix found for a key, and the first operations
// on that key left out of it, none of which could come next.
func explain(info porcupine.LinearizationInfo, history []porcupine.Operation) string {
	var prefix []porcupine.Operation
	for _, partition := range info.PartialLinearizationsOperations() {
		for _, lin := range partition {
			if len(lin) > len(prefix) {
				prefix = lin
			}
		}
	}
	if len(prefix) == 0 {
		return fmt.Sprintf("%d operations, none of which can come first", len(history))
	}
	key := prefix[0].Input.(step).key
	var b strings.Builder
	fmt.Fprintf(&b, "%d operations; on %s the longest linearizable prefix found has %d, ending", len(history), key, len(prefix))
	for _, op := range prefix[max(0, len(prefix)-3):] {
		fmt.Fprintf(&b, "\n\tclient %d: %s", op.ClientId, op.Input)
	}
	b.WriteString("\nand none of the next can follow it:")
	rest := slices.DeleteFunc(slices.Clone(history), func(op porcupine.Operation) bool {
		return op.Input.(step).key != key || slices.Contains(prefix, op)
	})
	slices.SortFunc(rest, func(a, b porcupine.Operation) int { return cmp.Compare(a.Call, b.Call) })
	for i, op := range rest {
		if i == 4 {
			b.WriteString("\n\t…")
			break
		}
		fmt.Fprintf(&b, "\n\tclient %d: %s", op.ClientId, op.Input)
	}
	return b.String()
}
