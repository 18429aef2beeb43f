package store

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io/fs"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// The journal of a Dir that one process owns (DirOptions.Journal: the
// data directory of a single node). Every change (a Put, a Delete, a
// commit's objects with the object that references them) is one record
// appended to one file and made durable by one fdatasync, which every
// writer waiting at the time shares; the changed objects are kept in
// memory until a checkpoint writes the latest version of each to its
// object file. A durable event of a room then costs an append and a
// share of a flush, where the object files cost a create, a rename and a
// filesystem sync each, plus the unlinks of the segments compaction
// supersedes: on ext4 those cost about ten times the CPU of the event
// itself, mostly in the kernel. Segments that a later compaction
// supersedes before the next checkpoint never reach a file at all.
//
// A checkpoint starts once the journal holds JournalSize bytes, or its
// oldest change is JournalAge old, or no change came for journalQuiet
// (what the journal holds it also keeps in memory, and a node that goes
// quiet should not keep its last writes on its heap): it moves
// the appends to a new journal file, writes the objects the old one
// changed (the latest version of each, under the ETag it has, with no
// flush), syncs the filesystem once, and removes the old file. Opening
// the directory again replays every journal file left by a crash the same
// way, so nothing a writer was told is durable is lost. A record cut
// short by a crash at the end of the last file is ignored: its writer was
// never answered.
//
// Readers see a change only once it is durable (a Get that finds one in
// flight waits for its flush), so nothing read can be lost by a crash. An
// append that fails (a full disk) is cut off again and fails alone; a
// flush that fails, or an append that cannot be cut off, makes every
// later operation fail: what the kernel dropped cannot be known, so the
// process must open the directory again, which replays what did reach
// the disk.

// Journal record, little endian:
//
//	[0:4]   magic "wkJ1"
//	[4:8]   payload length
//	[8:12]  CRC-32C of the payload
//	payload: entries, each
//	        op (1 put, 2 delete), key length u16, key,
//	        version u64, nonce u64, body length u32, body
const (
	journalMagic  = "wkJ1"
	journalHdrLen = 12
	journalDir    = "journal"      // in reservedDir: the journal files
	journalLock   = "journal.lock" // in reservedDir: held by the journal's owner
	opPut         = 1
	opDelete      = 2
	// maxJournalRecord bounds one record (a commit's objects): a larger
	// commit is refused rather than written.
	maxJournalRecord = 1 << 30
)

// DefaultJournalSize is how large a journal grows before a checkpoint:
// it bounds the memory the changed objects take until then, and what a
// start after a crash replays. DefaultJournalAge is how long a change
// waits for one at most. Under load most of what a journal holds is
// segments that compaction superseded before the checkpoint, which never
// reach a file; a checkpoint writes the others, a few files a room.
const (
	DefaultJournalSize = 64 << 20
	DefaultJournalAge  = 5 * time.Second
)

// errJournalBusy: another process keeps a journal in the directory.
var errJournalBusy = errors.New("another process has this store open with its journal (a node on its data directory)")

// JournalStats describes a Dir's journal.
type JournalStats struct {
	// Bytes is the size of the journal file appended to; Pending the
	// objects whose latest version only the journal holds (kept in
	// memory until the next checkpoint).
	Bytes   int64
	Pending int
	// Checkpoints counts the checkpoints since the Dir was opened;
	// Replayed the changes its open wrote to their object files from the
	// journal files a crash left.
	Checkpoints uint64
	Replayed    int
}

// journal is a Dir's journal (see above).
type journal struct {
	d        *Dir
	limit    int64
	maxAge   time.Duration
	lockFile *os.File // holds journalLock exclusively

	mu      sync.Mutex
	f       *os.File // the journal file appended to
	num     uint64   // f's number
	size    int64    // bytes appended to f
	seq     uint64   // records appended, all files
	pending map[string]*change
	failed  error // the first write or flush that failed: every later operation fails
	closed  bool
	writers sync.WaitGroup // appenders waiting for their flush
	ckpt    chan struct{}  // closed when the checkpoint running ends; nil if none runs
	aging   *time.Timer    // armed while f has records: starts a checkpoint when they are old or quiet
	firstAt time.Time      // when f's first record was appended
	lastAt  time.Time      // when the last record was appended

	checkpoints uint64 // under mu
	replayed    int

	fileMu  sync.Mutex // held by a flush of f, and to switch f
	flusher *groupSync // fdatasync of f, shared by the writers waiting
	durable atomic.Uint64
}

