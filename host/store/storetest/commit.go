package storetest

import (
	"errors"
	"testing"

	"github.com/wasmkeep/wasmkeep/host/store"
)

// testCommit: store.PutCommit writes its new objects and then its
// reference, under the reference's condition; a lost condition or an
// object that exists already writes no reference.
func testCommit(t *testing.T, b store.Bucket, _ Options) {
	ctx := t.Context()
	seg := func(n string) store.Object { return store.Object{Key: "c/seg/" + n, Body: []byte("segment " + n)} }
	etag, err := store.PutCommit(ctx, b, []store.Object{seg("1"), seg("2")}, "c/manifest", []byte("m1"), store.IfNoneMatch())
	if err != nil || etag == "" {
		t.Fatalf("the first commit: %q, %v", etag, err)
	}
	wantBody(t, b, "c/manifest", []byte("m1"), etag)
	wantBody(t, b, "c/seg/1", []byte("segment 1"), "")
	wantBody(t, b, "c/seg/2", []byte("segment 2"), "")

	// The reference's condition does not hold: no new reference.
	if _, err := store.PutCommit(ctx, b, []store.Object{seg("3")}, "c/manifest", []byte("m2"), store.Cond{IfMatch: "\"stale\""}); !lost(err) {
		t.Fatalf("a commit under a lost condition: %v, want a lost precondition", err)
	}
	wantBody(t, b, "c/manifest", []byte("m1"), etag)

	// An object to create exists: no new reference, and the object kept.
	if _, err := store.PutCommit(ctx, b, []store.Object{{Key: "c/seg/1", Body: []byte("other")}}, "c/manifest", []byte("m2"), store.Cond{IfMatch: etag}); !errors.Is(err, store.ErrPrecondition) {
		t.Fatalf("a commit creating an object that exists: %v, want ErrPrecondition", err)
	}
	wantBody(t, b, "c/manifest", []byte("m1"), etag)
	wantBody(t, b, "c/seg/1", []byte("segment 1"), "")

	// A commit with nothing to create, then one with an object.
	etag2, err := store.PutCommit(ctx, b, nil, "c/manifest", []byte("m2"), store.Cond{IfMatch: etag})
	if err != nil {
		t.Fatal(err)
	}
	etag3, err := store.PutCommit(ctx, b, []store.Object{seg("4")}, "c/manifest", []byte("m3"), store.Cond{IfMatch: etag2})
	if err != nil || etag3 == etag2 {
		t.Fatalf("the third commit: %q, %v", etag3, err)
	}
	wantBody(t, b, "c/manifest", []byte("m3"), etag3)
	wantBody(t, b, "c/seg/4", []byte("segment 4"), "")
}
