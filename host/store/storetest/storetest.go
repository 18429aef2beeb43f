// Package storetest is the conformance suite of [store.Bucket]: every
// backend (Mem, Dir, S3, and any wrapper that claims to be one) must pass
// [Run]. It checks the error contract of package store, the behaviour of
// conditional writes under contention, the handling of keys, prefixes
// and bodies of every size, and that concurrent read-modify-writes by
// If-Match form a linearizable history ([CheckLinearizable]).
package storetest

import (
	"bytes"
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/wasmkeep/wasmkeep/host/store"
)

// Options adjusts the suite to a backend. The zero value is the strictest.
type Options struct {
	// ContentETags says the backend derives an ETag from the body (S3's
	// single-part ETag is the body's MD5), so two Puts of identical bytes
	// may give the same ETag. The suite then checks only that different
	// bodies give different ETags.
	ContentETags bool

	// FileTree says the backend keeps each key as a file in a directory
	// tree, as S3 servers on a filesystem do (versitygw's posix backend,
	// MinIO): a key cannot also be a directory of others ("a" beside
	// "a/b"), and a segment is at most a file name (MaxFileName bytes).
	// The suite then writes no such keys.
	FileTree bool
}

// MaxFileName is the longest key segment the suite writes under
// [Options.FileTree]: NAME_MAX of Linux filesystems.
const MaxFileName = 255

// fileTreeKeys returns the keys of keys that a [Options.FileTree] backend
// can hold together: none that is a directory of another, none with a
// segment longer than MaxFileName. Others pass keys through.
func (o Options) fileTreeKeys(keys []string) []string {
	if !o.FileTree {
		return keys
	}
	var out []string
	for _, k := range keys {
		ok := true
		for _, seg := range strings.Split(k, "/") {
			ok = ok && len(seg) <= MaxFileName
		}
		for _, other := range keys {
			ok = ok && !strings.HasPrefix(other, k+"/")
		}
		if ok {
			out = append(out, k)
		}
	}
	return out
}

// Run runs the suite with the zero Options. newBucket must return an empty
// bucket for each subtest, and may be called from several subtests at once;
// it may register cleanups with t.
func Run(t *testing.T, newBucket func(t *testing.T) store.Bucket) {
	RunWith(t, newBucket, Options{})
}

// RunWith runs the suite with options.
func RunWith(t *testing.T, newBucket func(t *testing.T) store.Bucket, o Options) {
	tests := []struct {
		name string
		fn   func(t *testing.T, b store.Bucket, o Options)
	}{
		{"GetMissing", testGetMissing},
		{"RoundTrip", testRoundTrip},
		{"EmptyBody", testEmptyBody},
		{"BodiesAreCopied", testBodiesAreCopied},
		{"LargeBody", testLargeBody},
		{"IfNoneMatch", testIfNoneMatch},
		{"IfMatch", testIfMatch},
		{"IfMatchMissing", testIfMatchMissing},
		{"ETagChangesOnEveryPut", testETagChanges},
		{"InvalidCond", testInvalidCond},
		{"Delete", testDelete},
		{"ConditionalDelete", testConditionalDelete},
		{"RecreateAfterDelete", testRecreateAfterDelete},
		{"List", testList},
		{"ListEmpty", testListEmpty},
		{"ListPage", testListPage},
		{"ListPageBound", testListPageBound},
		{"InvalidKeys", testInvalidKeys},
		{"LongKeys", testLongKeys},
		{"EscapedNames", testEscapedNames},
		{"CancelledContext", testCancelledContext},
		{"RacingCreates", testRacingCreates},
		{"RacingIncrements", testRacingIncrements},
		{"ReadersSeeWholeBodies", testReadersSeeWholeBodies},
		{"ReadersSeeETagOfBody", testReadersSeeETagOfBody},
		{"SiblingChurn", testSiblingChurn},
		{"LinearizableOneKey", testLinearizableOneKey},
		{"LinearizableKeys", testLinearizableKeys},
		{"Commit", testCommit},
	}
	// Each subtest has a bucket of its own, and most of them wait on the
	// store (a disk's fsync, an S3 server's answers): they run side by side.
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			tc.fn(t, newBucket(t), o)
		})
	}
}

