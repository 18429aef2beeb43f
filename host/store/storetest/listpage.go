package storetest

import (
	"errors"
	"fmt"
	"slices"
	"testing"

	"github.com/wasmkeep/wasmkeep/host/store"
)

// testListPage: pages in key order with their ETags, after a start key,
// bounded by the limit and by MaxListPage, and nothing of another prefix.
func testListPage(t *testing.T, b store.Bucket, _ Options) {
	etags := map[string]string{}
	var want []string
	for i := range 25 {
		k := fmt.Sprintf("p/k%02d", i)
		etags[k] = mustPut(t, b, k, []byte(k), store.Cond{})
		want = append(want, k)
	}
	mustPut(t, b, "p.x", []byte("outside: no slash"), store.Cond{})
	mustPut(t, b, "q/k00", []byte("another prefix"), store.Cond{})

	// Pages of 10: 10, 10 and 5, each after the last key of the one before.
	var got []string
	after := ""
	for page := 0; ; page++ {
		entries, more, err := b.ListPage(t.Context(), "p/", after, 10)
		if err != nil {
			t.Fatal(err)
		}
		if wantLen := min(10, 25-10*page); len(entries) != wantLen {
			t.Fatalf("page %d after %q: %d entries, want %d", page, after, len(entries), wantLen)
		}
		for _, e := range entries {
			if e.ETag != etags[e.Key] {
				t.Fatalf("%s: ETag %q, want %q (the Put's)", e.Key, e.ETag, etags[e.Key])
			}
			got = append(got, e.Key)
		}
		after = entries[len(entries)-1].Key
		if !more {
			break
		}
		if page > 3 {
			t.Fatal("more pages than there are keys")
		}
	}
	if !slices.Equal(got, want) {
		t.Fatalf("paged keys %q, want %q", got, want)
	}

	// After a key that is not there, and no limit: the rest at once.
	entries, more, err := b.ListPage(t.Context(), "p/", "p/k07x", 0)
	if err != nil || more || len(entries) != 17 || entries[0].Key != "p/k08" {
		t.Fatalf("after p/k07x: %d entries from %v, more %v, %v; want 17 from p/k08", len(entries), entries[:min(1, len(entries))], more, err)
	}
	// After the last key: nothing, and no more.
	if entries, more, err := b.ListPage(t.Context(), "p/", "p/k24", 5); err != nil || more || len(entries) != 0 {
		t.Fatalf("after the last key: %v, more %v, %v", entries, more, err)
	}
	// A prefix that is not a directory takes the key "p.x" too.
	if entries, _, err := b.ListPage(t.Context(), "p", "", 2); err != nil || len(entries) != 2 || entries[0].Key != "p.x" {
		t.Fatalf("prefix p: %v, %v", entries, err)
	}
	// A new write shows its new ETag; a deleted key is gone.
	etags["p/k00"] = mustPut(t, b, "p/k00", []byte("again"), store.Cond{})
	if err := b.Delete(t.Context(), "p/k01", ""); err != nil {
		t.Fatal(err)
	}
	entries, _, err = b.ListPage(t.Context(), "p/", "", 2)
	if err != nil || len(entries) != 2 || entries[0] != (store.Entry{Key: "p/k00", ETag: etags["p/k00"]}) || entries[1].Key != "p/k02" {
		t.Fatalf("after a rewrite and a delete: %v, %v", entries, err)
	}
	if _, _, err := b.ListPage(t.Context(), "p//", "", 1); !errors.Is(err, store.ErrInvalidKey) {
		t.Fatalf("invalid prefix: %v, want ErrInvalidKey", err)
	}
}

// testListPageBound: a page never holds more than MaxListPage entries.
func testListPageBound(t *testing.T, b store.Bucket, _ Options) {
	if testing.Short() {
		t.Skip("writes 1,001 objects")
	}
	n := store.MaxListPage + 1
	for i := range n {
		mustPut(t, b, fmt.Sprintf("m/%04d", i), nil, store.Cond{})
	}
	for _, limit := range []int{0, -1, n} {
		entries, more, err := b.ListPage(t.Context(), "m/", "", limit)
		if err != nil || len(entries) != store.MaxListPage || !more {
			t.Fatalf("limit %d: %d entries, more %v, %v; want %d and more", limit, len(entries), more, err, store.MaxListPage)
		}
	}
}
