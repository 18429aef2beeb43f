// Package sim will run the cluster core (package cluster, the code a
// server runs, not a model of it) under a deterministic simulation. Its
// first part is the scheduler: every task is a goroutine, but only one
// runs at a time, and each bucket call and each sleep hands control back
// to the scheduler, which runs the next event in (virtual time, tie drawn
// from the seed, sequence) order, so that a seed replays exactly.
package sim