// change is the latest version of a key the journal holds.
type change struct {
	h       header
	body    []byte
	deleted bool
	seq     uint64 // the record that made it
	num     uint64 // the journal file that holds it
}

// jop is one change a write asks for.
type jop struct {
	key     string
	body    []byte
	del     bool
	cond    Cond // for a put; a delete's If-Match is cond.IfMatch
	created bool // must not exist
}

// openJournal replays what a crashed owner left and, with own, starts
// the journal of d (nil without own). Without own the lock is only
// tried, and only if journal files are there: a live owner makes the
// directory unusable to others.
func openJournal(d *Dir, own bool, limit int64, maxAge time.Duration) (*journal, error) {
	rdir := filepath.Join(d.root, reservedDir)
	if !own {
		// An owner always has a journal file: without one there is
		// nothing to replay and nobody to wait for.
		entries, err := os.ReadDir(filepath.Join(rdir, journalDir))
		if errors.Is(err, fs.ErrNotExist) || err == nil && len(entries) == 0 {
			return nil, nil
		}
		if err != nil {
			return nil, err
		}
	}
	if err := d.mkdirs(filepath.Join(rdir, journalDir)); err != nil {
		return nil, err
	}
	lf, err := os.OpenFile(filepath.Join(rdir, journalLock), os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		return nil, err
	}
	ok, err := flock(lf, false)
	if err != nil || !ok {
		_ = lf.Close()
		if err == nil {
			err = errJournalBusy
		}
		return nil, err
	}
	last, replayed, err := d.replayJournal()
	if err != nil || !own {
		_ = lf.Close() // releases the lock
		return nil, err
	}
	j := &journal{d: d, limit: limit, maxAge: maxAge, lockFile: lf, pending: map[string]*change{}, replayed: replayed}
	if j.f, err = j.create(last + 1); err != nil {
		_ = lf.Close()
		return nil, err
	}
	j.num = last + 1
	j.flusher = newGroupSync(j.flush)
	return j, nil
}

func (d *Dir) journalPath(num uint64) string {
	return filepath.Join(d.root, reservedDir, journalDir, fmt.Sprintf("%020d", num))
}

// create makes journal file num, durably.
func (j *journal) create(num uint64) (*os.File, error) {
	f, err := os.OpenFile(j.d.journalPath(num), os.O_WRONLY|os.O_CREATE|os.O_EXCL|os.O_APPEND, 0o644)
	if err != nil {
		return nil, err
	}
	if err := j.d.syncDir(filepath.Dir(f.Name())); err != nil {
		_ = f.Close()
		return nil, err
	}
	return f, nil
}

// flush makes what was appended to the journal file durable.
func (j *journal) flush() error {
	if j.d.noSync {
		return nil
	}
	j.fileMu.Lock()
	defer j.fileMu.Unlock()
	return datasync(j.f)
}

// fail records the first failure of the journal; every later operation
// returns it.
func (j *journal) fail(err error) error {
	err = fmt.Errorf("%w: the journal failed, reopen the store: %w", ErrUnknownOutcome, err)
	j.mu.Lock()
	if j.failed == nil {
		j.failed = err
	}
	err = j.failed
	j.mu.Unlock()
	return err
}

// state returns key's object as the journal or its file has it: exists
// is false for none (deleted in the journal, or no file). The caller
// holds j.mu.
func (j *journal) state(key string) (h header, exists bool, err error) {
	if c := j.pending[key]; c != nil {
		return c.h, !c.deleted, nil
	}
	return readHeader(j.d.objectFile(key))
}

