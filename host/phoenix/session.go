package phoenix

import (
	"encoding/json"
	"errors"
	"sort"
)

// Defaults of Config.
const (
	// DefaultMaxTopics is how many topics one socket may have joined or
	// pending at once. A page rarely needs more than a handful; 100 leaves
	// room for dashboards while bounding what one socket costs its rooms.
	DefaultMaxTopics = 100
	// DefaultJoinRate is the sustained joins per second a socket may make.
	// Every join wakes a room, so a join/leave loop must not run free.
	DefaultJoinRate = 10
	// DefaultJoinBurst is how many joins a socket may make at once. It
	// equals DefaultMaxTopics because phoenix.js rejoins every channel at
	// once after a reconnect; a smaller burst would turn a reconnect into
	// a storm of refused joins and retries.
	DefaultJoinBurst = DefaultMaxTopics
	// DefaultMessageRate is the sustained messages per second a socket may
	// send to its topics (above what chat or a 60 Hz game input needs).
	DefaultMessageRate = 100
	// DefaultMessageBurst is how many messages a socket may send at once.
	DefaultMessageBurst = 200
)

// Config sets the limits of a Session. A zero field means its Default*
// constant, and a negative value (limits.Off, internal/limits has the
// convention) turns off the limits that say so.
type Config struct {
	// MaxTopics is the most topics joined or pending at once: 0 means
	// DefaultMaxTopics, a negative value means no limit.
	MaxTopics int
	// JoinRate is the sustained joins per second: 0 means DefaultJoinRate,
	// a negative value means no limit.
	JoinRate float64
	// JoinBurst is the joins allowed at once; 0 or less means
	// DefaultJoinBurst.
	JoinBurst int
	// MessageRate is the sustained messages per second: 0 means
	// DefaultMessageRate, a negative value means no limit. Heartbeats,
	// joins and leaves are not counted.
	MessageRate float64
	// MessageBurst is the messages allowed at once; 0 or less means
	// DefaultMessageBurst.
	MessageBurst int
}

// Errors of the Session methods that carry a room's answers. Compare with
// errors.Is.
var (
	// ErrNotPending: no join of that topic with that join_ref awaits an
	// answer (it was answered, replaced, left or never made).
	ErrNotPending = errors.New("phoenix: no such pending join")
	// ErrNotJoined: the topic is not joined with that join_ref (it was
	// never joined, is still pending, or has ended or been replaced).
	ErrNotJoined = errors.New("phoenix: topic not joined with that join_ref")
)

// ActionKind tells what an Action asks the host to do.
type ActionKind uint8

const (
	// ActionSend: write Action.Frame to the client.
	ActionSend ActionKind = iota + 1
	// ActionDeliver: hand Action.Delivery to the room.
	ActionDeliver
	// ActionDrop: count Action.Drop; the client's message goes no further.
	ActionDrop
)

// String returns "send", "deliver" or "drop".
func (k ActionKind) String() string {
	switch k {
	case ActionSend:
		return "send"
	case ActionDeliver:
		return "deliver"
	case ActionDrop:
		return "drop"
	}
	return "unknown"
}

// Action is one thing for the host to do, in order, after Session.Handle.
// Only the field its Kind names is set.
type Action struct {
	// Kind says which field is meaningful.
	Kind ActionKind
	// Frame is the frame to write (ActionSend).
	Frame Frame
	// Delivery is the event for the room (ActionDeliver).
	Delivery Delivery
	// Drop is why the client's message was not delivered (ActionDrop).
	Drop DropReason
}

// DeliveryKind is the kind of a Delivery.
type DeliveryKind uint8

const (
	// DeliverJoin: a client asks to join Message.Topic with the parameters
	// in Message.Payload. The room must answer with AcceptJoin or
	// RejectJoin naming Message.Topic and Message.JoinRef; until then the
	// join is pending.
	DeliverJoin DeliveryKind = iota + 1
	// DeliverMessage: an event on a joined topic. The room may answer it
	// with Reply, naming Message.Ref.
	DeliverMessage
	// DeliverLeave: the join named by Message.Topic and Message.JoinRef has
	// ended, for Reason. It may follow a join the room has not answered
	// yet, or one it rejected, when the client left while the join was
	// pending.
	DeliverLeave
)

