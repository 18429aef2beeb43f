package images

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/wasmkeep/wasmkeep/host/snapshot"
)

// Images across a clean restart. Persist, at a clean stop, syncs each
// image's file to the disk and only then writes an index of them, so that
// the next cache in the directory picks them up. That cache trusts the
// index once: it checks the files the index lists and removes the index
// before it writes anything into them, so that a crash at any later point
// leaves no index, and the next start removes every image it finds
// without reading it. A crash during Persist leaves files and no index
// (or a half-written one under another name), which the next start
// removes alike. So a file is read after a restart only if a clean stop
// synced it whole and nothing wrote to it since.
//
// Only one cache may use a directory: each takes a flock on the
// directory's lock file, and New refuses a directory another cache holds
// (ErrShared), since it would remove that cache's files.

const (
	indexName = "index"
	indexTemp = "index.tmp"
	lockName  = "lock"
	fileExt   = ".image"
	// probePrefix names the file New makes to see that it can (removed
	// at once; a start clears one a crash left).
	probePrefix = "probe-"
	// indexMagic begins an index; a later format changes it.
	indexMagic = "wasmkeep images 1\n"
	// maxKey bounds a key read from an index (room keys are far shorter).
	maxKey = 4096
)

// ErrShared: another cache (another node of this machine) holds the
// directory.
var ErrShared = errors.New("images: another cache holds the directory")

// record is an index's line for one image.
type record struct {
	key  string
	id   uint64
	size int64
	tag  [32]byte
}

// imageName is image id's name in its directory.
func imageName(id uint64) string { return strconv.FormatUint(id, 10) + fileExt }

func fileName(dir string, id uint64) string { return filepath.Join(dir, imageName(id)) }

// Persist keeps the cache's images for the next cache made in its
// directory (the node's next start) and closes the cache as Close does.
// Call it at a clean stop, when no Store or Lookup runs; an image being
// written is not kept. Syncing a gigabyte of images the kernel has not
// written out yet takes seconds: when ctx ends, the images not synced by
// then are left out. It returns how many images it kept, and why it kept
// no more: an image that failed to sync is left out, the others kept.
func (c *Cache) Persist(ctx context.Context) (int, error) {
	defer c.Close() // after the index is written: Close gives up the lock
	// Nothing else runs (Store and Lookup are done): the entries are
	// read under the lock, the files synced outside it, so that Stats
	// (a scrape of the node's metrics) does not wait on the disk.
	c.mu.Lock()
	var keep []*entry
	for el := c.lru.Front(); el != nil; el = el.Next() {
		if e := el.Value.(*entry); e.valid && e.refs == 0 {
			e.refs++ // released once synced
			keep = append(keep, e)
		}
	}
	c.mu.Unlock()
	var (
		recs []record
		errs []error
	)
	for _, e := range keep {
		var err error
		if err = ctx.Err(); err == nil {
			var f *os.File
			if f, err = c.file(e); err == nil {
				err = syncData(f)
			}
		}
		c.release(e)
		switch {
		case err == nil:
			recs = append(recs, record{key: e.key, id: e.id, size: e.size, tag: e.tag})
		case ctx.Err() == nil:
			errs = append(errs, err)
		} // else left out at the deadline, not failed
	}
	if err := writeIndex(c.cfg.Dir, recs); err != nil {
		return 0, fmt.Errorf("images: %w", err)
	}
	c.mu.Lock()
	c.persisted = true // the index's now: Close leaves the names
	c.mu.Unlock()
	if len(errs) > 0 {
		return len(recs), fmt.Errorf("images: %d of %d images not kept: %w", len(errs), len(keep), errors.Join(errs...))
	}
	return len(recs), nil
}

// load picks up the images a clean stop kept in the directory, within the
// bounds, and removes every name the directory holds. It returns how many
// it kept; an index it cannot read or trust keeps none.
func (c *Cache) load() (int, error) {
	recs, err := readIndex(c.cfg.Dir)
	if errors.Is(err, fs.ErrNotExist) {
		return 0, clearNames(c.cfg.Dir, nil)
	}
	var files []record
	for _, r := range recs {
		if r.size < c.cfg.MinBytes || r.size > c.cfg.MaxBytes {
			continue
		}
		name := fileName(c.cfg.Dir, r.id)
		st, serr := os.Lstat(name)
		if serr != nil {
			err = errors.Join(err, serr)
			continue
		}
		// The hashes follow the memory; a file of another length is not
		// the one the index describes.
		if !st.Mode().IsRegular() || st.Size() != r.size+8*(r.size/snapshot.PageSize) {
			err = errors.Join(err, fmt.Errorf("%s is not the image its index describes", filepath.Base(name)))
			continue
		}
		files = append(files, r)
	}
	// The index goes first: from here on no crash can make it trusted
	// again, whatever this cache then writes into the files.
	if rerr := os.Remove(filepath.Join(c.cfg.Dir, indexName)); rerr != nil && !errors.Is(rerr, fs.ErrNotExist) {
		return 0, errors.Join(err, rerr)
	}
	if serr := syncDir(c.cfg.Dir); serr != nil {
		err = errors.Join(err, serr)
	}
	c.mu.Lock()
	for _, o := range files {
		e := &entry{key: o.key, id: o.id, size: o.size, tag: o.tag, valid: true}
		if old := c.by[o.key]; old != nil {
			c.remove(old) // an index lists a room once; a second is damage
		}
		e.elem = c.lru.PushBack(e) // the index is most recent first
		c.by[o.key] = e
		c.bytes += o.size
		c.nextID = max(c.nextID, o.id)
	}
	c.evict()
	keep := map[string]bool{}
	for _, e := range c.by {
		keep[imageName(e.id)] = true
	}
	n := c.lru.Len()
	c.mu.Unlock()
	return n, errors.Join(err, clearNames(c.cfg.Dir, keep))
}

