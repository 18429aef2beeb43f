package socket

import (
	"errors"
	"net"
	"os"
	"runtime"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/wasmkeep/wasmkeep/abi"
)

// Handler receives a socket's events. For one Conn its methods are called
// one at a time, never concurrently, by a goroutine of the socket layer (not
// the caller's), in wire order: every OnMessage for messages read before the
// socket began to close, then OnClose exactly once. A Handler may call Send
// and Close from inside its methods. A Handler that blocks delays only its
// own socket (see the package documentation).
type Handler interface {
	// OnMessage delivers one complete message: kind is abi.MessageText
	// (valid UTF-8) or abi.MessageBinary. data belongs to the callee and
	// is never reused by the socket layer.
	OnMessage(c *Conn, kind int, data []byte)

	// OnClose reports that the socket is gone, exactly once per Conn,
	// after its last OnMessage. code is the client's close code if the
	// client closed (1005 if its close frame had none); the code given to
	// Close or CloseAll if the server did; 1006 if TCP dropped or the socket
	// was closed as dead; abi.CloseSlowReader after an eviction for its
	// outbound budget or a write timeout; 1009 for a message over
	// MaxMessage; 1002 for a protocol error; 1007 for invalid UTF-8.
	OnClose(c *Conn, code abi.CloseCode, reason string)
}

// Conn is one WebSocket, owned by the node that accepted it. Its methods are
// safe for concurrent use.
type Conn struct {
	hub      *Hub
	conn     net.Conn
	id       uint64
	protocol string
	ip       *ipEntry // the client address's admission entry, if counted
	handler  Handler
	started  atomic.Bool
	lastSeen atomic.Int64 // hub clock of the last read that got bytes

	// raw is set (by Start, under mu) when the socket is read through the
	// hub's poller; rstate is then its reader state (rsIdle, rsReady).
	raw    syscall.RawConn
	rstate atomic.Uint32
	// full says that the outbound queue has reached its budget and not
	// drained to half of it since (set under mu, with the counts): the
	// reader looks at it before each frame without taking the lock.
	full atomic.Bool

	// Reader goroutine only (one at a time, see readLoop and pollRead).
	rb     *readBuf // pooled; held only while read bytes are buffered
	carry  []byte   // bytes read by net/http behind the handshake request
	hb     [14]byte // frame header
	held   uint8    // bytes of hb already read when reading paused
	msgOp  byte     // the opcode of msg; 0 when none is in progress
	msg    []byte   // fragmented message being reassembled
	msgTAT int64    // inbound message bucket (gcra)

	mu sync.Mutex
	// space is made (under mu) by a reader that waits for inbound room,
	// and closed by wakeReaderLocked: a channel only while one waits,
	// where a sync.Cond was 56 bytes in every socket.
	space chan struct{}

	// Outbound queue (under mu). The counts are of every frame not yet
	// written: those in out and the rest of the batch being written.
	out       [][]byte // encoded frames not yet taken by the writer
	outChunk  []byte   // where Send encodes small frames (outSpaceLocked)
	outBurst  int      // bytes carved from chunks since the queue was last empty
	outFrames int
	outBytes  int
	writeDL   int64 // hub clock: deadline of the write in progress; 0 when none
	taken     int64 // hub clock: when the client last took bytes, as the writer knows
	writing   bool  // a writer goroutine runs
	corked    bool  // data frames wait for Uncork before a writer starts (or the budget)
	stallDL   bool  // writeDL is the stall deadline (SlowTimeout), not the write timeout
	paused    bool  // the reader stopped for the outbound budget; no goroutine reads
	outLarge  bool  // the last burst outgrew a small chunk

	// Inbound queue (under mu).
	in            []Message
	inBytes       int
	dispatching   bool // a delivery goroutine is running
	readerWaiting bool // the reader waits for room in the queue
	readerDone    bool // no more messages will come; deliver the close
	closeReported bool

	// Closing (under mu).
	closing       bool // the close cause is set; no sends, no new messages
	closeSent     bool // our close frame is queued
	finishing     bool // close TCP once the queue is written
	tcpClosed     bool
	code          abi.CloseCode // cause: what OnClose reports
	reason        string        // cause
	closeDeadline int64         // hub clock; 0 when none
	tcpDone       chan struct{} // made on demand, closed with TCP
}

