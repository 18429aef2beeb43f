package store_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"

	"github.com/wasmkeep/wasmkeep/host/store"
)

// ignoring is a bucket that drops the conditions a broken S3 server
// ignores: If-None-Match, If-Match, or both.
type ignoring struct {
	store.Bucket
	ifNoneMatch, ifMatch bool
}

func (b ignoring) Put(ctx context.Context, key string, body []byte, cond store.Cond) (string, error) {
	if b.ifNoneMatch {
		cond.IfNoneMatch = false
	}
	if b.ifMatch {
		cond.IfMatch = ""
	}
	return b.Bucket.Put(ctx, key, body, cond)
}

// racy checks a create's condition and writes in two steps, as a server
// without atomic conditions does. Creates of the key "race" wait until all
// of the probe's racers have checked, so that every one of them wins.
type racy struct {
	store.Bucket
	checked sync.WaitGroup
}

func newRacy() *racy {
	b := &racy{Bucket: store.NewMem()}
	b.checked.Add(store.ProbeCreators)
	return b
}

func (b *racy) Put(ctx context.Context, key string, body []byte, cond store.Cond) (string, error) {
	if !cond.IfNoneMatch {
		return b.Bucket.Put(ctx, key, body, cond)
	}
	if _, _, err := b.Get(ctx, key); err == nil {
		return "", store.ErrPrecondition
	}
	if strings.HasSuffix(key, "/race") {
		b.checked.Done()
		b.checked.Wait()
	}
	return b.Bucket.Put(ctx, key, body, store.Cond{})
}

// blind lists nothing.
type blind struct{ store.Bucket }

func (blind) List(context.Context, string) ([]string, error) { return nil, nil }

func TestProbe(t *testing.T) {
	dir, err := store.OpenDir(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { dir.Close() })
	for name, b := range map[string]store.Bucket{"mem": store.NewMem(), "dir": dir} {
		if err := store.Probe(context.Background(), b); err != nil {
			t.Errorf("%s: %v", name, err)
		}
		if keys, err := b.List(context.Background(), store.ProbePrefix+"/"); err != nil || len(keys) != 0 {
			t.Errorf("%s: the probe left %q (%v)", name, keys, err)
		}
	}
}

func TestProbeRefusesBrokenStores(t *testing.T) {
	for _, tc := range []struct {
		name  string
		b     store.Bucket
		check string
	}{
		{"ignores If-None-Match", ignoring{Bucket: store.NewMem(), ifNoneMatch: true}, "create twice"},
		{"ignores If-Match", ignoring{Bucket: store.NewMem(), ifMatch: true}, "stale If-Match"},
		{"ignores both", ignoring{Bucket: store.NewMem(), ifNoneMatch: true, ifMatch: true}, "create twice"},
		{"creates are not atomic", newRacy(), "concurrent creates"},
		{"lists nothing", blind{store.NewMem()}, "list after write"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := store.Probe(context.Background(), tc.b)
			var pe *store.ProbeError
			if !errors.As(err, &pe) || pe.Check != tc.check {
				t.Fatalf("probe: %v, want the check %q to fail", err, tc.check)
			}
			if !strings.Contains(err.Error(), tc.check) || pe.Answer == "" {
				t.Fatalf("the error does not name the check and the answer: %v", err)
			}
			t.Log(err)
		})
	}
}

func TestProbeStopsWithItsContext(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	err := store.Probe(ctx, store.NewMem())
	var pe *store.ProbeError
	if !errors.Is(err, context.Canceled) || errors.As(err, &pe) {
		t.Fatalf("probe with a cancelled context: %v, want context.Canceled and no failed check", err)
	}
}
