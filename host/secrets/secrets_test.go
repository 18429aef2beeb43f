package secrets

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/base64"
	"errors"
	"strconv"
	"strings"
	"testing"

	"github.com/wasmkeep/wasmkeep/host/store"
)

func newTestKey(t *testing.T) (*Key, string) {
	t.Helper()
	raw := make([]byte, KeySize)
	if _, err := rand.Read(raw); err != nil {
		t.Fatal(err)
	}
	s := base64.StdEncoding.EncodeToString(raw)
	k, err := ParseKey(s + "\n")
	if err != nil {
		t.Fatal(err)
	}
	return k, s
}

func TestParseKey(t *testing.T) {
	for _, bad := range []string{"", "not base64!", base64.StdEncoding.EncodeToString(make([]byte, 16))} {
		if _, err := ParseKey(bad); err == nil {
			t.Errorf("ParseKey(%q) took it", bad)
		}
	}
	_, s := newTestKey(t)
	raw, _ := base64.StdEncoding.DecodeString(s)
	for _, enc := range []*base64.Encoding{base64.RawStdEncoding, base64.URLEncoding, base64.RawURLEncoding} {
		if _, err := ParseKey(enc.EncodeToString(raw)); err != nil {
			t.Errorf("%v", err)
		}
	}
}

// TestSealOpen: a value opens under the key that sealed it (or a node's
// previous key), not under another, not under another name, and the
// stored bytes do not hold it.
func TestSealOpen(t *testing.T) {
	ctx := t.Context()
	b := store.NewMem()
	k1, _ := newTestKey(t)
	k2, _ := newTestKey(t)
	s := New(b, Keys{Current: k1})
	value := []byte("sk_live_0123456789abcdef")
	if err := s.Put(ctx, "STRIPE_KEY", value); err != nil {
		t.Fatal(err)
	}
	body, _, err := b.Get(ctx, "secrets/STRIPE_KEY")
	if err != nil || bytes.Contains(body, value) || bytes.Contains(body, []byte("sk_live")) {
		t.Fatalf("stored body holds the value (or %v)", err)
	}
	if got, err := New(b, Keys{Current: k1}).Get(ctx, "STRIPE_KEY"); err != nil || !bytes.Equal(got, value) {
		t.Fatalf("Get: %q, %v", got, err)
	}
	if got, err := New(b, Keys{Current: k2, Previous: k1}).Get(ctx, "STRIPE_KEY"); err != nil || !bytes.Equal(got, value) {
		t.Fatalf("Get with the sealing key as previous: %q, %v", got, err)
	}
	if _, err := New(b, Keys{Current: k2}).Get(ctx, "STRIPE_KEY"); !errors.Is(err, ErrWrongKey) {
		t.Fatalf("Get under another key: %v, want ErrWrongKey", err)
	}
	if _, err := New(b, Keys{}).Get(ctx, "STRIPE_KEY"); !errors.Is(err, ErrNoKey) {
		t.Fatalf("Get without a key: %v, want ErrNoKey", err)
	}
	// A body copied to another name does not open there.
	if _, err := b.Put(ctx, "secrets/OTHER", body, store.Cond{}); err != nil {
		t.Fatal(err)
	}
	if _, err := New(b, Keys{Current: k1}).Get(ctx, "OTHER"); err == nil {
		t.Fatal("a sealed value opened under another name")
	}
	if _, err := s.Get(ctx, "MISSING"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("Get of a missing secret: %v", err)
	}
}

func TestNamesAndSizes(t *testing.T) {
	k, _ := newTestKey(t)
	s := New(store.NewMem(), Keys{Current: k})
	for _, bad := range []string{"", "1ABC", "A-B", "a b", strings.Repeat("A", 129), "../x"} {
		if err := s.Put(t.Context(), bad, []byte("v")); !errors.Is(err, ErrName) {
			t.Errorf("Put(%q): %v, want ErrName", bad, err)
		}
	}
	if err := s.Put(t.Context(), "BIG", make([]byte, MaxValue+1)); !errors.Is(err, ErrTooLarge) {
		t.Errorf("a value over MaxValue: %v", err)
	}
	if err := s.Put(t.Context(), "EMPTY", nil); err != nil {
		t.Fatal(err)
	}
	if got, err := s.Get(t.Context(), "EMPTY"); err != nil || len(got) != 0 {
		t.Fatalf("an empty secret: %q, %v", got, err)
	}
}

