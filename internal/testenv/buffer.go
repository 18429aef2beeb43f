package testenv

import (
	"bytes"
	"sync"
)

// Buffer collects what a child process or a logger writes while it runs,
// for a test to read at any moment. With Limit > 0 it keeps only the first
// Limit bytes (and still takes every write whole).
type Buffer struct {
	Limit int

	mu sync.Mutex
	b  bytes.Buffer
}

// Write implements io.Writer.
func (b *Buffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.Limit <= 0 {
		return b.b.Write(p)
	}
	if room := b.Limit - b.b.Len(); room > 0 {
		b.b.Write(p[:min(len(p), room)])
	}
	return len(p), nil
}

// String returns what was written so far.
func (b *Buffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
}
