package s3_test

import (
	"bytes"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/wasmkeep/wasmkeep/host/store"
	"github.com/wasmkeep/wasmkeep/host/store/s3"
	"github.com/wasmkeep/wasmkeep/internal/s3test"
)

// config returns the Config of srv's bucket with explicit credentials.
func config(srv *s3test.Server, bucket string) s3.Config {
	return s3.Config{
		Bucket:          bucket,
		Endpoint:        srv.Endpoint,
		AccessKeyID:     srv.AccessKeyID,
		SecretAccessKey: srv.SecretAccessKey,
	}
}

func open(t *testing.T, c s3.Config) *s3.Bucket {
	t.Helper()
	b, err := s3.New(t.Context(), c)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// observed records what Config.Observe is told.
type observed struct {
	mu   sync.Mutex
	reqs []string
}

func (o *observed) observe(r s3.Request) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if r.Duration <= 0 {
		r.Op += " without a duration"
	}
	if (r.Err == nil) != (r.Outcome == s3.OutcomeOK) {
		r.Op += fmt.Sprintf(" with error %v", r.Err)
	}
	o.reqs = append(o.reqs, r.Op+" "+string(r.Outcome))
}

func (o *observed) take() []string {
	o.mu.Lock()
	defer o.mu.Unlock()
	r := o.reqs
	o.reqs = nil
	return r
}

func TestBasics(t *testing.T) {
	srv := s3test.Start(t)
	var seen observed
	c := config(srv, srv.Bucket)
	c.Observe = seen.observe
	b := open(t, c)
	ctx := t.Context()

	etag, err := b.Put(ctx, "k", []byte("v1"), store.IfNoneMatch())
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(etag, `"`) || !strings.HasSuffix(etag, `"`) {
		t.Fatalf("ETag %s is not quoted", etag)
	}
	if _, err := b.Put(ctx, "k", []byte("v2"), store.IfNoneMatch()); !errors.Is(err, store.ErrPrecondition) {
		t.Fatalf("second create: %v, want ErrPrecondition", err)
	}
	body, got, err := b.Get(ctx, "k")
	if err != nil || string(body) != "v1" || got != etag {
		t.Fatalf("Get = %q, %s, %v; want v1, %s", body, got, err, etag)
	}
	if _, _, err := b.Get(ctx, "missing"); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("Get of a missing key: %v", err)
	}
	// An If-Match that cannot be an ETag of the bucket loses without a
	// request; S3 would read "*" as "any version".
	for _, bad := range []string{"*", strings.Trim(etag, `"`)} {
		if _, err := b.Put(ctx, "k", []byte("v3"), store.IfMatch(bad)); !errors.Is(err, store.ErrPrecondition) {
			t.Fatalf("If-Match %s: %v, want ErrPrecondition", bad, err)
		}
	}
	if _, err := b.Put(ctx, "gone", []byte("x"), store.IfMatch(etag)); !errors.Is(err, store.ErrPrecondition) || !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("If-Match on a missing key: %v, want ErrPrecondition and ErrNotFound", err)
	}
	if err := b.Delete(ctx, "k", `"stale"`); !errors.Is(err, store.ErrPrecondition) || errors.Is(err, store.ErrNotFound) {
		t.Fatalf("Delete with a stale ETag: %v, want ErrPrecondition only", err)
	}
	if err := b.Delete(ctx, "k", etag); err != nil {
		t.Fatal(err)
	}
	if err := b.Delete(ctx, "k", etag); !errors.Is(err, store.ErrPrecondition) || !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("conditional Delete of a missing key: %v, want ErrPrecondition and ErrNotFound", err)
	}
	want := []string{
		"PutObject ok", "PutObject precondition", "GetObject ok", "GetObject not_found",
		"PutObject not_found",
		"HeadObject precondition", "HeadObject ok", "DeleteObject ok", "HeadObject not_found",
	}
	if got := seen.take(); !slices.Equal(got, want) {
		t.Fatalf("Observe saw\n  %q\nwant\n  %q", got, want)
	}
}

