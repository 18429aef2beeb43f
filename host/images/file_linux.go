package images

import (
	"errors"
	"os"

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
