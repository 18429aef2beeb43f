package store_test

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/wasmkeep/wasmkeep/host/store"
	"github.com/wasmkeep/wasmkeep/host/store/storetest"
)

// TestDirJournal runs the suite on a Dir with a journal small enough that
// checkpoints run while it does.
func TestDirJournal(t *testing.T) {
	t.Parallel()
	storetest.Run(t, func(t *testing.T) store.Bucket {
		return openDir(t, t.TempDir(), store.DirOptions{Journal: true, JournalSize: 16 << 10})
	})
}

// TestDirJournalOwnsTheDirectory: while a process keeps a journal in a
// directory, no other open of it succeeds; once it closes, the objects
// are in their files and the journal is gone.
func TestDirJournalOwnsTheDirectory(t *testing.T) {
	path := t.TempDir()
	d, err := store.OpenDirWith(path, store.DirOptions{Journal: true})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := d.Put(t.Context(), "a/b", []byte("one"), store.Cond{}); err != nil {
		t.Fatal(err)
	}
	if _, err := store.OpenDir(path); err == nil || !strings.Contains(err.Error(), "journal") {
		t.Fatalf("OpenDir beside a journal: %v, want refused", err)
	}
	if _, err := store.OpenDirWith(path, store.DirOptions{Journal: true}); err == nil {
		t.Fatal("a second journal opened")
	}
	if _, err := os.Stat(d.ObjectFile("a/b")); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("object file before a checkpoint: %v, want none", err)
	}
	if err := d.Close(); err != nil {
		t.Fatal(err)
	}
	if files := store.JournalFiles(path); len(files) != 0 {
		t.Fatalf("journal files after Close: %v", files)
	}
	d2 := openDir(t, path, store.DirOptions{})
	body, _, err := d2.Get(t.Context(), "a/b")
	if err != nil || string(body) != "one" {
		t.Fatalf("after Close: %q, %v", body, err)
	}
}

