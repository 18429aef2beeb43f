// Package socket is the host side of wasmkeep's WebSockets: the RFC 6455
// handshake, framing, keepalive, outbound queues and admission. It is the only
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
// blocked reading the next frame header into a few bytes inside the Conn. No
// buffer is held while idle: a pooled read buffer is taken when a frame
// starts arriving and returned as soon as it is drained, and a message's
// payload buffer is allocated when its header arrives (bounded by
// [Config.MaxMessage], checked from the header before anything is read, and
// grown as bytes actually arrive rather than trusting the declared length).
//
// There is no writer goroutine while the outbound queue is empty: the first
// frame queued starts one, which writes everything queued in batches
// (writev) and exits when the queue is drained. Likewise the goroutine that
// calls the Handler exists only while messages wait to be delivered. This
// keeps an idle socket at one goroutine and makes [Conn.Send] a
// non-blocking enqueue: the caller is typically a room executing wasm, which
// must never wait for a client's TCP window.
//
// # Eviction policy
//
// Every socket has an outbound budget in frames and bytes
// ([Config.OutboundFrames], [Config.OutboundBytes]) that counts everything
// queued and not yet written. A send that would pass either budget does not
// wait: the socket is evicted at once (queued frames are dropped, a close
// frame with [abi.CloseSlowReader] is attempted under a short deadline, then
// the TCP connection is closed) and the send returns [ErrSlowReader]. A
// single write that takes longer than [Config.WriteTimeout] drops the socket
// the same way. Each socket has its own queue and writer, so a slow client
// slows no one else. A socket that sends nothing at all (not even a pong) for
// twice the ping interval is closed as dead. Every eviction is counted by
// reason in wasmkeep_socket_evictions_total.
//
// # Inbound order and the Handler
//
// Frames are read by the socket's reader goroutine; complete messages are
// queued and delivered by a per-socket delivery goroutine, one at a time, in
// wire order, followed by exactly one [Handler.OnClose]. A Handler that
// blocks delays only its own socket's messages: the reader goes on answering
// pings meanwhile, until [Config.InboundMessages] or [Config.InboundBytes]
// are queued, at which point it stops reading (TCP backpressure) and the
// socket is not counted as dead while it waits for the Handler.
package socket
