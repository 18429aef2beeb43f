//go:build race

package node

// raceEnabled reports a -race build, which caps live goroutines at 8128 and
// multiplies memory use: the memory measurement opens fewer sockets under
// it.
const raceEnabled = true
