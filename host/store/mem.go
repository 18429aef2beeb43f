package store

import (
	"context"
	"slices"
	"strconv"
	"strings"
	"sync"
)

// Mem is a [Bucket] in memory, for tests and simulations. The zero value is
// an empty bucket ready to use; a Mem must not be copied after first use.
//
// Its ETags are the decimal values of one counter shared by all keys, so an
// ETag is never reused, not even after a Delete. Mem never returns
// ErrConflict or ErrUnknownOutcome; wrap it with [WithFaults] for those.
type Mem struct {
	mu   sync.Mutex
	objs map[string]memObject
	seq  uint64
}

type memObject struct {
	body []byte
	etag string
}

var _ Bucket = (*Mem)(nil)

// NewMem returns an empty Mem.
func NewMem() *Mem { return &Mem{} }

// Get implements [Bucket].
func (m *Mem) Get(ctx context.Context, key string) ([]byte, string, error) {
	if err := ValidKey(key); err != nil {
		return nil, "", opError("get", key, err)
	}
	if err := ctx.Err(); err != nil {
		return nil, "", opError("get", key, err)
	}
	m.mu.Lock()
	o, ok := m.objs[key]
	m.mu.Unlock()
	if !ok {
		return nil, "", opError("get", key, ErrNotFound)
	}
	// Stored bodies are never modified in place, so copying outside the
	// lock is safe.
	return slices.Clone(o.body), o.etag, nil
}

// Put implements [Bucket].
func (m *Mem) Put(ctx context.Context, key string, body []byte, cond Cond) (string, error) {
	if err := ValidKey(key); err != nil {
		return "", opError("put", key, err)
	}
	if err := cond.Validate(); err != nil {
		return "", opError("put", key, err)
	}
	if err := ctx.Err(); err != nil {
		return "", opError("put", key, err)
	}
	body = append(make([]byte, 0, len(body)), body...)
	m.mu.Lock()
	defer m.mu.Unlock()
	o, ok := m.objs[key]
	if err := checkCond(cond, ok, o.etag); err != nil {
		return "", opError("put", key, err)
	}
	if m.objs == nil {
		m.objs = make(map[string]memObject)
	}
	m.seq++
	etag := strconv.FormatUint(m.seq, 10)
	m.objs[key] = memObject{body: body, etag: etag}
	return etag, nil
}

// Delete implements [Bucket].
func (m *Mem) Delete(ctx context.Context, key string, ifMatch string) error {
	if err := ValidKey(key); err != nil {
		return opError("delete", key, err)
	}
	if err := ctx.Err(); err != nil {
		return opError("delete", key, err)
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	o, ok := m.objs[key]
	if ifMatch != "" {
		if err := checkCond(Cond{IfMatch: ifMatch}, ok, o.etag); err != nil {
			return opError("delete", key, err)
		}
	}
	delete(m.objs, key)
	return nil
}

// List implements [Bucket].
func (m *Mem) List(ctx context.Context, prefix string) ([]string, error) {
	if err := ValidPrefix(prefix); err != nil {
		return nil, opError("list", prefix, err)
	}
	if err := ctx.Err(); err != nil {
		return nil, opError("list", prefix, err)
	}
	m.mu.Lock()
	keys := make([]string, 0)
	for k := range m.objs {
		if strings.HasPrefix(k, prefix) {
			keys = append(keys, k)
		}
	}
	m.mu.Unlock()
	slices.Sort(keys)
	return keys, nil
}

// ListPage implements [Bucket].
func (m *Mem) ListPage(ctx context.Context, prefix, after string, limit int) ([]Entry, bool, error) {
	keys, err := m.List(ctx, prefix)
	if err != nil {
		return nil, false, err
	}
	page, more := pageOf(keys, after, limit)
	entries := make([]Entry, 0, len(page))
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, k := range page {
		if o, ok := m.objs[k]; ok { // not deleted meanwhile
			entries = append(entries, Entry{Key: k, ETag: o.etag})
		}
	}
	return entries, more, nil
}
