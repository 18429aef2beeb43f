package rooms

import (
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"sync"
	"sync/atomic"

	"github.com/wasmkeep/wasmkeep/abi"
	"github.com/wasmkeep/wasmkeep/host/engine"
	"github.com/wasmkeep/wasmkeep/host/phoenix"
)

// Phoenix channels. A socket opened on a room's /socket/websocket path
// speaks the Phoenix V2 protocol, which the host terminates: each such
// socket has a phoenix.Session that answers heartbeats on the socket's own
// reader goroutine (the room never wakes for them), validates joins and
// rate-limits messages, and turns the rest into room events (join, channel
// message, leave). What the room answers (replies, pushes, broadcasts,
// presence) goes back through the same Session, under its lock, so every
// socket's frames keep one order.
//
// Which joins the guest has accepted is host-side room state, saved with
// snapshots like the socket list: after a rollback or a restart the host
// tells the guest about joins that ended meanwhile (leave events) and ends,
// with phx_error, joins the guest no longer knows (the client rejoins).

// channelState is a socket's protocol state.
type channelState struct {
	mu      sync.Mutex
	session *phoenix.Session
}

// joinKey names one accepted join of one socket.
type joinKey struct {
	socket  uint32
	topic   string
	joinRef string
}

// OpenChannelSocket attaches a newly accepted Phoenix socket to a room,
// like OpenSocket. Its messages go through the Phoenix protocol.
func (m *Manager) OpenChannelSocket(key Key, conn Conn, open *abi.SocketOpen, cfg phoenix.Config) (*Socket, error) {
	s := newSocket(conn, open, &channelState{session: phoenix.NewSession(cfg)})
	if err := m.enqueueNew(key, &event{kind: evSocketOpen, sock: s}, false); err != nil {
		return nil, err
	}
	return s, nil
}

// channelInput runs a client frame through the socket's Session: protocol
// answers (heartbeats, refusals) go out at once, deliveries are queued for
// the room in order.
func (s *Socket) channelInput(kind int, data []byte) error {
	m := s.room.m
	msg, err := phoenix.Decode(phoenix.Frame{Data: data, Binary: kind == abi.MessageBinary})
	if err != nil {
		code := abi.ClosePolicyViolation
		if errors.Is(err, phoenix.ErrInvalidUTF8) {
			code = abi.CloseInvalidData
		}
		m.met.channelDrops["malformed"].Inc()
		s.conn.Close(code, "malformed Phoenix message")
		return nil
	}
	s.ch.mu.Lock()
	acts := s.ch.session.Handle(m.clock.Now(), msg)
	var deliveries []phoenix.Delivery
	for _, a := range acts {
		switch a.Kind {
		case phoenix.ActionSend:
			s.sendFrame(a.Frame)
		case phoenix.ActionDeliver:
			deliveries = append(deliveries, a.Delivery)
		case phoenix.ActionDrop:
			if c := m.met.channelDrops[a.Drop.String()]; c != nil {
				c.Inc()
			}
		}
	}
	s.ch.mu.Unlock()
	for _, d := range deliveries {
		ev := &event{kind: evChannel, sock: s, delivery: d}
		if err := s.room.enqueue(ev, d.Kind != phoenix.DeliverLeave); err != nil {
			return err
		}
	}
	return nil
}

// channelClosed ends every join of a socket that went away; the leaves
// reach the room before the socket's close event.
func (s *Socket) channelClosed() {
	s.ch.mu.Lock()
	acts := s.ch.session.Terminate()
	s.ch.mu.Unlock()
	for _, a := range acts {
		_ = s.room.enqueue(&event{kind: evChannel, sock: s, delivery: a.Delivery}, false)
	}
}

// sendFrame queues a Phoenix frame on the socket now: the protocol's own
// answers, which depend on no state of the room.
func (s *Socket) sendFrame(f phoenix.Frame) {
	if fr, ok := s.frame(f); ok {
		_ = s.conn.SendFrame(fr)
	}
}

// frame encodes a Phoenix frame for the socket layer.
func (s *Socket) frame(f phoenix.Frame) (Frame, bool) {
	kind := abi.MessageText
	if f.Binary {
		kind = abi.MessageBinary
	}
	fr, err := s.room.m.cfg.Framer(kind, f.Data)
	return fr, err == nil
}