// String returns "join", "message" or "leave".
func (k DeliveryKind) String() string {
	switch k {
	case DeliverJoin:
		return "join"
	case DeliverMessage:
		return "message"
	case DeliverLeave:
		return "leave"
	}
	return "unknown"
}

// Delivery is an event for the room.
type Delivery struct {
	// Kind is join, message or leave.
	Kind DeliveryKind
	// Message is the client's message. For a leave the Session makes it:
	// Topic and JoinRef name the join that ended, Event is phx_leave, and
	// Ref is the client's ref for LeaveClient and null otherwise.
	Message Message
	// Reason says why a join ended (DeliverLeave only).
	Reason LeaveReason
}

// LeaveReason says why a join ended.
type LeaveReason uint8

const (
	// LeaveClient: the client sent phx_leave.
	LeaveClient LeaveReason = iota + 1
	// LeaveRejoin: the client joined the same topic again; the old join
	// was closed first.
	LeaveRejoin
	// LeaveClosed: the socket went away (Session.Terminate).
	LeaveClosed
)

// String returns a short name for logs and metric labels.
func (r LeaveReason) String() string {
	switch r {
	case LeaveClient:
		return "client"
	case LeaveRejoin:
		return "rejoin"
	case LeaveClosed:
		return "closed"
	}
	return "unknown"
}

// DropReason says why a client's message was not delivered.
type DropReason uint8

const (
	// DropMessageRate: over the message rate; nothing is sent back.
	DropMessageRate DropReason = iota + 1
	// DropJoinRate: a join over the join rate; an error reply is sent.
	DropJoinRate
	// DropTopicLimit: a join past MaxTopics; an error reply is sent.
	DropTopicLimit
	// DropInvalidJoin: a join with an invalid topic or no join_ref; an
	// error reply is sent.
	DropInvalidJoin
	// DropStale: a message or leave whose join_ref is not the topic's
	// current join (a client racing a close or a rejoin); nothing is sent.
	DropStale
	// DropUnmatched: a message on a topic not joined (or whose join is
	// still pending); the "unmatched topic" error reply is sent.
	DropUnmatched
)

// String returns a short name for logs and metric labels.
func (r DropReason) String() string {
	switch r {
	case DropMessageRate:
		return "message_rate"
	case DropJoinRate:
		return "join_rate"
	case DropTopicLimit:
		return "topic_limit"
	case DropInvalidJoin:
		return "invalid_join"
	case DropStale:
		return "stale"
	case DropUnmatched:
		return "unmatched"
	}
	return "unknown"
}

// channel is one topic of a Session: a join pending or accepted.
type channel struct {
	joinRef string // never empty
	ref     Ref    // the join message's ref, which its reply carries
	joined  bool
}

// Session is the protocol state of one socket: the topics it has joined or
// is joining, the rate buckets and the last heartbeat. It performs no I/O
// and reads no clock: the host feeds it decoded client messages with
// Handle and the room's answers with the other methods, and writes the
// frames they return, in the order returned and in the order of the calls.
// A Session is not safe for concurrent use; the host serialises the calls
// for one socket.
type Session struct {
	maxTopics     int
	joins, msgs   bucket
	topics        map[string]*channel
	lastHeartbeat int64
}

// NewSession returns a Session with the limits of cfg.
func NewSession(cfg Config) *Session {
	cfg = cfg.withDefaults()
	return &Session{
		maxTopics: cfg.MaxTopics,
		joins:     newBucket(cfg.JoinRate, cfg.JoinBurst),
		msgs:      newBucket(cfg.MessageRate, cfg.MessageBurst),
		topics:    make(map[string]*channel),
	}
}

// withDefaults fills in c's zero fields. The package is pure (standard
// library only), so it spells internal/limits' rules out.
func (c Config) withDefaults() Config {
	if c.MaxTopics == 0 {
		c.MaxTopics = DefaultMaxTopics
	}
	if c.JoinRate == 0 {
		c.JoinRate = DefaultJoinRate
	}
	if c.JoinBurst <= 0 {
		c.JoinBurst = DefaultJoinBurst
	}
	if c.MessageRate == 0 {
		c.MessageRate = DefaultMessageRate
	}
	if c.MessageBurst <= 0 {
		c.MessageBurst = DefaultMessageBurst
	}
	return c
}

