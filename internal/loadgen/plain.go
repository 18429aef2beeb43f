package loadgen

import (
	"bufio"
	"encoding/binary"
	"errors"
	"io"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unicode/utf8"

	"github.com/gobwas/ws"
)

// PlainServer is the benchmark's reference: a plain WebSocket server on
// gobwas/ws with nothing behind it, written to be as fast as a
// straightforward server can be, so that the node's figures can be read
// as a fraction of it. It accepts a socket on any path.
//
//   - Echo: one goroutine per connection reads frames through a buffered
//     reader and writes each one back through a buffered writer, which is
//     flushed only when the reader is about to block: frames that arrived
//     together leave together, in one write. No allocation per message.
//   - Broadcast: sockets on the same path form a room. A message is
//     encoded once and queued to every socket of its room; each socket has a
//     writer goroutine that writes everything queued with one flush. A
//     socket more than plainQueueLimit frames behind is dropped.
//
// Like the node it checks what RFC 6455 asks of a server: client frames
// masked, control frames short and final, text valid UTF-8 (in echo, for
// unfragmented messages; fragments are echoed as they come), frames and
// messages at most 1 MiB (the node's default --max-message); it answers
// pings and close frames. It does not ping, and it has no idle timeout.
type PlainServer struct {
	ln        net.Listener
	broadcast bool
	wg        sync.WaitGroup

	mu     sync.Mutex
	conns  map[net.Conn]struct{}
	rooms  map[string]*plainRoom
	closed bool
}

const (
	plainMaxMessage = 1 << 20
	plainQueueLimit = 4096
	plainBuffer     = 4 << 10
)

// ListenPlain starts a plain server on addr (host:port) that echoes, or
// broadcasts when mode is Broadcast. Close stops it.
func ListenPlain(addr string, mode Mode) (*PlainServer, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, err
	}
	s := &PlainServer{ln: ln, broadcast: mode == Broadcast, conns: map[net.Conn]struct{}{}, rooms: map[string]*plainRoom{}}
	s.wg.Add(1)
	go s.accept()
	return s, nil
}

// Addr returns the address the server listens on.
func (s *PlainServer) Addr() string { return s.ln.Addr().String() }

// Close stops accepting, closes every connection and waits for the
// server's goroutines to end.
func (s *PlainServer) Close() error {
	s.mu.Lock()
	s.closed = true
	for c := range s.conns {
		_ = c.Close()
	}
	s.mu.Unlock()
	err := s.ln.Close()
	s.wg.Wait()
	return err
}

func (s *PlainServer) accept() {
	defer s.wg.Done()
	for {
		c, err := s.ln.Accept()
		if err != nil {
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				time.Sleep(5 * time.Millisecond) // out of file descriptors, say
				continue
			}
			return
		}
		s.mu.Lock()
		if s.closed {
			s.mu.Unlock()
			_ = c.Close()
			return
		}
		s.conns[c] = struct{}{}
		s.wg.Add(1)
		s.mu.Unlock()
		go s.serve(c)
	}
}

func (s *PlainServer) serve(c net.Conn) {
	defer s.wg.Done()
	defer func() {
		s.mu.Lock()
		delete(s.conns, c)
		s.mu.Unlock()
		_ = c.Close()
	}()
	var (
		path string
		m    *plainMember
		room *plainRoom
	)
	u := ws.Upgrader{OnRequest: func(uri []byte) error {
		path, _, _ = strings.Cut(string(uri), "?")
		return nil
	}}
	if s.broadcast {
		// The socket joins its room before the handshake's answer goes
		// out, so that a client that sees the socket open is in the room
		// (what is queued meanwhile is written after the answer).
		u.OnBeforeUpgrade = func() (ws.HandshakeHeader, error) {
			m = &plainMember{c: c, wake: make(chan struct{}, 1)}
			room = s.join(path, m)
			return nil, nil
		}
	}
	_ = c.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := u.Upgrade(c); err != nil {
		if room != nil {
			s.leave(path, room, m)
		}
		return
	}
	_ = c.SetDeadline(time.Time{})
	if s.broadcast {
		s.serveRoom(c, path, m, room)
		return
	}
	serveEcho(c)
}

// flushReader reads from the connection, first flushing what the writer
// holds: bufio.Reader calls it only when it has no bytes left, that is
// right before the connection would block.
type flushReader struct {
	c  net.Conn
	bw *bufio.Writer
}