// session runs fn on the socket's Session under its lock, and sends the
// frame fn returns, if any, as the room's output (held while it must
// wait: commit.go). Worker only.
func (s *Socket) session(fn func(*phoenix.Session) (phoenix.Frame, bool)) {
	s.ch.mu.Lock()
	defer s.ch.mu.Unlock()
	if f, ok := fn(s.ch.session); ok {
		if fr, ok := s.frame(f); ok {
			s.room.emitFrame(s, fr)
		}
	}
}

// joined reports the socket's current join_ref for topic, if joined.
func (s *Socket) joined(topic string) (phoenix.Ref, bool) {
	if s.ch == nil {
		return phoenix.Ref{}, false
	}
	s.ch.mu.Lock()
	defer s.ch.mu.Unlock()
	return s.ch.session.Joined(topic)
}

func ok(f phoenix.Frame, err error) (phoenix.Frame, bool) { return f, err == nil }

var (
	joinCrashed  = json.RawMessage(`{"reason":"join crashed"}`)
	joinRefused  = json.RawMessage(`{"reason":"join refused"}`)
	unavailable  = json.RawMessage(`{"reason":"room unavailable"}`)
	invalidReply = json.RawMessage(`{"reason":"invalid reply"}`)
)

// handleChannel runs a join, message or leave of a channel socket.
func (r *Room) handleChannel(ev *event) {
	s, d := ev.sock, ev.delivery
	msg := d.Message
	if s.id == 0 || r.sockets[s.id] != s {
		if d.Kind == phoenix.DeliverJoin {
			s.session(func(ss *phoenix.Session) (phoenix.Frame, bool) { return ss.AbandonPending(msg.Topic, msg.JoinRef) })
		}
		return // the socket is gone; its leaves are moot
	}
	if d.Kind == phoenix.DeliverLeave {
		r.endJoin(s, msg.Topic, msg.JoinRef, d.Reason.String())
		return
	}
	if err := r.ensureResident(r.eventCtx(ev)); err != nil {
		r.failChannel(s, d, unavailable)
		return
	}
	if r.sockets[s.id] != s {
		return // waking found the socket gone
	}
	// If the write its state waits for fails, the topic ends with
	// phx_error and the client joins again (commit.go).
	defer r.holdOrigin(s, msg.Topic, msg.JoinRef)
	switch d.Kind {
	case phoenix.DeliverJoin:
		r.handleJoin(s, msg)
	case phoenix.DeliverMessage:
		r.handleChannelMessage(s, msg)
	}
}

func (r *Room) handleJoin(s *Socket, msg phoenix.Message) {
	m := r.m
	payload := abi.AppendJoin(nil, &abi.Join{Topic: msg.Topic, Payload: msg.Payload})
	var reply engine.ChannelReply
	r.joining = &joinKey{s.id, msg.Topic, msg.JoinRef.Value}
	defer func() { r.joining = nil }()
	err := r.deliverThen(func(inst Instance) (err error) {
		reply, err = inst.Join(s.id, payload)
		return err
	}, func() {
		// Before the handler's own effects: a push made while joining
		// must follow the accept on the wire.
		body, invalid := orEmpty(reply.Body), false
		if reply.Given && reply.Status == abi.ReplyOK {
			s.session(func(ss *phoenix.Session) (phoenix.Frame, bool) {
				f, err := ss.AcceptJoin(msg.Topic, msg.JoinRef, body)
				invalid = errors.Is(err, phoenix.ErrInvalidJSON)
				return ok(f, err)
			})
			key := joinKey{s.id, msg.Topic, msg.JoinRef.Value}
			if _, joined := s.joined(msg.Topic); joined {
				put(&r.joins, key, true)
				put(&r.joinPayloads, key, payload)
				m.met.joins["accepted"].Inc()
				r.sendPresenceState(s, msg.Topic)
				return
			}
			if !invalid {
				return
			}
			// The guest holds the join as accepted; it hears that the
			// join ended, in turn, as when it closes a topic itself.
			put(&r.joins, key, true)
			r.enqueueLeave(s, msg.Topic, msg.JoinRef)
		}
		m.met.joins["rejected"].Inc()
		if !reply.Given {
			body = joinRefused // unanswered joins fail closed
		}
		s.session(func(ss *phoenix.Session) (phoenix.Frame, bool) {
			f, err := ss.RejectJoin(msg.Topic, msg.JoinRef, body)
			if errors.Is(err, phoenix.ErrInvalidJSON) {
				invalid = true
				f, err = ss.RejectJoin(msg.Topic, msg.JoinRef, invalidReply)
			}
			return ok(f, err)
		})
		if invalid {
			r.invalidReply(msg, reply.Status)
		}
	})
	if err != nil {
		m.met.joins["crashed"].Inc()
		s.session(func(ss *phoenix.Session) (phoenix.Frame, bool) {
			return ok(ss.RejectJoin(msg.Topic, msg.JoinRef, joinCrashed))
		})
	}
	// Whatever happened, a join still pending now was not answered.
	s.session(func(ss *phoenix.Session) (phoenix.Frame, bool) { return ss.AbandonPending(msg.Topic, msg.JoinRef) })
}

