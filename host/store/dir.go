package store

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"io/fs"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"time"
)

// Names in a Dir that no key can produce: every one contains '@' or '+',
// which are not key bytes.
const (
	reservedDir = "@store" // internals, at the root
	formatFile  = "format" // in reservedDir: identifies the layout
	locksDir    = "locks"  // in reservedDir: the lock files
	objSuffix   = "@"      // the object of key "a/b" is the file "a/b@"
	tmpInfix    = "@tmp-"  // temporary files: "<name>@tmp-<random>"
	chainSuffix = "+"      // a piece of a long segment: directory "<piece>+"
	formatLine  = "wasmkeep store dir v1\n"
)

// StaleTempAge is how old a temporary file must be for OpenDir to remove
// it. A Put that is still writing a file older than this fails at its
// rename and reports that nothing was applied.
const StaleTempAge = time.Minute

// Segments longer than maxPlainName bytes are stored as a chain of
// directories of chainPieceLen bytes plus '+', then a final piece of more
// than maxPlainName-chainPieceLen bytes (so never "." or ".."). A plain name
// plus the temporary suffix stays well under the usual 255-byte limit.
const (
	maxPlainName  = 200
	chainPieceLen = 150
)

// numStripes is the number of lock files; a key's lock is the stripe its
// hash selects.
const numStripes = 256

// Object file header, little endian:
//
//	[0:4]   magic "wkO1"
//	[4:8]   flags, zero
//	[8:16]  version: 1 at creation, +1 per write
//	[16:24] nonce: random per write
//	[24:32] body length
//	[32:36] CRC-32C of [0:32] and the body
const (
	hdrLen   = 36
	hdrMagic = "wkO1"
)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// errClosed is returned by every method of a closed Dir.
var errClosed = errors.New("store: dir is closed")

// DirOptions configures [OpenDirWith]. The zero value is the default.
type DirOptions struct {
	// NoSync skips every fsync. Writes stay atomic for readers and survive
	// the crash of a process, but a kernel crash or power loss may lose or
	// roll back acknowledged writes. For tests and benchmarks only.
	NoSync bool
	// Journal makes this process the directory's only user, and its
	// writes appends to one journal file (journal.go): for the data
	// directory of a single node, whose every durable event is a write.
	// Another process's OpenDir of the directory fails while it is open.
	Journal bool
	// JournalSize is how large the journal grows before its changes are
	// written to the object files (DefaultJournalSize if 0).
	JournalSize int64
	// JournalAge is how long a change stays in the journal at most before
	// it is written to its object file (DefaultJournalAge if 0).
	JournalAge time.Duration
}

func (o DirOptions) withDefaults() DirOptions {
	if o.JournalSize <= 0 {
		o.JournalSize = DefaultJournalSize
	}
	if o.JournalAge <= 0 {
		o.JournalAge = DefaultJournalAge
	}
	return o
}

// Dir is a [Bucket] on a local directory, safe for concurrent use by any
// number of goroutines and processes on one machine. See the package
// documentation for its layout and the reasons for it.
//
// Its ETags have the form "<version>-<nonce>"; callers must treat them as
// opaque. Dir never returns ErrConflict; it returns ErrUnknownOutcome only
// when the fsync of a directory fails after a rename or unlink.
type Dir struct {
	root    string
	noSync  bool
	closed  atomic.Bool
	stripes [numStripes]stripe
	// group, if not nil, makes writes durable with its filesystem's
	// group sync instead of an fsync each (flush.go); rootFile is the
	// root held open for it.
	group    *groupSync
	rootFile *os.File
	// j, if not nil, takes every write (DirOptions.Journal).
	j *journal
}

// stripe is one lock file and the token that serializes this process's use
// of it.
type stripe struct {
	// sem has capacity one; the goroutine whose send succeeded owns the
	// stripe, its file and its flock until it receives.
	sem chan struct{}
	f   *os.File // opened on first use
}

