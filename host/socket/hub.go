package socket

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/VictoriaMetrics/metrics"
	"github.com/gobwas/ws"
	"github.com/wasmkeep/wasmkeep/abi"
	"github.com/wasmkeep/wasmkeep/internal/clock"
	"github.com/wasmkeep/wasmkeep/internal/limits"
)

// shardCount is the number of registry shards. The ping loop visits one
// shard per tick, so every socket is pinged once per PingInterval and the
// pings of a node are spread over the interval instead of sent in a burst.
const shardCount = 16

// Hub is the node-wide registry of open sockets: it admits upgrades under
// the node's cap and the per-address limits, runs the one ping loop for all
// sockets and holds the metrics. A Hub is safe for concurrent use.
type Hub struct {
	cfg     Config
	m       *hubMetrics
	adm     *admission // nil without per-address limits
	poll    *poller    // ReadEpoll's; nil with ReadGoroutine
	msgRate gcra       // each socket's inbound message bucket
	clock   clock.Clock
	// pingTurns counts the ping loop's turns, so that a test on a manual
	// clock knows a tick has been handled before it moves the clock on.
	pingTurns atomic.Int64
	count     atomic.Int64
	nextID    atomic.Uint64
	closed    atomic.Bool
	stop      chan struct{}
	stopped   sync.Once
	loop      sync.WaitGroup

	// queueLimit is the hard cap of a socket's outbound queue, in bytes
	// with frameCost for each frame.
	queueLimit int

	upgrader ws.HTTPUpgrader

	shards [shardCount]shard

	waitMu  sync.Mutex
	waiters []chan struct{} // closed when count drops to zero
	// closing is the cause of the CloseAll calls in progress (the latest
	// one's): a socket registered meanwhile is closed with it at once.
	closing    atomic.Pointer[closeCause]
	closeMu    sync.Mutex
	closeCalls int // under closeMu
}

type closeCause struct {
	code   abi.CloseCode
	reason string
}

type shard struct {
	mu sync.Mutex
	m  map[uint64]*Conn
}

// NewHub returns a Hub with cfg (defaults filled in) whose metrics are
// registered on set (a private set if nil; registering two hubs on one set
// panics), and starts its ping loop. Stop the loop with Close.
func NewHub(cfg Config, set *metrics.Set) *Hub {
	if set == nil {
		set = metrics.NewSet()
	}
	h := &Hub{
		cfg:  cfg.withDefaults(),
		stop: make(chan struct{}),
	}
	h.clock = h.cfg.Clock
	for i := range h.shards {
		h.shards[i].m = make(map[uint64]*Conn)
	}
	if h.cfg.Reader == ReadEpoll {
		p, err := newPoller(h)
		if err != nil {
			h.cfg.Reader = ReadGoroutine
		} else {
			h.poll = p
		}
	}
	h.queueLimit = QueueLimitFactor * h.cfg.OutboundBytes
	h.upgrader = ws.HTTPUpgrader{Timeout: h.cfg.HandshakeTimeout}
	h.adm = newAdmission(h.cfg)
	if !limits.IsOff(h.cfg.MessageRate) {
		h.msgRate = newGCRA(h.cfg.MessageRate, h.cfg.MessageBurst)
	}
	h.m = newHubMetrics(set, gauges{
		open: func() float64 { return float64(h.count.Load()) },
		addresses: func() float64 {
			if h.adm == nil {
				return 0
			}
			return float64(h.adm.size())
		},
		queued: h.queued,
	})
	h.loop.Add(1)
	go h.pingLoop()
	return h
}

// Config returns the configuration in effect, defaults filled in.
func (h *Hub) Config() Config { return h.cfg }

// now is the hub's monotonic clock in nanoseconds.
func (h *Hub) now() int64 { return h.clock.Now() }

// Count returns the number of sockets open on this hub, including those in
// their handshake and those whose OnClose has not returned yet.
func (h *Hub) Count() int { return int(h.count.Load()) }

// UpgradeOptions are per-request choices for Upgrade. The zero value
// selects no subprotocol and adds no header.
type UpgradeOptions struct {
	// Protocol, if set, is called with each subprotocol the client offers
	// (Sec-WebSocket-Protocol), in order; the first it accepts is selected.
	Protocol func(string) bool

	// Header holds extra headers for the handshake response.
	Header http.Header
}