// TestDirJournalReplay drops a Dir as a crash would, with a record cut
// short at the end of its journal, and opens it again: every acknowledged
// write is there under the ETag it was given, every delete stays done,
// and the cut record is not.
func TestDirJournalReplay(t *testing.T) {
	path := t.TempDir()
	d, err := store.OpenDirWith(path, store.DirOptions{Journal: true, JournalSize: 4 << 10})
	if err != nil {
		t.Fatal(err)
	}
	ctx := t.Context()
	want := map[string]string{} // key → body
	etags := map[string]string{}
	for i := range 40 {
		key := fmt.Sprintf("rooms/r%d/manifest", i%5)
		body := bytes.Repeat([]byte{byte(i)}, 300+i)
		seg := fmt.Sprintf("rooms/r%d/seg-%d", i%5, i)
		etag, err := store.PutCommit(ctx, d, []store.Object{{Key: seg, Body: body}}, key, body, store.Cond{})
		if err != nil {
			t.Fatal(err)
		}
		want[key], want[seg], etags[key] = string(body), string(body), etag
		if i%3 == 0 { // compaction's garbage
			if err := d.Delete(ctx, seg, ""); err != nil {
				t.Fatal(err)
			}
			delete(want, seg)
		}
	}
	d.Abandon()
	// The first journal file is number 1; each checkpoint starts the next.
	if files := store.JournalFiles(path); len(files) == 0 || strings.HasSuffix(files[len(files)-1], "00001") {
		t.Fatalf("journal files %v: want checkpoints to have run", files)
	}
	last := store.JournalFiles(path)
	fi, err := os.Stat(last[len(last)-1])
	if err != nil {
		t.Fatal(err)
	}
	held := fi.Size() > 0 // changes no checkpoint wrote out before the crash
	f, err := os.OpenFile(last[len(last)-1], os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.Write([]byte("wkJ1\xff\x00\x00\x00 cut short")); err != nil {
		t.Fatal(err)
	}
	_ = f.Close()

	d2 := openDir(t, path, store.DirOptions{Journal: true})
	if js, ok := d2.Journal(); !ok || (js.Replayed > 0) != held || js.Pending != 0 {
		t.Fatalf("journal stats after a replay: %+v, %v; want changes replayed: %v, none pending", js, ok, held)
	}
	keys, err := d2.List(ctx, "rooms/")
	if err != nil {
		t.Fatal(err)
	}
	if len(keys) != len(want) {
		t.Fatalf("listed %d keys, want %d: %v", len(keys), len(want), keys)
	}
	for key, body := range want {
		got, etag, err := d2.Get(ctx, key)
		if err != nil || string(got) != body {
			t.Fatalf("%s after replay: %d bytes, %v", key, len(got), err)
		}
		if e, ok := etags[key]; ok && e != etag {
			t.Fatalf("%s: ETag %s after replay, %s before", key, etag, e)
		}
	}
	if !journalEmpty(path) {
		t.Fatalf("journal files after replay: %v, want one, empty", store.JournalFiles(path))
	}
}

// TestDirJournalRefusesACorruptMiddle: a record that fails its check in a
// journal file with another file after it is not a crash's cut, and the
// open fails rather than lose what follows.
func TestDirJournalRefusesACorruptMiddle(t *testing.T) {
	path := t.TempDir()
	d, err := store.OpenDirWith(path, store.DirOptions{Journal: true})
	if err != nil {
		t.Fatal(err)
	}
	for range 3 {
		if _, err := d.Put(t.Context(), "k", bytes.Repeat([]byte("x"), 2<<10), store.Cond{}); err != nil {
			t.Fatal(err)
		}
	}
	d.Abandon()
	files := store.JournalFiles(path)
	if len(files) != 1 {
		t.Fatalf("journal files %v, want one", files)
	}
	b, err := os.ReadFile(files[0])
	if err != nil || len(b) < 20 {
		t.Fatalf("%s: %d bytes, %v", files[0], len(b), err)
	}
	// A later file with the same records, then the first one damaged.
	next := files[0][:len(files[0])-1] + string(files[0][len(files[0])-1]+1)
	if err := os.WriteFile(next, b, 0o644); err != nil {
		t.Fatal(err)
	}
	b[15] ^= 0xff
	if err := os.WriteFile(files[0], b, 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := store.OpenDir(path); err == nil || !strings.Contains(err.Error(), "corrupt journal") {
		t.Fatalf("open with a corrupt middle record: %v", err)
	}
}

// TestDirJournalCheckpointsWhenQuiet: a journal that stops growing is
// written to the object files soon after, so a quiet node keeps none of
// it in memory.
func TestDirJournalCheckpointsWhenQuiet(t *testing.T) {
	path := t.TempDir()
	d := openDir(t, path, store.DirOptions{Journal: true})
	if _, err := d.Put(t.Context(), "quiet/k", []byte("v"), store.Cond{}); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, "a checkpoint after the last change", func() bool {
		_, err := os.Stat(d.ObjectFile("quiet/k"))
		return err == nil && journalEmpty(path)
	})
}

// TestDirJournalCheckpointsByAge: a journal that keeps growing, too slowly
// to reach its size, is checkpointed once its first change is JournalAge
// old.
func TestDirJournalCheckpointsByAge(t *testing.T) {
	path := t.TempDir()
	d := openDir(t, path, store.DirOptions{Journal: true, JournalAge: 50 * time.Millisecond})
	first := store.JournalFiles(path)
	for i := 0; ; i++ {
		if _, err := d.Put(t.Context(), "busy/k", []byte(strconv.Itoa(i)), store.Cond{}); err != nil {
			t.Fatal(err)
		}
		if files := store.JournalFiles(path); len(files) > 0 && !slices.Equal(files, first) {
			return // a checkpoint moved the appends to the next file
		}
		if i == 100000 {
			t.Fatal("no checkpoint after 100,000 writes with a journal age of 50 ms")
		}
	}
}

// journalEmpty reports whether the Dir at path has one journal file, and
// it empty.
func journalEmpty(path string) bool {
	files := store.JournalFiles(path)
	if len(files) != 1 {
		return false
	}
	fi, err := os.Stat(files[0])
	return err == nil && fi.Size() == 0
}

// waitUntil waits up to 10 s for cond.
func waitUntil(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(time.Millisecond)
	}
}
