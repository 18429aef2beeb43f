//go:build unix

package memtest

import "syscall"

// RaiseFileLimitTo is RaiseFileLimit for a helper process, which has no
// testing.TB.
func RaiseFileLimitTo(want uint64) (uint64, error) {
	var lim syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil {
		return 0, err
	}
	if want > lim.Max {
		raised := syscall.Rlimit{Cur: want, Max: want}
		if syscall.Setrlimit(syscall.RLIMIT_NOFILE, &raised) == nil {
			return want, nil
		}
	}
	lim.Cur = lim.Max
	if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil {
		return 0, err
	}
	return lim.Cur, nil
}
