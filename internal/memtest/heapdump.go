package memtest

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"sort"
	"testing"
)

// ClassUse is what the live objects of one small size class hold of the
// Go heap. The runtime never moves an object, and a span (here one 8 KiB
// page) stays in use while any object in it lives, so a few survivors
// allocated among a burst's garbage keep whole pages: Held is that memory,
// which runtime.MemStats shows only as HeapInuse above HeapAlloc.
type ClassUse struct {
	Size    uint64 // the size class: every object in it takes this many bytes
	Objects int    // live objects
	Pages   int    // 8 KiB pages with at least one of them
}

// Live is the bytes the class's live objects take.
func (c ClassUse) Live() uint64 { return c.Size * uint64(c.Objects) }

// Held is the bytes of the class's pages that hold no live object.
func (c ClassUse) Held() uint64 { return uint64(c.Pages)*heapPage - c.Live() }

// heapPage is the runtime's page; maxOnePageClass is the largest size
// class whose spans are one page, the classes ClassUse can tell apart by
// address alone.
const (
	heapPage        = 8 << 10
	maxOnePageClass = 1024
)

// HeapUse collects garbage twice, writes a heap dump
// (debug.WriteHeapDump: the world stops while it is written, tens of MB
// for a busy test) into the test's temporary directory, and returns the
// small size classes (up to 1 KiB) by the memory their survivors hold,
// most first.
func HeapUse(tb testing.TB) []ClassUse {
	tb.Helper()
	runtime.GC()
	runtime.GC()
	path := filepath.Join(tb.TempDir(), "heap.dump")
	f, err := os.Create(path)
	if err != nil {
		tb.Fatal(err)
	}
	debug.WriteHeapDump(f.Fd())
	if _, err := f.Seek(0, io.SeekStart); err != nil {
		tb.Fatal(err)
	}
	use, err := readHeapDump(bufio.NewReaderSize(f, 1<<20))
	f.Close()
	if err != nil {
		tb.Fatal(err)
	}
	return use
}

// The records of the runtime's heap dump format (runtime/heapdump.go)
// that come before and among the objects; the first other one ends them.
const (
	dumpObject = 1
	dumpType   = 3
	dumpParams = 6
	dumpItab   = 8
)

const dumpHeader = "go1.7 heap dump\n"

var errHeapDump = errors.New("memtest: not a heap dump of this format")

// readHeapDump reads a dump's objects, which the runtime writes span by
// span, each as its address, its contents and its pointer fields.
func readHeapDump(r *bufio.Reader) ([]ClassUse, error) {
	hdr := make([]byte, len(dumpHeader))
	if _, err := io.ReadFull(r, hdr); err != nil || string(hdr) != dumpHeader {
		return nil, errHeapDump
	}
	var err error
	uvarint := func() uint64 {
		if err != nil {
			return 0
		}
		var v uint64
		v, err = binary.ReadUvarint(r)
		return v
	}
	skip := func(n uint64) {
		if err == nil {
			_, err = r.Discard(int(n))
		}
	}
	type class struct {
		objects int
		pages   map[uint64]bool
	}
	classes := map[uint64]*class{}
	for err == nil {
		switch tag := uvarint(); tag {
		case dumpParams: // byte order, pointer size, arena bounds, GOARCH, version, CPUs
			uvarint()
			uvarint()
			uvarint()
			uvarint()
			skip(uvarint())
			skip(uvarint())
			uvarint()
		case dumpType: // address, size, name, whether stored indirectly
			uvarint()
			uvarint()
			skip(uvarint())
			uvarint()
		case dumpItab: // address, type
			uvarint()
			uvarint()
		case dumpObject: // address, contents, pointer fields to the end of the list
			addr, size := uvarint(), uvarint()
			skip(size)
			for kind := uvarint(); kind != 0 && err == nil; kind = uvarint() {
				uvarint() // the field's offset
			}
			if err != nil || size > maxOnePageClass {
				continue
			}
			c := classes[size]
			if c == nil {
				c = &class{pages: map[uint64]bool{}}
				classes[size] = c
			}
			c.objects++
			c.pages[addr/heapPage] = true
		default: // the goroutines, which follow the objects
			if err != nil {
				break
			}
			var use []ClassUse
			for size, c := range classes {
				use = append(use, ClassUse{Size: size, Objects: c.objects, Pages: len(c.pages)})
			}
			sort.Slice(use, func(i, j int) bool {
				if use[i].Held() != use[j].Held() {
					return use[i].Held() > use[j].Held()
				}
				return use[i].Size < use[j].Size
			})
			return use, nil
		}
	}
	return nil, fmt.Errorf("%w: %v", errHeapDump, err)
}