// lost reports whether err is a lost condition, or a conflict that a
// retry resolves.
func lost(err error) bool {
	return errors.Is(err, store.ErrPrecondition) || errors.Is(err, store.ErrConflict)
}

func mustPut(t *testing.T, b store.Bucket, key string, body []byte, cond store.Cond) string {
	t.Helper()
	etag, err := b.Put(t.Context(), key, body, cond)
	if err != nil {
		t.Fatalf("Put(%q, %s): %v", key, cond, err)
	}
	if etag == "" {
		t.Fatalf("Put(%q, %s): empty ETag", key, cond)
	}
	return etag
}

func mustGet(t *testing.T, b store.Bucket, key string) ([]byte, string) {
	t.Helper()
	body, etag, err := b.Get(t.Context(), key)
	if err != nil {
		t.Fatalf("Get(%q): %v", key, err)
	}
	return body, etag
}

func wantBody(t *testing.T, b store.Bucket, key string, want []byte, wantETag string) {
	t.Helper()
	body, etag := mustGet(t, b, key)
	if !bytes.Equal(body, want) {
		t.Fatalf("Get(%q) = %d bytes %.40q, want %d bytes %.40q", key, len(body), body, len(want), want)
	}
	if wantETag != "" && etag != wantETag {
		t.Fatalf("Get(%q) ETag = %q, want %q (from Put)", key, etag, wantETag)
	}
}

func wantMissing(t *testing.T, b store.Bucket, key string) {
	t.Helper()
	if _, _, err := b.Get(t.Context(), key); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("Get(%q) err = %v, want ErrNotFound", key, err)
	}
}

func wantList(t *testing.T, b store.Bucket, prefix string, want []string) {
	t.Helper()
	got, err := b.List(t.Context(), prefix)
	if err != nil {
		t.Fatalf("List(%q): %v", prefix, err)
	}
	if len(got) == 0 && len(want) == 0 {
		return
	}
	if !slices.Equal(got, want) {
		t.Fatalf("List(%q) =\n  %q\nwant\n  %q", prefix, got, want)
	}
}

func testGetMissing(t *testing.T, b store.Bucket, _ Options) {
	wantMissing(t, b, "missing")
	wantMissing(t, b, "a/b/missing")
	mustPut(t, b, "a/b", []byte("x"), store.Cond{})
	wantMissing(t, b, "a")
	wantMissing(t, b, "a/b/c")
}

func testRoundTrip(t *testing.T, b store.Bucket, o Options) {
	all := make([]byte, 256)
	for i := range all {
		all[i] = byte(i)
	}
	for _, tc := range []struct {
		key  string
		body []byte
	}{
		{"k", []byte("hello")},
		{"rooms/chat/lobby", all},
		{"A.b_c~d-e%20f/0", []byte("mixed case and punctuation")},
		{"a", []byte("a and a/b coexist")},
		{"a/b", []byte("a/b under a")},
	} {
		if o.FileTree && tc.key == "a/b" {
			continue
		}
		etag := mustPut(t, b, tc.key, tc.body, store.Cond{})
		wantBody(t, b, tc.key, tc.body, etag)
	}
	// Overwrite.
	etag := mustPut(t, b, "k", []byte("world"), store.Cond{})
	wantBody(t, b, "k", []byte("world"), etag)
	wantBody(t, b, "a", []byte("a and a/b coexist"), "")
}

func testEmptyBody(t *testing.T, b store.Bucket, _ Options) {
	e1 := mustPut(t, b, "empty/nil", nil, store.Cond{})
	wantBody(t, b, "empty/nil", nil, e1)
	e2 := mustPut(t, b, "empty/zero", []byte{}, store.IfNoneMatch())
	wantBody(t, b, "empty/zero", nil, e2)
	// Empty to non-empty and back.
	e3 := mustPut(t, b, "empty/zero", []byte("x"), store.IfMatch(e2))
	e4 := mustPut(t, b, "empty/zero", nil, store.IfMatch(e3))
	wantBody(t, b, "empty/zero", nil, e4)
}