// write applies ops as one record: every op's condition holds and all of
// them are durable when it returns without an error, or none is applied.
// It returns the new ETag of each op (empty for a delete).
func (j *journal) write(ops []jop) ([]string, error) {
	j.mu.Lock()
	if err := j.usable(); err != nil {
		j.mu.Unlock()
		return nil, err
	}
	rec := make([]byte, journalHdrLen, journalHdrLen+64)
	etags := make([]string, len(ops))
	changes := make([]*change, len(ops))
	n := 0
	for i, op := range ops {
		cur, exists, err := j.state(op.key)
		if err != nil && (op.cond != (Cond{}) || op.created) {
			j.mu.Unlock()
			return nil, opError(opName(op), op.key, err)
		}
		if err != nil {
			cur, exists = header{}, false // an unconditional write replaces what it cannot read
		}
		cond := op.cond
		if op.created {
			cond = IfNoneMatch()
		}
		if err := checkCond(cond, exists, cur.etag()); err != nil {
			j.mu.Unlock()
			return nil, opError(opName(op), op.key, err)
		}
		if op.del && !exists {
			continue // an unconditional delete of nothing changes nothing
		}
		c := &change{deleted: op.del}
		if !op.del {
			c.body = slices.Clone(op.body)
			c.h = header{version: 1, nonce: rand.Uint64(), length: uint64(len(op.body))}
			if exists {
				c.h.version = cur.version + 1
			}
			etags[i] = c.h.etag()
		}
		changes[i] = c
		rec = appendEntry(rec, op.key, c)
		n++
	}
	if n == 0 {
		j.mu.Unlock()
		return etags, nil
	}
	if len(rec)-journalHdrLen > maxJournalRecord {
		j.mu.Unlock()
		return nil, opError("put", ops[len(ops)-1].key, fmt.Errorf("a commit of %d bytes passes the journal's bound of %d", len(rec), maxJournalRecord))
	}
	copy(rec[0:4], journalMagic)
	binary.LittleEndian.PutUint32(rec[4:8], uint32(len(rec)-journalHdrLen))
	binary.LittleEndian.PutUint32(rec[8:12], crc32.Checksum(rec[journalHdrLen:], castagnoli))
	if _, err := j.f.Write(rec); err != nil {
		// A record cut short would end every replay there: it goes, or
		// nothing may be appended after it. A full disk then fails this
		// write only, as it would an object file's.
		terr := j.f.Truncate(j.size)
		j.mu.Unlock()
		if terr != nil {
			return nil, j.fail(err)
		}
		return nil, opError(opName(ops[len(ops)-1]), ops[len(ops)-1].key, err)
	}
	j.seq++
	seq := j.seq
	for i, c := range changes {
		if c != nil {
			c.seq, c.num = seq, j.num
			j.pending[ops[i].key] = c
		}
	}
	j.lastAt = time.Now()
	if j.size == 0 {
		j.firstAt = j.lastAt
		j.armAge()
	}
	j.size += int64(len(rec))
	if j.size >= j.limit {
		j.startCheckpoint()
	}
	if err := j.awaitDurable(seq); err != nil {
		return nil, err
	}
	return etags, nil
}

// awaitDurable releases j.mu, which the caller holds, and waits for a
// flush that makes the records up to seq durable.
func (j *journal) awaitDurable(seq uint64) error {
	j.writers.Add(1)
	j.mu.Unlock()
	err := j.flusher.wait()
	j.writers.Done()
	if err != nil {
		return j.fail(err)
	}
	j.markDurable(seq)
	return nil
}

func opName(op jop) string {
	if op.del {
		return "delete"
	}
	return "put"
}

// usable is nil if the journal takes operations. The caller holds j.mu.
func (j *journal) usable() error {
	if j.failed != nil {
		return j.failed
	}
	if j.closed {
		return errClosed
	}
	return nil
}

// markDurable records that the records up to seq are durable.
func (j *journal) markDurable(seq uint64) {
	for {
		cur := j.durable.Load()
		if cur >= seq || j.durable.CompareAndSwap(cur, seq) {
			return
		}
	}
}

// settle waits until every record appended before the call is durable,
// so that a reader sees no change a crash could take back.
func (j *journal) settle() error {
	j.mu.Lock()
	if err := j.usable(); err != nil {
		j.mu.Unlock()
		return err
	}
	if j.durable.Load() >= j.seq {
		j.mu.Unlock()
		return nil
	}
	return j.awaitDurable(j.seq)
}

// get returns key's object if the journal holds its latest version
// (found), waiting for the flush of a change in flight.
func (j *journal) get(key string) (body []byte, etag string, found bool, err error) {
	for {
		j.mu.Lock()
		if err := j.usable(); err != nil {
			j.mu.Unlock()
			return nil, "", false, err
		}
		c := j.pending[key]
		if c == nil {
			j.mu.Unlock()
			return nil, "", false, nil
		}
		if c.seq <= j.durable.Load() {
			defer j.mu.Unlock()
			if c.deleted {
				return nil, "", true, ErrNotFound
			}
			return slices.Clone(c.body), c.h.etag(), true, nil
		}
		j.mu.Unlock()
		if err := j.settle(); err != nil {
			return nil, "", false, err
		}
	}
}

