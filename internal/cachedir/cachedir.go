// Package cachedir keeps a directory of cache files under a byte bound:
// wazero's compilation cache, which gains a file of machine code (about 8
// MB for a Go guest) for every module version a node ever compiles and
// removes none, so that months of deploys, or a day of `wasmkeep dev`
// saves, would fill the disk.
package cachedir

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"time"
)

// MinAge is how recently used a file may be and still be removed: never
// one used in the last ten minutes, so that a file another process has
// just written (or is about to read, having found it) stays, and a bound
// smaller than what is in use does not make a node delete what it has
// just compiled.
const MinAge = 10 * time.Minute

// Trimmed says what Trim did.
type Trimmed struct {
	Files, Removed int   // files found, and removed
	Bytes, Freed   int64 // their bytes, and the bytes removed
}

// Trim removes the least recently used files of dirs (the regular files
// directly in each) until at most max bytes are left, by the later of
// each file's access and modification time, keeping any used within
// MinAge of now. A missing directory, or a file another process removed
// meanwhile, is not an error.
func Trim(dirs []string, max int64, now time.Time) (Trimmed, error) {
	type file struct {
		path string
		size int64
		used time.Time
	}
	var files []file
	var t Trimmed
	for _, dir := range dirs {
		entries, err := os.ReadDir(dir)
		if errors.Is(err, fs.ErrNotExist) {
			continue
		}
		if err != nil {
			return t, err
		}
		for _, e := range entries {
			if !e.Type().IsRegular() {
				continue
			}
			info, err := e.Info()
			if errors.Is(err, fs.ErrNotExist) {
				continue
			}
			if err != nil {
				return t, err
			}
			used := info.ModTime()
			if a := accessTime(info); a.After(used) {
				used = a
			}
			files = append(files, file{filepath.Join(dir, e.Name()), info.Size(), used})
			t.Files++
			t.Bytes += info.Size()
		}
	}
	slices.SortFunc(files, func(a, b file) int { return a.used.Compare(b.used) }) // oldest first
	left := t.Bytes
	for _, f := range files {
		if left <= max || now.Sub(f.used) < MinAge {
			break
		}
		if err := os.Remove(f.path); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return t, err
		}
		left -= f.size
		t.Removed++
		t.Freed += f.size
	}
	return t, nil
}
