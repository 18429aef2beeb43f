package store

import (
	"os"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// openGroupSync returns the group sync of the filesystem root is on, and
// the directory it holds open for it; nil where syncfs(2) would not do:
// before Linux 5.8 it did not report writeback errors, so a write could
// be lost without its writer hearing of it.
func openGroupSync(root string) (*groupSync, *os.File, error) {
	if !syncfsReportsErrors() {
		return nil, nil, nil
	}
	f, err := os.Open(root)
	if err != nil {
		return nil, nil, err
	}
	fd := int(f.Fd())
	return newGroupSync(func() error { return unix.Syncfs(fd) }), f, nil
}

// syncfsReportsErrors reports whether the running kernel is Linux 5.8 or
// later.
func syncfsReportsErrors() bool {
	var u unix.Utsname
	if unix.Uname(&u) != nil {
		return false
	}
	release := unix.ByteSliceToString(u.Release[:])
	major, rest, _ := strings.Cut(release, ".")
	minor, _, _ := strings.Cut(rest, ".")
	ma, err1 := strconv.Atoi(major)
	mi, err2 := strconv.Atoi(strings.TrimRightFunc(minor, func(r rune) bool { return r < '0' || r > '9' }))
	return err1 == nil && err2 == nil && (ma > 5 || ma == 5 && mi >= 8)
}

// datasync makes f's data durable, and the metadata needed to read it
// back (its size), with fdatasync(2).
func datasync(f *os.File) error {
	rc, err := f.SyscallConn()
	if err != nil {
		return err
	}
	var serr error
	if err := rc.Control(func(fd uintptr) { serr = unix.Fdatasync(int(fd)) }); err != nil {
		return err
	}
	return serr
}