func testBodiesAreCopied(t *testing.T, b store.Bucket, _ Options) {
	in := []byte("original")
	mustPut(t, b, "k", in, store.Cond{})
	copy(in, "CHANGED!")
	out, _ := mustGet(t, b, "k")
	if string(out) != "original" {
		t.Fatalf("Put kept the caller's slice: got %q", out)
	}
	copy(out, "CHANGED!")
	wantBody(t, b, "k", []byte("original"), "")
}

func testLargeBody(t *testing.T, b store.Bucket, _ Options) {
	const size = 8 << 20
	r := rand.New(rand.NewPCG(1, 2))
	big := make([]byte, size)
	for i := 0; i < size; i += 8 {
		v := r.Uint64()
		for j := 0; j < 8; j++ {
			big[i+j] = byte(v >> (8 * j))
		}
	}
	e1 := mustPut(t, b, "big/one", big, store.IfNoneMatch())
	wantBody(t, b, "big/one", big, e1)
	big[size/2] ^= 0xff
	e2 := mustPut(t, b, "big/one", big, store.IfMatch(e1))
	wantBody(t, b, "big/one", big, e2)
}

func testIfNoneMatch(t *testing.T, b store.Bucket, _ Options) {
	etag := mustPut(t, b, "k", []byte("first"), store.IfNoneMatch())
	_, err := b.Put(t.Context(), "k", []byte("second"), store.IfNoneMatch())
	if !errors.Is(err, store.ErrPrecondition) {
		t.Fatalf("If-None-Match on an existing key: err = %v, want ErrPrecondition", err)
	}
	wantBody(t, b, "k", []byte("first"), etag)
}

func testIfMatch(t *testing.T, b store.Bucket, _ Options) {
	e1 := mustPut(t, b, "k", []byte("v1"), store.Cond{})
	e2 := mustPut(t, b, "k", []byte("v2"), store.IfMatch(e1))
	if e2 == e1 {
		t.Fatalf("If-Match write kept ETag %q", e1)
	}
	wantBody(t, b, "k", []byte("v2"), e2)

	for _, stale := range []string{e1, "not-an-etag", `"` + e2 + `"`, "*"} {
		_, err := b.Put(t.Context(), "k", []byte("v3"), store.IfMatch(stale))
		if !errors.Is(err, store.ErrPrecondition) {
			t.Fatalf("If-Match %q (current %q): err = %v, want ErrPrecondition", stale, e2, err)
		}
	}
	wantBody(t, b, "k", []byte("v2"), e2)
}

func testIfMatchMissing(t *testing.T, b store.Bucket, _ Options) {
	e1 := mustPut(t, b, "other", []byte("v1"), store.Cond{})
	_, err := b.Put(t.Context(), "k", []byte("v"), store.IfMatch(e1))
	if !errors.Is(err, store.ErrPrecondition) {
		t.Fatalf("If-Match on a missing key: err = %v, want ErrPrecondition (lost)", err)
	}
	wantMissing(t, b, "k")
}

func testETagChanges(t *testing.T, b store.Bucket, o Options) {
	seen := map[string]int{}
	body := []byte("same bytes every time")
	prev := ""
	for i := range 5 {
		etag := mustPut(t, b, "k", body, store.IfMatch(prev)) // IfMatch("") is unconditional
		if !o.ContentETags {
			if j, dup := seen[etag]; dup {
				t.Fatalf("Put %d of an identical body reused ETag %q of put %d", i, etag, j)
			}
		}
		seen[etag] = i
		_, got := mustGet(t, b, "k")
		if got != etag {
			t.Fatalf("Get ETag = %q, want %q", got, etag)
		}
		prev = etag
	}
	// Different bodies always give different ETags.
	seen = map[string]int{}
	for i := range 5 {
		etag := mustPut(t, b, "k", []byte("body "+strconv.Itoa(i)), store.Cond{})
		if j, dup := seen[etag]; dup {
			t.Fatalf("bodies %d and %d share ETag %q", j, i, etag)
		}
		seen[etag] = i
	}
}

