// Package cluster will hold the logic that lets several nodes share one
// bucket: node leases, per-room ownership records written with conditional
// puts, fences, parking of rooms whose sockets are open on a node, drains
// and moves. It will be pure logic over Clock and Bucket interfaces, driven
// by a loop, so that a deterministic simulation can run it.
//
// Nothing is here yet: a single node runs as a cluster of one through
// host/rooms.Local, and this package will implement the same
// host/rooms.Placement interface. See docs/architecture.md.
package cluster
