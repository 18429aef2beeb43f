package store

import (
	"fmt"
	"path/filepath"
	"strconv"
	"strings"
)

// ParseDirETag returns the version counter of a Dir ETag.
func ParseDirETag(etag string) (uint64, bool) {
	v, _, ok := strings.Cut(etag, "-")
	if !ok {
		return 0, false
	}
	n, err := strconv.ParseUint(v, 10, 64)
	return n, err == nil
}

// ObjectFile returns the file that holds key's object.
func (d *Dir) ObjectFile(key string) string { return d.objectFile(key) }

// LockFile returns the lock file that guards key.
func (d *Dir) LockFile(key string) string {
	return filepath.Join(d.root, reservedDir, locksDir, fmt.Sprintf("%02x", stripeOf(key)))
}

// Flock and Funlock expose the lock primitives.
var (
	Flock   = flock
	Funlock = funlock
)

// ProbeCreators is how many writers the probe's concurrent-create check
// starts.
const ProbeCreators = probeCreators

// Abandon drops d as a crash of its process would: its journal is neither
// written to the object files nor removed, and its lock is let go.
func (d *Dir) Abandon() {
	j := d.j
	j.quiesce()
	_ = j.f.Close()
	_ = j.lockFile.Close()
	d.closed.Store(true)
	if d.rootFile != nil {
		_ = d.rootFile.Close()
	}
}

// JournalFiles returns the journal files in the Dir at root, oldest first.
func JournalFiles(root string) []string {
	files, _ := filepath.Glob(filepath.Join(root, reservedDir, journalDir, "*"))
	return files
}
