//go:build !unix

package memtest

import "errors"

// RaiseFileLimitTo is RaiseFileLimit for a helper process, which has no
// testing.TB. Off unix there is no RLIMIT_NOFILE to raise.
func RaiseFileLimitTo(uint64) (uint64, error) {
	return 0, errors.New("memtest: no file limit to raise off unix")
}
