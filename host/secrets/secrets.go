// Package secrets keeps an app's secrets (API keys, tokens) in the bucket,
// encrypted at rest, for rooms and fronts to read by name.
//
// Each secret is one object, secrets/<name>, whose body is an envelope:
// a version byte, the id of the key that sealed it (the first 8 bytes of
// the SHA-256 of the key), a 12-byte random nonce, and the value sealed
// with AES-256-GCM under that key, with the secret's name as additional
// data (so a body copied to another name does not open). The key itself
// is given to each node (a flag, the environment or a file) and is never
// written to the bucket or the data directory.
//
// A node may hold a previous key besides the current one: it opens what
// either sealed, and Rotate seals every secret anew under the current
// key, after which the previous key can go.
package secrets

import (
	"context"
	"crypto/aes"
	"crypto/cipher"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/wasmkeep/wasmkeep/abi"
	"github.com/wasmkeep/wasmkeep/host/store"
)

// KeySize is the size of a key: AES-256.
const KeySize = 32

// MaxValue bounds a secret's value.
const MaxValue = 64 << 10

// prefix is where secrets live in the bucket.
const prefix = "secrets/"

// Errors.
var (
	// ErrNoKey: secrets exist but the node was given no key.
	ErrNoKey = errors.New("secrets: the app has secrets but this node has no key (--secrets-key or --secrets-key-file)")
	// ErrWrongKey: a secret was sealed under a key the node does not hold.
	ErrWrongKey = errors.New("secrets: a secret was sealed under a key this node does not hold (--secrets-key, --secrets-key-previous)")
	// ErrNotFound: no secret of that name.
	ErrNotFound = errors.New("secrets: no such secret")
	// ErrName: a name that is not one.
	ErrName = errors.New("secrets: a name is 1 to 128 letters, digits and underscores, not starting with a digit")
	// ErrTooLarge: a value over MaxValue.
	ErrTooLarge = fmt.Errorf("secrets: a value is at most %d bytes", MaxValue)
)

// ValidName returns ErrName unless name is a secret's name
// (abi.ValidSecretName).
func ValidName(name string) error {
	if !abi.ValidSecretName(name) {
		return fmt.Errorf("%w: %q", ErrName, name)
	}
	return nil
}

// Key is an AES-256 key.
type Key struct {
	aead cipher.AEAD
	id   [8]byte
}

// ParseKey decodes a key from base64 (standard or URL alphabet, padded
// or not) of exactly KeySize bytes; surrounding white space is ignored.
func ParseKey(s string) (*Key, error) {
	s = strings.TrimSpace(s)
	var raw []byte
	for _, enc := range []*base64.Encoding{base64.StdEncoding, base64.RawStdEncoding, base64.URLEncoding, base64.RawURLEncoding} {
		if b, err := enc.DecodeString(s); err == nil {
			raw = b
			break
		}
	}
	if raw == nil {
		return nil, errors.New("secrets: a key is base64 of 32 bytes (openssl rand -base64 32); this is not base64")
	}
	if len(raw) != KeySize {
		return nil, fmt.Errorf("secrets: a key is base64 of 32 bytes (openssl rand -base64 32); this decodes to %d", len(raw))
	}
	return newKey(raw)
}

// ReadKeyFile reads a key from a file that holds it in base64.
func ReadKeyFile(path string) (*Key, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("secrets: reading the key file: %w", err)
	}
	k, err := ParseKey(string(b))
	if err != nil {
		return nil, fmt.Errorf("%w (in %s)", err, path)
	}
	return k, nil
}

func newKey(raw []byte) (*Key, error) {
	block, err := aes.NewCipher(raw)
	if err != nil {
		return nil, err
	}
	aead, err := cipher.NewGCM(block)
	if err != nil {
		return nil, err
	}
	k := &Key{aead: aead}
	sum := sha256.Sum256(raw)
	copy(k.id[:], sum[:8])
	return k, nil
}

// ID is the key's id as secrets list it: hex of its first 8 bytes of
// SHA-256, which says which key sealed a secret without saying the key.
func (k *Key) ID() string { return hex.EncodeToString(k.id[:]) }

// Envelope layout.
const (
	envelopeVersion = 1
	nonceSize       = 12
	headerSize      = 1 + 8 + nonceSize
)

