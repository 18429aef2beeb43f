package store_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"

	"github.com/wasmkeep/wasmkeep/host/store"
)

func TestCheckFormat(t *testing.T) {
	ctx := context.Background()
	b := store.NewMem()
	// Nodes starting at once on a new bucket: one writes, all agree.
	var wg sync.WaitGroup
	errs := make([]error, 8)
	for i := range errs {
		wg.Go(func() { _, errs[i] = store.CheckFormat(ctx, b, "") })
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Fatalf("node %d: %v", i, err)
		}
	}
	body, etag, err := b.Get(ctx, store.FormatKey)
	if err != nil || !strings.Contains(string(body), `"version":1`) {
		t.Fatalf("format object %q, %v", body, err)
	}
	// Checked again, it is left as it is.
	if layout, err := store.CheckFormat(ctx, b, ""); err != nil || layout != store.ManifestsOverwrite {
		t.Fatal(layout, err)
	}
	if _, again, _ := b.Get(ctx, store.FormatKey); again != etag {
		t.Fatal("a check rewrote the format object")
	}

	for _, tc := range []struct{ body, says string }{
		{`{"format":"wasmkeep","version":3}`, "newer than this binary's 2"},
		{`{"format":"wasmkeep","version":2,"manifests":"sideways"}`, "does not read"},
		{`{"format":"wasmkeep","version":1,"manifests":"numbered"}`, "does not read"},
		{`{"format":"wasmkeep","version":0}`, "does not read"},
		{`{"format":"othertool","version":1}`, "othertool's data"},
		{`<xml/>`, "another program's"},
	} {
		b := store.NewMem()
		if _, err := b.Put(ctx, store.FormatKey, []byte(tc.body), store.Cond{}); err != nil {
			t.Fatal(err)
		}
		_, err := store.CheckFormat(ctx, b, "")
		var fe *store.FormatError
		if !errors.As(err, &fe) || !strings.Contains(err.Error(), tc.says) {
			t.Errorf("format %s: %v, want a FormatError saying %q", tc.body, err, tc.says)
		}
	}

	// A lost answer to the create is resolved by reading.
	faulty := store.WithFaults(store.NewMem(), func(op store.Op) store.Fault {
		if op.Kind == store.OpPut {
			return store.LoseAnswer()
		}
		return store.Fault{}
	})
	if _, err := store.CheckFormat(ctx, faulty, ""); err != nil {
		t.Fatalf("with the create's answer lost: %v", err)
	}
}

// TestFormatManifests: a new bucket keeps rooms' manifests as its first
// node asks (numbered ones in layout version 2, which older binaries
// refuse); a node told otherwise than a bucket keeps them is refused, and
// one told nothing takes the bucket's.
func TestFormatManifests(t *testing.T) {
	ctx := t.Context()
	b := store.NewMem()
	if layout, err := store.CheckFormat(ctx, b, store.ManifestsNumbered); err != nil || layout != store.ManifestsNumbered {
		t.Fatalf("a new bucket, numbered: %q, %v", layout, err)
	}
	if body, _, _ := b.Get(ctx, store.FormatKey); !strings.Contains(string(body), `"version":2`) || !strings.Contains(string(body), `"manifests":"numbered"`) {
		t.Fatalf("format object %s", body)
	}
	if layout, err := store.CheckFormat(ctx, b, ""); err != nil || layout != store.ManifestsNumbered {
		t.Fatalf("a node told nothing: %q, %v", layout, err)
	}
	if _, err := store.CheckFormat(ctx, b, store.ManifestsOverwrite); !errors.Is(err, store.ErrLayout) {
		t.Fatalf("a node told overwrite on a numbered bucket: %v, want ErrLayout", err)
	}
	old := store.NewMem()
	if _, err := store.CheckFormat(ctx, old, ""); err != nil {
		t.Fatal(err)
	}
	if _, err := store.CheckFormat(ctx, old, store.ManifestsNumbered); !errors.Is(err, store.ErrLayout) {
		t.Fatalf("a node told numbered on an overwrite bucket: %v, want ErrLayout", err)
	}
	if _, err := store.CheckFormat(ctx, old, "sideways"); err == nil {
		t.Fatal("an unknown layout was taken")
	}
}
