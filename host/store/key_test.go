package store_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/wasmkeep/wasmkeep/host/store"
)

func TestValidKey(t *testing.T) {
	good := []string{
		"a", "A", "0", "a/b", "a.b", "..a", "a..", "...", "%", "%zz", "~_-.",
		"rooms/chat/lobby%20one/state", strings.Repeat("k", store.MaxKeyLen),
		strings.Repeat("a/", store.MaxKeyLen/2-1) + "a",
	}
	for _, k := range good {
		if err := store.ValidKey(k); err != nil {
			t.Errorf("ValidKey(%q) = %v, want nil", k, err)
		}
	}
	bad := []string{
		"", "/", "a/", "/a", "a//b", ".", "..", "a/.", "a/..", "./a", "../a", "a/./b",
		"a b", "a\tb", "a@b", "a+b", "a:b", "a*b", "é", "a\x00", "a\\b",
		strings.Repeat("k", store.MaxKeyLen+1),
	}
	for _, k := range bad {
		if err := store.ValidKey(k); !errors.Is(err, store.ErrInvalidKey) {
			t.Errorf("ValidKey(%q) = %v, want ErrInvalidKey", k, err)
		}
	}
}

func TestValidPrefix(t *testing.T) {
	for _, p := range []string{"", "a", "a/", "a/b", "a/.", "a/..", ".", "..", "a/b/"} {
		if err := store.ValidPrefix(p); err != nil {
			t.Errorf("ValidPrefix(%q) = %v, want nil", p, err)
		}
	}
	for _, p := range []string{"/", "/a", "a//", "./", "../", "a/../", "a b", "@", strings.Repeat("p", store.MaxKeyLen+1)} {
		if err := store.ValidPrefix(p); !errors.Is(err, store.ErrInvalidKey) {
			t.Errorf("ValidPrefix(%q) = %v, want ErrInvalidKey", p, err)
		}
	}
}

func TestEscapeSegment(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"lobby", "lobby"},
		{"Lobby-1_x~y.z", "Lobby-1_x~y.z"},
		{"a b", "a%20b"},
		{"a/b", "a%2Fb"},
		{"%", "%25"},
		{"%25", "%2525"},
		{".", "%2E"},
		{"..", "%2E%2E"},
		{"...", "..."},
		{".a", ".a"},
		{"é", "%C3%A9"},
		{"@", "%40"},
		{"+", "%2B"},
		{"\x00", "%00"},
	} {
		got := store.EscapeSegment(tc.in)
		if got != tc.want {
			t.Errorf("EscapeSegment(%q) = %q, want %q", tc.in, got, tc.want)
		}
		back, err := store.UnescapeSegment(got)
		if err != nil || back != tc.in {
			t.Errorf("UnescapeSegment(%q) = %q, %v; want %q", got, back, err, tc.in)
		}
	}
	if got := store.EscapeSegment(strings.Repeat("\xff", store.MaxNameLen)); len(got) != 3*store.MaxNameLen {
		t.Errorf("escape of %d bytes is %d bytes, want %d", store.MaxNameLen, len(got), 3*store.MaxNameLen)
	}
}

func TestUnescapeSegmentRejects(t *testing.T) {
	for _, s := range []string{
		"", ".", "..", "a/b", "a b", "%", "%2", "%2e", "%41", "%zz", "%2E%2E%2E", "a%2", "é", "%2e%2e",
	} {
		if got, err := store.UnescapeSegment(s); !errors.Is(err, store.ErrInvalidKey) {
			t.Errorf("UnescapeSegment(%q) = %q, %v; want ErrInvalidKey", s, got, err)
		}
	}
}

func FuzzEscapeSegment(f *testing.F) {
	for _, s := range []string{"lobby", ".", "..", "%", "a/b", "日本", "\xff", "%2E"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		esc := store.EscapeSegment(s)
		if s == "" {
			if esc != "" {
				t.Fatalf("EscapeSegment(\"\") = %q", esc)
			}
			return
		}
		// Check it as a key when it fits in one (names of up to
		// MaxNameLen bytes always do).
		if len(s) <= store.MaxNameLen || len(esc) <= store.MaxKeyLen {
			if err := store.ValidKey(esc); err != nil || strings.Contains(esc, "/") {
				t.Fatalf("EscapeSegment(%q) = %q is not a segment: %v", s, esc, err)
			}
		}
		if len(esc) > 3*len(s) {
			t.Fatalf("EscapeSegment(%q) = %q is more than 3x longer", s, esc)
		}
		back, err := store.UnescapeSegment(esc)
		if err != nil || back != s {
			t.Fatalf("UnescapeSegment(EscapeSegment(%q)) = %q, %v", s, back, err)
		}
		// Unescape accepts only canonical forms, so it is injective too.
		if u, err := store.UnescapeSegment(s); err == nil && store.EscapeSegment(u) != s {
			t.Fatalf("UnescapeSegment(%q) = %q, which escapes to %q", s, u, store.EscapeSegment(u))
		}
	})
}