var _ Bucket = (*Dir)(nil)

// OpenDir opens the bucket in the directory path with the default options,
// creating it if needed. See [OpenDirWith].
func OpenDir(path string) (*Dir, error) { return OpenDirWith(path, DirOptions{}) }

// OpenDirWith opens the bucket in the directory path, creating the
// directory if it does not exist. It refuses a directory that has entries
// but is not a bucket, and a case-insensitive filesystem. It removes
// temporary files older than [StaleTempAge], which means it reads every
// directory of the bucket once.
func OpenDirWith(path string, o DirOptions) (*Dir, error) {
	if !flockSupported {
		return nil, fmt.Errorf("store: open dir %q: %w: no flock(2) on this system", path, errors.ErrUnsupported)
	}
	root, err := filepath.Abs(path)
	if err != nil {
		return nil, fmt.Errorf("store: open dir %q: %w", path, err)
	}
	d := &Dir{root: root, noSync: o.NoSync}
	if err := d.init(); err != nil {
		return nil, fmt.Errorf("store: open dir %q: %w", root, err)
	}
	if !d.noSync {
		if d.group, d.rootFile, err = openGroupSync(root); err != nil {
			return nil, fmt.Errorf("store: open dir %q: %w", root, err)
		}
	}
	for i := range d.stripes {
		d.stripes[i].sem = make(chan struct{}, 1)
	}
	if err := d.removeStaleTemps(time.Now().Add(-StaleTempAge)); err != nil {
		return nil, fmt.Errorf("store: open dir %q: %w", root, err)
	}
	o = o.withDefaults()
	if d.j, err = openJournal(d, o.Journal, o.JournalSize, o.JournalAge); err != nil {
		if d.rootFile != nil {
			_ = d.rootFile.Close()
		}
		return nil, fmt.Errorf("store: open dir %q: %w", root, err)
	}
	return d, nil
}

// init creates or checks the root, the reserved directory and the format
// file.
func (d *Dir) init() error {
	if err := os.MkdirAll(d.root, 0o755); err != nil {
		return err
	}
	fpath := filepath.Join(d.root, reservedDir, formatFile)
	got, err := os.ReadFile(fpath)
	switch {
	case err == nil:
		if string(got) != formatLine {
			return fmt.Errorf("unknown format %q in %s", got, fpath)
		}
	case errors.Is(err, fs.ErrNotExist):
		entries, err := os.ReadDir(d.root)
		if err != nil {
			return err
		}
		for _, e := range entries {
			if e.Name() == reservedDir {
				continue
			}
			// Another process may have just created the bucket and
			// written to it.
			if got, err := os.ReadFile(fpath); err == nil && string(got) == formatLine {
				break
			}
			return fmt.Errorf("directory is not empty and has no %s", filepath.Join(reservedDir, formatFile))
		}
		if err := d.mkdirs(filepath.Join(d.root, reservedDir)); err != nil {
			return err
		}
		if err := d.writeAtomic(filepath.Join(d.root, reservedDir), formatFile, []byte(formatLine)); err != nil {
			return err
		}
	default:
		return err
	}
	// Keys differ by case; a filesystem that folds it would merge them.
	if _, err := os.Stat(filepath.Join(d.root, strings.ToUpper(reservedDir), strings.ToUpper(formatFile))); err == nil {
		return errors.New("the filesystem is case-insensitive")
	}
	return d.mkdirs(filepath.Join(d.root, reservedDir, locksDir))
}

