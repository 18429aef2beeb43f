// Package sim runs the cluster core (package cluster, the code a server
// runs, not a model of it) under a deterministic simulation, and checks
// its invariants after every step.
//
// A run is a seed. From it come three machines, each with its own clock
// (its own origin, a rate up to 2% off), running one process at a time: a
// cluster.Node with its three duties (lease, peers, settle) and a host
// that routes the events for ten rooms landing on random machines (host.go:
// serve the room here, taking it if it is free, relay the event to the
// node that holds it, or wait for a silent holder's failover), as
// clusternode's member and host/server's routing do. They share one
// bucket, a store.Mem behind a simulated network whose requests may be
// lost before they apply, apply and lose their answer, land late after
// their caller gave up, answer 409, or answer slowly; links to it degrade
// and break for a while, and so do the links between machines (peer.go),
// over which events are relayed. Processes crash (losing their memory) and
// restart as new instances, pause for longer than the lease ttl, stop
// cleanly, die or hang for good (then an operator fences them by hand);
// operators drain nodes and move rooms (ops.go). Clients open WebSockets
// to rooms on the node that runs them, and close them after a while; a
// room that goes idle with sockets open parks its hold there, wakes there
// at its next event wherever it lands, and is released when its last
// socket goes, by a drain, a move, a lapse or a clean stop (socket.go).
//
// Every task is a goroutine, but only one runs at a time: each bucket
// call, each call to another machine and each sleep blocks it and hands
// control back to the scheduler, which runs the next event in (virtual
// time, tie drawn from the seed, sequence) order. So a seed replays
// exactly, which the hash of its trace shows, and a failing seed prints
// itself and the command that replays it with every event written out.
//
// The invariants (check.go): no process counts its lease valid once the
// bucket has it fenced or taken; never two processes acting on one room;
// never one generation for two holds; no record naming a live process
// with nothing there to release it (a leak); no process fenced by hand
// runs again; every event answered or refused within a bound, none relayed
// twice; no room taken by a draining node; every drain drained within a
// bound; a move leaves the room with its target; no room taken while
// another node keeps it parked, or holds its sockets while valid, not
// draining and not moving it (unless that node's own wake had an unknown
// outcome or found another holder: exposed, counted). Each of
// cluster.Variants
// breaks one rule of the protocol, and each of HostVariants one of the
// host's, and the tests show that some seed catches each.
package sim