func (r *Room) handleChannelMessage(s *Socket, msg phoenix.Message) {
	r.m.met.channelMessages.Inc()
	rec := abi.ChannelMessage{Topic: msg.Topic, Event: msg.Event, Binary: msg.IsBinary, Payload: msg.Payload}
	if msg.IsBinary {
		rec.Payload = msg.Binary
	}
	payload := abi.AppendChannelMessage(nil, &rec)
	var reply engine.ChannelReply
	err := r.deliver(func(inst Instance) (err error) {
		reply, err = inst.ChannelMessage(s.id, payload)
		return err
	})
	if err != nil {
		// A crash in a topic's message closes that topic only.
		r.crashTopic(s, msg.Topic, msg.JoinRef)
		return
	}
	// The reply is what the handler returned: it follows what the handler
	// sent while it ran.
	if reply.Given {
		status := "ok"
		if reply.Status == abi.ReplyError {
			status = "error"
		}
		invalid := false
		s.session(func(ss *phoenix.Session) (phoenix.Frame, bool) {
			f, err := ss.Reply(msg.Topic, msg.JoinRef, msg.Ref, status, orEmpty(reply.Body))
			if errors.Is(err, phoenix.ErrInvalidJSON) {
				invalid = true
				f, err = ss.Reply(msg.Topic, msg.JoinRef, msg.Ref, "error", invalidReply)
			}
			return ok(f, err)
		})
		if invalid {
			r.invalidReply(msg, reply.Status)
		}
	}
}

// invalidReply logs a reply the room gave that is not valid JSON text: its
// client sees only an error reply, and the fix is in the room's code.
func (r *Room) invalidReply(msg phoenix.Message, status int) {
	answered := "ok"
	if status == abi.ReplyError {
		answered = "error"
	}
	r.m.log.Warn("room replied with a payload that is not valid JSON; the client got an error reply",
		"room", r.key.String(), "topic", msg.Topic, "event", msg.Event, "reply_status", answered)
}

// enqueueLeave tells the guest, in turn, that its join of topic ended on
// the host's side.
func (r *Room) enqueueLeave(s *Socket, topic string, joinRef phoenix.Ref) {
	leave := phoenix.Delivery{Kind: phoenix.DeliverLeave, Reason: phoenix.LeaveClosed,
		Message: phoenix.Message{Topic: topic, JoinRef: joinRef, Event: "phx_leave"}}
	_ = r.enqueue(&event{kind: evChannel, sock: s, delivery: leave}, false)
}

// failChannel answers a join or message the room could not take.
func (r *Room) failChannel(s *Socket, d phoenix.Delivery, reason json.RawMessage) {
	msg := d.Message
	switch d.Kind {
	case phoenix.DeliverJoin:
		s.session(func(ss *phoenix.Session) (phoenix.Frame, bool) {
			return ok(ss.RejectJoin(msg.Topic, msg.JoinRef, reason))
		})
	case phoenix.DeliverMessage:
		r.crashTopic(s, msg.Topic, msg.JoinRef)
	}
}