// removeStaleTemps deletes the temporary files modified before cutoff.
func (d *Dir) removeStaleTemps(cutoff time.Time) error {
	return filepath.WalkDir(d.root, func(path string, e fs.DirEntry, err error) error {
		if err != nil {
			if errors.Is(err, fs.ErrNotExist) {
				return nil // removed by a concurrent Delete
			}
			return err
		}
		if e.IsDir() {
			if path == filepath.Join(d.root, reservedDir) {
				return fs.SkipDir
			}
			return nil
		}
		if !strings.Contains(e.Name(), tmpInfix) {
			return nil
		}
		info, err := e.Info()
		if err != nil {
			if errors.Is(err, fs.ErrNotExist) {
				return nil
			}
			return err
		}
		if info.ModTime().Before(cutoff) {
			if err := os.Remove(path); err != nil && !errors.Is(err, fs.ErrNotExist) {
				return err
			}
		}
		return nil
	})
}

// Close releases the lock files. It waits for operations in progress;
// every later call returns an error.
func (d *Dir) Close() error {
	if d.closed.Swap(true) {
		return nil
	}
	var first error
	if d.j != nil {
		first = d.j.close()
	}
	for i := range d.stripes {
		s := &d.stripes[i]
		s.sem <- struct{}{}
		if s.f != nil {
			if err := s.f.Close(); err != nil && first == nil {
				first = err
			}
			s.f = nil
		}
		<-s.sem
	}
	// Every stripe is held and released: no write is waiting on the
	// group sync any more.
	if d.rootFile != nil {
		if err := d.rootFile.Close(); err != nil && first == nil {
			first = err
		}
	}
	return first
}

// Path returns the directory the bucket lives in.
func (d *Dir) Path() string { return d.root }

// Get implements [Bucket]. It takes no lock: objects are replaced by
// rename, so the file it opens is complete and never changes.
func (d *Dir) Get(ctx context.Context, key string) ([]byte, string, error) {
	if err := d.check(ctx, key); err != nil {
		return nil, "", opError("get", key, err)
	}
	if d.j != nil {
		body, etag, found, err := d.j.get(key)
		if err != nil {
			return nil, "", opError("get", key, err)
		}
		if found {
			return body, etag, nil
		}
	}
	body, h, err := readObject(d.objectFile(key))
	if err != nil {
		return nil, "", opError("get", key, err)
	}
	return body, h.etag(), nil
}

// Put implements [Bucket].
func (d *Dir) Put(ctx context.Context, key string, body []byte, cond Cond) (string, error) {
	if err := cond.Validate(); err != nil {
		return "", opError("put", key, err)
	}
	if err := d.check(ctx, key); err != nil {
		return "", opError("put", key, err)
	}
	if d.j != nil {
		return d.journalPut(key, body, cond)
	}
	unlock, err := d.lock(ctx, key)
	if err != nil {
		return "", opError("put", key, err)
	}
	defer unlock()
	dir, base := d.objectPath(key)
	obj := filepath.Join(dir, base+objSuffix)
	cur, exists, err := readHeader(obj)
	if err != nil {
		if cond != (Cond{}) {
			return "", opError("put", key, err)
		}
		// An unconditional Put replaces even an object it cannot read.
		cur, exists = header{}, false
	}
	if err := checkCond(cond, exists, cur.etag()); err != nil {
		return "", opError("put", key, err)
	}
	h := header{version: 1, nonce: rand.Uint64(), length: uint64(len(body))}
	if exists {
		h.version = cur.version + 1
	}
	if err := d.writeObject(dir, base, h, body); err != nil {
		return "", opError("put", key, err)
	}
	return h.etag(), nil
}

// Delete implements [Bucket].
func (d *Dir) Delete(ctx context.Context, key string, ifMatch string) error {
	if err := d.check(ctx, key); err != nil {
		return opError("delete", key, err)
	}
	if d.j != nil {
		return d.journalDelete(key, ifMatch)
	}
	unlock, err := d.lock(ctx, key)
	if err != nil {
		return opError("delete", key, err)
	}
	defer unlock()
	dir, base := d.objectPath(key)
	obj := filepath.Join(dir, base+objSuffix)
	if ifMatch != "" {
		cur, exists, err := readHeader(obj)
		if err != nil {
			return opError("delete", key, err)
		}
		if err := checkCond(Cond{IfMatch: ifMatch}, exists, cur.etag()); err != nil {
			return opError("delete", key, err)
		}
	}
	if err := os.Remove(obj); err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return nil // unconditional: a missing key is fine
		}
		return opError("delete", key, err)
	}
	if err := d.syncRemoval(dir); err != nil {
		return opError("delete", key, fmt.Errorf("%w: removed but not synced: %w", ErrUnknownOutcome, err))
	}
	d.removeEmptyDirs(dir)
	return nil
}

