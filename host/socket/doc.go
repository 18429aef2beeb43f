// Package socket is the host side of wasmkeep's WebSockets: the RFC 6455
// handshake, framing, keepalive, outbound queues, admission and rates. It is the only
// package of the project that speaks the wire protocol (and the only one that
// imports gobwas/ws); it knows nothing about rooms or wasm. Its callers see
// whole messages in and whole messages out.
//
// # Ownership: sockets outlive rooms
//
// A socket belongs to the node that accepted it, not to the room it talks to.
// A room may be hibernated (no instance in memory) for hours while its
// sockets stay open, so the socket layer does everything that does not need
// the room: it sends a ping to every socket every [Config.PingInterval] from
// one node-wide ticker, answers the client's pings, takes any frame from the
// client as a sign of life, closes sockets that stay silent, reassembles
// fragments, enforces limits and runs the closing handshake. Only complete
// data messages and the final close reach the [Handler], which is where the
// caller wakes a room.
//
// # Why idle sockets cost little
//
// A node is meant to hold tens of thousands of mostly idle sockets, so an
// idle [Conn] is a small struct, one TCP connection and one goroutine
// blocked reading the first bytes of the next frame header into the Conn
// itself. No buffer is held while idle: a pooled read buffer is taken when a
// frame starts arriving and returned as soon as it is drained, and a
// message's payload buffer is allocated when its header arrives (bounded by
// [Config.MaxMessage], checked from the header before anything is read, and
// grown as bytes actually arrive rather than trusting the declared length);
// the whole messages that one read brought share one allocation instead.
// Small outbound frames are encoded into a chunk the socket holds only
// while its queue is not empty.
//
// The goroutine that waits on an idle socket is always a fresh one, with a 2
// KiB stack: handling frames may grow a goroutine's stack, and the runtime
// does not shrink a stack back to 2 KiB while its goroutine is parked in a
// read, so after each burst of frames the reader hands the socket to a new
// goroutine and exits.
//
// There is no writer goroutine while the outbound queue is empty: the first
// frame queued starts one, which writes everything queued (small frames
// gathered into one write) and exits when the queue is drained. Likewise
// the goroutine that calls the Handler exists only while messages wait to be
// delivered. So an idle socket has exactly one goroutine, and [Conn.Send] is
// a non-blocking enqueue: the caller is typically a room executing wasm,
// which must never wait for a client's TCP window.
//
// # Backpressure and eviction
//
// Every socket has an outbound budget in frames and bytes
// ([Config.OutboundFrames], [Config.OutboundBytes]) over what is queued and
// not yet written, the batch being written included. A send never waits
// and is not refused for the budget: the budget is where the socket stops
// reading its client. Before it takes each frame, the reader looks at the
// queue; while the queue is at either budget the socket is not read (no
// goroutine holds it, in either read mode), its bytes wait in the kernel
// and the client's own writes slow down, until the writer has drained the
// queue to half of both budgets. What a room sends a socket is mostly its
// answers to that socket's messages, so this paces a client that sends
// faster than it reads, instead of evicting it. A corked queue that reaches
// the budget is written anyway. The messages read and not yet delivered
// (which are also the largest batch a [BatchHandler] gets) are at most a
// quarter of either budget, so that a room answering each once adds at
// most a quarter of the budget past it after the reader stopped.
//
// A client that does not read is evicted with [abi.CloseSlowReader]: when
// its queue is at the budget (and has not drained to half since) and the
// client takes not one byte of it for [Config.SlowTimeout] (the writer's
// deadline wakes it four times a timeout to see what the kernel took, so
// a client that takes a little at a time stays), or when a single write
// takes longer than [Config.WriteTimeout]. What a socket receives from
// elsewhere (a room's broadcasts) is not slowed by its reader stopping, so
// the queue also has a hard cap, [QueueLimitFactor] times the byte budget
// (each frame counting 32 bytes more, for its place in the queue): a send
// that would pass it evicts the socket at once and returns
// [ErrSlowReader]. An evicted socket's queued frames are dropped, a close
// frame is attempted under a short deadline, then the TCP connection is
// closed. Each socket has its own queue and writer, so a slow client slows
// no one else.
//
// A socket that sends nothing at all (not even a pong) for twice the
// ping interval is closed as dead, by the ping loop's next tick: the loop
// pings one shard of the registry a tick, sixteen ticks an interval, but
// looks at the silence of every socket at every tick, so that the drop
// comes at most a tick (PingInterval/16) after the two intervals whatever
// the phase of the socket's own pings. Time during which the node does not
// read a socket (its reader paused, or waiting for its Handler) is not its
// silence. Every eviction is counted by reason in
// wasmkeep_socket_evictions_total, and the reader's pauses and resumes in
// wasmkeep_socket_read_pauses_total and wasmkeep_socket_read_resumes_total.
//
// # Admission and rates
//
// [Hub.Upgrade] admits a socket before doing anything of the handshake, in
// this order: the client address's attempt bucket
// ([Config.UpgradeRatePerIP], [Config.UpgradeBurstPerIP]: every attempt
// spends a token, admitted or not), the address's open sockets
// ([Config.MaxSocketsPerIP]), then the node's cap ([Config.MaxSockets]).
// A refusal is HTTP 429 with Retry-After, counted by reason in
// wasmkeep_socket_upgrades_rejected_total; the caller has done nothing for
// a room yet. The per-address limits are off by default: every client behind
// one NAT or proxy shares an address.
//
// A client address is the TCP peer (or, with [Config.TrustForwardedFor],
// the last X-Forwarded-For address): an IPv4 address, or an IPv6 /64, since
// a host usually holds a whole /64 and could otherwise pass any limit by
// changing address. The table of addresses is bounded: an address is
// forgotten as soon as it has no socket open and a full bucket (it then
// carries nothing a new entry would not), by a sweep that runs when the
// table has doubled, and the table never holds more than MaxSockets +
// 100,000 addresses (a new one is refused while it is full). Buckets are
// kept as one number each (GCRA's theoretical arrival time), on the hub's
// monotonic clock.
//
// Each socket also has a bucket of inbound data messages
// ([Config.MessageRate], [Config.MessageBurst]): a complete message that
// finds it empty is dropped, never delivered, and counted in
// wasmkeep_socket_messages_dropped_total; the socket stays open, and a
// flood of messages answered by its room meets the outbound budget like any
// other traffic: the socket stops being read, it is not evicted while its
// client reads. Control frames are not counted: pings are answered by the
// host (a client that pings without reading its pongs fills its outbound
// queue, stops being read and is evicted after SlowTimeout).
//
// # Inbound order and the Handler
//
// Complete messages are delivered one at a time, in wire order, followed by
// exactly one [Handler.OnClose], by a delivery goroutine that exists only
// while messages wait: the reader that completes a message when none runs
// becomes it, after handing reading over to a fresh goroutine. A Handler
// that blocks therefore delays only its own socket's messages: the socket
// goes on reading and answering pings meanwhile, until
// [Config.InboundMessages] or [Config.InboundBytes] are queued; then it
// stops reading (TCP backpressure), and it is not counted as dead while it
// waits for the Handler.
package socket