func testInvalidCond(t *testing.T, b store.Bucket, _ Options) {
	etag := mustPut(t, b, "k", []byte("v1"), store.Cond{})
	_, err := b.Put(t.Context(), "k", []byte("v2"), store.Cond{IfMatch: etag, IfNoneMatch: true})
	if !errors.Is(err, store.ErrInvalidCond) {
		t.Fatalf("both conditions: err = %v, want ErrInvalidCond", err)
	}
	wantBody(t, b, "k", []byte("v1"), etag)
}

func testDelete(t *testing.T, b store.Bucket, o Options) {
	child := "d/k/child" // deleting d/k leaves the keys under it
	if o.FileTree {
		child = "d/j/child"
	}
	mustPut(t, b, "d/k", []byte("v"), store.Cond{})
	mustPut(t, b, child, []byte("c"), store.Cond{})
	if err := b.Delete(t.Context(), "d/k", ""); err != nil {
		t.Fatalf("Delete: %v", err)
	}
	wantMissing(t, b, "d/k")
	wantBody(t, b, child, []byte("c"), "")
	if err := b.Delete(t.Context(), "d/k", ""); err != nil {
		t.Fatalf("unconditional Delete of a missing key: %v, want nil", err)
	}
	if err := b.Delete(t.Context(), "never/was", ""); err != nil {
		t.Fatalf("unconditional Delete of a missing key: %v, want nil", err)
	}
	if err := b.Delete(t.Context(), child, ""); err != nil {
		t.Fatalf("Delete: %v", err)
	}
	wantList(t, b, "", nil)
}

func testConditionalDelete(t *testing.T, b store.Bucket, _ Options) {
	e1 := mustPut(t, b, "k", []byte("v1"), store.Cond{})
	e2 := mustPut(t, b, "k", []byte("v2"), store.Cond{})
	if err := b.Delete(t.Context(), "k", e1); !errors.Is(err, store.ErrPrecondition) {
		t.Fatalf("Delete with a stale ETag: err = %v, want ErrPrecondition", err)
	}
	wantBody(t, b, "k", []byte("v2"), e2)
	if err := b.Delete(t.Context(), "k", e2); err != nil {
		t.Fatalf("Delete with the current ETag: %v", err)
	}
	wantMissing(t, b, "k")
	err := b.Delete(t.Context(), "k", e2)
	if !errors.Is(err, store.ErrNotFound) || !errors.Is(err, store.ErrPrecondition) {
		t.Fatalf("conditional Delete of a missing key: err = %v, want ErrNotFound and ErrPrecondition", err)
	}
}

func testRecreateAfterDelete(t *testing.T, b store.Bucket, _ Options) {
	e1 := mustPut(t, b, "r/k", []byte("first life"), store.IfNoneMatch())
	if err := b.Delete(t.Context(), "r/k", e1); err != nil {
		t.Fatal(err)
	}
	e2 := mustPut(t, b, "r/k", []byte("second life"), store.IfNoneMatch())
	wantBody(t, b, "r/k", []byte("second life"), e2)
	if _, err := b.Put(t.Context(), "r/k", []byte("x"), store.IfMatch(e1)); !errors.Is(err, store.ErrPrecondition) {
		t.Fatalf("If-Match with the ETag of a deleted incarnation: err = %v, want ErrPrecondition", err)
	}
}