// merge applies the journal's changes to keys, a sorted listing of the
// object files under prefix, and returns the ETags of the keys it holds.
func (j *journal) merge(keys []string, prefix string) ([]string, map[string]string, error) {
	if err := j.settle(); err != nil {
		return nil, nil, err
	}
	j.mu.Lock()
	defer j.mu.Unlock()
	etags := map[string]string{}
	gone := map[string]bool{}
	for k, c := range j.pending {
		if !strings.HasPrefix(k, prefix) {
			continue
		}
		if c.deleted {
			gone[k] = true
		} else {
			etags[k] = c.h.etag()
		}
	}
	out := keys[:0]
	for _, k := range keys {
		if !gone[k] {
			out = append(out, k)
		}
	}
	for k := range etags {
		out = append(out, k) // one that has a file too goes in Compact
	}
	slices.Sort(out)
	return slices.Compact(out), etags, nil
}

// startCheckpoint starts a checkpoint unless one runs. The caller holds
// j.mu.
func (j *journal) startCheckpoint() {
	if j.ckpt == nil && !j.closed && j.failed == nil {
		j.ckpt = make(chan struct{})
		go j.checkpoint()
	}
}

// journalQuiet is how long a journal with records waits for the next
// before it checkpoints: a node that went quiet writes its last changes
// out at once.
const journalQuiet = 100 * time.Millisecond

// armAge starts a checkpoint once the first record of the journal file
// is maxAge old or no record came for journalQuiet, looking every
// journalQuiet. The caller holds j.mu.
func (j *journal) armAge() {
	if j.aging != nil {
		j.aging.Stop()
	}
	var look func()
	look = func() {
		j.mu.Lock()
		defer j.mu.Unlock()
		if j.size == 0 || j.closed || j.ckpt != nil {
			return // nothing to write, or the checkpoint's end looks again
		}
		if now := time.Now(); now.Sub(j.lastAt) >= journalQuiet || now.Sub(j.firstAt) >= j.maxAge {
			j.startCheckpoint()
			return
		}
		j.aging = time.AfterFunc(journalQuiet, look)
	}
	j.aging = time.AfterFunc(journalQuiet, look)
}

// checkpoint moves the appends to a new journal file, writes the objects
// the old one changed to their files, and removes it (see above).
func (j *journal) checkpoint() {
	err := j.checkpointOnce()
	j.mu.Lock()
	close(j.ckpt)
	j.ckpt = nil
	if err == nil && j.size > 0 && !j.closed {
		j.firstAt = j.lastAt // roughly: what came meanwhile waits at most maxAge more
		j.armAge()
	}
	j.mu.Unlock()
	if err != nil {
		_ = j.fail(err)
	}
}

func (j *journal) checkpointOnce() error {
	j.mu.Lock()
	if j.failed != nil {
		j.mu.Unlock()
		return nil
	}
	old, oldNum := j.f, j.num
	j.fileMu.Lock()
	err := j.switchFile(old)
	j.fileMu.Unlock()
	if err != nil {
		j.mu.Unlock()
		return err
	}
	// Every record of the old file is durable now.
	j.markDurable(j.seq)
	var todo []keyedChange
	for k, c := range j.pending {
		if c.num <= oldNum {
			todo = append(todo, keyedChange{k, c})
		}
	}
	j.mu.Unlock()
	if err := j.d.applyChanges(todo); err != nil {
		return err
	}
	if err := os.Remove(j.d.journalPath(oldNum)); err != nil {
		return err
	}
	if err := j.d.syncDir(filepath.Dir(j.d.journalPath(oldNum))); err != nil {
		return err
	}
	j.mu.Lock()
	for _, t := range todo {
		if j.pending[t.key] == t.c {
			delete(j.pending, t.key)
		}
	}
	j.checkpoints++
	j.mu.Unlock()
	return nil
}

// stats returns the journal's JournalStats.
func (j *journal) stats() JournalStats {
	j.mu.Lock()
	defer j.mu.Unlock()
	return JournalStats{Bytes: j.size, Pending: len(j.pending), Checkpoints: j.checkpoints, Replayed: j.replayed}
}

// Journal returns the stats of d's journal, and false if it keeps none.
func (d *Dir) Journal() (JournalStats, bool) {
	if d.j == nil {
		return JournalStats{}, false
	}
	return d.j.stats(), true
}