// seal seals value for name under k.
func (k *Key) seal(name string, value []byte) []byte {
	out := make([]byte, headerSize, headerSize+len(value)+k.aead.Overhead())
	out[0] = envelopeVersion
	copy(out[1:9], k.id[:])
	if _, err := rand.Read(out[9:headerSize]); err != nil {
		panic(err) // crypto/rand does not fail on supported systems
	}
	return k.aead.Seal(out, out[9:headerSize], value, []byte(name))
}

// keyIDOf returns the id of the key that sealed body.
func keyIDOf(body []byte) (string, error) {
	if len(body) < headerSize || body[0] != envelopeVersion {
		return "", errors.New("secrets: not a sealed secret")
	}
	return hex.EncodeToString(body[1:9]), nil
}

// Keys are the keys a node holds: the current one seals, both open.
type Keys struct {
	Current  *Key
	Previous *Key
}

// open opens body, the sealed value of name.
func (ks Keys) open(name string, body []byte) ([]byte, error) {
	id, err := keyIDOf(body)
	if err != nil {
		return nil, err
	}
	for _, k := range []*Key{ks.Current, ks.Previous} {
		if k == nil || k.ID() != id {
			continue
		}
		v, err := k.aead.Open(nil, body[9:headerSize], body[headerSize:], []byte(name))
		if err != nil {
			return nil, fmt.Errorf("secrets: %s does not open under key %s: damaged, or sealed for another name", name, id)
		}
		return v, nil
	}
	if ks.Current == nil {
		return nil, ErrNoKey
	}
	return nil, fmt.Errorf("%w: %s is sealed under key %s", ErrWrongKey, name, id)
}

// cacheFor is how long a value read from the bucket, and the list of
// which secrets exist, are used before they are read again: what a secret
// changed through another node takes at most to reach this one.
const cacheFor = 10 * time.Second

// Store reads and writes secrets in a bucket.
type Store struct {
	bucket store.Bucket
	keys   Keys
	now    func() time.Time

	mu      sync.Mutex
	names   map[string]bool // the secrets that exist, as listed at namesAt
	namesAt time.Time
	cache   map[string]cached // values of secrets that exist
}

type cached struct {
	value []byte
	at    time.Time
}

// New returns the secrets of bucket, opened with keys (none: the node
// can list and remove secrets, not read or write them).
func New(bucket store.Bucket, keys Keys) *Store {
	return &Store{bucket: bucket, keys: keys, now: time.Now, cache: map[string]cached{}}
}

func key(name string) string { return prefix + name }

// Put seals value under the current key and stores it as name.
func (s *Store) Put(ctx context.Context, name string, value []byte) error {
	if err := ValidName(name); err != nil {
		return err
	}
	if len(value) > MaxValue {
		return ErrTooLarge
	}
	if s.keys.Current == nil {
		return errors.New("secrets: this node has no key to seal with (--secrets-key or --secrets-key-file)")
	}
	if _, err := s.bucket.Put(ctx, key(name), s.keys.Current.seal(name, value), store.Cond{}); err != nil {
		return err
	}
	s.forget(name, true)
	return nil
}

// Get returns the value of name: from memory if it was read in the last
// cacheFor, else from the bucket. Which secrets exist is listed once per
// cacheFor too, so names that do not exist, however many a guest asks
// for, cost neither a bucket request each nor memory: ErrNotFound.
func (s *Store) Get(ctx context.Context, name string) ([]byte, error) {
	if err := ValidName(name); err != nil {
		return nil, err
	}
	now := s.now()
	s.mu.Lock()
	c, ok := s.cache[name]
	listed := now.Sub(s.namesAt) < cacheFor
	exists := s.names[name]
	s.mu.Unlock()
	if ok && now.Sub(c.at) < cacheFor {
		return c.value, nil
	}
	if !listed {
		var err error
		if exists, err = s.relist(ctx, name); err != nil {
			return nil, err
		}
	}
	if !exists {
		return nil, ErrNotFound
	}
	body, _, err := s.bucket.Get(ctx, key(name))
	if errors.Is(err, store.ErrNotFound) {
		return nil, ErrNotFound // removed since the listing
	}
	if err != nil {
		return nil, err
	}
	value, err := s.keys.open(name, body)
	if err != nil {
		return nil, err
	}
	if value == nil {
		value = []byte{}
	}
	s.mu.Lock()
	s.cache[name] = cached{value: value, at: now}
	s.mu.Unlock()
	return value, nil
}