func testList(t *testing.T, b store.Bucket, o Options) {
	long := strings.Repeat("L", 300)
	keys := o.fileTreeKeys([]string{
		"a", "a/b", "a/b/c", "a/bc", "a/b.c", "a.b", "ab", "a-", "a~",
		"b/x/y", "b%2Fz", "B",
		"long/" + long, "long/" + long + "/x", "long/" + long + "M",
		"long/" + long[:150], "long/" + long[:150] + "/y",
		"z/1", "z/10", "z/2",
	})
	for i, k := range slices.Backward(keys) {
		mustPut(t, b, k, []byte(strconv.Itoa(i)), store.Cond{})
	}
	sorted := slices.Sorted(slices.Values(keys))
	expect := func(prefix string) []string {
		var out []string
		for _, k := range sorted {
			if strings.HasPrefix(k, prefix) {
				out = append(out, k)
			}
		}
		return out
	}
	prefixes := []string{
		"", "a", "a/", "a/b", "a/b/", "a/b/c", "a/b/c/", "a/bc/", "a.", "a/b.",
		"b", "b/", "b/x/", "B", "c", "c/", "z/", "z/1",
		"long/", "long/L", "long/" + long[:100], "long/" + long[:150], "long/" + long[:150] + "/",
		"long/" + long[:200], "long/" + long, "long/" + long + "/", "long/" + long + "M",
	}
	for _, p := range prefixes {
		wantList(t, b, p, expect(p))
	}
	// Spot checks that do not depend on expect.
	wantList(t, b, "z/", []string{"z/1", "z/10", "z/2"})
	wantList(t, b, "c", nil)
	if o.FileTree {
		wantList(t, b, "a/b", []string{"a/b.c", "a/b/c", "a/bc"})
		if err := b.Delete(t.Context(), "a/b/c", ""); err != nil {
			t.Fatal(err)
		}
		wantList(t, b, "a/b", []string{"a/b.c", "a/bc"})
		return
	}
	wantList(t, b, "a/b", []string{"a/b", "a/b.c", "a/b/c", "a/bc"})
	if err := b.Delete(t.Context(), "a/b", ""); err != nil {
		t.Fatal(err)
	}
	wantList(t, b, "a/b", []string{"a/b.c", "a/b/c", "a/bc"})
}

func testListEmpty(t *testing.T, b store.Bucket, _ Options) {
	wantList(t, b, "", nil)
	wantList(t, b, "x/", nil)
}

func testInvalidKeys(t *testing.T, b store.Bucket, _ Options) {
	bad := []string{
		"", "/", "/a", "a/", "a//b", ".", "..", "a/.", "./a", "a/../b", "a/./b",
		"a b", "a\x00b", "a\nb", "é", "a@b", "a+b", "a*", "a:b", `a\b`, "a?b", "a#b",
		strings.Repeat("k", store.MaxKeyLen+1),
	}
	ctx := t.Context()
	for _, k := range bad {
		if _, _, err := b.Get(ctx, k); !errors.Is(err, store.ErrInvalidKey) {
			t.Errorf("Get(%q): err = %v, want ErrInvalidKey", k, err)
		}
		if _, err := b.Put(ctx, k, []byte("x"), store.Cond{}); !errors.Is(err, store.ErrInvalidKey) {
			t.Errorf("Put(%q): err = %v, want ErrInvalidKey", k, err)
		}
		if err := b.Delete(ctx, k, ""); !errors.Is(err, store.ErrInvalidKey) {
			t.Errorf("Delete(%q): err = %v, want ErrInvalidKey", k, err)
		}
	}
	for _, p := range []string{"/", "/a", "a//", "a/../", "./", "a b", "é", "a@", strings.Repeat("p", store.MaxKeyLen+1)} {
		if _, err := b.List(ctx, p); !errors.Is(err, store.ErrInvalidKey) {
			t.Errorf("List(%q): err = %v, want ErrInvalidKey", p, err)
		}
	}
	for _, p := range []string{"a/.", "a/..", "."} {
		if _, err := b.List(ctx, p); err != nil {
			t.Errorf("List(%q): %v, want no error (a valid key may start with it)", p, err)
		}
	}
	wantList(t, b, "", nil)
}

func testLongKeys(t *testing.T, b store.Bucket, o Options) {
	keys := []string{
		strings.Repeat("k", store.MaxKeyLen),
		"a/" + strings.Repeat("b", store.MaxKeyLen-2),
		strings.Repeat("s", 200) + "/" + strings.Repeat("t", 201) + "/" + strings.Repeat(".", 351),
		strings.Repeat("x/", store.MaxKeyLen/2-1) + "x",
	}
	if o.FileTree {
		keys = []string{
			fileTreeKey("", 'k'),
			fileTreeKey("a/", 'b'),
			strings.Repeat("s", 200) + "/" + strings.Repeat("t", 201) + "/" + strings.Repeat(".", MaxFileName),
			strings.Repeat("x/", store.MaxKeyLen/2-1) + "x",
		}
	}
	for _, k := range keys {
		if len(k) > store.MaxKeyLen || store.ValidKey(k) != nil || len(o.fileTreeKeys([]string{k})) == 0 {
			t.Fatalf("bad test key of %d bytes", len(k))
		}
		etag := mustPut(t, b, k, []byte(k[:10]), store.IfNoneMatch())
		wantBody(t, b, k, []byte(k[:10]), etag)
	}
	wantList(t, b, "", slices.Sorted(slices.Values(keys)))
	for _, k := range keys {
		_, etag := mustGet(t, b, k)
		if err := b.Delete(t.Context(), k, etag); err != nil {
			t.Fatalf("Delete(%.20q…): %v", k, err)
		}
	}
	wantList(t, b, "", nil)
}

