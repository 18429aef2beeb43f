package store

import (
	"errors"
	"syscall"
)

// IsOutOfSpace reports whether err says the bucket's storage is full: the
// disk (ENOSPC) or the owner's quota (EDQUOT). Servers answer it with HTTP
// 507 Insufficient Storage rather than blaming the request.
func IsOutOfSpace(err error) bool {
	return errors.Is(err, syscall.ENOSPC) || errors.Is(err, syscall.EDQUOT)
}