func (f *flushReader) Read(p []byte) (int, error) {
	if f.bw.Buffered() > 0 {
		if err := f.bw.Flush(); err != nil {
			return 0, err
		}
	}
	return f.c.Read(p)
}

// serveEcho echoes every frame back until the client closes or breaks a
// rule.
func serveEcho(c net.Conn) {
	bw := bufio.NewWriterSize(c, plainBuffer)
	br := bufio.NewReaderSize(&flushReader{c: c, bw: bw}, plainBuffer)
	var (
		hb      [ws.MaxHeaderSize]byte
		payload []byte
		inMsg   bool // a fragmented message is in progress
	)
	for {
		h, err := ws.ReadHeaderBuffer(br, hb[:])
		if err != nil {
			return
		}
		if code := checkFrame(h, inMsg); code != 0 {
			closeWith(bw, code)
			return
		}
		if int64(cap(payload)) < h.Length {
			payload = make([]byte, h.Length)
		}
		payload = payload[:h.Length]
		if _, err := io.ReadFull(br, payload); err != nil {
			return
		}
		ws.Cipher(payload, h.Mask, 0)
		switch h.OpCode {
		case ws.OpPing:
			h.OpCode = ws.OpPong
		case ws.OpPong:
			continue
		case ws.OpClose:
			_ = writeFrame(bw, ws.OpClose, true, payload)
			_ = bw.Flush()
			return
		case ws.OpText:
			if h.Fin && !utf8.Valid(payload) {
				closeWith(bw, ws.StatusInvalidFramePayloadData)
				return
			}
		}
		if !h.OpCode.IsControl() {
			inMsg = !h.Fin
		}
		if err := writeFrame(bw, h.OpCode, h.Fin, payload); err != nil {
			return
		}
	}
}

// checkFrame returns the close code for a frame a server must refuse, or 0.
func checkFrame(h ws.Header, inMsg bool) ws.StatusCode {
	switch {
	case !h.Masked, h.Rsv != 0, h.OpCode.IsReserved():
		return ws.StatusProtocolError
	case h.OpCode.IsControl() && (!h.Fin || h.Length > 125):
		return ws.StatusProtocolError
	case h.OpCode == ws.OpContinuation && !inMsg, h.OpCode.IsData() && h.OpCode != ws.OpContinuation && inMsg:
		return ws.StatusProtocolError
	case h.Length > plainMaxMessage:
		return ws.StatusMessageTooBig
	}
	return 0
}

// writeFrame writes an unmasked (server) frame; its header is built in
// bw's own buffer, without an allocation.
func writeFrame(bw *bufio.Writer, op ws.OpCode, fin bool, p []byte) error {
	if _, err := bw.Write(appendServerHeader(bw.AvailableBuffer(), op, fin, len(p))); err != nil {
		return err
	}
	_, err := bw.Write(p)
	return err
}

// appendServerHeader appends the header of an unmasked frame of n bytes.
func appendServerHeader(dst []byte, op ws.OpCode, fin bool, n int) []byte {
	b0 := byte(op)
	if fin {
		b0 |= 0x80
	}
	switch {
	case n <= 125:
		return append(dst, b0, byte(n))
	case n <= 0xffff:
		return append(dst, b0, 126, byte(n>>8), byte(n))
	}
	return binary.BigEndian.AppendUint64(append(dst, b0, 127), uint64(n))
}

func closeWith(bw *bufio.Writer, code ws.StatusCode) {
	_ = writeFrame(bw, ws.OpClose, true, ws.NewCloseFrameBody(code, ""))
	_ = bw.Flush()
}

// plainRoom is the sockets on one path, in broadcast mode.
type plainRoom struct {
	members atomic.Pointer[[]*plainMember] // replaced, never changed
}

// plainMember is one socket of a room with its outbound queue.
type plainMember struct {
	c     net.Conn
	mu    sync.Mutex
	queue [][]byte // encoded frames, shared between members
	spare [][]byte
	dead  bool
	wake  chan struct{} // one pending signal at most
}

// enqueue queues a frame for the writer; a member too far behind is
// dropped.
func (m *plainMember) enqueue(f []byte) {
	m.mu.Lock()
	if m.dead {
		m.mu.Unlock()
		return
	}
	if len(m.queue) >= plainQueueLimit {
		m.dead = true
		m.mu.Unlock()
		_ = m.c.Close()
		return
	}
	m.queue = append(m.queue, f)
	m.mu.Unlock()
	select {
	case m.wake <- struct{}{}:
	default:
	}
}