// relist lists which secrets exist, drops the values of those that do
// not any more, and reports whether name exists.
func (s *Store) relist(ctx context.Context, name string) (bool, error) {
	keys, err := s.bucket.List(ctx, prefix)
	if err != nil {
		return false, err
	}
	names := make(map[string]bool, len(keys))
	for _, k := range keys {
		names[strings.TrimPrefix(k, prefix)] = true
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.names, s.namesAt = names, s.now()
	for n := range s.cache {
		if !names[n] {
			delete(s.cache, n)
		}
	}
	return names[name], nil
}

// Delete removes name; a missing one is not an error.
func (s *Store) Delete(ctx context.Context, name string) error {
	if err := ValidName(name); err != nil {
		return err
	}
	err := s.bucket.Delete(ctx, key(name), "")
	s.forget(name, false)
	return err
}

// forget drops the value of name kept in memory after a write of it, and
// notes whether it exists now.
func (s *Store) forget(name string, exists bool) {
	s.mu.Lock()
	delete(s.cache, name)
	if s.names != nil {
		if exists {
			s.names[name] = true
		} else {
			delete(s.names, name)
		}
	}
	s.mu.Unlock()
}

// Info describes a stored secret, without its value.
type Info struct {
	Name string `json:"name"`
	// Key is the id of the key that sealed it (Key.ID).
	Key string `json:"key"`
	// Opens says whether this node can open it.
	Opens bool `json:"opens"`
}

// each calls fn with every secret's name, sealed body and ETag, in the
// order of their keys, until fn returns an error.
func (s *Store) each(ctx context.Context, fn func(name string, body []byte, etag string) error) error {
	keys, err := s.bucket.List(ctx, prefix)
	if err != nil {
		return err
	}
	for _, k := range keys {
		name := strings.TrimPrefix(k, prefix)
		if ValidName(name) != nil {
			continue // not ours
		}
		body, etag, err := s.bucket.Get(ctx, k)
		if errors.Is(err, store.ErrNotFound) {
			continue // removed meanwhile
		}
		if err != nil {
			return err
		}
		if err := fn(name, body, etag); err != nil {
			return err
		}
	}
	return nil
}

// List describes every secret, sorted by name.
func (s *Store) List(ctx context.Context) ([]Info, error) {
	var out []Info
	err := s.each(ctx, func(name string, body []byte, _ string) error {
		id, err := keyIDOf(body)
		if err != nil {
			id = "?"
		}
		_, err = s.keys.open(name, body)
		out = append(out, Info{Name: name, Key: id, Opens: err == nil})
		return nil
	})
	if err != nil {
		return nil, err
	}
	if out == nil {
		out = []Info{}
	}
	slices.SortFunc(out, func(a, b Info) int { return strings.Compare(a.Name, b.Name) })
	return out, nil
}

// Check is nil if this node can open every secret (or there are none),
// else why not: ErrNoKey, ErrWrongKey, or the bucket's error.
func (s *Store) Check(ctx context.Context) error {
	return s.each(ctx, func(name string, body []byte, _ string) error {
		_, err := s.keys.open(name, body)
		return err
	})
}

// Rotate seals every secret sealed under another key anew under the
// current one, each with a conditional write (a secret changed meanwhile
// is left as it was written); it returns how many it sealed anew.
func (s *Store) Rotate(ctx context.Context) (int, error) {
	if s.keys.Current == nil {
		return 0, errors.New("secrets: this node has no key to seal with (--secrets-key or --secrets-key-file)")
	}
	n := 0
	err := s.each(ctx, func(name string, body []byte, etag string) error {
		if id, _ := keyIDOf(body); id == s.keys.Current.ID() {
			return nil
		}
		value, err := s.keys.open(name, body)
		if err != nil {
			return err
		}
		_, err = s.bucket.Put(ctx, key(name), s.keys.Current.seal(name, value), store.IfMatch(etag))
		if err != nil && !errors.Is(err, store.ErrPrecondition) {
			return err
		}
		if err == nil {
			n++
		}
		s.forget(name, true)
		return nil
	})
	return n, err
}
