package images

import (
	"errors"
	"os"
	"path/filepath"

	"golang.org/x/sys/unix"
)

// supported: the engine maps images on Linux.
const supported = true

// noFollow: an image's name is never a symbolic link (the cache makes
// each with O_EXCL), so opening one that is refuses to follow it.
const noFollow = unix.O_NOFOLLOW

// memoryBacked reports whether dir's file system keeps its files in
// memory.
func memoryBacked(dir string) (bool, error) {
	var st unix.Statfs_t
	if err := unix.Statfs(dir, &st); err != nil {
		return false, err
	}
	return memoryFS(int64(st.Type)), nil
}

// memoryFS reports whether a statfs type is a file system in memory.
func memoryFS(t int64) bool { return t == unix.TMPFS_MAGIC || t == unix.RAMFS_MAGIC }

// syncData writes f's data (and length) to the disk.
func syncData(f *os.File) error {
	if err := unix.Fdatasync(int(f.Fd())); err != nil {
		return &os.PathError{Op: "fdatasync", Path: f.Name(), Err: err}
	}
	return nil
}

// lockDir takes the flock on dir's lock file, or returns nil if another
// holds it. The lock ends with the file's closing, or the process.
func lockDir(dir string) (*os.File, error) {
	f, err := os.OpenFile(filepath.Join(dir, lockName), os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, err
	}
	if err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
		f.Close()
		if errors.Is(err, unix.EWOULDBLOCK) {
			return nil, nil
		}
		return nil, &os.PathError{Op: "flock", Path: f.Name(), Err: err}
	}
	return f, nil
}