// crashTopic ends a join with phx_error (the client rejoins) without
// telling the guest, whose state no longer has it or is about to roll back.
func (r *Room) crashTopic(s *Socket, topic string, joinRef phoenix.Ref) {
	s.session(func(ss *phoenix.Session) (phoenix.Frame, bool) { return ok(ss.Crash(topic, joinRef)) })
	r.untrackJoin(s, topic)
	delete(r.joinPayloads, joinKey{s.id, topic, joinRef.Value})
}

// endJoin handles a join that ended on the client's side (or with its
// socket): presence is untracked and the guest hears of it if it had
// accepted the join.
func (r *Room) endJoin(s *Socket, topic string, joinRef phoenix.Ref, reason string) {
	r.untrackJoin(s, topic)
	key := joinKey{s.id, topic, joinRef.Value}
	delete(r.joinPayloads, key)
	if !r.joins[key] {
		return // never accepted (pending, rejected or crashed)
	}
	if r.inst == nil {
		put(&r.goneJoins, key, reason)
		if !r.m.isStopping() {
			_ = r.ensureResident(r.workCtx()) // waking delivers it
		}
		return
	}
	r.deliverLeave(key, reason)
}

func (r *Room) deliverLeave(key joinKey, reason string) {
	payload := abi.AppendLeave(nil, &abi.Leave{Topic: key.topic, Reason: reason})
	if err := r.deliver(func(inst Instance) error { return inst.Leave(key.socket, payload) }); err == nil {
		delete(r.joins, key)
		delete(r.goneJoins, key)
	} else {
		put(&r.goneJoins, key, reason)
	}
}

// untrackJoin removes a socket's presence on a topic and tells the topic.
func (r *Room) untrackJoin(s *Socket, topic string) {
	p := r.presence[topic]
	if p == nil {
		return
	}
	r.broadcastDiff(topic, p.UntrackAll(uint64(s.id)))
}

func (r *Room) sendPresenceState(s *Socket, topic string) {
	state := json.RawMessage("{}")
	if p := r.presence[topic]; p != nil {
		state = p.State()
	}
	s.session(func(ss *phoenix.Session) (phoenix.Frame, bool) {
		ref, joined := ss.Joined(topic)
		if !joined {
			return phoenix.Frame{}, false
		}
		return ok(ss.Push(topic, ref, "presence_state", state))
	})
}

func (r *Room) broadcastDiff(topic string, d phoenix.Diff) {
	if d.Empty() {
		return
	}
	r.channelBroadcast(0, topic, "presence_diff", false, d.JSON())
}

// channelBroadcast encodes a message once and queues it on every socket
// joined to topic but except.
func (r *Room) channelBroadcast(except uint32, topic, event string, binary bool, payload []byte) int {
	var frame []byte
	var err error
	if binary {
		frame, err = phoenix.AppendBinaryBroadcast(nil, topic, event, payload)
	} else {
		frame, err = phoenix.AppendBroadcast(nil, topic, event, payload)
	}
	if err != nil {
		return 0
	}
	kind := abi.MessageText
	if binary {
		kind = abi.MessageBinary
	}
	fr, err := r.m.cfg.Framer(kind, frame)
	if err != nil {
		return 0
	}
	n := 0
	for id, s := range r.sockets {
		if id == except || s.ch == nil {
			continue
		}
		if _, joined := s.joined(topic); joined {
			r.emitFrame(s, fr)
			n++
		}
	}
	return n
}

