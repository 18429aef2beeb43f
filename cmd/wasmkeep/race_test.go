//go:build race

package main

// raceEnabled reports a -race build: the CLI tests then build the wasmkeep
// binary they run with -race too, so the node under test is checked as well.
const raceEnabled = true
