// Package sim runs the cluster core (package cluster) and the cluster
// member (package cluster/member) — the code a server runs, not a model
// of it — under a deterministic simulation, and checks its invariants
// after every step.
//
// A run is a seed. From it come three machines, each with its own clock
// (its own origin, a rate 1.5% to 2% fast or slow), running one process
// at a time: a cluster.Node and its member, with their seven duties, over
// fakes of what the rest of a server would be: the node's rooms and
// sockets (host.go, socket.go) and its calls to peers (peer.go). Events
// for ten rooms land on random machines and the member routes them:
// served by the fake rooms (which acquire and end holds through the
// member), forwarded to the node that holds the room, or refused. They share one
// bucket, a store.Mem behind a simulated network whose requests may be
// lost before they apply, apply and lose their answer, land late after
// their caller gave up, answer 409, or answer slowly; links to it degrade
// and break for a while, and so do the links between machines (peer.go),
// over which events are forwarded. Processes crash (losing their memory) and
// restart as new instances, pause for longer than the lease ttl, stop
// cleanly, die or hang for good (then an operator fences them by hand);
// operators drain nodes and move rooms (ops.go). Clients open WebSockets
// to rooms on the node that runs them, and close them after a while; a
// room that goes idle with sockets open parks its hold there, wakes there
// at its next event wherever it lands, and is released when its last
// socket goes, by a drain, a move, the owner sweep, a lapse or a clean
// stop, all of it the member's doing. Fronts on random machines call
// rooms (call.go), and the member routes each call as it does an event
// (Member.Call): the fake rooms run it one at a time in its room, where
// it broadcasts to the room's sockets and may call another room, its
// chain extended and its deadline kept; the calls meet slow legs,
// connections that break after delivery, and lost answers. Clients ask
// rooms to set and clear alarms (alarm.go); every process runs the real
// alarm duty (package alarms) as its member's duty, which finds them in
// the bucket's index and delivers each through the member as a call, to
// a fake room that runs it in its turn, sometimes for seconds, sometimes
// crashing, and sets the next.
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
// runs again; every event answered or refused within a bound, none
// forwarded twice; no room taken or parked by a draining node; every
// drain drained within a bound, and no record naming a drained node; a
// move leaves the room with its target, and a finished move no record
// naming its source; no sweep closing the sockets of a room it keeps; no room taken while
// another node keeps it parked, or holds its sockets while valid, not
// draining and not moving it (unless that node's own wake had an unknown
// outcome or found another holder: exposed, counted); no call run twice,
// nor after it was answered refused, nor where another node holds its
// room, nor in a room waiting on its chain, nor after its caller gave up;
// every call answered by its deadline, one in a cycle at once and as a
// cycle; never an alarm run without a valid hold, nor two runs of one at
// once on valid holds, nor a delivery of one from a process while another
// from there is under way, and no alarm made durable left neither run,
// cleared nor dropped. Each of
// cluster.Variants breaks one rule of the core, each of member.Variants
// one of the member's, each of alarms.Variants one of the alarm duty's,
// and each of Variants one of the world's own (its network, its
// operator, its fake room manager); the tests show that some seed
// catches each.
package sim