// fileTreeKey returns a key of MaxKeyLen bytes that starts with start and
// goes on with segments of c no longer than MaxFileName.
func fileTreeKey(start string, c byte) string {
	seg := strings.Repeat(string(c), MaxFileName-1) + "/"
	k := start
	for len(k)+len(seg) < store.MaxKeyLen {
		k += seg
	}
	return k + strings.Repeat(string(c), store.MaxKeyLen-len(k))
}

func testEscapedNames(t *testing.T, b store.Bucket, o Options) {
	names := []string{
		"lobby", "Lobby", "room with spaces", "a/b", ".", "..", "...", "%", "%25",
		"日本語のルーム", "emoji 🎉", strings.Repeat("名", store.MaxNameLen/3),
		"\x00\x01\xff", "@store", "x+y", "tmp@tmp-1",
	}
	want := map[string]string{}
	kept := names[:0:0]
	for _, n := range names {
		key := "rooms/chat/" + store.EscapeSegment(n) + "/state"
		if len(o.fileTreeKeys([]string{key})) == 0 {
			continue
		}
		kept = append(kept, n)
		mustPut(t, b, key, []byte(n), store.IfNoneMatch())
		want[key] = n
	}
	got, err := b.List(t.Context(), "rooms/chat/")
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != len(kept) {
		t.Fatalf("List found %d keys, want %d: %q", len(got), len(kept), got)
	}
	for _, key := range got {
		seg := strings.TrimSuffix(strings.TrimPrefix(key, "rooms/chat/"), "/state")
		n, err := store.UnescapeSegment(seg)
		if err != nil {
			t.Fatalf("UnescapeSegment(%q): %v", seg, err)
		}
		if want[key] != n {
			t.Fatalf("key %q unescapes to %q, want %q", key, n, want[key])
		}
		wantBody(t, b, key, []byte(n), "")
	}
}

func testCancelledContext(t *testing.T, b store.Bucket, _ Options) {
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	if _, err := b.Put(ctx, "k", []byte("v"), store.Cond{}); !errors.Is(err, context.Canceled) {
		t.Fatalf("Put with a cancelled context: err = %v, want context.Canceled", err)
	} else if !errors.Is(err, store.ErrUnknownOutcome) {
		wantMissing(t, b, "k")
	}
	if _, _, err := b.Get(ctx, "k"); err == nil {
		t.Fatal("Get with a cancelled context: no error")
	}
	if _, err := b.List(ctx, ""); err == nil {
		t.Fatal("List with a cancelled context: no error")
	}
}

// start runs n goroutines that call fn(i) at once and waits for them.
func start(n int, fn func(i int)) {
	var ready, done sync.WaitGroup
	gate := make(chan struct{})
	ready.Add(n)
	for i := range n {
		done.Go(func() {
			ready.Done()
			<-gate
			fn(i)
		})
	}
	ready.Wait()
	close(gate)
	done.Wait()
}

func testRacingCreates(t *testing.T, b store.Bucket, _ Options) {
	const n = 16
	errs := make([]error, n)
	etags := make([]string, n)
	start(n, func(i int) {
		for {
			etags[i], errs[i] = b.Put(context.Background(), "race/create", []byte("winner "+strconv.Itoa(i)), store.IfNoneMatch())
			if !errors.Is(errs[i], store.ErrConflict) {
				return
			}
		}
	})
	winner := -1
	for i, err := range errs {
		switch {
		case err == nil && winner >= 0:
			t.Fatalf("two creates won: %d and %d", winner, i)
		case err == nil:
			winner = i
		case !errors.Is(err, store.ErrPrecondition):
			t.Fatalf("create %d: err = %v, want nil or ErrPrecondition", i, err)
		}
	}
	if winner < 0 {
		t.Fatal("no create won")
	}
	wantBody(t, b, "race/create", []byte("winner "+strconv.Itoa(winner)), etags[winner])
}

