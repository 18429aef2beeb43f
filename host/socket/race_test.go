//go:build race

package socket

// raceEnabled reports a -race build: the race detector allows at most 8128
// live goroutines and multiplies memory use, so the memory test skips.
const raceEnabled = true