// TestPrefix checks that two stores under different prefixes of one S3
// bucket do not see each other's keys, and that List strips the prefix.
func TestPrefix(t *testing.T) {
	srv := s3test.Start(t)
	ctx := t.Context()
	whole := open(t, config(srv, srv.Bucket))
	ca, cb := config(srv, srv.Bucket), config(srv, srv.Bucket)
	ca.Prefix, cb.Prefix = "tenant/a", "tenant/b/"
	a, b := open(t, ca), open(t, cb)
	for _, k := range []string{"rooms/x", "rooms/y"} {
		if _, err := a.Put(ctx, k, []byte("a:"+k), store.IfNoneMatch()); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := b.Put(ctx, "rooms/x", []byte("b"), store.IfNoneMatch()); err != nil {
		t.Fatalf("the same key under another prefix: %v", err)
	}
	if keys, err := a.List(ctx, "rooms/"); err != nil || !slices.Equal(keys, []string{"rooms/x", "rooms/y"}) {
		t.Fatalf("List under a = %q, %v", keys, err)
	}
	if keys, err := b.List(ctx, ""); err != nil || !slices.Equal(keys, []string{"rooms/x"}) {
		t.Fatalf("List under b = %q, %v", keys, err)
	}
	if keys, err := whole.List(ctx, ""); err != nil || !slices.Equal(keys, []string{"tenant/a/rooms/x", "tenant/a/rooms/y", "tenant/b/rooms/x"}) {
		t.Fatalf("List of the whole bucket = %q, %v", keys, err)
	}
	if body, _, err := whole.Get(ctx, "tenant/b/rooms/x"); err != nil || string(body) != "b" {
		t.Fatalf("the object of b's key = %q, %v", body, err)
	}
	if s := a.String(); s != "s3://"+srv.Bucket+"/tenant/a/" {
		t.Fatalf("String() = %q", s)
	}
}

// TestListPages lists more keys than one ListObjectsV2 page holds (1000).
func TestListPages(t *testing.T) {
	srv := s3test.Start(t)
	var seen observed
	c := config(srv, srv.Bucket)
	c.Observe = seen.observe
	b := open(t, c)
	const n = 1100
	var want []string
	for i := range n {
		want = append(want, fmt.Sprintf("many/%04d", i))
	}
	var wg sync.WaitGroup
	errs := make([]error, 8)
	for w := range 8 {
		wg.Go(func() {
			for i := w; i < n; i += 8 {
				if _, err := b.Put(t.Context(), want[i], nil, store.Cond{}); err != nil {
					errs[w] = err
					return
				}
			}
		})
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		t.Fatal(err)
	}
	seen.take()
	got, err := b.List(t.Context(), "many/")
	if err != nil || !slices.Equal(got, want) {
		t.Fatalf("List = %d keys (%v), want %d", len(got), err, n)
	}
	if reqs := seen.take(); !slices.Equal(reqs, []string{"ListObjectsV2 ok", "ListObjectsV2 ok"}) {
		t.Fatalf("List sent %q, want two pages", reqs)
	}
}

func TestMaxObjectSize(t *testing.T) {
	srv := s3test.Start(t)
	ctx := t.Context()
	big := open(t, config(srv, srv.Bucket))
	c := config(srv, srv.Bucket)
	c.MaxObjectSize = 10
	small := open(t, c)
	if _, err := small.Put(ctx, "k", bytes.Repeat([]byte("x"), 11), store.Cond{}); !errors.Is(err, s3.ErrTooLarge) {
		t.Fatalf("Put of 11 bytes under a limit of 10: %v, want ErrTooLarge", err)
	}
	if _, _, err := big.Get(ctx, "k"); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("the refused Put was sent: %v", err)
	}
	if _, err := small.Put(ctx, "k", bytes.Repeat([]byte("x"), 10), store.Cond{}); err != nil {
		t.Fatal(err)
	}
	if body, _, err := small.Get(ctx, "k"); err != nil || len(body) != 10 {
		t.Fatalf("Get at the limit = %d bytes, %v", len(body), err)
	}
	if _, err := big.Put(ctx, "k", bytes.Repeat([]byte("x"), 11), store.Cond{}); err != nil {
		t.Fatal(err)
	}
	if _, _, err := small.Get(ctx, "k"); !errors.Is(err, s3.ErrTooLarge) {
		t.Fatalf("Get of 11 bytes under a limit of 10: %v, want ErrTooLarge", err)
	}
}

// TestEnvironment reaches the server with nothing in the Config but the
// bucket: endpoint, credentials and region come from the standard AWS
// environment variables, and the endpoint on 127.0.0.1 implies path-style
// addressing (virtual-host style would send the bucket name as a host
// name under an IP address, and fail).
func TestEnvironment(t *testing.T) {
	srv := s3test.Start(t)
	t.Setenv("AWS_ENDPOINT_URL", srv.Endpoint)
	t.Setenv("AWS_ACCESS_KEY_ID", srv.AccessKeyID)
	t.Setenv("AWS_SECRET_ACCESS_KEY", srv.SecretAccessKey)
	t.Setenv("AWS_REGION", s3test.Region)
	t.Setenv("AWS_CONFIG_FILE", t.TempDir()+"/none")
	t.Setenv("AWS_SHARED_CREDENTIALS_FILE", t.TempDir()+"/none")
	b := open(t, s3.Config{Bucket: srv.Bucket})
	if _, err := b.Put(t.Context(), "env", []byte("v"), store.IfNoneMatch()); err != nil {
		t.Fatal(err)
	}
	if body, _, err := b.Get(t.Context(), "env"); err != nil || string(body) != "v" {
		t.Fatalf("Get = %q, %v", body, err)
	}
	t.Setenv("AWS_SECRET_ACCESS_KEY", "wrong")
	b = open(t, s3.Config{Bucket: srv.Bucket})
	if _, _, err := b.Get(t.Context(), "env"); err == nil {
		t.Fatal("a wrong secret from the environment was not used")
	}
}
