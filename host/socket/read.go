package socket

import (
	"encoding/binary"
	"errors"
	"io"
	"slices"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/gobwas/ws"
	"github.com/wasmkeep/wasmkeep/abi"
)

// readBufferSize is the size of the pooled read buffers. A socket holds one
// only while bytes it has read are waiting in it.
const readBufferSize = 4096

// growStep bounds how far a payload buffer is grown ahead of the bytes that
// actually arrived: a header may declare up to MaxMessage, but memory is
// committed only as the payload comes in.
const growStep = 64 << 10

// readBuf is a pooled read buffer: b[r:w] is read and not yet consumed.
// fn, set on first use by the epoll reader, fills it without blocking
// through a RawConn; it is kept with the buffer so that such a read
// allocates nothing.
type readBuf struct {
	b     [readBufferSize]byte
	r, w  int
	n     int   // fn's result
	err   error // fn's result
	fn    func(fd uintptr) bool
	chunk []byte // where the whole messages in b get their payloads (payloadDst)
}

var readPool = sync.Pool{
	New: func() any { return new(readBuf) },
}

func getReadBuf() *readBuf {
	rb := readPool.Get().(*readBuf)
	rb.r, rb.w = 0, 0
	return rb
}

func putReadBuf(rb *readBuf) {
	rb.err, rb.chunk = nil, nil
	readPool.Put(rb)
}

// frameHeader is a parsed frame header.
type frameHeader struct {
	fin    bool
	rsv    byte
	op     byte
	masked bool
	mask   [4]byte
	length int64
	size   int // bytes of the header on the wire
}

// source reads the carried handshake bytes, then through the pooled buffer
// (taken on first use). A read of at least a buffer's size with nothing
// buffered goes straight to the connection.
type source Conn

func (s *source) Read(p []byte) (int, error) {
	c := (*Conn)(s)
	if len(c.carry) > 0 {
		n := copy(p, c.carry)
		c.carry = c.carry[n:]
		if len(c.carry) == 0 {
			c.carry = nil
		}
		return n, nil
	}
	rb := c.rb
	if rb == nil || rb.r == rb.w {
		if len(p) >= readBufferSize {
			n, err := c.conn.Read(p)
			c.sawBytes(n)
			return n, err
		}
		if rb == nil {
			rb = getReadBuf()
			c.rb = rb
		}
		n, err := c.conn.Read(rb.b[:])
		c.sawBytes(n)
		rb.r, rb.w = 0, n
		if n == 0 {
			return 0, err
		}
		// An error that came with data comes back on the next read.
	}
	n := copy(p, rb.b[rb.r:rb.w])
	rb.r += n
	return n, nil
}

// sawBytes notes that n bytes were read from the network: the socket is
// alive as of now. It is the reader's one clock reading per read system
// call, which the frames in those bytes share for liveness and for the
// message rate (a clock reading per frame was 3% of a node's CPU in an
// echo of small messages).
func (c *Conn) sawBytes(n int) {
	if n > 0 {
		c.lastSeen.Store(c.hub.now())
	}
}

// releaseBuffer returns the read buffer to the pool once nothing waits in it
// (or with force), so that an idle socket holds none. It reports whether
// the socket has no read bytes pending, buffer or carry.
func (c *Conn) releaseBuffer(force bool) bool {
	if c.rb != nil && (force || c.rb.r == c.rb.w) {
		putReadBuf(c.rb)
		c.rb = nil
	}
	return c.rb == nil && len(c.carry) == 0
}

// readHeader reads one frame header, of which the first have bytes are
// already in c.hb.
func (c *Conn) readHeader(have int) (h frameHeader, err error) {
	src := (*source)(c)
	b := c.hb[:2]
	if _, err = io.ReadFull(src, b[have:]); err != nil {
		return h, err
	}
	h.fin = b[0]&0x80 != 0
	h.rsv = (b[0] >> 4) & 0x7
	h.op = b[0] & 0x0f
	h.masked = b[1]&0x80 != 0
	n := b[1] & 0x7f
	extra := 0
	switch n {
	case 126:
		extra = 2
	case 127:
		extra = 8
	}
	if h.masked {
		extra += 4
	}
	h.length = int64(n)
	h.size = 2 + extra
	if extra == 0 {
		return h, nil
	}
	b = c.hb[2 : 2+extra]
	if _, err = io.ReadFull(src, b); err != nil {
		return h, err
	}
	switch n {
	case 126:
		h.length = int64(binary.BigEndian.Uint16(b))
		b = b[2:]
	case 127:
		v := binary.BigEndian.Uint64(b)
		if v>>63 != 0 {
			h.length = -1 // invalid: most significant bit set
		} else {
			h.length = int64(v)
		}
		b = b[8:]
	}
	if h.masked {
		copy(h.mask[:], b)
	}
	return h, nil
}

