package engine

import (
	"context"
	"sync/atomic"

	"github.com/tetratelabs/wazero/experimental"

	"github.com/wasmkeep/wasmkeep/host/engine/wasmrw"
)

// memoryBackend is where instances keep their linear memory. Whatever the
// backend, the allocator also writes the data segments the rewriter lifted
// out of the module (wasmrw.Info.Data): wazero no longer does.
type memoryBackend int32

const (
	// memoryHeap: a []byte on the Go heap with headroom (every platform).
	memoryHeap memoryBackend = iota
	// memoryMapped: an anonymous mapping the size of the memory's maximum,
	// made accessible as it grows (linux). Grow never copies, and pages the
	// guest never touches never become resident.
	memoryMapped
	// memoryImage: memoryMapped, with the class's initial memory mapped
	// copy-on-write from one file per class (linux), so that the pages no
	// instance writes (most of a Go module's data) exist once per class.
	memoryImage
	numMemoryBackends
)

func (b memoryBackend) String() string {
	switch b {
	case memoryHeap:
		return "heap"
	case memoryMapped:
		return "mmap"
	case memoryImage:
		return "image"
	}
	return "unknown"
}

// memoryBackendSetting is the backend new instances get; tests switch it to
// compare backends.
var memoryBackendSetting atomic.Int32

func init() { memoryBackendSetting.Store(int32(defaultMemoryBackend)) }

// spareMemory is a memory an instance of the class closed with, made
// ready for a restore (spare_linux.go).
type spareMemory interface {
	experimental.LinearMemory
	// fits reports whether the memory has the maximum wazero asks for.
	fits(maxBytes uint64) bool
	// release unmaps it.
	release()
}

// withMemory gives an instantiation the class's memory allocator. A backend
// that cannot allocate (no address space left, too many mappings, no
// memfd) falls back to the next simpler one: the Go heap always works. A
// spare memory (spare_linux.go), if given, is used instead.
func (c *Class) withMemory(ctx context.Context, spare spareMemory) context.Context {
	backend := memoryBackend(memoryBackendSetting.Load())
	data := c.info.Data
	return experimental.WithMemoryAllocator(ctx, experimental.MemoryAllocatorFunc(func(capBytes, maxBytes uint64) experimental.LinearMemory {
		if spare != nil {
			if spare.fits(maxBytes) {
				return spare
			}
			spare.release()
		}
		switch backend {
		case memoryImage:
			if m := c.imageMemory(capBytes, maxBytes); m != nil {
				return m
			}
			fallthrough
		case memoryMapped:
			if m := newMappedMemory(maxBytes, data); m != nil {
				return m
			}
		}
		return c.heapMemory(capBytes, maxBytes, data)
	}))
}

// writeData writes the lifted data segments into a memory of its initial
// size. The rewriter lifts only segments that fit.
func writeData(mem []byte, data []wasmrw.DataSegment) {
	for _, s := range data {
		if end := uint64(s.Offset) + uint64(len(s.Init)); end <= uint64(len(mem)) {
			copy(mem[s.Offset:end], s.Init)
		}
	}
}

// heapMemory's first allocation reserves room for the memory size the
// class's rooms reached lately, so that the grow a restore does first (from
// the module's initial size to the snapshot's) is a reslice, not a copy of
// the whole memory. wazero's own allocator copies on every grow past its
// capacity.
func (c *Class) heapMemory(capBytes, maxBytes uint64, data []wasmrw.DataSegment) *linearMemory {
	reserve := min(max(capBytes, c.memoryHint.Load()), maxBytes)
	return &linearMemory{buf: make([]byte, 0, reserve), max: maxBytes, data: data}
}

// linearMemory is a guest's memory on the Go heap with spare capacity.
type linearMemory struct {
	buf  []byte
	max  uint64
	data []wasmrw.DataSegment // written by the first Reallocate
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
	} else {
		next := min(max(size, uint64(cap(m.buf))*5/4), m.max)
		nb := make([]byte, size, next)
		copy(nb, m.buf)
		m.buf = nb
	}
	if m.data != nil {
		writeData(m.buf, m.data)
		m.data = nil
	}
	return m.buf
}

// Free implements experimental.LinearMemory.
func (m *linearMemory) Free() { m.buf = nil }
