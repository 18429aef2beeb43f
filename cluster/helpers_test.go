package cluster

import (
	"context"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/wasmkeep/wasmkeep/host/store"
	"github.com/wasmkeep/wasmkeep/internal/clock"
)

var ctx = context.Background()

const ttl = 10 * time.Second

// testNode is a node named name on b with its own manual clock.
func testNode(t *testing.T, b store.Bucket, name string, seed uint64, edit ...func(*Config)) (*Node, *clock.Manual) {
	t.Helper()
	clk := clock.NewManual(time.Unix(0, 0))
	cfg := Config{Node: name, Address: name + ":8080", TTL: ttl, Bucket: b, Clock: clk, Rand: rand.New(rand.NewPCG(seed, 0))}
	for _, e := range edit {
		e(&cfg)
	}
	n, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return n, clk
}

// joined is testNode after its first renewal, which creates its lease.
func joined(t *testing.T, b store.Bucket, name string, seed uint64, edit ...func(*Config)) (*Node, *clock.Manual) {
	t.Helper()
	n, clk := testNode(t, b, name, seed, edit...)
	n.RenewLease(ctx)
	if !n.LeaseValid() {
		t.Fatalf("%s did not join: %+v", name, n.Counts())
	}
	return n, clk
}

// manualSleeper sleeps by moving a manual clock.
type manualSleeper struct{ clk *clock.Manual }

func (s manualSleeper) Sleep(_ context.Context, d time.Duration) error {
	s.clk.Advance(d)
	return nil
}

func readLease(t *testing.T, b store.Bucket, node string) (Lease, string) {
	t.Helper()
	body, etag, err := b.Get(ctx, LeaseKey(node))
	if err != nil {
		t.Fatal(err)
	}
	l, err := DecodeLease(body)
	if err != nil {
		t.Fatal(err)
	}
	return l, etag
}

func readRecord(t *testing.T, b store.Bucket, room Room) (Record, string) {
	t.Helper()
	body, etag, err := b.Get(ctx, RecordKey(room))
	if err != nil {
		t.Fatal(err)
	}
	r, err := DecodeRecord(body)
	if err != nil {
		t.Fatal(err)
	}
	return r, etag
}

// slowBucket moves a manual clock during each Put, after the write
// applied: an answer that arrives late.
type slowBucket struct {
	store.Bucket
	clk   *clock.Manual
	delay time.Duration
}

func (b *slowBucket) Put(ctx context.Context, key string, body []byte, cond store.Cond) (string, error) {
	etag, err := b.Bucket.Put(ctx, key, body, cond)
	b.clk.Advance(b.delay)
	return etag, err
}

// lateBucket keeps the next Put to key instead of applying it, answers it
// with ErrUnknownOutcome, and applies it when the test calls land: a
// write that lands after its writer gave up on it.
type lateBucket struct {
	store.Bucket
	key  string
	held func() error
}

func (b *lateBucket) Put(ctx context.Context, key string, body []byte, cond store.Cond) (string, error) {
	if key == b.key && b.held == nil {
		b.key = ""
		b.held = func() error { _, err := b.Bucket.Put(ctx, key, body, cond); return err }
		return "", store.ErrUnknownOutcome
	}
	return b.Bucket.Put(ctx, key, body, cond)
}

func (b *lateBucket) land(t *testing.T) {
	t.Helper()
	if b.held == nil {
		t.Fatal("no write held")
	}
	if err := b.held(); err != nil {
		t.Fatalf("the late write did not land: %v", err)
	}
}

// faultOn returns a FaultFunc that injects f into the next call of kind
// on key, and nothing else.
func faultOn(kind store.OpKind, key string, f store.Fault) store.FaultFunc {
	done := false
	return func(op store.Op) store.Fault {
		if !done && op.Kind == kind && op.Key == key {
			done = true
			return f
		}
		return store.Fault{}
	}
}

// instantSleeper returns at once.
type instantSleeper struct{}

func (instantSleeper) Sleep(context.Context, time.Duration) error { return nil }