// payloadDst returns the slice a data frame's payload is appended to:
// c.msg, or, for a whole message (unfragmented, not empty) that is already
// in the read buffer, space carved from the buffer's chunk, allocated for
// the bytes the buffer holds and dropped with it (releaseBuffer), so the
// messages of one read share one allocation instead of one each, and a
// socket keeps no chunk between reads. A message keeps its chunk alive
// until it has been handled; the chunk is at most a read buffer's size and
// holds this socket's messages only.
func (c *Conn) payloadDst(hdr frameHeader) []byte {
	n := int(hdr.length)
	rb := c.rb
	if c.msg != nil || !hdr.fin || n == 0 || len(c.carry) > 0 || rb == nil || rb.w-rb.r < n {
		return c.msg
	}
	if cap(rb.chunk)-len(rb.chunk) < n {
		rb.chunk = make([]byte, 0, rb.w-rb.r)
	}
	at := len(rb.chunk)
	rb.chunk = rb.chunk[:at+n]
	return rb.chunk[at : at : at+n] // its capacity ends where the next message's space begins
}

// readPayload appends n bytes of payload to dst and unmasks them. The buffer
// grows by at most growStep beyond the bytes received so far.
func (c *Conn) readPayload(dst []byte, n int, mask [4]byte) ([]byte, error) {
	src := (*source)(c)
	start := len(dst)
	for n > 0 {
		step := min(n, growStep)
		dst = slices.Grow(dst, step)
		at := len(dst)
		dst = dst[:at+step]
		if _, err := io.ReadFull(src, dst[at:]); err != nil {
			return dst[:at], err
		}
		n -= step
	}
	ws.Cipher(dst[start:], mask, 0)
	return dst, nil
}

// protocolError is how the reader ends a socket that broke the protocol.
type protocolError struct {
	code   abi.CloseCode
	reason string
	evict  string
}

var (
	errReserved     = &protocolError{abi.CloseProtocolError, "reserved bits set", evictProtocol}
	errOpcode       = &protocolError{abi.CloseProtocolError, "unknown opcode", evictProtocol}
	errUnmasked     = &protocolError{abi.CloseProtocolError, "unmasked client frame", evictProtocol}
	errControl      = &protocolError{abi.CloseProtocolError, "bad control frame", evictProtocol}
	errContinuation = &protocolError{abi.CloseProtocolError, "unexpected continuation", evictProtocol}
	errInterleaved  = &protocolError{abi.CloseProtocolError, "new message inside a fragmented one", evictProtocol}
	errLength       = &protocolError{abi.CloseProtocolError, "bad payload length", evictProtocol}
	errCloseCode    = &protocolError{abi.CloseProtocolError, "bad close code", evictProtocol}
	errUTF8         = &protocolError{abi.CloseInvalidData, "invalid UTF-8", evictProtocol}
	errTooBig       = &protocolError{abi.CloseTooBig, "message too big", evictTooBig}
)

// readLoop reads frames, answers control frames and queues complete
// messages for delivery, until the connection ends; then it reports the
// close. It is the reader of a socket read by goroutines (ReadGoroutine).
//
// Each idle wait happens on a fresh goroutine: when a burst of frames has
// been handled and nothing is left in the read buffer, the goroutine starts
// a new one to wait for the next frame and exits. Handling a frame (pooled
// buffers, allocations, spawning the writer) may grow a goroutine's stack to
// 4 KiB or more, and the runtime never shrinks a stack back to its initial
// 2 KiB while the goroutine is parked in a read; a new goroutine starts at 2
// KiB. The cost is one goroutine start per burst.
func (c *Conn) readLoop() {
	have := int(c.held) // a reader paused for the outbound budget had read them
	c.held = 0
	if have == 0 && c.rb == nil && len(c.carry) == 0 {
		if c.pauseReading(0) {
			return
		}
		// Idle: wait for the first bytes of the next frame with as few
		// frames on the stack as possible, straight into c.hb.
		var ok bool
		if have, ok = c.waitHeader(); !ok {
			c.finishRead(nil, false)
			return
		}
	}
	c.burst(have)
}

