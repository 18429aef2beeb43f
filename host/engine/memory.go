package engine

import (
	"context"

	"github.com/tetratelabs/wazero/experimental"
)

// withMemory gives an instantiation the class's memory allocator: its
// first allocation reserves room for the memory size the class's rooms
// reached lately, so that the grow a restore does first (from the module's
// initial size to the snapshot's) is a reslice, not a copy of the whole
// memory. wazero's own allocator copies on every grow past its capacity.
func (c *Class) withMemory(ctx context.Context) context.Context {
	return experimental.WithMemoryAllocator(ctx, experimental.MemoryAllocatorFunc(func(capBytes, maxBytes uint64) experimental.LinearMemory {
		reserve := min(max(capBytes, c.memoryHint.Load()), maxBytes)
		return &linearMemory{buf: make([]byte, 0, reserve), max: maxBytes}
	}))
}

// linearMemory is a guest's memory on the Go heap with spare capacity.
type linearMemory struct {
	buf []byte
	max uint64
}

// Reallocate implements experimental.LinearMemory. Bytes past the old
// length are zero: the capacity was zeroed when allocated and wasm never
// writes past its memory's length.
func (m *linearMemory) Reallocate(size uint64) []byte {
	if size > m.max {
		return nil
	}
	if size <= uint64(cap(m.buf)) {
		m.buf = m.buf[:size]
		return m.buf
	}
	next := min(max(size, uint64(cap(m.buf))*5/4), m.max)
	nb := make([]byte, size, next)
	copy(nb, m.buf)
	m.buf = nb
	return nb
}

// Free implements experimental.LinearMemory.
func (m *linearMemory) Free() { m.buf = nil }
