package store

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/VictoriaMetrics/metrics"
)

// Outcomes of a bucket request, as [Metered] counts them.
const (
	OutcomeOK           = "ok"
	OutcomeNotFound     = "not_found"
	OutcomePrecondition = "precondition" // a condition lost
	OutcomeConflict     = "conflict"     // a concurrent write got in the way
	OutcomeUnknown      = "unknown"      // a write that may or may not have landed
	OutcomeInvalid      = "invalid"      // refused before any I/O
	OutcomeCanceled     = "canceled"     // the caller's context ended
	OutcomeError        = "error"        // anything else: the store failed
)

var outcomes = []string{OutcomeOK, OutcomeNotFound, OutcomePrecondition, OutcomeConflict, OutcomeUnknown, OutcomeInvalid, OutcomeCanceled, OutcomeError}

var ops = []OpKind{OpGet, OpPut, OpDelete, OpList}

// Outcome classifies a bucket call's error as one of the Outcome*
// constants. An unknown outcome comes first, since a backend wraps it around
// whatever else it reports.
func Outcome(err error) string {
	switch {
	case err == nil:
		return OutcomeOK
	case errors.Is(err, ErrUnknownOutcome):
		return OutcomeUnknown
	case errors.Is(err, ErrPrecondition):
		return OutcomePrecondition
	case errors.Is(err, ErrNotFound):
		return OutcomeNotFound
	case errors.Is(err, ErrConflict):
		return OutcomeConflict
	case errors.Is(err, ErrInvalidKey), errors.Is(err, ErrInvalidCond):
		return OutcomeInvalid
	case errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		return OutcomeCanceled
	}
	return OutcomeError
}

// MeteredBucket is a Bucket whose requests are counted and timed; see
// [Metered].
type MeteredBucket struct {
	Bucket
	requests map[OpKind]map[string]*metrics.Counter // op → outcome → counter
	seconds  map[OpKind]*metrics.Histogram          // op → latency
}

// Metered wraps b so that every request is counted by operation and
// outcome, wasmkeep_bucket_requests_total{op,outcome}, and timed,
// wasmkeep_bucket_request_seconds{op}, in set. On S3 these are the figures
// an operator watches: requests are what a bucket bills, and their latency
// is what a wake waits for.
func Metered(b Bucket, set *metrics.Set) *MeteredBucket {
	m := &MeteredBucket{Bucket: b, requests: map[OpKind]map[string]*metrics.Counter{}, seconds: map[OpKind]*metrics.Histogram{}}
	for _, op := range ops {
		m.requests[op] = make(map[string]*metrics.Counter, len(outcomes))
		for _, o := range outcomes {
			m.requests[op][o] = set.NewCounter(fmt.Sprintf(`wasmkeep_bucket_requests_total{op=%q,outcome=%q}`, op.String(), o))
		}
		m.seconds[op] = set.NewHistogram(fmt.Sprintf(`wasmkeep_bucket_request_seconds{op=%q}`, op.String()))
	}
	return m
}

// Requests returns how many op requests ended with outcome.
func (m *MeteredBucket) Requests(op OpKind, outcome string) uint64 {
	return m.requests[op][outcome].Get()
}

// AllRequests returns how many op requests were made, whatever their
// outcome.
func (m *MeteredBucket) AllRequests(op OpKind) uint64 {
	var n uint64
	for _, c := range m.requests[op] {
		n += c.Get()
	}
	return n
}

func (m *MeteredBucket) done(op OpKind, start time.Time, err error) {
	m.requests[op][Outcome(err)].Inc()
	m.seconds[op].UpdateDuration(start)
}

// Get implements Bucket.
func (m *MeteredBucket) Get(ctx context.Context, key string) ([]byte, string, error) {
	start := time.Now()
	body, etag, err := m.Bucket.Get(ctx, key)
	m.done(OpGet, start, err)
	return body, etag, err
}

// Put implements Bucket.
func (m *MeteredBucket) Put(ctx context.Context, key string, body []byte, cond Cond) (string, error) {
	start := time.Now()
	etag, err := m.Bucket.Put(ctx, key, body, cond)
	m.done(OpPut, start, err)
	return etag, err
}

// PutCommit implements [Committer]: with the wrapped bucket's own, if it
// has one, counted as a put of each object; else as a metered Put each.
func (m *MeteredBucket) PutCommit(ctx context.Context, created []Object, key string, body []byte, cond Cond) (string, error) {
	c, ok := m.Bucket.(Committer)
	if !ok {
		return putEach(ctx, m, created, key, body, cond)
	}
	start := time.Now()
	etag, err := c.PutCommit(ctx, created, key, body, cond)
	for range len(created) + 1 {
		m.done(OpPut, start, err)
	}
	return etag, err
}

// Delete implements Bucket.
func (m *MeteredBucket) Delete(ctx context.Context, key string, ifMatch string) error {
	start := time.Now()
	err := m.Bucket.Delete(ctx, key, ifMatch)
	m.done(OpDelete, start, err)
	return err
}

// List implements Bucket.
func (m *MeteredBucket) List(ctx context.Context, prefix string) ([]string, error) {
	start := time.Now()
	keys, err := m.Bucket.List(ctx, prefix)
	m.done(OpList, start, err)
	return keys, err
}

// ListPage implements Bucket; it is counted as a list.
func (m *MeteredBucket) ListPage(ctx context.Context, prefix, after string, limit int) ([]Entry, bool, error) {
	start := time.Now()
	page, more, err := m.Bucket.ListPage(ctx, prefix, after, limit)
	m.done(OpList, start, err)
	return page, more, err
}
