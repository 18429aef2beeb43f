package socket

import (
	"io"
	"os"
	"sync"
	"syscall"

	"golang.org/x/sys/unix"
)

// epollSupported: ReadAuto means ReadEpoll here.
const epollSupported = true

// pollBatch is how many events the poller takes per epoll_wait.
const pollBatch = 256

// poller watches a hub's idle sockets (ReadEpoll): every socket's file
// descriptor is in one epoll instance, edge-triggered, with the socket's id
// as its data; a readable socket is handed to a reader goroutine (see
// Conn.wake and Conn.pollRead), which reads until the socket has nothing
// left and exits. The sockets stay in the Go runtime's own poller as well,
// for their writes, deadlines and the blocking reads that finish a frame
// arriving in pieces.
//
// The poller's goroutine does not hold a thread while it waits: the epoll
// descriptor is itself in the Go runtime's poller (an epoll descriptor is
// readable when it has events), so the goroutine parks there like any
// goroutine blocked in a network read, and takes the events with
// epoll_wait calls that do not block.
type poller struct {
	hub    *Hub
	file   *os.File        // the epoll descriptor
	raw    syscall.RawConn // of file: every use of the descriptor goes through it
	done   chan struct{}   // closed when the loop has ended
	stop   sync.Once
	events [pollBatch]unix.EpollEvent // the loop's
}

// newPoller creates a hub's poller and starts its loop.
func newPoller(h *Hub) (*poller, error) {
	fd, err := unix.EpollCreate1(unix.EPOLL_CLOEXEC)
	if err != nil {
		return nil, os.NewSyscallError("epoll_create1", err)
	}
	// Non-blocking, so that os.NewFile puts it in the runtime's poller.
	if err := unix.SetNonblock(fd, true); err != nil {
		unix.Close(fd)
		return nil, os.NewSyscallError("setnonblock", err)
	}
	f := os.NewFile(uintptr(fd), "epoll")
	raw, err := f.SyscallConn()
	if err != nil {
		f.Close()
		return nil, err
	}
	p := &poller{hub: h, file: f, raw: raw, done: make(chan struct{})}
	go p.loop()
	return p, nil
}

// loop takes events until the poller is closed, waking each socket.
func (p *poller) loop() {
	defer close(p.done)
	// RawConn.Read calls the function again each time the descriptor
	// becomes readable; it returns false once epoll_wait has nothing,
	// which parks the goroutine until it has.
	_ = p.raw.Read(func(epfd uintptr) bool {
		for {
			n, err := unix.EpollWait(int(epfd), p.events[:], 0)
			if err == unix.EINTR {
				continue
			}
			if err != nil {
				return true // the descriptor is gone: end
			}
			if n == 0 {
				return false
			}
			for i := range p.events[:n] {
				e := &p.events[i]
				id := uint64(uint32(e.Fd)) | uint64(uint32(e.Pad))<<32
				if c := p.hub.lookup(id); c != nil {
					c.wake()
				}
			}
		}
	})
}

// add puts the socket in the poller and returns its RawConn, or nil if the
// socket cannot be read through the poller (no file descriptor, or it is
// already closed): it is then read by a goroutine.
func (p *poller) add(c *Conn) syscall.RawConn {
	sc, ok := c.conn.(syscall.Conn)
	if !ok {
		return nil
	}
	raw, err := sc.SyscallConn()
	if err != nil {
		return nil
	}
	ev := unix.EpollEvent{
		Events: unix.EPOLLIN | unix.EPOLLRDHUP | unix.EPOLLET,
		Fd:     int32(uint32(c.id)),
		Pad:    int32(uint32(c.id >> 32)),
	}
	if p.ctl(raw, unix.EPOLL_CTL_ADD, &ev) != nil {
		return nil
	}
	return raw
}

// remove takes a socket out of the poller before its connection is closed.
// (Closing the descriptor would do it too, unless it had been duplicated.)
func (p *poller) remove(raw syscall.RawConn) {
	_ = p.ctl(raw, unix.EPOLL_CTL_DEL, nil)
}

// ctl runs epoll_ctl for a socket. Both descriptors are used through their
// RawConn, which holds them open meanwhile: neither can be closed and its
// number reused under the call.
func (p *poller) ctl(raw syscall.RawConn, op int, ev *unix.EpollEvent) error {
	var err error
	cerr := raw.Control(func(fd uintptr) {
		perr := p.raw.Control(func(epfd uintptr) {
			err = unix.EpollCtl(int(epfd), op, int(fd), ev)
		})
		if perr != nil {
			err = perr
		}
	})
	if cerr != nil {
		return cerr
	}
	return err
}

// close ends the loop and closes the epoll descriptor. Sockets still in it
// are no longer read: the hub closes it only when it has none.
func (p *poller) close() {
	p.stop.Do(func() {
		p.file.Close() // wakes the loop, and waits for it to leave the descriptor
		<-p.done
	})
}

// fill reads what the socket has into a pooled buffer, without blocking,
// and keeps the buffer in c.rb if it got anything. It returns errAgain if
// there was nothing to read, io.EOF or the read error if the connection
// has ended.
func (c *Conn) fill() error {
	rb := getReadBuf()
	if rb.fn == nil {
		rb.fn = func(fd uintptr) bool {
			for {
				n, err := unix.Read(int(fd), rb.b[:])
				if err == unix.EINTR {
					continue
				}
				rb.n, rb.err = n, err
				return true // never wait in the runtime's poller
			}
		}
	}
	err := c.raw.Read(rb.fn)
	if err == nil {
		err = rb.err
	}
	switch {
	case err == unix.EAGAIN:
		err = errAgain
	case err == nil && rb.n <= 0:
		err = io.EOF
	}
	if err != nil {
		putReadBuf(rb)
		return err
	}
	rb.w = rb.n
	c.rb = rb
	c.sawBytes(rb.n)
	return nil
}