// Upgrade performs the WebSocket handshake for r and returns the new socket,
// registered with the hub and counted as open. The Conn does not read until
// Start is called, so that the caller can record it first: every Conn that
// Upgrade returns must be started exactly once, even if the caller closes it
// at once.
//
// Admission comes first, before anything of the handshake: over a limit
// (the client address's attempt rate or open sockets, or the node's cap)
// Upgrade answers HTTP 429 with a Retry-After header and returns
// ErrRateLimited, ErrAddressLimit or ErrAtCapacity; after Close it answers
// HTTP 503 and returns ErrHubClosed. A request that is not a valid
// WebSocket upgrade gets the HTTP error the handshake calls for. In every
// error case the response has already been written, and each refusal is
// counted by reason in wasmkeep_socket_upgrades_rejected_total.
func (h *Hub) Upgrade(w http.ResponseWriter, r *http.Request, opts *UpgradeOptions) (*Conn, error) {
	if h.closed.Load() {
		h.m.rejected(rejectShutdown)
		h.refuse(w, rejectShutdown, 0)
		return nil, ErrHubClosed
	}
	var ip *ipEntry
	if h.adm != nil {
		// A request without an IP peer (a test's pipe, a unix socket) is not
		// counted per address.
		if key, ok := clientKey(r, h.cfg.TrustForwardedFor); ok {
			e, reason, wait := h.adm.admit(key, h.now())
			if e == nil {
				h.m.rejected(reason)
				h.refuse(w, reason, wait)
				if reason == rejectIPRate {
					return nil, ErrRateLimited
				}
				return nil, ErrAddressLimit
			}
			ip = e
		}
	}
	if h.count.Add(1) > int64(h.cfg.MaxSockets) {
		h.release(ip)
		h.m.rejected(rejectCap)
		h.refuse(w, rejectCap, 0)
		return nil, ErrAtCapacity
	}
	u := h.upgrader
	if opts != nil {
		u.Protocol = opts.Protocol
		u.Header = opts.Header
	}
	nc, rw, hs, err := u.Upgrade(r, w)
	if err != nil {
		if nc != nil {
			nc.Close()
		}
		h.release(ip)
		h.m.rejected(rejectBadRequest)
		return nil, fmt.Errorf("socket: upgrade: %w", err)
	}
	c := h.register(nc, hs.Protocol, ip)
	// A client may send frames right behind its request; net/http may have
	// read them into its buffer. Keep those bytes, drop the buffer.
	if n := rw.Reader.Buffered(); n > 0 {
		c.carry = make([]byte, n)
		_, _ = rw.Reader.Read(c.carry)
	}
	return c, nil
}

// register makes a Conn for an upgraded connection and adds it to the
// registry. The caller has reserved its slot in count.
func (h *Hub) register(nc net.Conn, protocol string, ip *ipEntry) *Conn {
	c := &Conn{
		hub:      h,
		conn:     nc,
		id:       h.nextID.Add(1),
		protocol: protocol,
		ip:       ip,
	}
	c.lastSeen.Store(h.now())
	s := &h.shards[c.id%shardCount]
	s.mu.Lock()
	s.m[c.id] = c
	s.mu.Unlock()
	// A CloseAll that started before c was in the registry may have missed
	// it (the client has its 101 before register runs): close c here. It
	// sets closing before it reads the registry, so one of the two sees c.
	if cause := h.closing.Load(); cause != nil {
		c.Close(cause.code, cause.reason)
	}
	return c
}

// refuse answers an upgrade the hub will not take: HTTP 429 for a limit,
// 503 when the hub is closed, with Retry-After (wait if set, else the
// configured RetryAfter, rounded up to whole seconds).
func (h *Hub) refuse(w http.ResponseWriter, reason string, wait time.Duration) {
	status, msg := http.StatusTooManyRequests, "too many sockets on this node, retry later"
	switch reason {
	case rejectShutdown:
		status, msg = http.StatusServiceUnavailable, "the node is stopping, retry later"
	case rejectIPRate:
		msg = "too many upgrade attempts from your address, retry later"
	case rejectIPConcurrent:
		msg = "too many sockets open from your address"
	case rejectIPTableFull:
		msg = "too many client addresses at once, retry later"
	}
	if wait <= 0 {
		wait = h.cfg.RetryAfter
	}
	secs := max(int64((wait+time.Second-1)/time.Second), 1)
	w.Header().Set("Retry-After", strconv.FormatInt(secs, 10))
	http.Error(w, msg, status)
}

// release gives back one slot of the cap (and of its address, if counted)
// and wakes CloseAll when the hub is empty.
func (h *Hub) release(ip *ipEntry) {
	if ip != nil {
		h.adm.release(ip, h.now())
	}
	if h.count.Add(-1) != 0 {
		return
	}
	if h.closed.Load() {
		h.closePoller()
	}
	h.waitMu.Lock()
	ws := h.waiters
	h.waiters = nil
	h.waitMu.Unlock()
	for _, ch := range ws {
		close(ch)
	}
}

// remove unregisters a socket whose close has been reported.
func (h *Hub) remove(c *Conn) {
	s := &h.shards[c.id%shardCount]
	s.mu.Lock()
	delete(s.m, c.id)
	s.mu.Unlock()
	h.release(c.ip)
}

// lookup returns the open socket with id, or nil.
func (h *Hub) lookup(id uint64) *Conn {
	s := &h.shards[id%shardCount]
	s.mu.Lock()
	c := s.m[id]
	s.mu.Unlock()
	return c
}