// Message is one complete message a client sent: Kind is abi.MessageText
// or abi.MessageBinary.
type Message struct {
	Kind int
	Data []byte
}

// BatchHandler is a Handler that can take several messages at once: when
// more than one message of the socket waits for delivery, OnMessages gets
// them all, in wire order, in place of an OnMessage call each. Rooms take a client's burst as one
// event this way.
type BatchHandler interface {
	Handler
	// OnMessages delivers msgs: the slice is valid only during the call
	// (the socket layer reuses it), the Data of each message belongs to
	// the callee.
	OnMessages(c *Conn, msgs []Message)
}

// ID returns the socket's id, unique within its Hub (never 0).
func (c *Conn) ID() uint64 { return c.id }

// RemoteAddr returns the client's network address.
func (c *Conn) RemoteAddr() string { return c.conn.RemoteAddr().String() }

// Protocol returns the subprotocol selected at the handshake, if any.
func (c *Conn) Protocol() string { return c.protocol }

// Start makes the socket read and deliver its events to h. Call it once the
// caller has recorded the Conn (so that whatever the caller does on open is
// ordered before the first message), exactly once per Conn. Start does not
// block.
func (c *Conn) Start(h Handler) {
	if h == nil {
		panic("socket: Start with a nil Handler")
	}
	if c.started.Swap(true) {
		panic("socket: Conn started twice")
	}
	c.handler = h
	if p := c.hub.poll; p != nil {
		if raw := p.add(c); raw != nil {
			c.mu.Lock()
			c.raw = raw
			c.mu.Unlock()
			go c.pollRead()
			return
		}
	}
	go c.readLoop()
}

// Send queues a message; it copies data and never blocks. kind is
// abi.MessageText (data must be valid UTF-8) or abi.MessageBinary. It returns
// ErrClosed if the socket is closing, or ErrSlowReader if the message would
// take the socket's queue past its hard cap (see the package documentation):
// the socket has then been evicted.
//
// A small message is encoded into a chunk the socket holds while its queue
// does (see outSpaceLocked) rather than into an allocation of its own: most
// of what a room answers is small.
func (c *Conn) Send(kind int, data []byte) error {
	if err := checkMessage(kind, data); err != nil {
		return err
	}
	return c.send(kind, data)
}

// SendChecked is Send for a text message whose UTF-8 the caller has
// already checked (a room's send, which the engine checks when the guest
// makes it): validating it twice was 1 % of a node's CPU in an echo. The
// kind is still checked.
func (c *Conn) SendChecked(kind int, data []byte) error {
	if kind != abi.MessageText && kind != abi.MessageBinary {
		return ErrBadKind
	}
	return c.send(kind, data)
}

func (c *Conn) send(kind int, data []byte) error {
	n := headerLen(len(data)) + len(data)
	if n > maxChunkedFrame {
		return c.enqueue(encodeFrame(byte(kind), data))
	}
	c.mu.Lock()
	err := c.admitLocked(n)
	if err == nil {
		f := appendHeader(c.outSpaceLocked(n), byte(kind), len(data))
		c.queueLocked(append(f, data...))
	}
	c.mu.Unlock()
	return err
}

// Frames of at most maxChunkedFrame bytes that Send encodes go into the
// socket's chunk: a chunk of minOutChunk bytes first, then, while a burst
// fills it, chunks of maxOutChunk bytes, all from free lists.
const (
	maxChunkedFrame = 1 << 10
	minOutChunk     = 512
	maxOutChunk     = 4 << 10
)

// outSpaceLocked returns an empty slice with room for an n-byte frame
// (n <= maxChunkedFrame), carved from c.outChunk. Frames carved from it are
// written by the writer while Send appends after them: they never share a
// byte. A full chunk is left to the frames still queued in it (and the
// collector); the writer gives the current one back to its free list when it
// leaves the queue empty (releaseOutChunkLocked), so an idle socket holds
// none and an echo's bursts allocate none. What a chunk holds beyond the
// queued frames it is counted against is at most one chunk a socket. A
// burst starts with a small chunk unless the last one outgrew it or the
// frame is too big for it.
func (c *Conn) outSpaceLocked(n int) []byte {
	if cap(c.outChunk)-len(c.outChunk) < n {
		if c.outChunk == nil && !c.outLarge && n <= minOutChunk {
			c.outChunk = smallOutChunks.get()
		} else {
			c.outChunk = largeOutChunks.get()
		}
	}
	c.outBurst += n
	at := len(c.outChunk)
	c.outChunk = c.outChunk[:at+n]
	return c.outChunk[at : at : at+n]
}