// listFiles lists the object files under prefix.
func (d *Dir) listFiles(ctx context.Context, prefix string) ([]string, error) {
	if err := ValidPrefix(prefix); err != nil {
		return nil, opError("list", prefix, err)
	}
	if err := d.ready(ctx); err != nil {
		return nil, opError("list", prefix, err)
	}
	// Start in the deepest directory the prefix names completely.
	start, keyDir := d.root, ""
	if i := strings.LastIndexByte(prefix, '/'); i >= 0 {
		keyDir = prefix[:i+1]
		start = d.dirPath(prefix[:i])
	}
	keys := make([]string, 0)
	if err := d.walk(ctx, start, keyDir, "", prefix, &keys); err != nil {
		return nil, opError("list", prefix, err)
	}
	slices.Sort(keys)
	return keys, nil
}

// List implements [Bucket].
func (d *Dir) List(ctx context.Context, prefix string) ([]string, error) {
	keys, _, err := d.list(ctx, prefix)
	return keys, err
}

// list lists the keys under prefix, with the ETags of those whose
// latest version the journal holds.
func (d *Dir) list(ctx context.Context, prefix string) ([]string, map[string]string, error) {
	keys, err := d.listFiles(ctx, prefix)
	if err != nil || d.j == nil {
		return keys, nil, err
	}
	keys, etags, err := d.j.merge(keys, prefix)
	if err != nil {
		return nil, nil, opError("list", prefix, err)
	}
	return keys, etags, nil
}

// ListPage implements [Bucket]. It walks the directories as List does
// and reads the header of each object on the page for its ETag.
func (d *Dir) ListPage(ctx context.Context, prefix, after string, limit int) ([]Entry, bool, error) {
	keys, journaled, err := d.list(ctx, prefix)
	if err != nil {
		return nil, false, err
	}
	page, more := pageOf(keys, after, limit)
	entries := make([]Entry, 0, len(page))
	for _, k := range page {
		if etag, ok := journaled[k]; ok {
			entries = append(entries, Entry{Key: k, ETag: etag})
			continue
		}
		h, exists, err := readHeader(d.objectFile(k))
		if err != nil {
			return nil, false, opError("list", prefix, err)
		}
		if exists { // not deleted meanwhile
			entries = append(entries, Entry{Key: k, ETag: h.etag()})
		}
	}
	return entries, more, nil
}

// walk appends to keys the keys with prefix under the directory fsdir,
// which holds the keys that begin keyDir+pending (pending: the pieces of a
// long segment read so far).
func (d *Dir) walk(ctx context.Context, fsdir, keyDir, pending, prefix string, keys *[]string) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	entries, err := os.ReadDir(fsdir)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return nil // not there, or removed by a concurrent Delete
		}
		return err
	}
	compatible := func(s string) bool {
		return strings.HasPrefix(s, prefix) || strings.HasPrefix(prefix, s)
	}
	for _, e := range entries {
		name := e.Name()
		switch {
		case strings.HasSuffix(name, objSuffix):
			seg := strings.TrimSuffix(name, objSuffix)
			key := keyDir + pending + seg
			if e.Type().IsRegular() && strings.HasPrefix(key, prefix) &&
				ValidKey(key) == nil && d.objectFile(key) == filepath.Join(fsdir, name) {
				*keys = append(*keys, key)
			}
		case strings.Contains(name, "@") || !e.IsDir():
			// temporary file, internals, or something that is not ours
		case strings.HasSuffix(name, chainSuffix):
			p := pending + strings.TrimSuffix(name, chainSuffix)
			if compatible(keyDir + p) {
				if err := d.walk(ctx, filepath.Join(fsdir, name), keyDir, p, prefix, keys); err != nil {
					return err
				}
			}
		default:
			k := keyDir + pending + name + "/"
			if compatible(k) {
				if err := d.walk(ctx, filepath.Join(fsdir, name), k, "", prefix, keys); err != nil {
					return err
				}
			}
		}
	}
	return nil
}

