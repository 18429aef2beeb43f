// Package cluster is the logic that lets several nodes share one bucket:
// node leases and membership, fences, and per-room ownership records
// taken and released with conditional writes, with the pending releases
// and the resolver of acquisitions whose answer was lost. docs/cluster.md
// gives the rules and their timing.
//
// It is a core in the shape of etcd-io/raft's: it does no I/O of its own
// accord, starts no goroutine and reads no clock but the one it is given.
// A Node's duties are steps that make synchronous bucket calls and return
// how long to wait; a server runs each in a loop (Node.Run), and the
// simulation in cluster/sim runs the very same code on a scheduler of its
// own, with faults, and checks its invariants after every step.
//
// Route decides where a room's events go (here, another node, or wait),
// FenceByHand is an operator's fence, SetDraining, WriteDraining and
// Drained are a drain's, and Park and ReleaseParked keep the record of a
// room that hibernated with sockets open here (parked.go). Package
// cluster/member is what a node does with these rules (routing, parking,
// drains, moves, the owner sweep), run by a server through package
// clusternode (host does not import cluster) and by the simulation.
package cluster