func send(data []byte) Action { return Action{Kind: ActionSend, Frame: Frame{Data: data}} }

func drop(r DropReason) Action { return Action{Kind: ActionDrop, Drop: r} }

func deliver(d Delivery) Action { return Action{Kind: ActionDeliver, Delivery: d} }

// Handle takes a message decoded from the client at time now (monotonic
// nanoseconds from any fixed origin, never decreasing) and returns what
// the host must do about it, in order:
//
//   - heartbeat on "phoenix": the reply is sent at once; the room never
//     sees it. Heartbeats are not rate limited.
//   - phx_join: the topic must pass ValidateTopic and the join carry a
//     join_ref, and a join token must be left; else an error reply. A join
//     of a topic already joined or pending first closes that join
//     (phx_close with its join_ref, and a leave for the room). Past
//     MaxTopics the join gets an error reply; otherwise it is pending and
//     delivered to the room.
//   - phx_leave: acknowledged with an ok reply; if it names the topic's
//     current join, that join ends and the room gets a leave. A leave
//     naming another join_ref is dropped as stale, without a reply, as
//     Phoenix does.
//   - any other event takes a message token (dropped when none is left),
//     then is delivered if the topic is joined and the join_ref is the
//     current one; on a topic not joined it gets the "unmatched topic"
//     error reply; with another join_ref it is dropped as stale.
func (s *Session) Handle(now int64, m Message) []Action {
	if m.Topic == TopicPhoenix && m.Event == EventHeartbeat {
		s.lastHeartbeat = now
		return []Action{send(AppendHeartbeatReply(nil, m.Ref))}
	}
	switch m.Event {
	case EventJoin:
		return s.join(now, m)
	case EventLeave:
		return s.leave(m)
	}
	return s.message(now, m)
}

func refuseJoin(acts []Action, m Message, reason string, why DropReason) []Action {
	return append(acts, send(appendErrorReply(nil, m.JoinRef, m.Ref, m.Topic, reason)), drop(why))
}

func (s *Session) join(now int64, m Message) []Action {
	if ValidateTopic(m.Topic) != nil {
		return refuseJoin(nil, m, ReasonInvalidTopic, DropInvalidJoin)
	}
	if !m.JoinRef.Valid || m.JoinRef.Value == "" {
		return refuseJoin(nil, m, ReasonInvalidJoinRef, DropInvalidJoin)
	}
	if !s.joins.allow(now) {
		return refuseJoin(nil, m, ReasonJoinRate, DropJoinRate)
	}
	var acts []Action
	if old, ok := s.topics[m.Topic]; ok {
		delete(s.topics, m.Topic)
		acts = append(acts,
			send(AppendClose(nil, MakeRef(old.joinRef), m.Topic)),
			deliver(leaveOf(m.Topic, old.joinRef, Ref{}, LeaveRejoin)))
	}
	if s.maxTopics > 0 && len(s.topics) >= s.maxTopics {
		return refuseJoin(acts, m, ReasonTooManyTopics, DropTopicLimit)
	}
	s.topics[m.Topic] = &channel{joinRef: m.JoinRef.Value, ref: m.Ref}
	return append(acts, deliver(Delivery{Kind: DeliverJoin, Message: m}))
}

func leaveOf(topic, joinRef string, ref Ref, why LeaveReason) Delivery {
	return Delivery{
		Kind:    DeliverLeave,
		Message: Message{JoinRef: MakeRef(joinRef), Ref: ref, Topic: topic, Event: EventLeave},
		Reason:  why,
	}
}

// current reports whether r names the current join of ch.
func (ch *channel) current(r Ref) bool { return r.Valid && r.Value == ch.joinRef }

