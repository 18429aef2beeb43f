package store

import (
	"fmt"
	"strings"
)

// MaxKeyLen is the longest key, in bytes.
const MaxKeyLen = 1024

// MaxNameLen is the longest name, in bytes, that callers should pass to
// [EscapeSegment] for a key segment: its escape is at most 3*MaxNameLen
// bytes, which leaves room for the rest of a key within [MaxKeyLen].
const MaxNameLen = 255

// keyByte reports whether c may appear in a key segment.
func keyByte(c byte) bool {
	switch {
	case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z', '0' <= c && c <= '9':
		return true
	}
	switch c {
	case '.', '_', '~', '-', '%':
		return true
	}
	return false
}

// ValidKey returns nil if key is a valid key, and otherwise an error
// wrapping [ErrInvalidKey] that says why.
//
// A key is one or more segments joined by '/'. A segment is a non-empty
// string of the bytes [A-Za-z0-9._~%-] other than "." and "..". A key is at
// most [MaxKeyLen] bytes long. So a key has no leading, trailing or doubled
// '/', and no byte outside ASCII.
func ValidKey(key string) error {
	if key == "" {
		return fmt.Errorf("%w: empty", ErrInvalidKey)
	}
	if len(key) > MaxKeyLen {
		return fmt.Errorf("%w: %d bytes, more than %d", ErrInvalidKey, len(key), MaxKeyLen)
	}
	start := 0
	for i := 0; i <= len(key); i++ {
		if i < len(key) && key[i] != '/' {
			if !keyByte(key[i]) {
				return fmt.Errorf("%w: %q: byte %#x at %d", ErrInvalidKey, key, key[i], i)
			}
			continue
		}
		switch seg := key[start:i]; seg {
		case "":
			return fmt.Errorf("%w: %q: empty segment at %d", ErrInvalidKey, key, start)
		case ".", "..":
			return fmt.Errorf("%w: %q: segment %q", ErrInvalidKey, key, seg)
		}
		start = i + 1
	}
	return nil
}

// ValidPrefix returns nil if prefix can begin a valid key (the empty
// prefix can), and otherwise an error wrapping [ErrInvalidKey].
//
// Every complete segment of prefix (those followed by '/') must be valid;
// the last, partial one may be empty, "." or "..", since "a/.." begins
// "a/..b".
func ValidPrefix(prefix string) error {
	if prefix == "" {
		return nil
	}
	if len(prefix) > MaxKeyLen {
		return fmt.Errorf("%w: prefix of %d bytes, more than %d", ErrInvalidKey, len(prefix), MaxKeyLen)
	}
	dir, last := "", prefix
	if i := strings.LastIndexByte(prefix, '/'); i >= 0 {
		dir, last = prefix[:i], prefix[i+1:]
	}
	if dir != "" || last != prefix {
		if err := ValidKey(dir); err != nil {
			return fmt.Errorf("%w: prefix %q", ErrInvalidKey, prefix)
		}
	}
	for i := 0; i < len(last); i++ {
		if !keyByte(last[i]) {
			return fmt.Errorf("%w: prefix %q: byte %#x", ErrInvalidKey, prefix, last[i])
		}
	}
	return nil
}

const upperHex = "0123456789ABCDEF"

// plainByte reports whether EscapeSegment copies c unchanged.
func plainByte(c byte) bool { return c != '%' && keyByte(c) }

// EscapeSegment turns any non-empty string into a valid key segment,
// reversibly: UnescapeSegment(EscapeSegment(s)) == s, and distinct strings
// give distinct segments. Use it for every user-chosen name (room names,
// class names) that becomes part of a key.
//
// Bytes of [A-Za-z0-9._~-] are kept; every other byte, '%' included,
// becomes "%XX" (upper-case hex), and the names "." and ".." become "%2E"
// and "%2E%2E". The result is at most three times as long as s, so a name
// of up to [MaxNameLen] bytes escapes to at most 765. The empty string
// escapes to itself, which is not a valid segment.
func EscapeSegment(s string) string {
	if s == "." || s == ".." {
		return strings.Repeat("%2E", len(s))
	}
	n := 0
	for i := 0; i < len(s); i++ {
		if !plainByte(s[i]) {
			n++
		}
	}
	if n == 0 {
		return s
	}
	b := make([]byte, 0, len(s)+2*n)
	for i := 0; i < len(s); i++ {
		c := s[i]
		if plainByte(c) {
			b = append(b, c)
			continue
		}
		b = append(b, '%', upperHex[c>>4], upperHex[c&15])
	}
	return string(b)
}

// UnescapeSegment reverses [EscapeSegment]. It accepts only what
// EscapeSegment produces (upper-case hex, no escape of a byte that is kept
// as is, no '/'), so that each name has exactly one segment; anything else
// gives an error wrapping [ErrInvalidKey].
func UnescapeSegment(seg string) (string, error) {
	if seg == "" {
		return "", fmt.Errorf("%w: empty segment", ErrInvalidKey)
	}
	if !strings.Contains(seg, "%") {
		if err := ValidKey(seg); err != nil || strings.Contains(seg, "/") {
			return "", fmt.Errorf("%w: %q is not an escaped segment", ErrInvalidKey, seg)
		}
		return seg, nil
	}
	b := make([]byte, 0, len(seg))
	for i := 0; i < len(seg); i++ {
		c := seg[i]
		if c != '%' {
			if !plainByte(c) {
				return "", fmt.Errorf("%w: %q: byte %#x", ErrInvalidKey, seg, c)
			}
			b = append(b, c)
			continue
		}
		if i+2 >= len(seg) {
			return "", fmt.Errorf("%w: %q: truncated escape", ErrInvalidKey, seg)
		}
		hi, lo := unhex(seg[i+1]), unhex(seg[i+2])
		if hi < 0 || lo < 0 {
			return "", fmt.Errorf("%w: %q: bad escape %q", ErrInvalidKey, seg, seg[i:i+3])
		}
		b = append(b, byte(hi<<4|lo))
		i += 2
	}
	s := string(b)
	if EscapeSegment(s) != seg {
		return "", fmt.Errorf("%w: %q is not in canonical escaped form", ErrInvalidKey, seg)
	}
	return s, nil
}

// unhex decodes one upper-case hex digit, or returns -1.
func unhex(c byte) int {
	switch {
	case '0' <= c && c <= '9':
		return int(c - '0')
	case 'A' <= c && c <= 'F':
		return int(c - 'A' + 10)
	}
	return -1
}