// check validates key and tells whether d and ctx allow an operation.
func (d *Dir) check(ctx context.Context, key string) error {
	if err := ValidKey(key); err != nil {
		return err
	}
	return d.ready(ctx)
}

func (d *Dir) ready(ctx context.Context) error {
	if d.closed.Load() {
		return errClosed
	}
	return ctx.Err()
}

// appendSegment appends the file names that store segment seg: a chain of
// pieces ending in '+' for a long one, then the final piece.
func appendSegment(names []string, seg string) []string {
	for len(seg) > maxPlainName {
		names = append(names, seg[:chainPieceLen]+chainSuffix)
		seg = seg[chainPieceLen:]
	}
	return append(names, seg)
}

// dirPath returns the directory of the segments of key (a valid key).
func (d *Dir) dirPath(key string) string {
	names := []string{d.root}
	for seg := range strings.SplitSeq(key, "/") {
		names = appendSegment(names, seg)
	}
	return filepath.Join(names...)
}

// objectPath returns the directory that holds key's object file and the
// name of that file without objSuffix.
func (d *Dir) objectPath(key string) (dir, base string) {
	names := []string{d.root}
	for seg := range strings.SplitSeq(key, "/") {
		names = appendSegment(names, seg)
	}
	return filepath.Join(names[:len(names)-1]...), names[len(names)-1]
}

// objectFile returns the path of key's object file.
func (d *Dir) objectFile(key string) string {
	dir, base := d.objectPath(key)
	return filepath.Join(dir, base+objSuffix)
}

// writeObject writes the object file dir/base@ atomically: a temporary file
// beside it, fsync, rename, fsync of dir. The caller holds the key's lock.
func (d *Dir) writeObject(dir, base string, h header, body []byte) error {
	var hdr [hdrLen]byte
	h.put(&hdr, body)
	return d.writeAtomic(dir, base+objSuffix, hdr[:], body)
}

// writeAtomic replaces dir/name with the concatenation of parts. An error
// wrapping ErrUnknownOutcome means the rename happened and the directory
// fsync failed; any other error means dir/name was not changed.
func (d *Dir) writeAtomic(dir, name string, parts ...[]byte) error {
	target := filepath.Join(dir, name)
	base := strings.TrimSuffix(name, objSuffix)
	for attempt := 0; ; attempt++ {
		tmp, err := d.writeTemp(dir, base, parts, true)
		if errors.Is(err, fs.ErrNotExist) && attempt < 100 {
			// A Delete of another key removed dir while it was empty
			// (between mkdirs and the create). Make it again.
			continue
		}
		if err != nil {
			return err
		}
		if err := os.Rename(tmp, target); err != nil {
			_ = os.Remove(tmp)
			return err
		}
		if err := d.syncDir(dir); err != nil {
			return fmt.Errorf("%w: renamed but not synced: %w", ErrUnknownOutcome, err)
		}
		return nil
	}
}