// releaseOutChunkLocked gives the socket's chunk back to its free list.
// Only the writer calls it, when it has written every queued frame:
// nothing refers to the chunk's bytes any more.
func (c *Conn) releaseOutChunkLocked() {
	switch cap(c.outChunk) {
	case minOutChunk:
		smallOutChunks.put(c.outChunk[:0])
	case maxOutChunk:
		largeOutChunks.put(c.outChunk[:0])
	}
	// The whole burst decides, not its last chunk: a burst just past a
	// small chunk (an echo of 8 messages of 66 bytes) would otherwise
	// start each burst small, outgrow it and leave it to the collector.
	// A burst that fitted a small chunk starts the next one small again.
	c.outLarge = c.outBurst > minOutChunk
	c.outChunk, c.outBurst = nil, 0
}

// Prepare encodes a message once for sending to many sockets with
// SendPrepared. It fails like Send for a bad kind or invalid UTF-8.
func (h *Hub) Prepare(kind int, data []byte) (*Prepared, error) {
	f, err := prepare(kind, data)
	if err != nil {
		return nil, err
	}
	return &Prepared{frame: f}, nil
}

// SendPrepared queues a prepared message without copying it; otherwise it
// behaves like Send.
func (c *Conn) SendPrepared(p *Prepared) error {
	return c.enqueue(p.frame)
}

// enqueue adds an encoded frame to the outbound queue. It never waits: a
// queue at its budget makes the socket stop reading (see pauseReading),
// and a frame that would take it past the hard cap evicts the socket.
func (c *Conn) enqueue(f []byte) error {
	c.mu.Lock()
	err := c.admitLocked(len(f))
	if err == nil {
		c.queueLocked(f)
	}
	c.mu.Unlock()
	return err
}

// admitLocked says whether a frame of n bytes may be queued, evicting the
// socket if it would take the queue past its hard cap.
func (c *Conn) admitLocked(n int) error {
	switch {
	case n > c.hub.cfg.OutboundBytes:
		return ErrTooLarge
	case c.closing:
		return ErrClosed
	case c.outBytes+n+(c.outFrames+1)*frameCost > c.hub.queueLimit:
		c.failLocked(abi.CloseSlowReader, "slow reader", evictQueueLimit, evictGrace)
		return ErrSlowReader
	}
	return nil
}

// queueLocked appends an admitted frame to the queue.
func (c *Conn) queueLocked(f []byte) {
	if c.out == nil {
		c.out = getFrameQueue()
	}
	c.out = append(c.out, f)
	c.addedLocked(len(f))
	if !c.corked || c.full.Load() {
		// A queue at its budget is written corked or not: holding it
		// back would keep the socket's reader stopped for nothing.
		c.startWriterLocked()
	}
}

// frameCost is what a queued frame costs besides its bytes (its place in
// the queue's slice, rounded up), counted against the hard cap so that
// tiny frames cannot pile up for free.
const frameCost = 32

// pushLocked appends a control frame (pong, close) to the queue and makes
// sure a writer runs, corked or not: control frames never wait for a room.
func (c *Conn) pushLocked(f []byte) {
	c.out = append(c.out, f)
	c.addedLocked(len(f))
	c.startWriterLocked()
}

// addedLocked counts a frame of n bytes just queued. When the queue
// reaches its budget the stall clock starts, and a write in progress is
// cut short (its deadline set to now): what it wrote so far went before,
// and the rest is written under the stall checks (see write).
func (c *Conn) addedLocked(n int) {
	c.outFrames++
	c.outBytes += n
	if c.full.Load() || !c.atBudgetLocked() {
		return
	}
	c.full.Store(true)
	h := c.hub
	c.taken = h.now()
	if c.writeDL != 0 && c.taken < c.writeDL {
		c.writeDL, c.stallDL = c.taken, true
		_ = c.conn.SetWriteDeadline(h.at(c.taken))
	}
}

