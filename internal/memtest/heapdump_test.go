package memtest

import (
	"bufio"
	"errors"
	"runtime/debug"
	"strings"
	"testing"
)

// survivor is a pointer-free 48-byte object: its own size class.
type survivor [6]uint64

// sink keeps the survivors; dropped holds the others until the dump.
var sink, dropped []*survivor

// TestHeapUseSeesSurvivorsSpread keeps objects that were each allocated
// among ten that die, as a room's few long-lived objects are among its
// cold start's garbage, and finds them holding about eleven times the
// pages they would fill packed.
func TestHeapUseSeesSurvivorsSpread(t *testing.T) {
	const n, dead = 2000, 10
	defer debug.SetGCPercent(debug.SetGCPercent(-1)) // no collection reuses a slot meanwhile
	kept := make([]*survivor, 0, n)
	for i := range n {
		for range dead {
			dropped = append(dropped, new(survivor))
		}
		s := new(survivor)
		s[0] = uint64(i)
		kept = append(kept, s)
	}
	dropped = nil
	sink = kept
	defer func() { sink = nil }()

	var c ClassUse
	for _, u := range HeapUse(t) {
		if u.Size == 48 {
			c = u
		}
	}
	packed := n * 48 / heapPage
	t.Logf("48-byte class: %d objects on %d pages, %d KiB held (%d of ours would fill %d pages packed)", c.Objects, c.Pages, c.Held()>>10, n, packed)
	if c.Objects < n {
		t.Fatalf("the dump has %d live 48-byte objects; want at least the %d kept", c.Objects, n)
	}
	if c.Pages < 4*packed {
		t.Fatalf("the %d survivors are on %d pages; allocated one among %d dead, they should be spread over far more than the %d they fill packed", n, c.Pages, dead+1, packed)
	}
	if c.Held() != uint64(c.Pages)*heapPage-c.Live() {
		t.Fatal("Held is not the pages less the live bytes")
	}
}

func TestReadHeapDumpRefusesOtherBytes(t *testing.T) {
	for _, in := range []string{"", "go1.6 heap dump\n", dumpHeader + "\x01"} {
		if _, err := readHeapDump(bufio.NewReader(strings.NewReader(in))); !errors.Is(err, errHeapDump) {
			t.Errorf("readHeapDump(%q) = %v; want errHeapDump", in, err)
		}
	}
}