func (s *Session) leave(m Message) []Action {
	ch, ok := s.topics[m.Topic]
	if !ok {
		return []Action{send(appendOKReply(nil, m.JoinRef, m.Ref, m.Topic))}
	}
	if !ch.current(m.JoinRef) {
		return []Action{drop(DropStale)}
	}
	delete(s.topics, m.Topic)
	return []Action{
		send(appendOKReply(nil, m.JoinRef, m.Ref, m.Topic)),
		deliver(leaveOf(m.Topic, ch.joinRef, m.Ref, LeaveClient)),
	}
}

func (s *Session) message(now int64, m Message) []Action {
	if !s.msgs.allow(now) {
		return []Action{drop(DropMessageRate)}
	}
	ch, ok := s.topics[m.Topic]
	if ok && !ch.current(m.JoinRef) {
		return []Action{drop(DropStale)}
	}
	if !ok || !ch.joined {
		return []Action{
			send(appendErrorReply(nil, m.JoinRef, m.Ref, m.Topic, ReasonUnmatchedTopic)),
			drop(DropUnmatched),
		}
	}
	return []Action{deliver(Delivery{Kind: DeliverMessage, Message: m})}
}

// pending returns the pending join of topic named joinRef, or nil.
func (s *Session) pending(topic string, joinRef Ref) *channel {
	if ch, ok := s.topics[topic]; ok && !ch.joined && ch.current(joinRef) {
		return ch
	}
	return nil
}

// joined returns the accepted join of topic named joinRef, or nil.
func (s *Session) joined(topic string, joinRef Ref) *channel {
	if ch, ok := s.topics[topic]; ok && ch.joined && ch.current(joinRef) {
		return ch
	}
	return nil
}

// AcceptJoin accepts the pending join of topic named joinRef and returns
// the ok reply carrying response (an empty response is written as {}).
// The topic is then joined: messages are delivered and the room may Push
// and Reply. ErrNotPending if there is no such pending join (no frame is
// due); ErrInvalidJSON if response is not valid JSON, and the join stays
// pending.
func (s *Session) AcceptJoin(topic string, joinRef Ref, response json.RawMessage) (Frame, error) {
	ch := s.pending(topic, joinRef)
	if ch == nil {
		return Frame{}, ErrNotPending
	}
	data, err := AppendReply(nil, joinRef, ch.ref, topic, StatusOK, response)
	if err != nil {
		return Frame{}, err
	}
	ch.joined = true
	return Frame{Data: data}, nil
}

// RejectJoin refuses the pending join of topic named joinRef and returns
// the error reply carrying response (for instance {"reason":"unauthorized"};
// an empty response is written as {}). phoenix.js retries a refused join
// with back-off. Errors as for AcceptJoin; on ErrInvalidJSON the join stays
// pending.
func (s *Session) RejectJoin(topic string, joinRef Ref, response json.RawMessage) (Frame, error) {
	ch := s.pending(topic, joinRef)
	if ch == nil {
		return Frame{}, ErrNotPending
	}
	data, err := AppendReply(nil, joinRef, ch.ref, topic, StatusError, response)
	if err != nil {
		return Frame{}, err
	}
	delete(s.topics, topic)
	return Frame{Data: data}, nil
}

// AbandonPending fails closed a join the room did not answer: the host
// calls it, with the topic and join_ref of the DeliverJoin, once the room's
// event for that join has returned (normally or not). If the join is still
// pending it is refused with the "join crashed" error reply, which is
// returned with true; if it was answered (or has ended) there is nothing to
// send and it returns false.
func (s *Session) AbandonPending(topic string, joinRef Ref) (Frame, bool) {
	ch := s.pending(topic, joinRef)
	if ch == nil {
		return Frame{}, false
	}
	delete(s.topics, topic)
	return Frame{Data: appendErrorReply(nil, joinRef, ch.ref, topic, ReasonJoinCrashed)}, true
}

// Reply answers a message of a joined topic: [join_ref, ref, topic,
// "phx_reply", {"status": status, "response": response}]. ref is the ref of
// the message answered. ErrNotJoined if topic is not joined with joinRef;
// encoding errors as AppendReply.
func (s *Session) Reply(topic string, joinRef, ref Ref, status string, response json.RawMessage) (Frame, error) {
	if s.joined(topic, joinRef) == nil {
		return Frame{}, ErrNotJoined
	}
	data, err := AppendReply(nil, joinRef, ref, topic, status, response)
	return Frame{Data: data}, err
}

