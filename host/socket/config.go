package socket

import (
	"fmt"
	"time"

	"github.com/wasmkeep/wasmkeep/internal/clock"
	"github.com/wasmkeep/wasmkeep/internal/limits"
)

// Config holds the limits and timings of a [Hub]. A zero field means its
// Default* constant, so Config{} is a valid configuration; limits.Off turns
// off the limits that say so, and a negative value of any other field means
// its default (internal/limits has the convention). The per-address limits
// are off by default; the per-socket message rate is on.
type Config struct {
	// MaxMessage is the largest frame payload and the largest reassembled
	// message a client may send, in bytes. It is checked against each frame
	// header before the payload is read; a frame that would pass it closes
	// the socket with 1009. Default 1 MiB (DefaultMaxMessage).
	MaxMessage int

	// PingInterval is how often the hub pings every socket. A socket from
	// which no frame at all (pong or other) arrives for more than twice this
	// long is closed as dead and reported with 1006. The hub checks every
	// socket each sixteenth of the interval, so the close comes at most
	// PingInterval/16 after the two intervals. Default 25 s.
	PingInterval time.Duration

	// WriteTimeout bounds each write to a client (up to 16 KiB of small
	// frames gathered, or one larger frame). A write that takes longer
	// evicts the socket with abi.CloseSlowReader, whatever its queue
	// holds. Default 10 s.
	WriteTimeout time.Duration

	// OutboundFrames and OutboundBytes are each socket's outbound budget:
	// the frames, and their bytes, queued and not yet written (the rest of
	// the batch being written included). A socket whose queue reaches
	// either stops reading its client (backpressure on the client's own
	// input, which is what most of a room's answers to it come from) until
	// the queue is down to half of both; sends are never refused for it.
	// A single frame larger than OutboundBytes is refused (ErrTooLarge).
	// Defaults 256 and 1 MiB.
	//
	// The queue's hard cap is QueueLimitFactor times OutboundBytes, each
	// frame counting 32 bytes more for its place in the queue: a send that
	// would pass it evicts the socket at once (ErrSlowReader), since what
	// reaches a client that does not read from elsewhere (broadcasts) is not
	// slowed by its reader stopping.
	OutboundFrames int
	OutboundBytes  int

	// SlowTimeout is how long a socket's queue may stay at its budget
	// while the client takes not a single byte: then the socket is evicted
	// with abi.CloseSlowReader. A client that takes some bytes within each
	// SlowTimeout is slow, not stuck, and stays. Default 5 s.
	SlowTimeout time.Duration

	// InboundMessages and InboundBytes bound the complete messages read from
	// one socket and not yet delivered to its Handler. When either is
	// reached the socket stops reading until the Handler catches up (one
	// message is always accepted whatever its size). They are also the
	// largest batch a BatchHandler gets, and so are at most a quarter of
	// OutboundFrames and OutboundBytes: a room that answers each message of
	// a batch once, or of what waits when the reader stops for the outbound
	// budget, adds at most a quarter of the budget. Defaults 64 and 256 KiB
	// (a quarter of the default outbound budgets).
	InboundMessages int
	InboundBytes    int

	// MaxSockets is the node-wide cap on open sockets (including those in
	// their handshake). At the cap, Upgrade answers HTTP 429 with a
	// Retry-After header before upgrading. Default 50,000.
	MaxSockets int

	// MaxSocketsPerIP caps the sockets open from one client address (an
	// IPv4 address, or an IPv6 /64; see TrustForwardedFor). Over it,
	// Upgrade answers HTTP 429. limits.Off: no limit, the default
	// (DefaultMaxSocketsPerIP), because every client behind one NAT or proxy
	// shares an address.
	MaxSocketsPerIP int

	// UpgradeRatePerIP and UpgradeBurstPerIP are a token bucket of upgrade
	// attempts per client address: UpgradeBurstPerIP attempts at once, then
	// UpgradeRatePerIP per second. Every attempt that reaches Upgrade
	// counts, whether it is admitted or not. Over it, Upgrade answers HTTP
	// 429 with Retry-After set to when the next attempt will pass. The rate
	// is off by default (limits.Off, as for MaxSocketsPerIP); the default
	// burst is 20 (DefaultUpgradeBurstPerIP).
	UpgradeRatePerIP  int
	UpgradeBurstPerIP int

	// TrustForwardedFor makes the per-address limits count a request under
	// the last address of its last X-Forwarded-For header (the one added by
	// the proxy in front of the node) instead of the TCP peer. Only for a
	// node that every client reaches through such a proxy: a client that
	// reaches the node directly chooses the address it is counted under.
	TrustForwardedFor bool

	// MessageRate and MessageBurst are each socket's token bucket of inbound
	// data messages: MessageBurst messages at once, then MessageRate per
	// second. A complete message read when the bucket is empty is dropped
	// (not delivered to the Handler) and counted; the socket stays open.
	// Defaults 1000 and 2000; MessageRate limits.Off turns the bucket off.
	MessageRate  int
	MessageBurst int

	// RetryAfter is the Retry-After value sent with a refused upgrade,
	// rounded up to whole seconds (a refusal for the attempt rate sends the
	// time until the next attempt passes instead). Default 5 s.
	RetryAfter time.Duration

	// HandshakeTimeout bounds writing the handshake response. Default 10 s.
	// (The request itself has been read by net/http before Upgrade runs:
	// bound it with the http.Server's ReadHeaderTimeout; a node sets that
	// to this value too.)
	HandshakeTimeout time.Duration

	// CloseTimeout is how long a socket closed by the server waits for the
	// client's close frame before its TCP connection is closed, and the
	// write deadline for a close frame echoed to a client. Default 2 s.
	CloseTimeout time.Duration

	// Reader is how sockets wait for their next frame. ReadEpoll (Linux
	// only) watches every idle socket of the hub from one epoll instance,
	// so that an idle socket has no goroutine; ReadGoroutine gives each
	// socket a goroutine blocked in a read (2 KiB of stack). Both read and
	// handle frames the same way once bytes arrive. Default (ReadAuto):
	// ReadEpoll on Linux, ReadGoroutine elsewhere; ReadEpoll where epoll is
	// not available means ReadGoroutine. A connection without a file
	// descriptor (TLS, a pipe) is always read by a goroutine.
	Reader ReadMode

	// Clock is the hub's clock: liveness, pings, rates, the slow-reader
	// and close timeouts run on it (default clock.Real()). Network
	// deadlines are the kernel's and so always real; they are set as
	// offsets from the hub clock's now.
	Clock clock.Clock
}

