package store_test

import (
	"context"
	"errors"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/wasmkeep/wasmkeep/host/store"
	"github.com/wasmkeep/wasmkeep/host/store/storetest"
)

func TestFaultyPassThrough(t *testing.T) {
	storetest.Run(t, func(*testing.T) store.Bucket { return store.WithFaults(store.NewMem(), nil) })
}

func TestFaultyFailBefore(t *testing.T) {
	ctx := context.Background()
	mem := store.NewMem()
	var seen []store.Op
	b := store.WithFaults(mem, func(op store.Op) store.Fault {
		seen = append(seen, op)
		return store.FailBefore(store.ErrConflict)
	})
	if _, err := b.Put(ctx, "k", []byte("v"), store.IfNoneMatch()); !errors.Is(err, store.ErrConflict) {
		t.Fatalf("Put: err = %v, want the injected ErrConflict", err)
	}
	if _, _, err := mem.Get(ctx, "k"); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("a call failed before running was applied: %v", err)
	}
	if err := b.Delete(ctx, "k", "7"); !errors.Is(err, store.ErrConflict) {
		t.Fatalf("Delete: err = %v", err)
	}
	if _, _, err := b.Get(ctx, "k"); !errors.Is(err, store.ErrConflict) {
		t.Fatalf("Get: err = %v", err)
	}
	if _, err := b.List(ctx, "p/"); !errors.Is(err, store.ErrConflict) {
		t.Fatalf("List: err = %v", err)
	}
	want := []store.Op{
		{Kind: store.OpPut, Key: "k", Cond: store.IfNoneMatch()},
		{Kind: store.OpDelete, Key: "k", Cond: store.IfMatch("7")},
		{Kind: store.OpGet, Key: "k"},
		{Kind: store.OpList, Key: "p/"},
	}
	if !slices.Equal(seen, want) {
		t.Fatalf("FaultFunc saw %v, want %v", seen, want)
	}
}

func TestFaultyLoseAnswer(t *testing.T) {
	ctx := context.Background()
	mem := store.NewMem()
	b := store.WithFaults(mem, func(store.Op) store.Fault { return store.LoseAnswer() })
	if _, err := b.Put(ctx, "k", []byte("v"), store.IfNoneMatch()); !errors.Is(err, store.ErrUnknownOutcome) {
		t.Fatalf("Put: err = %v, want ErrUnknownOutcome", err)
	}
	body, etag, err := mem.Get(ctx, "k")
	if err != nil || string(body) != "v" {
		t.Fatalf("the call whose answer was lost was not applied: %q, %v", body, err)
	}
	// Retrying the create now loses to itself: the caller must re-read.
	b.SetFaults(nil)
	if _, err := b.Put(ctx, "k", []byte("v"), store.IfNoneMatch()); !errors.Is(err, store.ErrPrecondition) {
		t.Fatalf("retried create: err = %v, want ErrPrecondition", err)
	}
	b.SetFaults(func(store.Op) store.Fault { return store.LoseAnswer() })
	if err := b.Delete(ctx, "k", etag); !errors.Is(err, store.ErrUnknownOutcome) {
		t.Fatalf("Delete: err = %v, want ErrUnknownOutcome", err)
	}
	if _, _, err := mem.Get(ctx, "k"); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("the Delete whose answer was lost was not applied: %v", err)
	}
	if b.Unwrap() != store.Bucket(mem) {
		t.Fatal("Unwrap does not return the wrapped bucket")
	}
}

// TestRandomFaultsDeterministic runs the same script twice with the same
// seed and expects the same outcomes and the same final state; a third run
// with another seed must differ.
func TestRandomFaultsDeterministic(t *testing.T) {
	run := func(seed uint64) (trace []string, final []byte) {
		ctx := context.Background()
		mem := store.NewMem()
		b := store.WithFaults(mem, store.RandomFaults(rand.New(rand.NewPCG(seed, 0)), 0.2, 0.2))
		for range 200 {
			_, err := storetest.Increment(ctx, b, "counter")
			switch {
			case err == nil:
				trace = append(trace, "ok")
			case errors.Is(err, store.ErrUnknownOutcome):
				trace = append(trace, "unknown")
			default:
				t.Fatalf("unexpected error: %v", err)
			}
		}
		final, _, _ = mem.Get(ctx, "counter")
		return trace, final
	}
	t1, f1 := run(42)
	t2, f2 := run(42)
	if !slices.Equal(t1, t2) || string(f1) != string(f2) {
		t.Fatalf("same seed, different runs: final %q vs %q", f1, f2)
	}
	t3, _ := run(43)
	if slices.Equal(t1, t3) {
		t.Fatal("seeds 42 and 43 gave the same trace")
	}
	unknown := 0
	for _, s := range t1 {
		if s == "unknown" {
			unknown++
		}
	}
	if unknown == 0 || unknown == len(t1) {
		t.Fatalf("%d of %d increments had unknown outcomes; want some", unknown, len(t1))
	}
}