// reconcileJoins brings the guest's accepted joins in line with the
// sockets' sessions after a wake: leaves for joins that ended meanwhile,
// and the join again for joins the guest does not know (it rolled back past
// them), which it must accept again or the topic ends with phx_error.
func (r *Room) reconcileJoins() {
	keys := make([]joinKey, 0, len(r.joins))
	for k := range r.joins {
		keys = append(keys, k)
	}
	sortJoins(keys)
	for _, k := range keys {
		if r.inst == nil {
			return
		}
		if s := r.sockets[k.socket]; s != nil {
			if ref, joined := s.joined(k.topic); joined && ref.Value == k.joinRef {
				continue
			}
		}
		reason := r.goneJoins[k]
		if reason == "" {
			reason = abi.LeaveClosed
		}
		r.deliverLeave(k, reason)
	}
	for _, id := range sortedIDs(r.sockets) {
		s := r.sockets[id]
		if s.ch == nil {
			continue
		}
		s.ch.mu.Lock()
		var forgotten []string
		for _, topic := range s.ch.session.Topics() {
			if ref, joined := s.ch.session.Joined(topic); joined && !r.joins[joinKey{id, topic, ref.Value}] {
				forgotten = append(forgotten, topic)
			}
		}
		s.ch.mu.Unlock()
		for _, topic := range forgotten {
			if r.inst == nil {
				return
			}
			ref, _ := s.joined(topic)
			r.replayJoin(s, topic, ref)
		}
	}
}

// replayJoin asks the guest to accept again a join it forgot. The client
// is not told unless the guest refuses (then the topic ends with
// phx_error, and phoenix.js rejoins).
func (r *Room) replayJoin(s *Socket, topic string, ref phoenix.Ref) {
	key := joinKey{s.id, topic, ref.Value}
	payload := r.joinPayloads[key]
	if payload == nil {
		r.crashTopic(s, topic, ref)
		return
	}
	var reply engine.ChannelReply
	r.joining = &key
	err := r.deliver(func(inst Instance) (err error) {
		reply, err = inst.Join(s.id, payload)
		return err
	})
	r.joining = nil
	if err == nil && reply.Given && reply.Status == abi.ReplyOK {
		put(&r.joins, key, true)
		return
	}
	r.crashTopic(s, topic, ref)
}

func sortJoins(ks []joinKey) {
	sort.Slice(ks, func(i, j int) bool {
		if ks[i].socket != ks[j].socket {
			return ks[i].socket < ks[j].socket
		}
		if ks[i].topic != ks[j].topic {
			return ks[i].topic < ks[j].topic
		}
		return ks[i].joinRef < ks[j].joinRef
	})
}

func orEmpty(b []byte) json.RawMessage {
	if len(b) == 0 {
		return json.RawMessage("{}")
	}
	return json.RawMessage(b)
}

// presenceFor returns a topic's presence list, creating it. Refs must
// never repeat for a client, so each list gets a prefix of its own.
func (r *Room) presenceFor(topic string) *phoenix.Presence {
	p := r.presence[topic]
	if p == nil {
		p = phoenix.NewPresence(fmt.Sprintf("%s.%d.", r.m.instance, presenceSeq.Add(1)))
		put(&r.presence, topic, p)
	}
	return p
}

var presenceSeq atomic.Uint64

// The engine.Host channel methods below run on the worker inside a guest
// call: they check what they can now and record effects that take place
// when the event returns.

// channelTarget finds a socket that has joined topic, or is joining it in
// this very event.
func (r *Room) channelTarget(id uint32, topic string) (*Socket, abi.Status) {
	s := r.sockets[id]
	switch {
	case s == nil:
		return nil, abi.StatusNoSocket
	case s.ch == nil:
		return nil, abi.StatusInvalid
	}
	if j := r.joining; j != nil && j.socket == id && j.topic == topic {
		return s, abi.Success
	}
	if _, joined := s.joined(topic); !joined {
		return nil, abi.StatusState
	}
	return s, abi.Success
}

// ChannelPush implements engine.Host.
func (r *Room) ChannelPush(id uint32, m *abi.ChannelMessage) abi.Status {
	s, st := r.channelTarget(id, m.Topic)
	if st != abi.Success {
		return st
	}
	if !r.takeOutput(channelMessageSize(m)) {
		return abi.StatusTooLarge
	}
	r.effects = append(r.effects, effect{op: opChanPush, sock: s, msg: cloneMessage(m)})
	return abi.Success
}

// ChannelBroadcast implements engine.Host.
func (r *Room) ChannelBroadcast(except uint32, m *abi.ChannelMessage) int {
	n := 0
	for id, s := range r.sockets {
		if id == except || s.ch == nil {
			continue
		}
		if _, joined := s.joined(m.Topic); joined {
			n++
		}
	}
	if !r.takeOutput(channelMessageSize(m)) {
		return int(abi.StatusTooLarge)
	}
	r.effects = append(r.effects, effect{op: opChanBroadcast, except: except, msg: cloneMessage(m)})
	return n
}

