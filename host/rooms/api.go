package rooms

import (
	"context"
	"errors"
	"strings"

	"github.com/wasmkeep/wasmkeep/abi"
)

// ErrNoResponse: the room handled a request without answering it.
var ErrNoResponse = errors.New("rooms: the room did not respond")

// CrashError is a request's failure because the room crashed handling it.
type CrashError struct{ Cause error }

func (e *CrashError) Error() string {
	// A client reads this (HTTP 500): its cause without the engine's
	// package prefix, which is for logs.
	cause := strings.TrimPrefix(e.Cause.Error(), "engine: ")
	return "the room crashed handling this request and restarts from its last snapshot: " + cause
}

func (e *CrashError) Unwrap() error { return e.Cause }

// Request delivers an encoded abi.Request to a room and waits for its
// answer. It fails with ErrOverloaded when the room's mailbox is full,
// ErrStopping during shutdown, ErrUnavailable when the room cannot wake,
// *CrashError when the guest crashed, and the class registry's error for a
// class that does not exist.
func (m *Manager) Request(ctx context.Context, key Key, payload []byte) (*abi.Response, error) {
	ev := &event{kind: evRequest, ctx: ctx, data: payload, reply: make(chan result, 1)}
	r, err := m.enqueueNewRoom(key, ev, false)
	if err != nil {
		return nil, err
	}
	defer r.openRequests.Add(-1)
	select {
	case res := <-ev.reply:
		return res.resp, res.err
	case <-ctx.Done():
		// The event still runs if it already started; its answer is dropped.
		return nil, ctx.Err()
	}
}

// OpenSocket attaches a newly accepted socket to a room. The open event is
// queued before the caller starts reading the socket, so it reaches the
// guest before any message.
func (m *Manager) OpenSocket(key Key, conn Conn, open *abi.SocketOpen) (*Socket, error) {
	s := newSocket(conn, open, nil)
	ev := &event{kind: evSocketOpen, sock: s}
	if err := m.enqueueNew(key, ev, false); err != nil {
		return nil, err
	}
	return s, nil
}

func newSocket(conn Conn, open *abi.SocketOpen, ch *channelState) *Socket {
	return &Socket{conn: conn, open: abi.AppendSocketOpen(nil, open), ch: ch}
}

// enqueueNew finds or creates the room and queues ev while holding the
// manager's lock, so the room cannot be forgotten in between.
func (m *Manager) enqueueNew(key Key, ev *event, wait bool) error {
	_, err := m.enqueueNewRoom(key, ev, wait)
	return err
}

// enqueueNewRoom is enqueueNew that also returns the room. A request is
// counted as open at the room from here until the caller drops the count
// (listings show it as the reason the room is awake).
func (m *Manager) enqueueNewRoom(key Key, ev *event, wait bool) (*Room, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.stopping {
		return nil, ErrStopping
	}
	r := m.rooms[key]
	if r == nil {
		r = newRoom(m, key)
		m.rooms[key] = r
	}
	if ev.sock != nil {
		ev.sock.room = r
	}
	if ev.kind == evRequest {
		r.openRequests.Add(1)
	}
	if err := r.enqueue(ev, wait); err != nil {
		if ev.kind == evRequest {
			r.openRequests.Add(-1)
		}
		return nil, err
	}
	return r, nil
}

// Message delivers a message that arrived on the socket. It waits while the
// room's mailbox is full, which slows the client down through TCP rather
// than dropping its messages.
func (s *Socket) Message(kind int, data []byte) error {
	if s.ch != nil {
		return s.channelInput(kind, data)
	}
	return s.queueMessages(&event{kind: evSocketMessage, sock: s, msgKind: kind, data: data})
}

// Messages delivers several messages that arrived on the socket, in order:
// the room takes them as one event (one guest call, if the guest handles
// batches). It waits like Message. The room keeps the messages' data, not
// msgs itself, which the caller may reuse once it returns.
func (s *Socket) Messages(msgs []Message) error { return DeliverMessages(s, msgs) }

// WireMessage is a message type of the same shape as Message, such as the
// socket layer's, whose batches DeliverMessages takes as they are.
type WireMessage interface {
	~struct {
		Kind int
		Data []byte
	}
}

// DeliverMessages is Socket.Messages for a batch of another package's
// messages of the same shape: the batch is copied once, into the event,
// instead of into a slice of Message first.
func DeliverMessages[M WireMessage](s *Socket, msgs []M) error {
	if s.ch != nil {
		for _, wm := range msgs {
			m := Message(wm)
			if err := s.channelInput(m.Kind, m.Data); err != nil {
				return err
			}
		}
		return nil
	}
	return s.queueMessages(newMessagesEvent(s, msgs))
}

// messagesEvent is a message event with room for a burst of messages, so
// that a burst costs the room one allocation.
type messagesEvent struct {
	event
	msgs [inlineMessages]Message
}

// inlineMessages is how many messages a messagesEvent holds in place.
const inlineMessages = 16

func newMessagesEvent[M WireMessage](s *Socket, msgs []M) *event {
	var batch []Message
	me := &messagesEvent{event: event{kind: evSocketMessage, sock: s}}
	if len(msgs) <= inlineMessages {
		batch = me.msgs[:0]
	} else {
		batch = make([]Message, 0, len(msgs))
	}
	for _, m := range msgs {
		batch = append(batch, Message(m))
	}
	me.batch = batch
	return &me.event
}

// queueMessages queues a message event of the socket once fewer than
// maxInflight of its events wait in the room's mailbox, waiting until
// then: the socket's reader stops meanwhile (its client slows down through
// TCP), so one client's flood can neither fill its room's mailbox nor push
// other sockets' events far back, and what the room answers to it stays
// within its outbound budget.
func (s *Socket) queueMessages(ev *event) error {
	return s.room.enqueue(ev, true)
}

// maxInflight is how many message events of one socket may wait in its
// room's mailbox (each a batch of at most a quarter of its outbound
// budget: see host/socket): one being handled, one ready behind it.
const maxInflight = 2

// Closed reports that the socket is gone, with the close code and reason
// the client sent (or the one the host closed it with).
func (s *Socket) Closed(code abi.CloseCode, reason string) {
	if s.ch != nil {
		s.channelClosed()
	}
	_ = s.room.enqueue(&event{kind: evSocketClose, sock: s, code: code, reason: reason}, false)
}

// Stopping reports whether Shutdown has begun: the node takes no new
// work, and its HTTP surface tells load balancers so (/readyz) while the
// stop hibernates its rooms.
func (m *Manager) Stopping() bool { return m.isStopping() }

func (m *Manager) isStopping() bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.stopping
}
