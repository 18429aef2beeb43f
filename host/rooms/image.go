package rooms

import (
	"context"
	"errors"
	"log/slog"
	"time"

	"github.com/wasmkeep/wasmkeep/host/engine"
	"github.com/wasmkeep/wasmkeep/host/images"
	"github.com/wasmkeep/wasmkeep/host/rooms/life"
	"github.com/wasmkeep/wasmkeep/host/snapshot"
	"github.com/wasmkeep/wasmkeep/internal/limits"
)

// Memory images (issue 13 §2). When a room hibernates here its memory is
// also saved in a file on the node's disk (host/images), tied to the
// manifest the store holds; a later wake here that finds the store still
// holding that manifest maps the file instead of decoding the snapshot,
// so that a Go room's megabytes are read in only as the guest touches
// them. Like a kept instance (warm.go) an image is only ever the state the
// store holds, checked byte for byte at the wake; unlike one it costs no
// resident memory, so it outlives WarmFor by far, bounded by
// Config.ImageBytes and ImageFiles. A clean stop keeps the images for the
// next start (images.Cache.Persist), after saving those of the rooms it
// hibernates, so that a restart's wakes map them too.

// openImages makes the manager's image cache, if configured. A directory
// the cache refuses (one on tmpfs, where the images would hold RAM, or one
// another node of this machine holds) leaves the node without images,
// which is said once.
func (m *Manager) openImages() {
	if m.cfg.ImageDir == "" {
		return
	}
	if limits.IsOff(m.cfg.ImageBytes) {
		// Images an earlier run kept (or a crash left) are never read
		// by this one: they go, rather than hold the disk.
		if err := images.Clear(m.cfg.ImageDir); err != nil && !errors.Is(err, images.ErrUnsupported) && !errors.Is(err, images.ErrShared) {
			m.log.Warn("rooms: removing the memory images of an earlier run failed", "dir", m.cfg.ImageDir, "err", err)
		}
		return
	}
	c, err := images.New(images.Config{Dir: m.cfg.ImageDir, MaxBytes: m.cfg.ImageBytes, MaxFiles: m.cfg.ImageFiles, MinBytes: m.cfg.ImageMinBytes})
	if err != nil {
		level := slog.LevelWarn
		if errors.Is(err, images.ErrUnsupported) {
			level = slog.LevelInfo // nothing to fix: the platform has none
		}
		m.log.Log(context.Background(), level, "rooms: memory images are off; wakes restore from the store", "err", err)
		return
	}
	m.images = c
	switch n, err := c.Kept(); {
	case err != nil:
		m.log.Warn("rooms: some memory images of the last run could not be used; their rooms restore from the store", "kept", n, "err", err)
	case n > 0:
		m.log.Info("rooms: memory images kept from the last run", "images", n, "bytes", c.Stats().Bytes)
	}
}

// keepImages keeps the images for the next start, at a clean stop, as
// many as it can sync before ctx ends.
func (m *Manager) keepImages(ctx context.Context) {
	start := m.clock.Now()
	n, err := m.images.Persist(ctx)
	if err != nil {
		m.log.Warn("rooms: some memory images were not kept for the next start; their rooms' wakes restore from the store", "kept", n, "err", err)
	}
	if n > 0 {
		m.log.Info("rooms: memory images kept for the next start", "images", n, "took", time.Duration(m.clock.Now()-start).Round(time.Millisecond))
	}
}

// saveImage saves the instance's memory as the room's image after a
// hibernation that leaves the store holding it (r.manBody) and the room
// likely to wake here: an idle one, an eviction, an operator's, or a
// clean stop (the next start keeps the images). A hand-over (drain, move)
// or a drop means the room will wake elsewhere or from another state, so
// there is nothing to save for.
func (r *Room) saveImage(why life.EndReason) {
	m := r.m
	if m.images == nil || (why != life.EndIdle && why != life.EndEvict && why != life.EndAdmin && why != life.EndStop) || r.inst == nil || r.manBody == nil || r.etag == "" || r.changed {
		return
	}
	key := r.key.prefix()
	err := r.inst.ReadMemory(func(mem []byte) error {
		id, err := m.images.Store(key, r.manBody, mem, r.pages, r.image)
		r.image = id
		return err
	})
	if err != nil {
		// Said at the 1st, 2nd, 4th, 8th... failure: a full disk fails
		// every hibernation.
		if n := m.images.Stats().Errors; n&(n-1) == 0 {
			m.log.Warn("rooms: saving a room's memory image failed; its next wake restores from the store", "room", r.key.String(), "failures", n, "err", err)
		}
	}
}

// lookupImage returns the room's image if it holds the state whose stored
// manifest is body.
func (r *Room) lookupImage(body []byte) *images.Image {
	if r.m.images == nil {
		return nil
	}
	img, ok := r.m.images.Lookup(r.key.prefix(), body)
	if !ok {
		return nil
	}
	return img
}

// forgetImage drops the room's image (its stored state went or changed).
func (m *Manager) forgetImage(key Key) {
	if m.images != nil {
		m.images.Forget(key.prefix())
	}
}

// restoreImage restores the room from its image; a class that cannot use
// it (engine.ErrNoImage) or any other failure leaves the caller to restore
// from the segments.
func (r *Room) restoreImage(ctx context.Context, man *snapshot.Manifest, img *images.Image) (Instance, error) {
	m := r.m
	class, err := m.classes.ByHash(ctx, man.ModuleHash)
	if err != nil {
		return nil, err
	}
	inst, err := class.RestoreImage(ctx, man, img, r)
	if err != nil {
		if !errors.Is(err, engine.ErrNoImage) {
			m.log.Warn("rooms: restoring a room from its memory image failed; restoring from the store", "room", r.key.String(), "err", err)
		}
		m.met.imageFallbacks.Inc()
		return nil, err
	}
	m.met.imageRestores.Inc()
	return inst, nil
}
