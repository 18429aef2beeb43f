//go:build !linux

package images

import "os"

// supported: the engine maps images only on Linux; elsewhere a cache
// would write files no wake reads.
const supported = false

const noFollow = 0

func memoryBacked(string) (bool, error) { return false, nil }

func syncData(*os.File) error { return ErrUnsupported }

func lockDir(string) (*os.File, error) { return nil, ErrUnsupported }