// switchFile makes old durable and appends to a new journal file from
// now on. The caller holds j.mu and j.fileMu.
func (j *journal) switchFile(old *os.File) error {
	if !j.d.noSync {
		if err := datasync(old); err != nil {
			return err
		}
	}
	nf, err := j.create(j.num + 1)
	if err != nil {
		return err
	}
	if err := old.Close(); err != nil {
		_ = nf.Close()
		return err
	}
	j.f, j.num, j.size = nf, j.num+1, 0
	return nil
}

// quiesce takes no more operations, and waits for the writers and the
// checkpoint under way.
func (j *journal) quiesce() {
	j.mu.Lock()
	j.closed = true
	ck := j.ckpt
	if j.aging != nil {
		j.aging.Stop()
	}
	j.mu.Unlock()
	j.writers.Wait()
	if ck != nil {
		<-ck
	}
}

// close ends the journal: it waits for the writers and the checkpoint
// running, writes every change to its object file, and removes the
// journal, so that the directory needs no replay.
func (j *journal) close() error {
	j.quiesce()
	j.mu.Lock()
	failed := j.failed
	j.mu.Unlock()
	var err error
	if failed == nil {
		// Closed: no writer appends any more, and this checkpoint is the
		// last.
		j.ckpt = make(chan struct{})
		err = j.checkpointOnce()
	}
	if cerr := j.f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Remove(j.f.Name())
	}
	if cerr := j.lockFile.Close(); err == nil {
		err = cerr
	}
	return err
}

// keyedChange is a change with its key.
type keyedChange struct {
	key string
	c   *change
}

// appendEntry appends the journal entry of c to rec.
func appendEntry(rec []byte, key string, c *change) []byte {
	op := byte(opPut)
	if c.deleted {
		op = opDelete
	}
	rec = append(rec, op)
	rec = binary.LittleEndian.AppendUint16(rec, uint16(len(key)))
	rec = append(rec, key...)
	rec = binary.LittleEndian.AppendUint64(rec, c.h.version)
	rec = binary.LittleEndian.AppendUint64(rec, c.h.nonce)
	rec = binary.LittleEndian.AppendUint32(rec, uint32(len(c.body)))
	return append(rec, c.body...)
}

// parseRecords decodes the records of a journal file. A record cut short
// or failing its checksum ends the file (torn): only the last file may
// end so.
func parseRecords(b []byte) (changes []keyedChange, torn bool, err error) {
	for len(b) > 0 {
		if len(b) < journalHdrLen || string(b[0:4]) != journalMagic {
			return changes, true, nil
		}
		n := int(binary.LittleEndian.Uint32(b[4:8]))
		if n > len(b)-journalHdrLen {
			return changes, true, nil
		}
		payload := b[journalHdrLen : journalHdrLen+n]
		if crc32.Checksum(payload, castagnoli) != binary.LittleEndian.Uint32(b[8:12]) {
			return changes, true, nil
		}
		entries, err := parseEntries(payload)
		if err != nil {
			return nil, false, err
		}
		changes = append(changes, entries...)
		b = b[journalHdrLen+n:]
	}
	return changes, false, nil
}

func parseEntries(p []byte) ([]keyedChange, error) {
	var out []keyedChange
	for len(p) > 0 {
		if len(p) < 3 {
			return nil, errCorruptJournal
		}
		op, kl := p[0], int(binary.LittleEndian.Uint16(p[1:3]))
		p = p[3:]
		if len(p) < kl+20 || (op != opPut && op != opDelete) {
			return nil, errCorruptJournal
		}
		key := string(p[:kl])
		c := &change{deleted: op == opDelete}
		c.h.version = binary.LittleEndian.Uint64(p[kl:])
		c.h.nonce = binary.LittleEndian.Uint64(p[kl+8:])
		bl := int(binary.LittleEndian.Uint32(p[kl+16:]))
		p = p[kl+20:]
		if len(p) < bl || ValidKey(key) != nil {
			return nil, errCorruptJournal
		}
		c.body = p[:bl]
		c.h.length = uint64(bl)
		p = p[bl:]
		out = append(out, keyedChange{key, c})
	}
	return out, nil
}

var errCorruptJournal = errors.New("store: corrupt journal record")