// Clear removes what caches left in dir (the images a clean stop kept or
// a crash left, an index), for a node that now keeps no images, so that
// they do not hold its disk for nothing. A directory that does not exist
// is left alone; one another cache holds is too (ErrShared).
func Clear(dir string) error {
	if _, err := os.Lstat(dir); errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	hold, err := lockDir(dir)
	if err != nil {
		return fmt.Errorf("images: %w", err)
	}
	if hold == nil {
		return fmt.Errorf("%w: %s", ErrShared, dir)
	}
	defer hold.Close()
	return clearNames(dir, nil)
}

// clearNames removes from dir an index, the probe of New, and the images
// that are not in keep: those a crash left, those a start could not use.
func clearNames(dir string, keep map[string]bool) error {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return err
	}
	var errs []error
	for _, d := range ents {
		n := d.Name()
		if n == indexName || n == indexTemp || strings.HasPrefix(n, probePrefix) || (strings.HasSuffix(n, fileExt) && !keep[n]) {
			if err := os.Remove(filepath.Join(dir, n)); err != nil && !errors.Is(err, fs.ErrNotExist) {
				errs = append(errs, err)
			}
		}
	}
	return errors.Join(errs...)
}

// encodeIndex lays out an index: the magic, the records, and a CRC-32C of
// all before it.
func encodeIndex(recs []record) []byte {
	b := []byte(indexMagic)
	b = binary.AppendUvarint(b, uint64(len(recs)))
	for _, r := range recs {
		b = binary.AppendUvarint(b, uint64(len(r.key)))
		b = append(b, r.key...)
		b = binary.AppendUvarint(b, r.id)
		b = binary.AppendUvarint(b, uint64(r.size))
		b = append(b, r.tag[:]...)
	}
	return binary.LittleEndian.AppendUint32(b, crc32.Checksum(b, castagnoli))
}

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// errIndex: an index that is not one this version wrote whole.
var errIndex = errors.New("images: the index is damaged")

// decodeIndex reads an index encodeIndex laid out, refusing anything
// else: a wrong magic or checksum, a record cut short, a key too long, a
// memory of part pages, an id twice.
func decodeIndex(b []byte) ([]record, error) {
	if len(b) < len(indexMagic)+4 || !bytes.HasPrefix(b, []byte(indexMagic)) {
		return nil, errIndex
	}
	body := b[:len(b)-4]
	if crc32.Checksum(body, castagnoli) != binary.LittleEndian.Uint32(b[len(body):]) {
		return nil, errIndex
	}
	r := body[len(indexMagic):]
	uvarint := func() (uint64, bool) {
		v, n := binary.Uvarint(r)
		if n <= 0 {
			return 0, false
		}
		r = r[n:]
		return v, true
	}
	count, ok := uvarint()
	if !ok || count > uint64(len(r)) {
		return nil, errIndex
	}
	recs := make([]record, 0, count)
	ids := map[uint64]bool{}
	for range count {
		var rec record
		kl, ok := uvarint()
		if !ok || kl > maxKey || kl > uint64(len(r)) {
			return nil, errIndex
		}
		rec.key, r = string(r[:kl]), r[kl:]
		id, ok1 := uvarint()
		size, ok2 := uvarint()
		if !ok1 || !ok2 || id == 0 || ids[id] || size == 0 || size%snapshot.PageSize != 0 || size > 1<<40 || len(r) < len(rec.tag) {
			return nil, errIndex
		}
		ids[id] = true
		rec.id, rec.size = id, int64(size)
		r = r[copy(rec.tag[:], r):]
		recs = append(recs, rec)
	}
	if len(r) != 0 {
		return nil, errIndex
	}
	return recs, nil
}

// readIndex reads the directory's index; fs.ErrNotExist if there is none.
func readIndex(dir string) ([]record, error) {
	f, err := os.Open(filepath.Join(dir, indexName))
	if err != nil {
		return nil, err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return nil, err
	}
	// Some 60 bytes an image: an index of a million is 60 MB.
	if st.Size() > 64<<20 {
		return nil, errIndex
	}
	b := make([]byte, st.Size())
	if _, err := f.ReadAt(b, 0); err != nil {
		return nil, err
	}
	return decodeIndex(b)
}

// writeIndex writes the index whole or not at all: into a temporary name,
// synced, then renamed, and the directory synced.
func writeIndex(dir string, recs []record) error {
	tmp := filepath.Join(dir, indexTemp)
	f, err := os.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o600)
	if err != nil {
		return err
	}
	_, err = f.Write(encodeIndex(recs))
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp, filepath.Join(dir, indexName))
	}
	if err == nil {
		err = syncDir(dir)
	}
	if err != nil {
		os.Remove(tmp)
	}
	return err
}

func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}