// writeTemp creates dir if needed, writes parts to a new temporary file in
// it, flushes it (unless the caller will: flush false) and closes it, and
// returns its path. On error it leaves no file behind.
func (d *Dir) writeTemp(dir, base string, parts [][]byte, flush bool) (path string, err error) {
	if err := d.mkdirs(dir); err != nil {
		return "", err
	}
	path = filepath.Join(dir, base+tmpInfix+fmt.Sprintf("%016x", rand.Uint64()))
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644)
	if err != nil {
		return "", err
	}
	defer func() {
		if err != nil && f != nil {
			_ = f.Close()
			_ = os.Remove(path)
		}
	}()
	for _, p := range parts {
		if _, err := f.Write(p); err != nil {
			return "", err
		}
	}
	if flush {
		if err := d.flush(f); err != nil {
			return "", err
		}
	}
	if err := f.Close(); err != nil {
		_ = os.Remove(path)
		return "", err
	}
	f = nil
	return path, nil
}

// mkdirs creates dir (under the root) and its missing parents, fsyncing the
// parent of each directory it creates so that the new entry is durable.
func (d *Dir) mkdirs(dir string) error {
	if fi, err := os.Stat(dir); err == nil && fi.IsDir() {
		return nil
	}
	rel, err := filepath.Rel(d.root, dir)
	if err != nil || rel == ".." || strings.HasPrefix(rel, ".."+string(filepath.Separator)) {
		return fmt.Errorf("store: %q is not under %q", dir, d.root)
	}
	p := d.root
	for name := range strings.SplitSeq(rel, string(filepath.Separator)) {
		parent := p
		p = filepath.Join(p, name)
		switch err := os.Mkdir(p, 0o755); {
		case err == nil:
			if err := d.syncDir(parent); err != nil {
				return err
			}
		case errors.Is(err, fs.ErrExist):
		default:
			return err
		}
	}
	return nil
}

// syncRemoval makes the removal of an entry of dir durable by fsyncing dir.
// If dir is gone, a concurrent Delete found it empty (so after our unlink)
// and removed it; then the nearest ancestor that exists is fsynced, which
// commits that rmdir and, with it, the unlink that preceded it.
func (d *Dir) syncRemoval(dir string) error {
	for {
		err := d.syncDir(dir)
		if !errors.Is(err, fs.ErrNotExist) || dir == d.root {
			return err
		}
		dir = filepath.Dir(dir)
	}
}

// syncDir fsyncs a directory, which makes its entries durable: with a
// group sync, that of the whole filesystem, which needs no open of dir.
func (d *Dir) syncDir(dir string) error {
	if d.noSync {
		return nil
	}
	if d.group != nil {
		return d.group.wait()
	}
	f, err := os.Open(dir)
	if err != nil {
		return err
	}
	err = d.flush(f)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
}