// replayJournal writes what the journal files in d hold to their object
// files, makes that durable and removes them; it returns the number of
// the last file (0 if none). The caller holds the journal's lock.
func (d *Dir) replayJournal() (last uint64, replayed int, err error) {
	dir := filepath.Join(d.root, reservedDir, journalDir)
	entries, err := os.ReadDir(dir)
	if err != nil {
		return 0, 0, err
	}
	var nums []uint64
	for _, e := range entries {
		n, err := strconv.ParseUint(e.Name(), 10, 64)
		if err != nil {
			return 0, 0, fmt.Errorf("store: unknown file %s in %s", e.Name(), dir)
		}
		nums = append(nums, n)
	}
	slices.Sort(nums)
	for i, n := range nums {
		b, err := os.ReadFile(d.journalPath(n))
		if err != nil {
			return 0, 0, err
		}
		changes, torn, err := parseRecords(b)
		if err == nil && torn && i < len(nums)-1 {
			err = errCorruptJournal // only a crash cuts a record short, at the end
		}
		if err != nil {
			return 0, 0, fmt.Errorf("%w in %s", err, d.journalPath(n))
		}
		// Later changes of a key supersede earlier ones: only the last
		// is written.
		latest := map[string]int{}
		for i, c := range changes {
			latest[c.key] = i
		}
		var todo []keyedChange
		for i, c := range changes {
			if latest[c.key] == i {
				todo = append(todo, c)
			}
		}
		if err := d.applyChanges(todo); err != nil {
			return 0, 0, err
		}
		replayed += len(changes)
		last = n
	}
	for _, n := range nums {
		if err := os.Remove(d.journalPath(n)); err != nil {
			return 0, 0, err
		}
	}
	if len(nums) > 0 {
		if err := d.syncDir(dir); err != nil {
			return 0, 0, err
		}
	}
	return last, replayed, nil
}

// applyChanges writes each change to its object file (or removes it),
// and makes all of it durable: one group sync, or else an fsync each.
func (d *Dir) applyChanges(todo []keyedChange) error {
	flushEach := d.group == nil
	for _, t := range todo {
		dir, base := d.objectPath(t.key)
		obj := filepath.Join(dir, base+objSuffix)
		if t.c.deleted {
			if err := os.Remove(obj); err != nil && !errors.Is(err, fs.ErrNotExist) {
				return err
			}
			if flushEach {
				if err := d.syncRemoval(dir); err != nil {
					return err
				}
			}
			d.removeEmptyDirs(dir)
			continue
		}
		var hdr [hdrLen]byte
		t.c.h.put(&hdr, t.c.body)
		tmp, err := d.writeTemp(dir, base, [][]byte{hdr[:], t.c.body}, flushEach)
		if err != nil {
			return err
		}
		if err := os.Rename(tmp, obj); err != nil {
			_ = os.Remove(tmp)
			return err
		}
		if flushEach {
			if err := d.syncDir(dir); err != nil {
				return err
			}
		}
	}
	if d.noSync || flushEach {
		return nil
	}
	return d.group.wait()
}

// removeEmptyDirs removes dir and its parents up to the root while they
// are empty. A Put that is creating a file in one of them retries (see
// writeAtomic); the removal of an empty directory needs no fsync, as one
// that comes back is harmless.
func (d *Dir) removeEmptyDirs(dir string) {
	for p := dir; p != d.root && strings.HasPrefix(p, d.root+string(filepath.Separator)); p = filepath.Dir(p) {
		if os.Remove(p) != nil {
			break
		}
	}
}

// journalPut, journalDelete and journalCommit are Put, Delete and
// PutCommit of a Dir with a journal; the caller checked the keys.
func (d *Dir) journalPut(key string, body []byte, cond Cond) (string, error) {
	etags, err := d.j.write([]jop{{key: key, body: body, cond: cond}})
	if err != nil {
		return "", err
	}
	return etags[0], nil
}

func (d *Dir) journalDelete(key, ifMatch string) error {
	_, err := d.j.write([]jop{{key: key, del: true, cond: Cond{IfMatch: ifMatch}}})
	return err
}

func (d *Dir) journalCommit(created []Object, key string, body []byte, cond Cond) (string, error) {
	ops := make([]jop, 0, len(created)+1)
	for _, o := range created {
		if o.Key == key || slices.ContainsFunc(ops, func(p jop) bool { return p.key == o.Key }) {
			return "", opError("put", o.Key, fmt.Errorf("%w: named twice in one commit", ErrPrecondition))
		}
		ops = append(ops, jop{key: o.Key, body: o.Body, created: true})
	}
	ops = append(ops, jop{key: key, body: body, cond: cond})
	etags, err := d.j.write(ops)
	if err != nil {
		return "", err
	}
	return etags[len(etags)-1], nil
}

// with the journal's changes.