// ReplyBinary is Reply with a binary response, sent as a binary frame.
func (s *Session) ReplyBinary(topic string, joinRef, ref Ref, status string, response []byte) (Frame, error) {
	if s.joined(topic, joinRef) == nil {
		return Frame{}, ErrNotJoined
	}
	data, err := AppendBinaryReply(nil, joinRef, ref, topic, status, response)
	return Frame{Data: data, Binary: true}, err
}

// Push sends an event to one join: [join_ref, null, topic, event, payload].
// ErrNotJoined if topic is not joined with joinRef; encoding errors as
// AppendPush.
func (s *Session) Push(topic string, joinRef Ref, event string, payload json.RawMessage) (Frame, error) {
	if s.joined(topic, joinRef) == nil {
		return Frame{}, ErrNotJoined
	}
	data, err := AppendPush(nil, joinRef, topic, event, payload)
	return Frame{Data: data}, err
}

// PushBinary is Push with a binary payload, sent as a binary frame.
func (s *Session) PushBinary(topic string, joinRef Ref, event string, payload []byte) (Frame, error) {
	if s.joined(topic, joinRef) == nil {
		return Frame{}, ErrNotJoined
	}
	data, err := AppendBinaryPush(nil, joinRef, topic, event, payload)
	return Frame{Data: data, Binary: true}, err
}

// Close ends a joined topic from the server side and returns its phx_close.
// phoenix.js then considers the channel closed and does not rejoin.
// ErrNotJoined if topic is not joined with joinRef (a pending join is
// answered with RejectJoin instead).
func (s *Session) Close(topic string, joinRef Ref) (Frame, error) {
	if s.joined(topic, joinRef) == nil {
		return Frame{}, ErrNotJoined
	}
	delete(s.topics, topic)
	return Frame{Data: AppendClose(nil, joinRef, topic)}, nil
}

// Crash ends a joined topic because the room failed serving it, and
// returns its phx_error with ReasonChannelCrash. phoenix.js then rejoins
// with back-off. ErrNotJoined if topic is not joined with joinRef (a join
// that fails while pending is answered with AbandonPending).
func (s *Session) Crash(topic string, joinRef Ref) (Frame, error) {
	if s.joined(topic, joinRef) == nil {
		return Frame{}, ErrNotJoined
	}
	delete(s.topics, topic)
	return Frame{Data: AppendError(nil, joinRef, topic, ReasonChannelCrash)}, nil
}

// Joined reports whether topic is joined (accepted, not pending) and, if
// so, its join_ref. A broadcast is written to a socket only when this is
// true.
func (s *Session) Joined(topic string) (Ref, bool) {
	if ch, ok := s.topics[topic]; ok && ch.joined {
		return MakeRef(ch.joinRef), true
	}
	return Ref{}, false
}

// Topics returns the topics joined or pending, sorted.
func (s *Session) Topics() []string {
	topics := make([]string, 0, len(s.topics))
	for t := range s.topics {
		topics = append(topics, t)
	}
	sort.Strings(topics)
	return topics
}

// Len returns the number of topics joined or pending.
func (s *Session) Len() int { return len(s.topics) }

// LastHeartbeat returns the time passed to Handle with the latest
// heartbeat, or 0 if none came yet.
func (s *Session) LastHeartbeat() int64 { return s.lastHeartbeat }

// Terminate ends every join, joined or pending, when the socket goes away,
// and returns a DeliverLeave (LeaveClosed) for each, ordered by topic.
// Nothing is sent to the client. The Session is empty afterwards.
func (s *Session) Terminate() []Action {
	topics := make([]string, 0, len(s.topics))
	for t := range s.topics {
		topics = append(topics, t)
	}
	sort.Strings(topics)
	acts := make([]Action, 0, len(topics))
	for _, t := range topics {
		acts = append(acts, deliver(leaveOf(t, s.topics[t].joinRef, Ref{}, LeaveClosed)))
	}
	clear(s.topics)
	return acts
}
