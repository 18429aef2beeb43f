package storetest_test

import (
	"context"
	"errors"
	"math/rand/v2"
	"sync"
	"testing"

	"github.com/wasmkeep/wasmkeep/host/store"
	"github.com/wasmkeep/wasmkeep/host/store/storetest"
)

// ignoresIfMatch is a broken bucket: it turns every compare-and-swap into
// an unconditional write, as a server that drops the If-Match header
// would.
type ignoresIfMatch struct{ *store.Mem }

func (b ignoresIfMatch) Put(ctx context.Context, key string, body []byte, cond store.Cond) (string, error) {
	cond.IfMatch = ""
	return b.Mem.Put(ctx, key, body, cond)
}

// TestLinearizableCatchesIgnoredIfMatch shows that the check can fail:
// in a lockstep round every writer of a key replaces the version all of
// them read, so on a bucket that ignores If-Match several win at once.
func TestLinearizableCatchesIgnoredIfMatch(t *testing.T) {
	for _, keys := range [][]string{nil, {"a", "b", "c"}} {
		err := storetest.CheckLinearizable(t.Context(), ignoresIfMatch{store.NewMem()}, storetest.LinearOptions{Keys: keys})
		if !errors.Is(err, storetest.ErrNotLinearizable) {
			t.Fatalf("keys %q: a bucket that ignores If-Match passed: %v", keys, err)
		}
		t.Logf("keys %q: %v", keys, err)
	}
}

// TestLinearizableUnknownOutcomes checks a bucket that loses requests and
// answers: a lost answer leaves the write's effect open, which the check
// must accept either way.
func TestLinearizableUnknownOutcomes(t *testing.T) {
	for seed := range uint64(5) {
		b := store.WithFaults(store.NewMem(), store.RandomFaults(rand.New(rand.NewPCG(seed, 1)), 0.1, 0.1))
		if err := storetest.CheckLinearizable(t.Context(), b, storetest.LinearOptions{Keys: []string{"a", "b"}}); err != nil {
			t.Fatalf("seed %d: %v", seed, err)
		}
	}
}

// landedConflicts is a broken bucket: every third write that succeeds
// answers ErrConflict, which promises that nothing was written.
type landedConflicts struct {
	*store.Mem
	mu  sync.Mutex
	won int
}

func (b *landedConflicts) Put(ctx context.Context, key string, body []byte, cond store.Cond) (string, error) {
	etag, err := b.Mem.Put(ctx, key, body, cond)
	if err != nil {
		return etag, err
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.won++; b.won%3 == 0 {
		return "", store.ErrConflict
	}
	return etag, nil
}

// TestLinearizableCatchesConflictThatLanded shows the check holding a
// bucket to the contract of ErrConflict: the write did not happen.
func TestLinearizableCatchesConflictThatLanded(t *testing.T) {
	err := storetest.CheckLinearizable(t.Context(), &landedConflicts{Mem: store.NewMem()}, storetest.LinearOptions{})
	if !errors.Is(err, storetest.ErrNotLinearizable) {
		t.Fatalf("a bucket whose conflicts land passed: %v", err)
	}
}