// closePoller ends the poller once the hub is closed and has no socket
// left (sockets open at Close go on being read until they close).
func (h *Hub) closePoller() {
	if h.poll != nil {
		h.poll.close()
	}
}

// snapshot appends the sockets of shard i to buf.
func (h *Hub) snapshot(i int, buf []*Conn) []*Conn {
	s := &h.shards[i]
	s.mu.Lock()
	for _, c := range s.m {
		buf = append(buf, c)
	}
	s.mu.Unlock()
	return buf
}

// queueTotals are queue occupancies summed over the open sockets.
type queueTotals struct {
	outFrames, outBytes, inMessages int
}

// queued sums the sockets' queues, one socket at a time (the totals are not
// a snapshot of one instant).
func (h *Hub) queued() queueTotals {
	var t queueTotals
	var buf []*Conn
	for i := range h.shards {
		buf = h.snapshot(i, buf[:0])
		for _, c := range buf {
			c.mu.Lock()
			t.outFrames += c.outFrames
			t.outBytes += c.outBytes
			t.inMessages += len(c.in)
			c.mu.Unlock()
		}
		clear(buf)
	}
	return t
}

// pingLoop is the one keepalive loop of the hub. Every tick (a sixteenth
// of PingInterval) it closes as dead every socket that has been silent for
// more than two intervals, and pings the sockets of one shard: each socket
// is pinged once per interval, and a silent one is dropped at most a tick
// after its two intervals are up (the dead check visits every shard, where
// the pings take turns).
func (h *Hub) pingLoop() {
	defer h.loop.Done()
	t := h.clock.NewTicker(h.pingTick())
	defer t.Stop()
	var buf []*Conn
	next := 0
	for {
		select {
		case <-h.stop:
			return
		case <-t.C():
		}
		now := h.now()
		buf = h.silent(now, buf[:0])
		for _, c := range buf {
			c.dropIfDead(now)
		}
		clear(buf)
		buf = h.snapshot(next, buf[:0])
		next = (next + 1) % shardCount
		for _, c := range buf {
			c.ping()
		}
		clear(buf)
		h.pingTurns.Add(1)
	}
}

// pingTick is the period of the ping loop, which is also how late past its
// two silent intervals a dead socket may be dropped.
func (h *Hub) pingTick() time.Duration {
	return max(h.cfg.PingInterval/shardCount, time.Millisecond)
}

// silent appends to buf the sockets from which nothing has been read for
// more than two ping intervals at now. It reads only their clocks, so that
// a check of every socket every tick costs little.
func (h *Hub) silent(now int64, buf []*Conn) []*Conn {
	dead := int64(2 * h.cfg.PingInterval)
	for i := range h.shards {
		s := &h.shards[i]
		s.mu.Lock()
		for _, c := range s.m {
			if now-c.lastSeen.Load() > dead {
				buf = append(buf, c)
			}
		}
		s.mu.Unlock()
	}
	return buf
}

// CloseAll closes every socket with code and reason (for instance 1012 when
// the node stops) and waits until all of them are closed and their OnClose
// has returned, or until ctx is done; then the sockets still open are cut
// (TCP closed) and ctx's error is returned. Sockets are closed as described
// at Conn.Close; so are sockets upgraded while CloseAll runs. CloseAll does
// not stop new upgrades; Close does.
func (h *Hub) CloseAll(ctx context.Context, code abi.CloseCode, reason string) error {
	h.closeMu.Lock()
	h.closeCalls++
	h.closing.Store(&closeCause{code, reason})
	h.closeMu.Unlock()
	defer func() {
		h.closeMu.Lock()
		if h.closeCalls--; h.closeCalls == 0 {
			h.closing.Store(nil)
		}
		h.closeMu.Unlock()
	}()
	done := make(chan struct{})
	h.waitMu.Lock()
	if h.count.Load() == 0 {
		h.waitMu.Unlock()
		return nil
	}
	h.waiters = append(h.waiters, done)
	h.waitMu.Unlock()

	var buf []*Conn
	for i := range h.shards {
		buf = h.snapshot(i, buf[:0])
		for _, c := range buf {
			c.Close(code, reason)
		}
	}
	select {
	case <-done:
		return nil
	case <-ctx.Done():
	}
	for i := range h.shards {
		buf = h.snapshot(i, buf[:0])
		for _, c := range buf {
			c.abort()
		}
	}
	return ctx.Err()
}

// Close stops the ping loop and makes further upgrades fail with HTTP 503
// (the node is going away: not a limit, so not 429).
// Open sockets are left as they are; close them with CloseAll. (With
// ReadEpoll, the hub's poller ends when the last of them is gone.)
func (h *Hub) Close() {
	h.closed.Store(true)
	h.stopped.Do(func() { close(h.stop) })
	h.loop.Wait()
	if h.count.Load() == 0 {
		h.closePoller()
	}
}
