package rooms

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	"github.com/wasmkeep/wasmkeep/host/rooms/life"
	"github.com/wasmkeep/wasmkeep/host/snapshot"
	"github.com/wasmkeep/wasmkeep/host/store"
	"github.com/wasmkeep/wasmkeep/internal/limits"
)

// Memory images of hibernated rooms (image.go).

func newImageHarness(t *testing.T) *harness {
	return newHarness(t, Config{WarmMemory: limits.Off, ImageDir: t.TempDir(), ImageMinBytes: 1})
}

// instanceOf returns room c/name's resident instance.
func (h *harness) instanceOf(name string) *fakeInstance {
	h.t.Helper()
	h.m.mu.Lock()
	r := h.m.rooms[Key{"c", name}]
	h.m.mu.Unlock()
	if r == nil {
		h.t.Fatalf("no room %s", name)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	i, _ := r.inst.(*fakeInstance)
	return i
}

func TestImageAfterIdleAndEviction(t *testing.T) {
	h := newImageHarness(t)
	h.expect("a", "POST", "/", "1")
	h.idle("a")
	h.expect("a", "GET", "/", "1")
	if i := h.instanceOf("a"); i == nil || !i.fromImage {
		t.Fatal("the wake after an idle hibernation did not restore from the image")
	}
	if got := h.counter(`wasmkeep_room_image_restores_total`); got != 1 {
		t.Fatalf("image restores: %v", got)
	}
	if got := h.counter(`wasmkeep_room_restores_total`); got != 0 {
		t.Fatalf("restores from the store: %v", got)
	}
	// Changed and hibernated again: the image follows the new state.
	h.expect("a", "POST", "/", "2")
	if err := h.m.HandOver(context.Background(), Key{"c", "a"}, life.EndEvict); err != nil {
		t.Fatal(err)
	}
	h.settle("a")
	h.expect("a", "GET", "/", "2")
	if got := h.counter(`wasmkeep_room_image_restores_total`); got != 2 {
		t.Fatalf("image restores after an eviction: %v", got)
	}
	if got := h.m.images.Stats().Files; got != 1 {
		t.Fatalf("images kept: %v", got)
	}
}

// TestImageOnlyForTheStoredState: a wake uses an image only while the
// store holds the manifest it was saved with.
func TestImageOnlyForTheStoredState(t *testing.T) {
	h := newImageHarness(t)
	h.expect("a", "POST", "/", "1")
	h.idle("a")
	// A hibernation that saves none (a hand-over) of a changed state:
	// the image is of the older state, and the wake restores.
	h.expect("a", "POST", "/", "2")
	if err := h.m.HandOver(context.Background(), Key{"c", "a"}, life.EndDrain); err != nil {
		t.Fatal(err)
	}
	h.settle("a")
	h.expect("a", "GET", "/", "2")
	if got := h.counter(`wasmkeep_room_restores_total`); got != 1 {
		t.Fatalf("restores from the store: %v, want 1", got)
	}
	// Another writer's manifest: the same state in other bytes (a later
	// sequence number), as another node's hold would write it.
	h.idle("a")
	ctx := context.Background()
	key := Key{"c", "a"}.manifestKey()
	body, etag, err := h.bucket.Get(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	man, err := snapshot.DecodeManifest(body)
	if err != nil {
		t.Fatal(err)
	}
	man.Seq++
	if _, err := h.bucket.Put(ctx, key, man.Encode(), store.Cond{IfMatch: etag}); err != nil {
		t.Fatal(err)
	}
	images := h.counter(`wasmkeep_room_image_restores_total`)
	h.expect("a", "GET", "/", "2")
	if got := h.counter(`wasmkeep_room_image_restores_total`); got != images {
		t.Fatal("restored from an image of a manifest the store no longer holds")
	}
	if got := h.counter(`wasmkeep_room_restores_total`); got != 2 {
		t.Fatalf("restores from the store: %v, want 2", got)
	}
	// Deleted: the image goes with the stored state.
	if err := h.m.Delete(ctx, Key{"c", "a"}); err != nil {
		t.Fatal(err)
	}
	if got := h.m.images.Stats().Files; got != 0 {
		t.Fatalf("images after the delete: %v", got)
	}
}

// TestImagesOffClearsEarlierOnes: a manager started with images off on a
// directory where an earlier run kept some removes them.
func TestImagesOffClearsEarlierOnes(t *testing.T) {
	dir := t.TempDir()
	h := newHarness(t, Config{WarmMemory: limits.Off, ImageDir: dir, ImageMinBytes: 1})
	h.expect("a", "POST", "/", "1")
	h.idle("a")
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := h.m.Shutdown(ctx); err != nil {
		t.Fatal(err)
	}
	if err := h.m.Close(ctx); err != nil { // a clean stop: it keeps the image
		t.Fatal(err)
	}
	if n := imageFiles(t, dir); n != 1 {
		t.Fatalf("%d images kept by the clean stop, want 1", n)
	}
	newHarness(t, Config{WarmMemory: limits.Off, ImageDir: dir, ImageMinBytes: 1, ImageBytes: limits.Off})
	if n := imageFiles(t, dir); n != 0 {
		t.Fatalf("%d images left with images off", n)
	}
}

// imageFiles counts the image files in dir.
func imageFiles(t *testing.T, dir string) int {
	t.Helper()
	m, err := filepath.Glob(filepath.Join(dir, "*.image"))
	if err != nil {
		t.Fatal(err)
	}
	return len(m)
}
