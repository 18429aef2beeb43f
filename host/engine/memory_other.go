//go:build !linux

package engine

import (
	"os"
	"time"

	"github.com/tetratelabs/wazero/experimental"

	"github.com/wasmkeep/wasmkeep/host/engine/wasmrw"
	"github.com/wasmkeep/wasmkeep/host/snapshot"
)

// Instances keep their memory on the Go heap: the mapped backends are
// linux's.
const defaultMemoryBackend = memoryHeap

func newMappedMemory(uint64, []wasmrw.DataSegment) experimental.LinearMemory { return nil }

func (c *Class) imageMemory(_, _ uint64) experimental.LinearMemory { return nil }

func (c *Class) releaseMemoryImage() {}

// spareMemory: no memory is kept after its instance closes off linux.
func (c *Class) spareMemory(*snapshot.Manifest) spareMemory { return nil }

// DropSpares releases the spare memories kept longer than age ago: off
// linux there are none.
func (e *Engine) DropSpares(age time.Duration) int { return 0 }

func (e *Engine) spares() int { return 0 }

// trimMemory has nothing to give back: a memory on the Go heap is
// returned by the garbage collector.
func (i *Instance) trimMemory() {}

// mapImage: memories on the Go heap cannot map a file.
func (i *Instance) mapImage([]byte, *os.File) error { return ErrNoImage }

// pagesSince: without tracked writes, the encoder hashes every page.
func (i *Instance) pagesSince([]byte, []uint64) []uint64 { return nil }