// stallChecks is how many times per SlowTimeout the writer of a socket at
// its budget looks whether the client took bytes: it is evicted between
// SlowTimeout and SlowTimeout plus a quarter after the last bytes it took
// (or after the queue reached its budget, if that was later).
const stallChecks = 4

// writtenLocked counts frames and bytes the writer has written, or
// dropped. Once the queue is down to half its budget it is no longer
// full, and a paused reader goes on.
func (c *Conn) writtenLocked(frames, n int) {
	c.outFrames -= frames
	c.outBytes -= n
	cfg := &c.hub.cfg
	if c.full.Load() && c.outFrames <= cfg.OutboundFrames/2 && c.outBytes <= cfg.OutboundBytes/2 {
		c.full.Store(false)
		c.resumeLocked()
	}
}

// atBudgetLocked reports whether the frames not yet written reach either
// outbound budget.
func (c *Conn) atBudgetLocked() bool {
	cfg := &c.hub.cfg
	return c.outFrames >= cfg.OutboundFrames || c.outBytes >= cfg.OutboundBytes
}

// resumeLocked gives a reader stopped by pauseReading back its socket: a
// fresh goroutine goes on where it stopped. Silence while it was stopped
// is the node's, not the client's.
func (c *Conn) resumeLocked() {
	if !c.paused {
		return
	}
	c.paused = false
	c.lastSeen.Store(c.hub.now())
	c.hub.m.readResumes.Inc()
	if c.raw != nil {
		go c.pollRead()
	} else {
		go c.readLoop()
	}
}

func (c *Conn) startWriterLocked() {
	if !c.writing && !c.tcpClosed && len(c.out) > 0 {
		c.writing = true
		go c.writeLoop()
	}
}

// Cork holds the socket's writer back: messages queued until Uncork go out
// together, in one system call rather than one each. A room corks the
// sockets it sends to while it works through a burst of events, so that a
// client sending many messages gets its answers in batches, as a server
// that writes only when it has nothing left to read would send them.
// Control frames are not held, and neither is a queue that reaches its
// budget: it is a batch worth a write already, and the socket's reader
// waits for it to drain.
func (c *Conn) Cork() {
	c.mu.Lock()
	c.corked = true
	c.mu.Unlock()
}

// Uncork lets the writer send what Cork held back.
func (c *Conn) Uncork() {
	c.mu.Lock()
	c.corked = false
	c.startWriterLocked()
	c.mu.Unlock()
}

// Close closes the socket with code and reason: a close frame is queued
// behind what is already queued, and the TCP connection is closed when the
// client answers with its own close frame, or after CloseTimeout. Messages
// the client sends meanwhile are dropped. OnClose reports code (even if it
// may not appear on the wire, like 1006: the frame then carries no code).
// The reason is cut to abi.MaxCloseReason bytes. Close never blocks and
// only the first close of a socket (by anyone) counts.
func (c *Conn) Close(code abi.CloseCode, reason string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.beginCloseLocked(code, reason) {
		return
	}
	c.queueCloseLocked(code, reason, false)
	c.deadlineLocked(c.hub.cfg.CloseTimeout)
}

// beginCloseLocked sets the close cause if none is set yet and reports
// whether it did.
func (c *Conn) beginCloseLocked(code abi.CloseCode, reason string) bool {
	if c.closing {
		return false
	}
	c.closing = true
	c.code = code
	c.reason = reason
	c.wakeReaderLocked() // a reader waiting for inbound room drops its message
	c.resumeLocked()     // a paused one reads the client's last frames
	return true
}

// failLocked closes the socket as failed: queued frames are dropped, a close
// frame with code is attempted for at most grace, then TCP is closed. If
// this is the socket's first close it counts the eviction under evict and
// reports true.
func (c *Conn) failLocked(code abi.CloseCode, reason, evict string, grace time.Duration) bool {
	if !c.beginCloseLocked(code, reason) {
		return false
	}
	// Counted before the close frame can leave (its writer needs c.mu): a
	// client that has seen the close finds the eviction counted.
	c.hub.m.evicted(evict)
	c.queueCloseLocked(code, reason, true)
	c.finishing = true
	c.deadlineLocked(grace)
	return true
}