// waitHeader reads the first two bytes of a frame header into c.hb,
// blocking. It reports false if the connection ended first.
func (c *Conn) waitHeader() (have int, ok bool) {
	for have < 2 {
		n, err := c.conn.Read(c.hb[have:2])
		c.sawBytes(n)
		have += n
		if err != nil && have < 2 {
			return have, false
		}
	}
	return have, true
}

// burst handles frames while read bytes are pending, then hands the socket
// to a fresh goroutine (see readLoop) or ends it. have is the number of
// header bytes readLoop already read into c.hb.
//
// When a message needs delivering and no delivery goroutine runs, this
// goroutine becomes it: it hands reading over to a fresh goroutine first
// (so pings are still answered while the Handler runs), then delivers.
func (c *Conn) burst(have int) {
	batched := false // messages are queued that this goroutine must deliver
	for {
		if c.pauseReading(have) {
			if batched {
				c.dispatch()
			}
			return
		}
		next := c.readStep(have, &batched)
		have = 0
		switch next {
		case readEnded:
			return
		case readDeliver:
			if !c.pauseReading(0) {
				c.releaseBuffer(false)
				go c.readLoop()
			}
			// From here on this goroutine touches no read state.
			c.dispatch()
			return
		}
		if c.releaseBuffer(false) {
			go c.readLoop()
			return
		}
	}
}

// readNext is what a reader does after a frame (readStep).
type readNext int

const (
	readMore    readNext = iota // read on: a whole frame is buffered, or nothing waits for delivery
	readDeliver                 // messages are queued: this goroutine delivers them
	readEnded                   // the socket ended; its close will be reported
)

// readStep reads one frame (have header bytes are in c.hb already) and
// says what the reader does next. Messages are queued, not delivered, while
// whole frames wait in the read buffer: the room then takes what arrived
// together as one burst, and its answers leave in one write. *batched
// says that this goroutine has queued messages it must deliver.
func (c *Conn) readStep(have int, batched *bool) readNext {
	perr, clientClosed, deliver, err := c.readFrame(have)
	if err != nil || perr != nil || clientClosed {
		if *batched {
			go c.dispatch() // what was queued goes before the close
		}
		c.finishRead(perr, clientClosed)
		return readEnded
	}
	if (deliver || *batched) && c.moreBuffered() {
		*batched = true
		return readMore
	}
	if deliver || *batched {
		*batched = false
		return readDeliver
	}
	return readMore
}

// The reader state of a socket read through the hub's poller (ReadEpoll),
// in Conn.rstate. Zero: a goroutine owns the socket's read state (it is
// reading, or is about to look for bytes).
const (
	rsIdle  = 1 << iota // no goroutine reads: the socket waits in the poller
	rsReady             // woken while a goroutine read: it must look again
)

// errWait is returned by poll for a closing socket: its reader waits for
// the client's last frames with a blocking read, bounded by the close
// deadline, rather than in the poller.
var errWait = errors.New("socket: closing, wait in a read")

// errAgain is returned by fill when the socket has nothing to read.
var errAgain = errors.New("socket: nothing to read")

// wake is called by the poller when the socket is readable, and by whatever
// must make its reader look at it (its TCP was closed, a close deadline was
// set): an idle socket gets a reader goroutine; a socket being read is
// marked so that its reader does not leave it idle without looking again.
func (c *Conn) wake() {
	for {
		s := c.rstate.Load()
		if s&rsIdle != 0 {
			if c.rstate.CompareAndSwap(s, 0) {
				go c.pollRead()
				return
			}
			continue
		}
		if s&rsReady != 0 || c.rstate.CompareAndSwap(s, s|rsReady) {
			return
		}
	}
}