// writeLoop writes everything queued, one flush per batch, until the
// member is dead, or done closes and the queue is written.
func (m *plainMember) writeLoop(done <-chan struct{}) {
	bw := bufio.NewWriterSize(m.c, plainBuffer)
	last := false
	for !last {
		select {
		case <-m.wake:
		case <-done:
			last = true
		}
		m.mu.Lock()
		batch := m.queue
		m.queue = m.spare[:0]
		m.mu.Unlock()
		for _, f := range batch {
			if _, err := bw.Write(f); err != nil {
				m.kill()
				return
			}
		}
		clear(batch)
		m.mu.Lock()
		m.spare = batch
		m.mu.Unlock()
		if err := bw.Flush(); err != nil {
			m.kill()
			return
		}
	}
}

func (m *plainMember) kill() {
	m.mu.Lock()
	m.dead = true
	m.mu.Unlock()
	_ = m.c.Close()
}

func (s *PlainServer) join(path string, m *plainMember) *plainRoom {
	s.mu.Lock()
	defer s.mu.Unlock()
	r := s.rooms[path]
	if r == nil {
		r = &plainRoom{}
		r.members.Store(&[]*plainMember{})
		s.rooms[path] = r
	}
	old := *r.members.Load()
	next := append(append(make([]*plainMember, 0, len(old)+1), old...), m)
	r.members.Store(&next)
	return r
}

func (s *PlainServer) leave(path string, r *plainRoom, m *plainMember) {
	s.mu.Lock()
	defer s.mu.Unlock()
	old := *r.members.Load()
	next := make([]*plainMember, 0, len(old))
	for _, x := range old {
		if x != m {
			next = append(next, x)
		}
	}
	r.members.Store(&next)
	if len(next) == 0 {
		delete(s.rooms, path)
	}
}

// serveRoom reads socket m of room, which it has joined, and sends every
// message it sends to every socket of the room, itself included.
func (s *PlainServer) serveRoom(c net.Conn, path string, m *plainMember, room *plainRoom) {
	done := make(chan struct{})
	writer := make(chan struct{})
	go func() {
		m.writeLoop(done)
		close(writer)
	}()
	defer func() {
		close(done)
		<-writer
	}()
	defer s.leave(path, room, m)

	br := bufio.NewReaderSize(c, plainBuffer)
	var (
		hb    [ws.MaxHeaderSize]byte
		msg   []byte
		op    ws.OpCode
		inMsg bool
	)
	fail := func(code ws.StatusCode) { m.enqueue(encodeServerFrame(ws.OpClose, ws.NewCloseFrameBody(code, ""))) }
	for {
		h, err := ws.ReadHeaderBuffer(br, hb[:])
		if err != nil {
			return
		}
		if code := checkFrame(h, inMsg); code != 0 {
			fail(code)
			return
		}
		if !h.OpCode.IsControl() && int64(len(msg))+h.Length > plainMaxMessage && inMsg {
			fail(ws.StatusMessageTooBig)
			return
		}
		start := len(msg)
		if h.OpCode.IsControl() {
			start = 0
		} else if !inMsg {
			msg, op, start = msg[:0], h.OpCode, 0
		}
		var p []byte
		if h.OpCode.IsControl() {
			p = make([]byte, h.Length)
		} else {
			msg = append(msg, make([]byte, h.Length)...)
			p = msg[start:]
		}
		if _, err := io.ReadFull(br, p); err != nil {
			return
		}
		ws.Cipher(p, h.Mask, 0)
		switch h.OpCode {
		case ws.OpPing:
			m.enqueue(encodeServerFrame(ws.OpPong, p))
			continue
		case ws.OpPong:
			continue
		case ws.OpClose:
			m.enqueue(encodeServerFrame(ws.OpClose, p))
			return // the writer writes it before it ends
		}
		inMsg = !h.Fin
		if inMsg {
			continue
		}
		if op == ws.OpText && !utf8.Valid(msg) {
			fail(ws.StatusInvalidFramePayloadData)
			return
		}
		f := encodeServerFrame(op, msg) // shared by every member: never changed
		for _, x := range *room.members.Load() {
			x.enqueue(f)
		}
		msg = msg[:0]
	}
}

// encodeServerFrame returns a final server frame in one allocation.
func encodeServerFrame(op ws.OpCode, p []byte) []byte {
	f := appendServerHeader(make([]byte, 0, 10+len(p)), op, true, len(p))
	return append(f, p...)
}
