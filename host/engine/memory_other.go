//go:build !linux

package engine

import (
	"os"

	"github.com/tetratelabs/wazero/experimental"

	"github.com/wasmkeep/wasmkeep/host/engine/wasmrw"
)

// Instances keep their memory on the Go heap: the mapped backends are
// linux's.
const defaultMemoryBackend = memoryHeap

func newMappedMemory(uint64, []wasmrw.DataSegment) experimental.LinearMemory { return nil }

func (c *Class) imageMemory(_, _ uint64) experimental.LinearMemory { return nil }

func (c *Class) releaseMemoryImage() {}

// trimMemory has nothing to give back: a memory on the Go heap is
// returned by the garbage collector.
func (i *Instance) trimMemory() {}

// mapImage: memories on the Go heap cannot map a file.
func (i *Instance) mapImage([]byte, *os.File) error { return ErrNoImage }