// ReadMode is how a hub's sockets wait for their next frame: see
// [Config.Reader].
type ReadMode uint8

// Read modes.
const (
	ReadAuto      ReadMode = iota // ReadEpoll where available, else ReadGoroutine
	ReadGoroutine                 // a goroutine per socket, blocked in a read
	ReadEpoll                     // idle sockets watched by the hub's epoll instance
)

// String returns the mode's name, as ParseReadMode takes it.
func (m ReadMode) String() string {
	switch m {
	case ReadAuto:
		return "auto"
	case ReadGoroutine:
		return "goroutine"
	case ReadEpoll:
		return "epoll"
	}
	return fmt.Sprintf("ReadMode(%d)", uint8(m))
}

// ParseReadMode parses "auto", "goroutine" or "epoll".
func ParseReadMode(s string) (ReadMode, error) {
	for _, m := range []ReadMode{ReadAuto, ReadGoroutine, ReadEpoll} {
		if s == m.String() {
			return m, nil
		}
	}
	return 0, fmt.Errorf("socket: unknown read mode %q (want auto, goroutine or epoll)", s)
}

// Defaults of the Config fields.
const (
	DefaultMaxMessage       = 1 << 20
	DefaultPingInterval     = 25 * time.Second
	DefaultWriteTimeout     = 10 * time.Second
	DefaultOutboundFrames   = 256
	DefaultOutboundBytes    = 1 << 20
	DefaultSlowTimeout      = 5 * time.Second
	DefaultInboundMessages  = 64
	DefaultInboundBytes     = 256 << 10
	DefaultMaxSockets       = 50000
	DefaultMessageRate      = 1000
	DefaultMessageBurst     = 2000
	DefaultRetryAfter       = 5 * time.Second
	DefaultHandshakeTimeout = 10 * time.Second
	DefaultCloseTimeout     = 2 * time.Second
)

// Defaults of the per-address limits: off unless set, since every client
// behind one NAT or proxy shares an address; the burst applies once the
// rate is set.
const (
	DefaultMaxSocketsPerIP   = limits.Off
	DefaultUpgradeRatePerIP  = limits.Off
	DefaultUpgradeBurstPerIP = 20
)

// QueueLimitFactor is the hard cap of a socket's outbound queue, in
// multiples of Config.OutboundBytes (see there). The room above the budget
// is for what a room answers to the messages it had already taken when the
// socket's reader stopped, so that a client that reads is not evicted for
// its own traffic.
const QueueLimitFactor = 4

// evictGrace is the write deadline of the close frame sent to a socket that
// is being failed (slow reader, protocol error, too big): long enough for a
// healthy kernel buffer to take it, short enough that eviction is prompt.
const evictGrace = 250 * time.Millisecond

// withDefaults returns c with every unset field set to its default.
func (c Config) withDefaults() Config {
	setInt, setDur := limits.Default[int], limits.Default[time.Duration]
	setInt(&c.MaxMessage, DefaultMaxMessage)
	setDur(&c.PingInterval, DefaultPingInterval)
	setDur(&c.WriteTimeout, DefaultWriteTimeout)
	setInt(&c.OutboundFrames, DefaultOutboundFrames)
	setInt(&c.OutboundBytes, DefaultOutboundBytes)
	setDur(&c.SlowTimeout, DefaultSlowTimeout)
	setInt(&c.InboundMessages, DefaultInboundMessages)
	setInt(&c.InboundBytes, DefaultInboundBytes)
	c.InboundMessages = min(c.InboundMessages, max(c.OutboundFrames/4, 1))
	c.InboundBytes = min(c.InboundBytes, max(c.OutboundBytes/4, 1))
	setInt(&c.MaxSockets, DefaultMaxSockets)
	limits.DefaultOrOff(&c.MaxSocketsPerIP, DefaultMaxSocketsPerIP)
	limits.DefaultOrOff(&c.UpgradeRatePerIP, DefaultUpgradeRatePerIP)
	setInt(&c.UpgradeBurstPerIP, DefaultUpgradeBurstPerIP)
	limits.DefaultOrOff(&c.MessageRate, DefaultMessageRate)
	setInt(&c.MessageBurst, DefaultMessageBurst)
	setDur(&c.RetryAfter, DefaultRetryAfter)
	setDur(&c.HandshakeTimeout, DefaultHandshakeTimeout)
	setDur(&c.CloseTimeout, DefaultCloseTimeout)
	c.Reader = c.Reader.resolve()
	if c.Clock == nil {
		c.Clock = clock.Real()
	}
	return c
}

// resolve returns the mode a hub of this platform reads with for m.
func (m ReadMode) resolve() ReadMode {
	if m == ReadGoroutine || !epollSupported {
		return ReadGoroutine
	}
	return ReadEpoll
}