// poll looks for bytes on a socket read through the poller, without
// blocking: it returns more when bytes are now buffered (in c.rb); without
// more and error, the socket has been left idle in the poller and the
// caller no longer owns its read state. The error is the connection's
// (it has ended) or errWait.
func (c *Conn) poll() (more bool, err error) {
	for {
		c.rstate.Store(0) // from here on, a wake makes us look again
		switch err := c.fill(); {
		case err == nil:
			return true, nil
		case err != errAgain:
			return false, err
		}
		c.mu.Lock()
		closing := c.closing
		c.mu.Unlock()
		if closing {
			return false, errWait
		}
		if c.rstate.CompareAndSwap(0, rsIdle) {
			return false, nil
		}
	}
}

// pollRead is the reader of a socket read through the hub's poller: started
// by the poller when an idle socket becomes readable, it handles frames
// while bytes arrive and exits when a read finds none, leaving the socket
// idle in the poller, with no goroutine. A frame that arrives in pieces is
// finished with blocking reads (the goroutine then waits in the Go
// runtime's poller until the rest comes), and so is the closing handshake
// (under the close deadline); idle sockets never hold a goroutine or a
// buffer.
//
// When a message needs delivering and no delivery goroutine runs, this
// goroutine becomes it, as in burst: reading goes on on a fresh goroutine if
// bytes are pending, in the poller otherwise.
func (c *Conn) pollRead() {
	have := int(c.held) // a reader paused for the outbound budget had read them
	c.held = 0
	batched := false // messages are queued that this goroutine must deliver
	for {
		if c.pauseReading(have) {
			if batched {
				c.dispatch()
			}
			return
		}
		if have == 0 && c.releaseBuffer(false) {
			more, err := c.poll()
			switch {
			case err == errWait:
				var ok bool
				if have, ok = c.waitHeader(); !ok {
					c.finishRead(nil, false)
					return
				}
			case err != nil:
				c.finishRead(nil, false)
				return
			case !more:
				return // idle in the poller
			}
		}
		next := c.readStep(have, &batched)
		have = 0
		switch next {
		case readEnded:
			return
		case readMore:
			continue
		}
		switch {
		case c.pauseReading(0):
		case !c.releaseBuffer(false):
			go c.pollRead()
		default:
			if more, err := c.poll(); more || err != nil {
				go c.pollRead() // it meets the error again, or waits
			}
		}
		// From here on this goroutine touches no read state.
		c.dispatch()
		return
	}
}

// moreBuffered reports whether a whole frame is waiting in the read buffer
// and queueing it cannot make the reader wait for inbound room: the reader
// may then read it before it delivers what it has queued, without blocking
// (a queued message is never held back by a frame still on its way).
func (c *Conn) moreBuffered() bool {
	rb := c.rb
	if rb == nil || len(c.carry) > 0 {
		return false
	}
	b := rb.b[rb.r:rb.w]
	if len(b) < 2 {
		return false
	}
	size, n := 2, int64(b[1]&0x7f)
	switch n {
	case 126:
		size += 2
	case 127:
		size += 8
	}
	if b[1]&0x80 != 0 {
		size += 4
	}
	if len(b) < size {
		return false
	}
	switch n {
	case 126:
		n = int64(binary.BigEndian.Uint16(b[2:]))
	case 127:
		n = int64(binary.BigEndian.Uint64(b[2:]))
	}
	if n < 0 || n > int64(len(b)-size) {
		return false
	}
	cfg := &c.hub.cfg
	c.mu.Lock()
	room := len(c.in)+1 < cfg.InboundMessages && c.inBytes+int(n) <= cfg.InboundBytes
	c.mu.Unlock()
	return room
}