// queueCloseLocked queues our close frame (once), after the queue or, with
// drop, instead of the frames not being written yet.
func (c *Conn) queueCloseLocked(code abi.CloseCode, reason string, drop bool) {
	if c.closeSent || c.tcpClosed {
		return
	}
	c.closeSent = true
	if drop {
		n := 0
		for _, f := range c.out {
			n += len(f)
		}
		c.writtenLocked(len(c.out), n)
		c.out = nil
	}
	c.pushLocked(encodeClose(code, reason))
}

// deadlineLocked makes sure TCP is closed within d: reads and writes get a
// deadline (an earlier one is kept), so a blocked reader or writer wakes up
// and closes the connection.
func (c *Conn) deadlineLocked(d time.Duration) {
	t := c.hub.now() + int64(d)
	if c.closeDeadline != 0 && c.closeDeadline < t {
		return
	}
	c.closeDeadline = t
	_ = c.conn.SetDeadline(c.hub.at(t))
	if c.raw != nil {
		// An idle socket has no reader to time out: give it one, which
		// waits for the client's last frames in a read under the deadline.
		c.wake()
	}
}

// closeTCP closes the connection once; the reader then ends and reports the
// close.
func (c *Conn) closeTCP() {
	c.mu.Lock()
	if c.tcpClosed {
		c.mu.Unlock()
		return
	}
	c.tcpClosed = true
	if !c.closing {
		c.beginCloseLocked(abi.CloseAbnormal, "")
	}
	if c.tcpDone != nil {
		close(c.tcpDone)
	}
	c.wakeReaderLocked()
	raw := c.raw
	c.mu.Unlock()
	if raw != nil {
		c.hub.poll.remove(raw)
	}
	_ = c.conn.Close()
	if raw != nil {
		c.wake() // an idle socket's reader must see the end and report it
	}
}

// abort cuts the connection without a close frame (CloseAll past its
// context), reporting 1006 unless a cause is already set.
func (c *Conn) abort() { c.closeTCP() }

// dropIfDead closes the socket as dead if nothing has been read from it for
// more than two ping intervals at now; silence while the node itself does
// not read the socket (its reader waits for inbound room, or is paused for
// the outbound budget) does not count.
func (c *Conn) dropIfDead(now int64) {
	h := c.hub
	c.mu.Lock()
	if c.closing || c.readerWaiting || c.paused || now-c.lastSeen.Load() <= int64(2*h.cfg.PingInterval) {
		c.mu.Unlock()
		return
	}
	c.beginCloseLocked(abi.CloseAbnormal, "no answer to pings")
	c.mu.Unlock()
	h.m.evicted(evictDead)
	c.closeTCP()
}

// ping queues the hub's keepalive ping.
func (c *Conn) ping() {
	if err := c.enqueue(pingFrame); err == nil {
		c.hub.m.pingsSent.Inc()
	}
}

// writeLoop writes the queue in batches until it is empty, then exits. It
// runs only while there is something to write.
func (c *Conn) writeLoop() {
	h := c.hub
	for {
		// Let whatever is about to queue more frames (a room working
		// through a burst, the reader answering pings) run first: one
		// write of several frames costs little more than a write of one.
		runtime.Gosched()
		c.mu.Lock()
		if c.tcpClosed {
			c.writing = false
			c.out, c.outChunk, c.outBurst = nil, nil, 0
			c.writtenLocked(c.outFrames, c.outBytes) // nothing will be written
			c.mu.Unlock()
			return
		}
		if len(c.out) == 0 {
			c.writing = false
			c.releaseOutChunkLocked() // every frame carved from it is written
			fin := c.finishing
			c.mu.Unlock()
			if fin {
				c.closeTCP()
			}
			return
		}
		batch := c.out
		c.out = nil
		c.mu.Unlock()
		n, data := 0, 0
		for _, f := range batch {
			n += len(f)
			if isDataFrame(f) {
				data++
			}
		}

		err := c.writeBatch(batch)
		putFrameQueue(batch)

		c.mu.Lock()
		reason := evictNone
		if err != nil && !c.closing {
			switch {
			case errors.Is(err, errStalled):
				reason = evictSlowReader
				c.beginCloseLocked(abi.CloseSlowReader, "slow reader")
			case errors.Is(err, os.ErrDeadlineExceeded):
				reason = evictWriteTimeout
				c.beginCloseLocked(abi.CloseSlowReader, "write timeout")
			default:
				c.beginCloseLocked(abi.CloseAbnormal, "")
			}
		}
		c.mu.Unlock()
		if err != nil {
			h.m.evicted(reason)
			c.closeTCP()
			continue
		}
		h.m.bytesOut.Add(n)
		h.m.messagesOut.Add(data)
	}
}