// Increment adds one to the decimal counter in key with a compare-and-swap
// loop (If-None-Match to create, If-Match to update), retrying lost
// conditions. It returns the value it wrote. Tests of backends that run in
// several processes use it too.
func Increment(ctx context.Context, b store.Bucket, key string) (int, error) {
	for {
		n, cond := 0, store.IfNoneMatch()
		body, etag, err := b.Get(ctx, key)
		switch {
		case errors.Is(err, store.ErrNotFound):
		case err != nil:
			return 0, err
		default:
			if n, err = strconv.Atoi(string(body)); err != nil {
				return 0, fmt.Errorf("counter %q holds %q: %w", key, body, err)
			}
			cond = store.IfMatch(etag)
		}
		_, err = b.Put(ctx, key, []byte(strconv.Itoa(n+1)), cond)
		if err == nil {
			return n + 1, nil
		}
		if !lost(err) {
			return 0, err
		}
	}
}

func testRacingIncrements(t *testing.T, b store.Bucket, _ Options) {
	const n = 16
	wrote := make([]int, n)
	errs := make([]error, n)
	start(n, func(i int) {
		wrote[i], errs[i] = Increment(context.Background(), b, "race/counter")
	})
	for i, err := range errs {
		if err != nil {
			t.Fatalf("increment %d: %v", i, err)
		}
	}
	slices.Sort(wrote)
	for i, v := range wrote {
		if v != i+1 {
			t.Fatalf("increments wrote %v, want 1..%d each once (a lost update)", wrote, n)
		}
	}
	wantBody(t, b, "race/counter", []byte(strconv.Itoa(n)), "")
}

// SelfChecking returns a body of size bytes (a few more if size is too
// small) that names its writer and sequence number, continues with bytes
// from r and ends in a SHA-256 of the rest, for [CheckBody].
func SelfChecking(r *rand.Rand, writer, seq, size int) []byte {
	prefix := fmt.Sprintf("%d:%d:", writer, seq)
	size = max(size, len(prefix)+sha256.Size)
	b := make([]byte, size-sha256.Size)
	copy(b, prefix)
	for i := len(prefix); i < len(b); i += 8 {
		v := r.Uint64()
		for j := i; j < min(i+8, len(b)); j++ {
			b[j] = byte(v)
			v >>= 8
		}
	}
	sum := sha256.Sum256(b)
	return append(b, sum[:]...)
}

// CheckBody reports whether body is a whole body made by [SelfChecking].
func CheckBody(body []byte) error {
	if len(body) < sha256.Size+4 {
		return fmt.Errorf("body of %d bytes is too short", len(body))
	}
	n := len(body) - sha256.Size
	if sum := sha256.Sum256(body[:n]); !bytes.Equal(sum[:], body[n:]) {
		return fmt.Errorf("body of %d bytes fails its checksum (torn or mixed)", len(body))
	}
	return nil
}

func testReadersSeeWholeBodies(t *testing.T, b store.Bucket, _ Options) {
	const key = "torn/k"
	r := rand.New(rand.NewPCG(3, 4))
	mustPut(t, b, key, SelfChecking(r, 0, 0, 100), store.Cond{})
	stop := make(chan struct{})
	var wg sync.WaitGroup
	var mu sync.Mutex
	var failures []error
	for range 4 {
		wg.Go(func() {
			for {
				select {
				case <-stop:
					return
				default:
				}
				body, _, err := b.Get(context.Background(), key)
				if err == nil {
					err = CheckBody(body)
				}
				if err != nil {
					mu.Lock()
					failures = append(failures, err)
					mu.Unlock()
					return
				}
			}
		})
	}
	for i := range 40 {
		size := 40 + r.IntN(256<<10)
		if _, err := b.Put(t.Context(), key, SelfChecking(r, 0, i, size), store.Cond{}); err != nil {
			t.Error(err)
			break
		}
	}
	close(stop)
	wg.Wait()
	for _, err := range failures {
		t.Error(err)
	}
}

