//go:build race

package sim

// raceEnabled reports a -race build: TestSim runs fewer seeds under it.
const raceEnabled = true
