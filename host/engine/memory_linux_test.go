package engine

import (
	"bytes"
	"context"
	"encoding/binary"
	"runtime"
	"testing"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/wasmkeep/wasmkeep/host/engine/wasmrw"
	"github.com/wasmkeep/wasmkeep/internal/limits"
	"github.com/wasmkeep/wasmkeep/internal/testwasm"
)

// mapped reports whether the page at p is mapped.
func mapped(p unsafe.Pointer) bool {
	return unix.Msync(unsafe.Slice((*byte)(p), osPageSize), unix.MS_ASYNC) != unix.ENOMEM
}

func TestMappedMemory(t *testing.T) {
	const max = 4 << 16
	data := []wasmrw.DataSegment{{Offset: 3, Init: []byte("abc")}, {Offset: 4, Init: []byte("X")}}
	lm := newMappedMemory(max, data)
	if lm == nil {
		t.Fatal("no mapping")
	}
	m := lm.(*mappedMemory)
	buf := m.Reallocate(1 << 16)
	if len(buf) != 1<<16 || string(buf[:6]) != "\x00\x00\x00aXc" {
		t.Fatalf("first Reallocate: %d bytes, % x", len(buf), buf[:6])
	}
	buf[1<<16-1] = 7
	grown := m.Reallocate(3 << 16)
	if len(grown) != 3<<16 || &grown[0] != &buf[0] || grown[1<<16-1] != 7 || grown[2<<16] != 0 {
		t.Fatal("grow moved or lost the memory")
	}
	if string(grown[:6]) != "\x00\x00\x00aXc" {
		t.Fatal("data written again by a later Reallocate")
	}
	grown[3<<16-1] = 1
	if m.Reallocate(max+1) != nil {
		t.Fatal("Reallocate past the maximum succeeded")
	}
	if len(m.Reallocate(max)) != max {
		t.Fatal("Reallocate to the maximum failed")
	}
	base := m.base
	m.Free()
	if mapped(base) {
		t.Fatal("Free left the memory mapped")
	}
	m.Free() // a second Free does nothing
	if m.Reallocate(1<<16) != nil {
		t.Fatal("Reallocate after Free succeeded")
	}
}

// TestMappedMemoryCollected: a memory dropped without Free (its module was
// closed asynchronously and never called again) is unmapped once garbage.
func TestMappedMemoryCollected(t *testing.T) {
	lm := newMappedMemory(1<<16, nil)
	lm.Reallocate(1 << 16)[0] = 1
	base := lm.(*mappedMemory).base
	mine, _ := liveMappings.Load(base)
	lm = nil
	// The cleanup forgets the memory's entry, then unmaps it. Whether
	// base is still mapped cannot tell: once unmapped, any later mmap of
	// the process (wazero's code, the race detector's) may be placed there.
	deadline := time.Now().Add(10 * time.Second)
	for {
		if v, ok := liveMappings.Load(base); !ok || v != mine {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("a collected memory is still mapped")
		}
		runtime.GC()
		runtime.Gosched()
	}
}

func TestClassImage(t *testing.T) {
	e := newEngine(t, Config{PoolSize: limits.Off})
	c := compile(t, e, "./examples/counter")
	a := c.imageMemory(0, 64<<16)
	b := c.imageMemory(0, 64<<16)
	if a == nil || b == nil {
		t.Fatal("no image memory")
	}
	defer a.Free()
	defer b.Free()
	size := uint64(len(c.initial))
	ma, mb := a.Reallocate(size), b.Reallocate(size)
	if !bytes.Equal(ma, c.initial) || !bytes.Equal(mb, c.initial) {
		t.Fatal("an image memory differs from the class's initial memory")
	}
	first := c.info.Data[0].Offset
	ma[first]++
	if mb[first] != c.initial[first] {
		t.Fatal("a write to one image memory shows in another")
	}
	ma = a.Reallocate(size + 1<<16)
	if ma[first] != c.initial[first]+1 || ma[size] != 0 {
		t.Fatal("grow lost the memory")
	}

	// Once released, instances keep their mappings and new ones fall back
	// to plain mappings with the data written.
	c.releaseMemoryImage()
	c.releaseMemoryImage()
	if c.imageMemory(0, 64<<16) != nil {
		t.Fatal("image memory after release")
	}
	if ma[first] != c.initial[first]+1 || !bytes.Equal(mb, c.initial) {
		t.Fatal("release changed a mapped instance")
	}
	inst := startRoom(t, c)
	defer inst.Close()
	if got := request(t, inst, postRoot); got != "1" {
		t.Fatalf("after release: %q", got)
	}
}