// testReadersSeeETagOfBody overwrites a key while readers Get it, and
// checks that every Get paired its body with that body's ETag, as the
// writer's Puts returned it. (versitygw v1.8.0 reads a replaced object's
// ETag before it opens the file, and so pairs an old ETag with a new body
// a few times in a thousand.)
func testReadersSeeETagOfBody(t *testing.T, b store.Bucket, _ Options) {
	const key, writes = "pairs/k", 300
	type pair struct{ etag, body string }
	mustPut(t, b, key, []byte("initial"), store.Cond{})
	stop := make(chan struct{})
	var wg sync.WaitGroup
	var mu sync.Mutex
	var read []pair
	var failures []error
	for range 4 {
		wg.Go(func() {
			for {
				select {
				case <-stop:
					return
				default:
				}
				body, etag, err := b.Get(context.Background(), key)
				mu.Lock()
				if err != nil {
					failures = append(failures, err)
				} else {
					read = append(read, pair{etag, string(body)})
				}
				mu.Unlock()
				if err != nil {
					return
				}
			}
		})
	}
	wrote := map[string]string{} // ETag → body
	_, etag := mustGet(t, b, key)
	wrote[etag] = "initial"
	for i := range writes {
		body := fmt.Sprintf("body %d", i)
		etag, err := b.Put(t.Context(), key, []byte(body), store.Cond{})
		if err != nil {
			t.Error(err)
			break
		}
		wrote[etag] = body
	}
	close(stop)
	wg.Wait()
	for _, err := range failures {
		t.Error(err)
	}
	wrong := 0
	for _, p := range read {
		if want, ok := wrote[p.etag]; !ok || want != p.body {
			if wrong++; wrong <= 3 {
				t.Errorf("Get paired body %q with ETag %s, the ETag of %q", p.body, p.etag, want)
			}
		}
	}
	if wrong > 0 {
		t.Errorf("%d of %d Gets paired a body with another's ETag", wrong, len(read))
	}
}

// testSiblingChurn creates and deletes keys that share parent segments from
// many goroutines at once (for Dir: directories created and removed under
// each other's feet).
func testSiblingChurn(t *testing.T, b store.Bucket, _ Options) {
	const n, rounds = 8, 25
	errs := make([]error, n)
	start(n, func(i int) {
		ctx := context.Background()
		for j := range rounds {
			key := fmt.Sprintf("churn/p%d/k%d", j%2, i)
			body := []byte(fmt.Sprintf("%d.%d", i, j))
			etag, err := b.Put(ctx, key, body, store.IfNoneMatch())
			if err != nil {
				errs[i] = fmt.Errorf("put %s: %w", key, err)
				return
			}
			got, getETag, err := b.Get(ctx, key)
			if err != nil || !bytes.Equal(got, body) || getETag != etag {
				errs[i] = fmt.Errorf("get %s = %q, %q, %v; want %q, %q", key, got, getETag, err, body, etag)
				return
			}
			if err := b.Delete(ctx, key, etag); err != nil {
				errs[i] = fmt.Errorf("delete %s: %w", key, err)
				return
			}
		}
	})
	for _, err := range errs {
		if err != nil {
			t.Error(err)
		}
	}
	wantList(t, b, "churn/", nil)
}

// testLinearizableOneKey has 16 writers replace one key by If-Match.
func testLinearizableOneKey(t *testing.T, b store.Bucket, _ Options) {
	if err := CheckLinearizable(t.Context(), b, LinearOptions{}); err != nil {
		t.Fatal(err)
	}
}

// testLinearizableKeys has 16 writers replace three keys by If-Match.
func testLinearizableKeys(t *testing.T, b store.Bucket, _ Options) {
	if err := CheckLinearizable(t.Context(), b, LinearOptions{Keys: []string{"linear/a", "linear/b", "linear/c"}}); err != nil {
		t.Fatal(err)
	}
}
