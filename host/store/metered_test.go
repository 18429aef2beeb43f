package store_test

import (
	"bytes"
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/VictoriaMetrics/metrics"
	"github.com/wasmkeep/wasmkeep/host/store"
)

func TestMeteredCountsOutcomes(t *testing.T) {
	ctx := context.Background()
	set := metrics.NewSet()
	faulty := store.WithFaults(store.NewMem(), nil)
	b := store.Metered(faulty, set)

	if _, _, err := b.Get(ctx, "a"); !errors.Is(err, store.ErrNotFound) {
		t.Fatal(err)
	}
	etag, err := b.Put(ctx, "a", []byte("1"), store.IfNoneMatch())
	if err != nil {
		t.Fatal(err)
	}
	b.Put(ctx, "a", []byte("2"), store.IfNoneMatch()) // lost
	b.Put(ctx, "b", []byte("2"), store.IfMatch(etag)) // lost: missing key
	b.Put(ctx, "a/../x", []byte("2"), store.Cond{})   // refused
	faulty.SetFaults(func(store.Op) store.Fault { return store.LoseAnswer() })
	if _, err := b.Put(ctx, "a", []byte("3"), store.IfMatch(etag)); !errors.Is(err, store.ErrUnknownOutcome) {
		t.Fatal(err)
	}
	faulty.SetFaults(nil)
	cancelled, cancel := context.WithCancel(ctx)
	cancel()
	b.List(cancelled, "")
	b.Delete(ctx, "a", "")

	for _, c := range []struct {
		op      store.OpKind
		outcome string
		want    uint64
	}{
		{store.OpGet, store.OutcomeNotFound, 1},
		{store.OpPut, store.OutcomeOK, 1},
		{store.OpPut, store.OutcomePrecondition, 2},
		{store.OpPut, store.OutcomeInvalid, 1},
		{store.OpPut, store.OutcomeUnknown, 1},
		{store.OpList, store.OutcomeCanceled, 1},
		{store.OpDelete, store.OutcomeOK, 1},
		{store.OpGet, store.OutcomeOK, 0},
	} {
		if got := b.Requests(c.op, c.outcome); got != c.want {
			t.Errorf("%s %s: %d, want %d", c.op, c.outcome, got, c.want)
		}
	}
	if got := b.AllRequests(store.OpPut); got != 5 {
		t.Errorf("puts of every outcome: %d, want 5", got)
	}
	var out bytes.Buffer
	set.WritePrometheus(&out)
	for _, want := range []string{
		`wasmkeep_bucket_requests_total{op="put",outcome="precondition"} 2`,
		`wasmkeep_bucket_request_seconds_count{op="put"} 5`,
	} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("metrics lack %s", want)
		}
	}
}