// lock takes key's lock: first this process's token for the stripe, then
// the flock that excludes other processes. It gives up when ctx is done.
func (d *Dir) lock(ctx context.Context, key string) (unlock func(), err error) {
	s := &d.stripes[stripeOf(key)]
	select {
	case s.sem <- struct{}{}:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	release := func() { <-s.sem }
	if d.closed.Load() {
		release()
		return nil, errClosed
	}
	if s.f == nil {
		name := filepath.Join(d.root, reservedDir, locksDir, fmt.Sprintf("%02x", stripeOf(key)))
		f, err := os.OpenFile(name, os.O_RDWR|os.O_CREATE, 0o644)
		if err != nil {
			release()
			return nil, err
		}
		s.f = f
	}
	unlock = func() {
		_ = funlock(s.f)
		release()
	}
	ok, err := flock(s.f, false)
	if err != nil {
		release()
		return nil, err
	}
	if !ok {
		// Another process holds it. Wait in a goroutine so that ctx can
		// end the wait; if it does, that goroutine still owns the stripe
		// and hands it back once its flock returns.
		done := make(chan error, 1)
		go func() {
			_, err := flock(s.f, true)
			done <- err
		}()
		select {
		case err := <-done:
			if err != nil {
				release()
				return nil, err
			}
		case <-ctx.Done():
			go func() {
				if <-done == nil {
					_ = funlock(s.f)
				}
				release()
			}()
			return nil, ctx.Err()
		}
	}
	if err := ctx.Err(); err != nil {
		unlock()
		return nil, err
	}
	return unlock, nil
}

// stripeOf hashes key onto a lock stripe (FNV-1a).
func stripeOf(key string) int {
	h := uint32(2166136261)
	for i := 0; i < len(key); i++ {
		h ^= uint32(key[i])
		h *= 16777619
	}
	return int(h % numStripes)
}

// header is the decoded header of an object file.
type header struct {
	version, nonce, length uint64
}

func (h header) etag() string {
	return strconv.FormatUint(h.version, 10) + "-" + fmt.Sprintf("%016x", h.nonce)
}

// put encodes h for body into b.
func (h header) put(b *[hdrLen]byte, body []byte) {
	copy(b[0:4], hdrMagic)
	binary.LittleEndian.PutUint32(b[4:8], 0)
	binary.LittleEndian.PutUint64(b[8:16], h.version)
	binary.LittleEndian.PutUint64(b[16:24], h.nonce)
	binary.LittleEndian.PutUint64(b[24:32], uint64(len(body)))
	c := crc32.Update(0, castagnoli, b[:32])
	binary.LittleEndian.PutUint32(b[32:36], crc32.Update(c, castagnoli, body))
}

// parseHeader decodes the fixed fields of b (without checking the CRC).
func parseHeader(b []byte) (header, error) {
	if len(b) < hdrLen || string(b[0:4]) != hdrMagic || binary.LittleEndian.Uint32(b[4:8]) != 0 {
		return header{}, errCorrupt("bad header")
	}
	return header{
		version: binary.LittleEndian.Uint64(b[8:16]),
		nonce:   binary.LittleEndian.Uint64(b[16:24]),
		length:  binary.LittleEndian.Uint64(b[24:32]),
	}, nil
}

func errCorrupt(why string) error { return fmt.Errorf("store: corrupt object file: %s", why) }

// readHeader reads the header of the object file at path; exists is false
// if there is none.
func readHeader(path string) (h header, exists bool, err error) {
	f, err := os.Open(path)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return header{}, false, nil
		}
		return header{}, false, err
	}
	defer f.Close()
	var b [hdrLen]byte
	if _, err := io.ReadFull(f, b[:]); err != nil {
		return header{}, false, errCorrupt(err.Error())
	}
	h, err = parseHeader(b[:])
	return h, err == nil, err
}

// readObject reads and verifies the object file at path.
func readObject(path string) ([]byte, header, error) {
	f, err := os.Open(path)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return nil, header{}, ErrNotFound
		}
		return nil, header{}, err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, header{}, err
	}
	if fi.Size() < hdrLen {
		return nil, header{}, errCorrupt("short file")
	}
	buf := make([]byte, fi.Size())
	if _, err := io.ReadFull(f, buf); err != nil {
		return nil, header{}, err
	}
	h, err := parseHeader(buf)
	if err != nil {
		return nil, header{}, err
	}
	body := buf[hdrLen:]
	if h.length != uint64(len(body)) {
		return nil, header{}, errCorrupt("length mismatch")
	}
	c := crc32.Update(0, castagnoli, buf[:32])
	if crc32.Update(c, castagnoli, body) != binary.LittleEndian.Uint32(buf[32:36]) {
		return nil, header{}, errCorrupt("checksum mismatch")
	}
	return body, h, nil
}

var _ Committer = (*Dir)(nil)