// TestImageMemoryWithoutLiftedData: a class whose data the rewriter could
// not lift (here: none to lift) still gets a correct image.
func TestImageMemoryWithoutLiftedData(t *testing.T) {
	wasm := testwasm.Build(t, "./examples/counter")
	e := newEngine(t, Config{PoolSize: limits.Off})
	c, err := e.Compile(context.Background(), wasm)
	if err != nil {
		t.Fatal(err)
	}
	img := newClassImage(uint64(c.info.Memory.Min)<<16, nil)
	if img == nil {
		t.Fatal("no image")
	}
	defer img.close()
	m := img.newMemory(uint64(c.info.Memory.Min) << 16)
	defer m.Free()
	buf := m.Reallocate(uint64(c.info.Memory.Min) << 16)
	for i, b := range buf {
		if b != 0 {
			t.Fatalf("byte %d of an empty image is %d", i, b)
		}
	}
	if img.newMemory(uint64(c.info.Memory.Min)<<16-1) != nil {
		t.Fatal("an image larger than the memory's maximum was mapped")
	}
}

// privatePages counts the pages of view that the process has its own copy
// of.
func privatePages(t *testing.T, view []byte) int {
	t.Helper()
	f := pagemap()
	if f == nil {
		t.Skip("no /proc/self/pagemap")
	}
	ps := int(osPageSize)
	entries := make([]byte, 8*(len(view)/ps))
	if _, err := f.ReadAt(entries, int64(uintptr(unsafe.Pointer(&view[0]))/uintptr(ps)*8)); err != nil {
		t.Fatal(err)
	}
	n := 0
	for p := 0; p < len(entries); p += 8 {
		if private(binary.LittleEndian.Uint64(entries[p:])) {
			n++
		}
	}
	return n
}

// TestTrimMemory: trimming gives back private pages without changing what
// the guest sees, on every backend (on the heap, it does nothing).
func TestTrimMemory(t *testing.T) {
	forEachBackend(t, "./examples/counter", func(t *testing.T, b memoryBackend, c *Class) {
		inst := startRoom(t, c)
		defer inst.Close()
		request(t, inst, postRoot)
		// A snapshot reads every page.
		takeSnapshot(t, inst, nil)
		view, _ := inst.mem.Read(0, inst.mem.Size())
		// Start already trimmed; write 16 pages with what they hold,
		// as an initializer does, so the trim has private pages equal
		// to the image to give back.
		for p := range 16 {
			k := p * int(osPageSize)
			v := view[k]
			view[k] = v ^ 1
			view[k] = v
		}
		before, private := bytes.Clone(view), privatePages(t, view)
		inst.trimMemory()
		after := privatePages(t, view)
		t.Logf("%d pages, %d private before the trim, %d after", len(view)/int(osPageSize), private, after)
		if !bytes.Equal(view, before) {
			t.Fatal("the trim changed the memory")
		}
		if b != memoryHeap && after >= private {
			t.Fatal("the trim gave nothing back")
		}
		if got := request(t, inst, postRoot); got != "2" {
			t.Fatalf("after the trim: %q", got)
		}
		man, segs := takeSnapshot(t, inst, nil)
		restored, err := c.Restore(context.Background(), man, segs, &fakeHost{})
		if err != nil {
			t.Fatal(err)
		}
		defer restored.Close()
		if got := request(t, restored, postRoot); got != "3" {
			t.Fatalf("restored after the trim: %q", got)
		}
		inst.Close()
		inst.trimMemory() // a closed instance is left alone
	})
}

// TestMappingLimit: past the mappings vm.max_map_count allows, instances
// keep their memory on the Go heap rather than risk the Go runtime's own
// mappings.
func TestMappingLimit(t *testing.T) {
	e := newEngine(t, Config{PoolSize: limits.Off})
	c := compile(t, e, "./examples/counter")
	old := maxMapCount()
	t.Cleanup(func() { mapLimit.Store(old) })
	mapLimit.Store(1)
	if m := newMappedMemory(1<<16, nil); m != nil {
		m.Free()
		t.Fatal("a mapped memory past the mapping limit")
	}
	inst := startRoom(t, c)
	defer inst.Close()
	if got := request(t, inst, postRoot); got != "1" {
		t.Fatalf("on the heap: %q", got)
	}
	if _, ok := liveMappings.Load(unsafe.Pointer(unsafe.SliceData(must(inst.mem.Read(0, 1))))); ok {
		t.Fatal("the instance's memory is mapped")
	}
}

func must(b []byte, ok bool) []byte {
	if !ok {
		panic("memory read out of range")
	}
	return b
}

// forEachBackend runs f once per memory backend, on the guest pkg
// compiled by an engine with no pool.
func forEachBackend(t *testing.T, pkg string, f func(t *testing.T, b memoryBackend, c *Class)) {
	wasm := testwasm.Build(t, pkg)
	for b := range numMemoryBackends {
		t.Run(b.String(), func(t *testing.T) {
			setMemoryBackend(t, b)
			e := newEngine(t, Config{PoolSize: limits.Off})
			c, err := e.Compile(context.Background(), wasm)
			if err != nil {
				t.Fatal(err)
			}
			f(t, b, c)
		})
	}
}
