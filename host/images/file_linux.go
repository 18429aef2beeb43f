package images

import (
	"errors"
	"os"
	"path/filepath"
	"strconv"

	"golang.org/x/sys/unix"
)

// supported: the engine maps images on Linux.
const supported = true

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

// openUnlinked makes a file in dir that has no name: O_TMPFILE where the
// file system has it, else a temporary file removed at once.
func openUnlinked(dir string) (*os.File, error) {
	fd, err := unix.Open(dir, unix.O_TMPFILE|unix.O_RDWR|unix.O_CLOEXEC, 0o600)
	if err == nil {
		return os.NewFile(uintptr(fd), dir+"/(image)"), nil
	}
	if !errors.Is(err, unix.EOPNOTSUPP) && !errors.Is(err, unix.EISDIR) && !errors.Is(err, unix.EINVAL) {
		return nil, &os.PathError{Op: "open", Path: dir, Err: err}
	}
	return openRemoved(dir)
}

// syncData writes f's data (and length) to the disk.
func syncData(f *os.File) error {
	if err := unix.Fdatasync(int(f.Fd())); err != nil {
		return &os.PathError{Op: "fdatasync", Path: f.Name(), Err: err}
	}
	return nil
}

// linkFile gives f, an unnamed image, a name (through /proc, which links
// an O_TMPFILE file without privileges; a file made by openRemoved, or
// any other whose last name went, cannot be linked and fails).
func linkFile(f *os.File, name string) error {
	if err := os.Remove(name); err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	if err := unix.Linkat(unix.AT_FDCWD, "/proc/self/fd/"+strconv.Itoa(int(f.Fd())), unix.AT_FDCWD, name, unix.AT_SYMLINK_FOLLOW); err != nil {
		return &os.LinkError{Op: "link", Old: f.Name(), New: name, Err: err}
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