// pauseReading is the reader's look at the outbound queue before it takes
// a frame: while the queue is at its budget, the socket is not read (its
// bytes wait in the kernel, and the client's writes slow down) until the
// writer has drained it to half the budget (writtenLocked), or the socket
// closes. It reports whether it stopped the reader: the caller then gives
// up the socket's read state, which keeps the have header bytes already
// read, and holds no goroutine for it.
func (c *Conn) pauseReading(have int) bool {
	if !c.full.Load() {
		return false
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closing || !c.full.Load() {
		return false
	}
	if have == 0 {
		c.releaseBuffer(false) // a paused socket keeps a buffer only if bytes wait in it
	}
	c.held = uint8(have)
	c.paused = true
	c.hub.m.readPauses.Inc()
	return true
}

// finishRead ends the socket after its last frame: fail it or finish the
// closing handshake, close TCP, and have the close reported after the
// messages still queued.
func (c *Conn) finishRead(perr *protocolError, clientClosed bool) {
	switch {
	case perr != nil:
		c.mu.Lock()
		c.failLocked(perr.code, perr.reason, perr.evict, evictGrace)
		c.mu.Unlock()
		c.waitFlushed()
	case clientClosed:
		c.waitFlushed()
	}
	c.closeTCP()
	c.releaseBuffer(true)
	c.carry = nil
	c.msg = nil

	c.mu.Lock()
	c.readerDone = true
	run := !c.dispatching
	c.dispatching = true
	c.mu.Unlock()
	if run {
		c.dispatch()
	}
}

// waitFlushed waits until the writer has written our close frame and closed
// TCP, or until the close deadline.
func (c *Conn) waitFlushed() {
	c.mu.Lock()
	if c.tcpClosed {
		c.mu.Unlock()
		return
	}
	c.finishing = true
	if !c.writing && len(c.out) == 0 {
		c.mu.Unlock()
		return // nothing left to write
	}
	if c.tcpDone == nil {
		c.tcpDone = make(chan struct{})
	}
	done := c.tcpDone
	wait := time.Duration(c.closeDeadline - c.hub.now())
	c.mu.Unlock()
	t := c.hub.clock.NewTimer(wait)
	select {
	case <-done:
	case <-t.C():
	}
	t.Stop()
}

// readFrame reads and handles one frame. It returns err when the connection
// failed (or was closed), clientClosed when the client's close frame
// arrived, perr when the client broke the protocol, and deliver when it
// queued a message that the caller must now deliver (see burst).
func (c *Conn) readFrame(have int) (perr *protocolError, clientClosed, deliver bool, err error) {
	h := c.hub
	hdr, err := c.readHeader(have)
	if err != nil {
		return nil, false, false, err
	}
	// The clock was read when the frame's last bytes so far came in (see
	// sawBytes): frames that arrived in one read share that reading.
	now := c.lastSeen.Load()
	switch {
	case hdr.rsv != 0:
		return errReserved, false, false, nil
	case !hdr.masked:
		return errUnmasked, false, false, nil
	case hdr.length < 0:
		return errLength, false, false, nil
	}
	wire := int64(hdr.size) + hdr.length
	switch hdr.op {
	case opText, opBinary, opContinuation:
		if hdr.op == opContinuation && c.msgOp == 0 {
			return errContinuation, false, false, nil
		}
		if hdr.op != opContinuation && c.msgOp != 0 {
			return errInterleaved, false, false, nil
		}
		if int64(len(c.msg))+hdr.length > int64(h.cfg.MaxMessage) {
			return errTooBig, false, false, nil
		}
		if hdr.op != opContinuation {
			c.msgOp = hdr.op
		}
		c.msg, err = c.readPayload(c.payloadDst(hdr), int(hdr.length), hdr.mask)
		if err != nil {
			return nil, false, false, err
		}
		h.m.bytesIn.Add(int(wire))
		if !hdr.fin {
			return nil, false, false, nil
		}
		msg, op := c.msg, c.msgOp
		c.msg, c.msgOp = nil, 0
		if op == opText && !utf8.Valid(msg) {
			return errUTF8, false, false, nil
		}
		if msg == nil {
			msg = []byte{}
		}
		h.m.messagesIn.Inc()
		if ok, _ := h.msgRate.take(&c.msgTAT, now); !ok {
			// Over the socket's message rate: dropped, the socket stays.
			h.m.messagesDropped.Inc()
			return nil, false, false, nil
		}
		return nil, false, c.deliver(int(op), msg), nil

	case opPing, opPong, opClose:
		if !hdr.fin || hdr.length > maxControlPayload {
			return errControl, false, false, nil
		}
		var p []byte
		if hdr.op == opPing {
			// The pong is built in place: header, then the payload.
			p = appendHeader(make([]byte, 0, 2+hdr.length), opPong, int(hdr.length))
		}
		start := len(p)
		p, err = c.readPayload(p, int(hdr.length), hdr.mask)
		if err != nil {
			return nil, false, false, err
		}
		h.m.bytesIn.Add(int(wire))
		switch hdr.op {
		case opPing:
			_ = c.enqueue(p) // over budget evicts; closing drops it
		case opClose:
			if perr := c.clientClose(p[start:]); perr != nil {
				return perr, false, false, nil
			}
			return nil, true, false, nil
		}
		return nil, false, false, nil
	}
	return errOpcode, false, false, nil
}

// clientClose handles the client's close frame: validate it, set the cause
// and echo it (unless we closed first).
func (c *Conn) clientClose(p []byte) *protocolError {
	code, reason := abi.CloseNoStatus, ""
	switch {
	case len(p) == 1:
		return errCloseCode
	case len(p) >= 2:
		code = abi.CloseCode(binary.BigEndian.Uint16(p))
		if !sendableCode(code) {
			return errCloseCode
		}
		if !utf8.Valid(p[2:]) {
			return errUTF8
		}
		reason = string(p[2:])
	}
	c.mu.Lock()
	if c.beginCloseLocked(code, reason) {
		// Echo the code (RFC 6455 section 5.5.1), not the reason.
		c.queueCloseLocked(code, "", false)
		c.deadlineLocked(c.hub.cfg.CloseTimeout)
	}
	c.mu.Unlock()
	return nil
}

// deliver queues a complete message for the Handler, waiting while the
// inbound queue is full. Messages read after the socket began closing are
// dropped. It reports whether no delivery goroutine runs: the caller must
// then deliver (it is marked as running).
func (c *Conn) deliver(kind int, data []byte) bool {
	cfg := &c.hub.cfg
	c.mu.Lock()
	for !c.closing && len(c.in) > 0 &&
		(len(c.in) >= cfg.InboundMessages || c.inBytes+len(data) > cfg.InboundBytes) {
		c.readerWaiting = true
		if c.space == nil {
			c.space = make(chan struct{})
		}
		space := c.space
		c.mu.Unlock()
		<-space
		c.mu.Lock()
	}
	if c.readerWaiting {
		c.readerWaiting = false
		c.lastSeen.Store(c.hub.now()) // silence while we waited is ours
	}
	if c.closing {
		c.mu.Unlock()
		return false
	}
	if c.in == nil {
		c.in = getMessageQueue()
	}
	c.in = append(c.in, Message{Kind: kind, Data: data})
	c.inBytes += len(data)
	run := !c.dispatching
	c.dispatching = true
	c.mu.Unlock()
	return run
}

// wakeReaderLocked wakes the reader if it waits for inbound room (deliver):
// it looks at the queue again. Without a waiting reader it does nothing.
func (c *Conn) wakeReaderLocked() {
	if c.space != nil {
		close(c.space)
		c.space = nil
	}
}

// dispatch delivers queued messages in order, then the close once the reader
// is done. It runs only while there is something to deliver.
func (c *Conn) dispatch() {
	for {
		c.mu.Lock()
		if len(c.in) == 0 {
			if c.readerDone && !c.closeReported {
				c.closeReported = true
				code, reason := c.code, c.reason
				c.mu.Unlock()
				c.handler.OnClose(c, code, reason)
				c.hub.remove(c)
				return
			}
			c.dispatching = false
			c.mu.Unlock()
			return
		}
		if bh, ok := c.handler.(BatchHandler); ok || len(c.in) == 1 {
			// Take the whole queue: one message, or all of them for a
			// BatchHandler.
			msgs := c.in
			c.in, c.inBytes = nil, 0
			c.wakeReaderLocked() // if it waits for room
			c.mu.Unlock()
			if len(msgs) == 1 {
				c.handler.OnMessage(c, msgs[0].Kind, msgs[0].Data)
			} else {
				bh.OnMessages(c, msgs)
			}
			putMessageQueue(msgs)
			continue
		}
		m := c.in[0]
		c.in[0] = Message{}
		c.in = c.in[1:]
		if len(c.in) == 0 {
			c.in = nil
		}
		c.inBytes -= len(m.Data)
		c.wakeReaderLocked()
		c.mu.Unlock()
		c.handler.OnMessage(c, m.Kind, m.Data)
	}
}