// errStalled is returned by write when the client took no byte for
// SlowTimeout while the socket's queue was at its budget.
var errStalled = errors.New("socket: client took nothing for the slow-reader timeout")

// coalesceSize is the size of the pooled buffers in which the writer
// gathers small frames into one write; a frame of at least coalesceLimit
// bytes is written on its own, without a copy.
const (
	coalesceSize  = 16 << 10
	coalesceLimit = 4 << 10
)

var writePool = sync.Pool{
	New: func() any {
		b := make([]byte, 0, coalesceSize)
		return &b
	},
}

// writeBatch writes frames in order: small ones gathered into a pooled
// buffer, big ones directly. (Not writev: the poll package keeps the iovec
// array of a writev on the file descriptor for good, which an idle socket
// would then carry.)
func (c *Conn) writeBatch(batch [][]byte) error {
	var bp *[]byte
	defer func() {
		if bp != nil {
			*bp = (*bp)[:0]
			writePool.Put(bp)
		}
	}()
	for i := 0; i < len(batch); {
		f := batch[i]
		if len(f) >= coalesceLimit || i+1 == len(batch) || len(f)+len(batch[i+1]) > coalesceSize {
			i++
			if err := c.write(f, 1); err != nil {
				return err
			}
			continue
		}
		if bp == nil {
			bp = writePool.Get().(*[]byte)
		}
		buf := (*bp)[:0]
		frames := 0
		for i < len(batch) && len(batch[i]) < coalesceLimit && len(buf)+len(batch[i]) <= coalesceSize {
			buf = append(buf, batch[i]...)
			i++
			frames++
		}
		*bp = buf
		if err := c.write(buf, frames); err != nil {
			return err
		}
	}
	return nil
}

// write writes p, which holds frames whole frames, and counts them
// written. Its deadline is WriteTimeout from its start, or the close
// deadline if that is sooner. While the queue is at its budget the write
// also wakes every SlowTimeout/stallChecks to see whether the client took
// anything meanwhile: a client that took nothing for SlowTimeout fails it
// with errStalled. (The bytes of a check come in one count, so they are
// taken as of the end of the check: a client is never evicted before
// SlowTimeout without bytes, and at most one check late.)
func (c *Conn) write(p []byte, frames int) error {
	h := c.hub
	size := len(p)
	now := h.now()
	limit := now + int64(h.cfg.WriteTimeout)
	for {
		c.mu.Lock()
		dl, stall := limit, false
		if c.full.Load() {
			if t := now + int64(h.cfg.SlowTimeout)/stallChecks; t < dl {
				dl, stall = t, true
			}
		}
		if c.closeDeadline != 0 && c.closeDeadline < dl {
			dl, stall = c.closeDeadline, false
		}
		// Under mu, so that a shorter deadline set by an eviction or by
		// the queue reaching its budget is never overwritten by a longer
		// one.
		c.writeDL, c.stallDL = dl, stall
		_ = c.conn.SetWriteDeadline(h.at(dl))
		c.mu.Unlock()

		n, err := c.conn.Write(p)

		c.mu.Lock()
		stall = c.stallDL
		c.writeDL, c.stallDL = 0, false
		if err == nil {
			if c.full.Load() {
				c.taken = h.now()
			}
			c.writtenLocked(frames, size)
			c.mu.Unlock()
			return nil
		}
		if !stall || !errors.Is(err, os.ErrDeadlineExceeded) {
			c.mu.Unlock()
			return err
		}
		now = h.now()
		if n > 0 {
			c.taken = now
		}
		stuck := now-c.taken >= int64(h.cfg.SlowTimeout)
		c.mu.Unlock()
		if n == 0 && stuck {
			return errStalled
		}
		p = p[n:]
	}
}
