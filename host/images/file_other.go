//go:build !linux

package images

import "os"

// memoryBacked: only Linux is asked (the engine maps images only there).
func memoryBacked(string) (bool, error) { return false, nil }

func openUnlinked(dir string) (*os.File, error) { return openRemoved(dir) }
