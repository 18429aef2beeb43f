package engine

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/wasmkeep/wasmkeep/abi"
	"github.com/wasmkeep/wasmkeep/host/snapshot"
)

// TestSnapshotsHashOnlyWrittenPages: on a kernel that tracks writes, each
// snapshot after the first hashes only the pages written since the one
// before, and its page hashes are exactly those of every page hashed
// anew: through events, idle calls, a memory grow and a restore. Deltas
// built from them restore the room as it was.
func TestSnapshotsHashOnlyWrittenPages(t *testing.T) {
	if kernelAtLeast(6, 7) && tracker() == nil {
		t.Fatal("this kernel tracks writes to a mapping (userfaultfd write-protect, PAGEMAP_SCAN), but the tracker could not be opened")
	}
	e := newEngine(t, Config{})
	c := compile(t, e, "./examples/chat")
	inst := startRoom(t, c)
	open := abi.AppendSocketOpen(nil, &abi.SocketOpen{Path: "/"})
	if err := inst.SocketOpen(1, open); err != nil {
		t.Fatal(err)
	}
	var prev *snapshot.Manifest
	var prevPages []uint64
	tracked := 0
	check := func(what string) {
		t.Helper()
		d, err := inst.Snapshot(testEncoder, prev, prevPages, nil, 1, "", false)
		if err != nil {
			t.Fatal(err)
		}
		view, _ := inst.mem.Read(0, inst.mem.Size())
		if want := snapshot.HashPages(view); !slices.Equal(d.PageHashes, want) {
			for p := range want {
				if p >= len(d.PageHashes) || d.PageHashes[p] != want[p] {
					t.Fatalf("%s: page %d's hash is stale: a write to it was not tracked", what, p)
				}
			}
			t.Fatalf("%s: %d page hashes, want %d", what, len(d.PageHashes), len(want))
		}
		if prevPages != nil && tracker() != nil {
			tracked++
		}
		prev, prevPages = d.Manifest, d.PageHashes
	}
	check("the first snapshot")
	for i := range 40 {
		msg := fmt.Sprintf("message %d %s", i, strings.Repeat("x", i*97))
		if err := inst.SocketMessage(1, abi.MessageText, []byte(msg)); err != nil {
			t.Fatal(err)
		}
		if i%10 == 9 && inst.IdleRequested() {
			if err := inst.Idle(); err != nil {
				t.Fatal(err)
			}
		}
		check("after message " + strconv.Itoa(i))
	}
	// Past the memory it had: the guest grows it.
	before := inst.mem.Size()
	for i := 0; inst.mem.Size() == before && i < 300; i++ {
		msg := fmt.Sprintf("%d %s", i, strings.Repeat("y", 15000)) // under the chat's 16 KiB
		if err := inst.SocketMessage(1, abi.MessageText, []byte(msg)); err != nil {
			t.Fatal(err)
		}
		check("while growing")
	}
	if inst.mem.Size() == before {
		t.Fatal("the memory did not grow")
	}
	check("after the grow")
	if tracker() != nil && tracked == 0 {
		t.Fatal("no snapshot used the tracked writes")
	}

	// A restore of the last snapshot (from its full form) carries on.
	man, segs := takeSnapshot(t, inst, nil)
	woken, err := c.Restore(context.Background(), man, segs, &fakeHost{})
	if err != nil {
		t.Fatal(err)
	}
	inst, prev, prevPages = woken, man, woken.RestoredPages()
	check("the first snapshot after a restore")
	for i := range 10 {
		if err := inst.SocketMessage(1, abi.MessageText, []byte("after the restore "+strconv.Itoa(i))); err != nil {
			t.Fatal(err)
		}
		check("after a restored room's message " + strconv.Itoa(i))
	}
	t.Logf("%d of the snapshots hashed only the pages written (tracker: %v)", tracked, tracker() != nil)
}

// kernelAtLeast reports whether the running kernel is Linux major.minor
// or later.
func kernelAtLeast(major, minor int) bool {
	var u unix.Utsname
	if unix.Uname(&u) != nil {
		return false
	}
	var ma, mi int
	if _, err := fmt.Sscanf(unix.ByteSliceToString(u.Release[:]), "%d.%d", &ma, &mi); err != nil {
		return false
	}
	return ma > major || ma == major && mi >= minor
}
