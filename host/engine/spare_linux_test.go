package engine

import (
	"bytes"
	"context"
	"testing"
	"time"

	"github.com/wasmkeep/wasmkeep/internal/limits"
	"github.com/wasmkeep/wasmkeep/internal/testwasm"
)

// TestRestoreIntoASpare: a restore from segments made after another room
// of the class closed writes into that room's memory, and what it gives
// the new instance is what a restore into a fresh memory gives, byte for
// byte, past the snapshot's size too: nothing of the other room is left.
func TestRestoreIntoASpare(t *testing.T) {
	e := newEngine(t, Config{PoolSize: limits.Off})
	c, err := e.Compile(context.Background(), testwasm.Build(t, "./examples/counter"))
	if err != nil {
		t.Fatal(err)
	}
	// Room a: a few requests, snapshotted, its memory kept to compare.
	a := startRoom(t, c)
	for range 3 {
		request(t, a, postRoot)
	}
	man, segs := takeSnapshot(t, a, nil)
	var want []byte
	if err := a.ReadMemory(func(mem []byte) error { want = bytes.Clone(mem); return nil }); err != nil {
		t.Fatal(err)
	}
	a.Close()
	// a's memory, and that of the instance the compile made, are spares:
	// dropped, so that b's is the only one.
	if n := e.DropSpares(0); n < 1 {
		t.Fatalf("a's close left %d spares, want its memory kept", n)
	}

	// Room b: many requests, and its memory grown past a's and written
	// all over, then closed: its memory is the class's spare.
	b := startRoom(t, c)
	for range 300 {
		request(t, b, postRoot)
	}
	grown, ok := b.mem.Grow(16)
	if !ok {
		t.Fatal("b's memory did not grow")
	}
	if err := b.ReadMemory(func(mem []byte) error {
		for i := range mem {
			if mem[i] == 0 {
				mem[i] = 0xb
			}
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	b.Close()

	before := e.Stats().SpareRestores
	r, err := c.Restore(context.Background(), man, segs, &fakeHost{})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	if got := e.Stats().SpareRestores - before; got != 1 {
		t.Fatalf("%d restores into a spare, want 1", got)
	}
	if err := r.ReadMemory(func(mem []byte) error {
		if !bytes.Equal(mem, want) {
			t.Errorf("the restore into b's memory differs from a's memory")
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	// What lies past the snapshot's size, which b had written, reads as
	// zeros once the room grows into it.
	if _, ok := r.mem.Grow(grown + 16 - uint32(len(want)>>16)); !ok {
		t.Fatal("the restored memory did not grow")
	}
	if err := r.ReadMemory(func(mem []byte) error {
		if i := bytes.IndexFunc(mem[len(want):], func(r rune) bool { return r != 0 }); i >= 0 {
			t.Errorf("byte %d past the snapshot's memory is not zero after a grow", len(want)+i)
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	request(t, r, postRoot)
}

// TestSparesAreBoundedAndDropped: a class image keeps at most maxSpares
// memories of closed instances, the newest; drop releases those kept
// before the time it is given; a closed image keeps none.
func TestSparesAreBoundedAndDropped(t *testing.T) {
	var now int64
	img := &classImage{spares: spares{now: func() int64 { return now }}}
	mem := func() *mappedMemory {
		m := reserve(64 << 10)
		if m == nil {
			t.Fatal("no memory reserved")
		}
		return m
	}
	a, b, d := mem(), mem(), mem()
	for _, m := range []*mappedMemory{a, b, d} {
		if !img.keepSpare(m) {
			t.Fatal("a spare was refused")
		}
		now += int64(time.Second)
	}
	if a.base != nil {
		t.Error("the oldest of three spares is still mapped")
	}
	if n := img.spares.drop(int64(time.Second)); n != 0 {
		t.Fatalf("drop(1s) released %d spares kept at 1 s and 2 s", n)
	}
	if n := img.spares.drop(int64(2 * time.Second)); n != 1 || b.base != nil || d.base == nil {
		t.Fatalf("drop(2s) released %d spares (b mapped %v, d mapped %v), want b's only", n, b.base != nil, d.base != nil)
	}
	if got := img.spares.take(); got != d {
		t.Fatal("take did not give the spare kept")
	}
	if img.spares.take() != nil {
		t.Fatal("take gave a spare twice")
	}
	img.spares.close()
	if img.keepSpare(d) {
		t.Fatal("a closed image kept a spare")
	}
	d.release()
}
