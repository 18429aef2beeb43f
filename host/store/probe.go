package store

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"slices"
	"sync"
)

// ProbePrefix is the key range the conformance probe writes under, one
// fresh subdirectory per run. Nothing else uses it.
const ProbePrefix = "probe"

// ProbeError is a conformance check the bucket failed: its name, what the
// check needed, and the bucket's answer.
type ProbeError struct {
	Check  string // short name, e.g. "create twice"
	Want   string // what a conforming store does
	Answer string // what this one did
}

func (e *ProbeError) Error() string {
	return fmt.Sprintf("store: the bucket fails the conformance check %q: want %s, got %s", e.Check, e.Want, e.Answer)
}

// probeCreators is how many writers race to create one key.
const probeCreators = 8

// Probe checks, on a private key range under [ProbePrefix], that b honours
// the conditional writes the rest of wasmkeep depends on: a second create
// of a key loses, an If-Match with a stale ETag loses, an If-Match on a
// missing key loses, exactly one of several concurrent creates wins, and a
// key written is listed. It returns a *ProbeError naming the first check
// that failed and the bucket's answer, or ctx's error, or an error of the
// bucket that kept a check from being made. It removes what it wrote (a
// removal that fails is not an error: the keys are garbage).
//
// A store that passes may still differ from S3 where no check looks (a
// conditional DELETE, which nothing's safety depends on, is not checked).
func Probe(ctx context.Context, b Bucket) error {
	var nonce [8]byte
	_, _ = rand.Read(nonce[:])
	dir := ProbePrefix + "/" + hex.EncodeToString(nonce[:])
	keys := []string{dir + "/create", dir + "/missing", dir + "/race"}
	defer func() {
		// A cancelled ctx must not keep the garbage from going.
		clean := context.WithoutCancel(ctx)
		for _, k := range keys {
			_ = b.Delete(clean, k, "")
		}
	}()
	body := func(s string) []byte { return []byte(s + " " + dir) }

	// Create twice: the second must lose.
	first, err := b.Put(ctx, keys[0], body("one"), IfNoneMatch())
	if err != nil {
		return probeFailed(ctx, "create", "a create of a new key to succeed", err)
	}
	if _, err := b.Put(ctx, keys[0], body("two"), IfNoneMatch()); !errors.Is(err, ErrPrecondition) {
		return probeFailed(ctx, "create twice", "the second If-None-Match create to lose (412)", err)
	}
	// If-Match: the current ETag wins, then the stale one loses.
	second, err := b.Put(ctx, keys[0], body("three"), IfMatch(first))
	if err != nil {
		return probeFailed(ctx, "compare and swap", "an If-Match on the current ETag to succeed", err)
	}
	if second == first {
		return &ProbeError{Check: "compare and swap", Want: "a new ETag for a new body", Answer: fmt.Sprintf("ETag %s again", first)}
	}
	if _, err := b.Put(ctx, keys[0], body("four"), IfMatch(first)); !errors.Is(err, ErrPrecondition) {
		return probeFailed(ctx, "stale If-Match", "an If-Match on a replaced ETag to lose (412)", err)
	}
	if got, etag, err := b.Get(ctx, keys[0]); err != nil || etag != second || string(got) != string(body("three")) {
		if err == nil {
			err = fmt.Errorf("body %q, ETag %s (want ETag %s)", got, etag, second)
		}
		return probeFailed(ctx, "read after write", "the body and ETag of the last write that won", err)
	}
	// If-Match on a missing key loses (S3 answers 404, others 412).
	if _, err := b.Put(ctx, keys[1], body("five"), IfMatch(first)); !errors.Is(err, ErrPrecondition) {
		return probeFailed(ctx, "If-Match on a missing key", "it to lose (404 or 412)", err)
	}
	// Concurrent creates: exactly one wins.
	var (
		wg   sync.WaitGroup
		mu   sync.Mutex
		won  int
		errs []error
	)
	for i := range probeCreators {
		wg.Go(func() {
			_, err := b.Put(ctx, keys[2], body(fmt.Sprint("racer ", i)), IfNoneMatch())
			mu.Lock()
			defer mu.Unlock()
			switch {
			case err == nil:
				won++
			case errors.Is(err, ErrPrecondition), errors.Is(err, ErrConflict):
			default:
				errs = append(errs, err)
			}
		})
	}
	wg.Wait()
	if len(errs) > 0 {
		return probeFailed(ctx, "concurrent creates", fmt.Sprintf("one of %d creates to win and the others to lose", probeCreators), errs[0])
	}
	if won != 1 {
		return &ProbeError{Check: "concurrent creates", Want: fmt.Sprintf("exactly one of %d If-None-Match creates to win", probeCreators), Answer: fmt.Sprintf("%d won", won)}
	}
	// List after write.
	listed, err := b.List(ctx, dir+"/")
	if err != nil {
		return probeFailed(ctx, "list after write", "the keys just written", err)
	}
	for _, k := range []string{keys[0], keys[2]} {
		if !slices.Contains(listed, k) {
			return &ProbeError{Check: "list after write", Want: "the keys just written, " + keys[0] + " and " + keys[2], Answer: fmt.Sprintf("%q", listed)}
		}
	}
	return nil
}

// probeFailed is the error of a check whose call answered err: ctx's own
// error if the probe ran out of time, else a *ProbeError with the answer.
func probeFailed(ctx context.Context, check, want string, err error) error {
	if ctx.Err() != nil {
		return fmt.Errorf("store: conformance check %q: %w", check, ctx.Err())
	}
	answer := "success"
	if err != nil {
		answer = err.Error()
	}
	return &ProbeError{Check: check, Want: want, Answer: answer}
}