// TestCheckListRotate: Check says whether a node can open every secret;
// Rotate seals what an old key sealed under the current one, after which
// the old key is not needed.
func TestCheckListRotate(t *testing.T) {
	ctx := t.Context()
	b := store.NewMem()
	old, _ := newTestKey(t)
	cur, _ := newTestKey(t)
	if err := New(b, Keys{}).Check(ctx); err != nil {
		t.Fatalf("Check without secrets or a key: %v", err)
	}
	s := New(b, Keys{Current: old})
	for _, n := range []string{"A", "B"} {
		if err := s.Put(ctx, n, []byte("value of "+n)); err != nil {
			t.Fatal(err)
		}
	}
	if err := New(b, Keys{}).Check(ctx); !errors.Is(err, ErrNoKey) {
		t.Fatalf("Check without a key: %v", err)
	}
	if err := New(b, Keys{Current: cur}).Check(ctx); !errors.Is(err, ErrWrongKey) {
		t.Fatalf("Check with another key: %v", err)
	}
	both := New(b, Keys{Current: cur, Previous: old})
	if err := both.Check(ctx); err != nil {
		t.Fatal(err)
	}
	if n, err := both.Rotate(ctx); err != nil || n != 2 {
		t.Fatalf("Rotate: %d, %v; want 2", n, err)
	}
	if n, err := both.Rotate(ctx); err != nil || n != 0 {
		t.Fatalf("Rotate again: %d, %v; want 0", n, err)
	}
	curOnly := New(b, Keys{Current: cur})
	if err := curOnly.Check(ctx); err != nil {
		t.Fatalf("Check with the current key only, after Rotate: %v", err)
	}
	infos, err := curOnly.List(ctx)
	if err != nil || len(infos) != 2 || infos[0].Name != "A" || infos[0].Key != cur.ID() || !infos[1].Opens {
		t.Fatalf("List: %+v, %v", infos, err)
	}
	if got, err := curOnly.Get(ctx, "B"); err != nil || string(got) != "value of B" {
		t.Fatalf("after Rotate: %q, %v", got, err)
	}
	if err := curOnly.Delete(ctx, "A"); err != nil {
		t.Fatal(err)
	}
	if _, err := curOnly.Get(ctx, "A"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("after Delete: %v", err)
	}
}

// counting counts a bucket's reads.
type counting struct {
	store.Bucket
	gets, lists int
}

func (c *counting) Get(ctx context.Context, key string) ([]byte, string, error) {
	c.gets++
	return c.Bucket.Get(ctx, key)
}

func (c *counting) List(ctx context.Context, prefix string) ([]string, error) {
	c.lists++
	return c.Bucket.List(ctx, prefix)
}

// TestMissingNamesCostNothing: a guest asking for many names that do not
// exist gets ErrNotFound for each from one listing, with no read and
// nothing kept; a secret that exists is read once per cacheFor.
func TestMissingNamesCostNothing(t *testing.T) {
	k, _ := newTestKey(t)
	b := &counting{Bucket: store.NewMem()}
	if err := New(b, Keys{Current: k}).Put(t.Context(), "REAL", []byte("v")); err != nil {
		t.Fatal(err)
	}
	s := New(b, Keys{Current: k})
	for i := range 1000 {
		if _, err := s.Get(t.Context(), "NOPE_"+strconv.Itoa(i)); !errors.Is(err, ErrNotFound) {
			t.Fatal(err)
		}
	}
	for range 10 {
		if v, err := s.Get(t.Context(), "REAL"); err != nil || string(v) != "v" {
			t.Fatalf("REAL: %q, %v", v, err)
		}
	}
	if b.lists != 1 || b.gets != 1 || len(s.cache) != 1 {
		t.Fatalf("%d lists, %d gets, %d values kept; want 1, 1, 1", b.lists, b.gets, len(s.cache))
	}
}
