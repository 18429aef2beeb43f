//go:build !(linux || darwin || freebsd || netbsd || openbsd || dragonfly)

package store

import (
	"errors"
	"os"
)

// flockSupported tells OpenDir that Dir cannot work here.
const flockSupported = false

// flock is not implemented here: Dir needs flock(2).
func flock(f *os.File, wait bool) (bool, error) { return false, errors.ErrUnsupported }

// funlock is not implemented here.
func funlock(f *os.File) error { return errors.ErrUnsupported }