// PutCommit implements [Committer]. The new objects are written under
// their own names at once (O_EXCL: no temporary file, no rename, since
// nothing references them yet) and key's under a temporary name; one
// flush makes all of it durable, the rename makes key's object current,
// and a second flush makes the rename durable: two flushes a commit,
// shared with the commits of other rooms under way, where a Put each
// would take two fsyncs each.
func (d *Dir) PutCommit(ctx context.Context, created []Object, key string, body []byte, cond Cond) (string, error) {
	if err := cond.Validate(); err != nil {
		return "", opError("put", key, err)
	}
	for _, o := range created {
		if err := d.check(ctx, o.Key); err != nil {
			return "", opError("put", o.Key, err)
		}
	}
	if err := d.check(ctx, key); err != nil {
		return "", opError("put", key, err)
	}
	if d.j != nil {
		return d.journalCommit(created, key, body, cond)
	}
	var written []string // created object files, removed again on an error
	fail := func(k string, err error) (string, error) {
		for _, p := range written {
			_ = os.Remove(p)
		}
		return "", opError("put", k, err)
	}
	var files []*os.File // to flush, without a group sync
	defer func() {
		for _, f := range files {
			_ = f.Close()
		}
	}()
	for _, o := range created {
		f, err := d.createObject(o.Key)
		if err != nil {
			return fail(o.Key, err)
		}
		written = append(written, f.Name())
		files = append(files, f)
		h := header{version: 1, nonce: rand.Uint64(), length: uint64(len(o.Body))}
		var hdr [hdrLen]byte
		h.put(&hdr, o.Body)
		if _, err := f.Write(hdr[:]); err != nil {
			return fail(o.Key, err)
		}
		if _, err := f.Write(o.Body); err != nil {
			return fail(o.Key, err)
		}
	}
	unlock, err := d.lock(ctx, key)
	if err != nil {
		return fail(key, err)
	}
	defer unlock()
	dir, base := d.objectPath(key)
	obj := filepath.Join(dir, base+objSuffix)
	cur, exists, err := readHeader(obj)
	if err != nil && cond != (Cond{}) {
		return fail(key, err)
	}
	if err := checkCond(cond, exists, cur.etag()); err != nil {
		return fail(key, err)
	}
	h := header{version: 1, nonce: rand.Uint64(), length: uint64(len(body))}
	if exists {
		h.version = cur.version + 1
	}
	var hdr [hdrLen]byte
	h.put(&hdr, body)
	tmp, err := d.writeTemp(dir, base, [][]byte{hdr[:], body}, false)
	if err != nil {
		return fail(key, err)
	}
	// One flush for the new objects, their names and key's data.
	if err := d.flushAll(files, tmp); err != nil {
		_ = os.Remove(tmp)
		return fail(key, err)
	}
	if err := os.Rename(tmp, obj); err != nil {
		_ = os.Remove(tmp)
		return fail(key, err)
	}
	if err := d.syncDir(dir); err != nil {
		return "", opError("put", key, fmt.Errorf("%w: renamed but not synced: %w", ErrUnknownOutcome, err))
	}
	return h.etag(), nil
}

// createObject creates key's object file, which must not exist, and
// returns it open for writing: ErrPrecondition if it exists.
func (d *Dir) createObject(key string) (*os.File, error) {
	dir, base := d.objectPath(key)
	for attempt := 0; ; attempt++ {
		if err := d.mkdirs(dir); err != nil {
			return nil, err
		}
		f, err := os.OpenFile(filepath.Join(dir, base+objSuffix), os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644)
		switch {
		case errors.Is(err, fs.ErrExist):
			return nil, ErrPrecondition
		case errors.Is(err, fs.ErrNotExist) && attempt < 100:
			continue // a Delete removed dir while it was empty: make it again
		}
		return f, err
	}
}

// flushAll makes the data of files and of the file at tmp durable, and
// the entries of the directories the files were created in: one group
// sync, or else an fsync of each.
func (d *Dir) flushAll(files []*os.File, tmp string) error {
	if d.noSync {
		return nil
	}
	if d.group != nil {
		return d.group.wait()
	}
	for _, f := range files {
		if err := f.Sync(); err != nil {
			return err
		}
		if err := d.syncDir(filepath.Dir(f.Name())); err != nil {
			return err
		}
	}
	f, err := os.Open(tmp)
	if err != nil {
		return err
	}
	err = f.Sync()
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
}