// ChannelClose implements engine.Host.
func (r *Room) ChannelClose(id uint32, topic string) abi.Status {
	s, st := r.channelTarget(id, topic)
	if st != abi.Success {
		return st
	}
	if !r.takeOutput(len(topic)) {
		return abi.StatusTooLarge
	}
	r.effects = append(r.effects, effect{op: opChanClose, sock: s, msg: &abi.ChannelMessage{Topic: topic}})
	return abi.Success
}

// PresenceTrack implements engine.Host.
func (r *Room) PresenceTrack(id uint32, p *abi.Presence) abi.Status {
	s, st := r.channelTarget(id, p.Topic)
	if st != abi.Success {
		return st
	}
	if !r.takeOutput(presenceSize(p)) {
		return abi.StatusTooLarge
	}
	r.effects = append(r.effects, effect{op: opPresenceTrack, sock: s, presence: clonePresence(p)})
	return abi.Success
}

// PresenceUntrack implements engine.Host.
func (r *Room) PresenceUntrack(id uint32, p *abi.Presence) abi.Status {
	s, st := r.channelTarget(id, p.Topic)
	if st != abi.Success {
		return st
	}
	if !r.takeOutput(presenceSize(p)) {
		return abi.StatusTooLarge
	}
	r.effects = append(r.effects, effect{op: opPresenceUntrack, sock: s, presence: clonePresence(p)})
	return abi.Success
}

// channelMessageSize is the bytes of m an effect keeps.
func channelMessageSize(m *abi.ChannelMessage) int {
	return len(m.Topic) + len(m.Event) + len(m.Payload)
}

// presenceSize is the bytes of p an effect keeps.
func presenceSize(p *abi.Presence) int { return len(p.Topic) + len(p.Key) + len(p.Meta) }

// applyChannelEffect carries out one channel effect after its event
// returned.
func (r *Room) applyChannelEffect(e *effect) {
	switch e.op {
	case opChanPush:
		m := e.msg
		e.sock.session(func(ss *phoenix.Session) (phoenix.Frame, bool) {
			ref, joined := ss.Joined(m.Topic)
			if !joined {
				return phoenix.Frame{}, false // rejected, left or closed meanwhile
			}
			if m.Binary {
				return ok(ss.PushBinary(m.Topic, ref, m.Event, m.Payload))
			}
			return ok(ss.Push(m.Topic, ref, m.Event, orEmpty(m.Payload)))
		})
	case opChanBroadcast:
		m := e.msg
		payload := m.Payload
		if !m.Binary {
			payload = orEmpty(payload)
		}
		r.channelBroadcast(e.except, m.Topic, m.Event, m.Binary, payload)
	case opChanClose:
		s, topic := e.sock, e.msg.Topic
		ref, joined := s.joined(topic)
		if !joined {
			return
		}
		s.session(func(ss *phoenix.Session) (phoenix.Frame, bool) { return ok(ss.Close(topic, ref)) })
		r.enqueueLeave(s, topic, ref) // the guest hears of it as a leave
	case opPresenceTrack:
		p := e.presence
		if _, joined := e.sock.joined(p.Topic); !joined {
			return
		}
		d, err := r.presenceFor(p.Topic).Track(uint64(e.sock.id), p.Key, p.Meta)
		if err == nil {
			r.broadcastDiff(p.Topic, d)
		}
	case opPresenceUntrack:
		if pr := r.presence[e.presence.Topic]; pr != nil {
			r.broadcastDiff(e.presence.Topic, pr.Untrack(uint64(e.sock.id), e.presence.Key))
		}
	}
}

func cloneMessage(m *abi.ChannelMessage) *abi.ChannelMessage {
	c := *m
	c.Payload = append([]byte(nil), m.Payload...)
	return &c
}

func clonePresence(p *abi.Presence) *abi.Presence {
	c := *p
	c.Meta = append([]byte(nil), p.Meta...)
	return &c
}
