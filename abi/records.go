package abi

import (
	"encoding/binary"
	"errors"
)

// The records below cross the boundary as flat little-endian byte strings:
//
//	str   = len:u32 bytes[len]
//	bytes = len:u32 bytes[len]
//	headers = count:u32 (name:str value:str)*count
//
// Request        = method:str path:str query:str headers body:bytes
// Response       = status:u32 headers body:bytes
// SocketOpen     = path:str query:str headers remote:str
// RoomInfo       = class:str name:str
// StartFrom      = from:str state:bytes                   (from: the older version's hash)
// Join           = topic:str payload:bytes                (payload: JSON)
// ChannelMessage = topic:str event:str binary:u8 payload:bytes
// Leave          = topic:str reason:str
// ChannelOut     = topic:str event:str binary:u8 payload:bytes
// Presence       = topic:str key:str meta:bytes           (meta: a JSON object)
// Call           = class:str name:str payload:bytes       (the callee in call_start, the caller in on_call)
// HandOver       = class:str name:str headers             (a front's upgrade handed to a room)
// Fetch          = method:str url:str headers body:bytes  (fetch_start; its answer is a Response)
//
// binary is 0 for a JSON payload, 1 for raw bytes (Phoenix's binary frames).
//
// A decoder rejects trailing bytes, lengths past the end, and more than
// MaxHeaderCount headers, so a record either decodes whole or not at all.

// ErrMalformed is returned by every decoder for input that is not a whole,
// well-formed record.
var ErrMalformed = errors.New("abi: malformed record")

// Header is one HTTP header line. Names keep the case they arrived with.
type Header struct {
	Name, Value string
}

// Request is an HTTP request delivered to a room.
type Request struct {
	Method string
	// Path is the part of the URL path below the room, beginning with "/"
	// ("/" for the room itself): for /actor/chat/lobby/history it is "/history".
	Path string
	// Query is the raw query string without "?".
	Query   string
	Headers []Header
	Body    []byte
}

// Response is a room's answer to a Request.
type Response struct {
	Status  int
	Headers []Header
	Body    []byte
}

// SocketOpen describes a WebSocket the host accepted for a room.
type SocketOpen struct {
	Path    string // below the room, as in Request
	Query   string
	Headers []Header
	Remote  string // the client's address as the host saw it
}

// RoomInfo names the room a guest instance is running as.
type RoomInfo struct {
	Class, Name string
}

// Join is a client's request to join a topic.
type Join struct {
	Topic   string
	Payload []byte // JSON
}

// ChannelMessage is an event a client sent on a joined topic; it is also
// the record a guest gives to push or broadcast (ChannelOut).
type ChannelMessage struct {
	Topic, Event string
	Binary       bool // Payload is raw bytes, not JSON
	Payload      []byte
}

// Leave reasons.
const (
	LeaveClient = "client" // the client sent phx_leave
	LeaveRejoin = "rejoin" // the client joined the topic again
	LeaveClosed = "closed" // the socket closed, or the server closed the topic
)

// Leave says a join ended.
type Leave struct {
	Topic, Reason string
}

// Presence is a presence track: Meta is a JSON object.
type Presence struct {
	Topic, Key string
	Meta       []byte
}

// AppendJoin appends j's encoding to dst.
func AppendJoin(dst []byte, j *Join) []byte {
	return appendBytes(appendStr(dst, j.Topic), j.Payload)
}

// DecodeJoin decodes a Join record. Payload aliases b.
func DecodeJoin(b []byte) (Join, error) {
	d := decoder{b: b}
	j := Join{Topic: d.str(), Payload: d.bytes()}
	return j, d.finish()
}

// AppendChannelMessage appends m's encoding to dst.
func AppendChannelMessage(dst []byte, m *ChannelMessage) []byte {
	dst = appendStr(appendStr(dst, m.Topic), m.Event)
	flag := byte(0)
	if m.Binary {
		flag = 1
	}
	return appendBytes(append(dst, flag), m.Payload)
}

// DecodeChannelMessage decodes a ChannelMessage (or ChannelOut) record.
// Payload aliases b.
func DecodeChannelMessage(b []byte) (ChannelMessage, error) {
	d := decoder{b: b}
	m := ChannelMessage{Topic: d.str(), Event: d.str()}
	switch d.u8() {
	case 0:
	case 1:
		m.Binary = true
	default:
		d.bad = true
	}
	m.Payload = d.bytes()
	return m, d.finish()
}

// AppendLeave appends l's encoding to dst.
func AppendLeave(dst []byte, l *Leave) []byte {
	return appendStr(appendStr(dst, l.Topic), l.Reason)
}

// DecodeLeave decodes a Leave record.
func DecodeLeave(b []byte) (Leave, error) {
	d := decoder{b: b}
	l := Leave{Topic: d.str(), Reason: d.str()}
	return l, d.finish()
}

// AppendPresence appends p's encoding to dst.
func AppendPresence(dst []byte, p *Presence) []byte {
	return appendBytes(appendStr(appendStr(dst, p.Topic), p.Key), p.Meta)
}

// DecodePresence decodes a Presence record. Meta aliases b.
func DecodePresence(b []byte) (Presence, error) {
	d := decoder{b: b}
	p := Presence{Topic: d.str(), Key: d.str(), Meta: d.bytes()}
	return p, d.finish()
}

// AppendTopic appends the record channel_close takes: one string.
func AppendTopic(dst []byte, topic string) []byte { return appendStr(dst, topic) }

// DecodeTopic decodes channel_close's record.
func DecodeTopic(b []byte) (string, error) {
	d := decoder{b: b}
	t := d.str()
	return t, d.finish()
}

// AppendRequest appends r's encoding to dst.
func AppendRequest(dst []byte, r *Request) []byte {
	dst = appendStr(dst, r.Method)
	dst = appendStr(dst, r.Path)
	dst = appendStr(dst, r.Query)
	dst = appendHeaders(dst, r.Headers)
	return appendBytes(dst, r.Body)
}

// DecodeRequest decodes a Request record. Body aliases b.
func DecodeRequest(b []byte) (Request, error) {
	d := decoder{b: b}
	r := Request{Method: d.str(), Path: d.str(), Query: d.str()}
	r.Headers = d.headers()
	r.Body = d.bytes()
	return r, d.finish()
}

// AppendResponse appends r's encoding to dst.
func AppendResponse(dst []byte, r *Response) []byte {
	dst = binary.LittleEndian.AppendUint32(dst, uint32(r.Status))
	dst = appendHeaders(dst, r.Headers)
	return appendBytes(dst, r.Body)
}

// DecodeResponse decodes a Response record. Body aliases b.
func DecodeResponse(b []byte) (Response, error) {
	d := decoder{b: b}
	r := Response{Status: int(d.u32())}
	r.Headers = d.headers()
	r.Body = d.bytes()
	return r, d.finish()
}

// AppendSocketOpen appends o's encoding to dst.
func AppendSocketOpen(dst []byte, o *SocketOpen) []byte {
	dst = appendStr(dst, o.Path)
	dst = appendStr(dst, o.Query)
	dst = appendHeaders(dst, o.Headers)
	return appendStr(dst, o.Remote)
}

// DecodeSocketOpen decodes a SocketOpen record.
func DecodeSocketOpen(b []byte) (SocketOpen, error) {
	d := decoder{b: b}
	o := SocketOpen{Path: d.str(), Query: d.str()}
	o.Headers = d.headers()
	o.Remote = d.str()
	return o, d.finish()
}

// AppendRoomInfo appends i's encoding to dst.
func AppendRoomInfo(dst []byte, i *RoomInfo) []byte {
	return appendStr(appendStr(dst, i.Class), i.Name)
}

// DecodeRoomInfo decodes a RoomInfo record.
func DecodeRoomInfo(b []byte) (RoomInfo, error) {
	d := decoder{b: b}
	i := RoomInfo{Class: d.str(), Name: d.str()}
	return i, d.finish()
}

// StartFrom is what a new version of a room starts from: the state the
// older version handed over (ExportOnUpgrade) and which version that was.
type StartFrom struct {
	From  string // the older version's module hash, "sha256:<hex>"
	State []byte
}

// AppendStartFrom appends s's encoding to dst.
func AppendStartFrom(dst []byte, s *StartFrom) []byte {
	return appendBytes(appendStr(dst, s.From), s.State)
}

// DecodeStartFrom decodes a StartFrom record.
func DecodeStartFrom(b []byte) (StartFrom, error) {
	d := decoder{b: b}
	s := StartFrom{From: d.str(), State: d.bytes()}
	return s, d.finish()
}

// Call is a call between rooms. In ImportCallStart it names the callee;
// in ExportOnCall, the caller (Name is empty for a front).
type Call struct {
	Class, Name string
	Payload     []byte
}

// AppendCall appends c's encoding to dst.
func AppendCall(dst []byte, c *Call) []byte {
	return appendBytes(appendStr(appendStr(dst, c.Class), c.Name), c.Payload)
}

// DecodeCall decodes a Call record. Payload aliases b.
func DecodeCall(b []byte) (Call, error) {
	d := decoder{b: b}
	c := Call{Class: d.str(), Name: d.str(), Payload: d.bytes()}
	return c, d.finish()
}

// AlarmEvent is ExportOnAlarm's payload: At, the time the alarm was set
// for (Unix milliseconds), and Retry, how many runs of it failed before
// this one (0 the first time).
type AlarmEvent struct {
	At    int64
	Retry uint32
}

// AppendAlarmEvent appends a's encoding (at:i64 retry:u32) to dst.
func AppendAlarmEvent(dst []byte, a AlarmEvent) []byte {
	dst = binary.LittleEndian.AppendUint64(dst, uint64(a.At))
	return binary.LittleEndian.AppendUint32(dst, a.Retry)
}

// DecodeAlarmEvent decodes an AlarmEvent record.
func DecodeAlarmEvent(b []byte) (AlarmEvent, error) {
	if len(b) != 12 {
		return AlarmEvent{}, ErrMalformed
	}
	return AlarmEvent{At: int64(binary.LittleEndian.Uint64(b)), Retry: binary.LittleEndian.Uint32(b[8:])}, nil
}

// HandOver is a front's answer to a WebSocket upgrade that hands the
// socket to a room (ImportHTTPHandOver): the room's class and name, and
// headers that replace those of the same name in the upgrade request the
// room sees (what the front learnt of the client, say).
type HandOver struct {
	Class, Name string
	Headers     []Header
}

// AppendHandOver appends h's encoding to dst.
func AppendHandOver(dst []byte, h *HandOver) []byte {
	return appendHeaders(appendStr(appendStr(dst, h.Class), h.Name), h.Headers)
}

// DecodeHandOver decodes a HandOver record.
func DecodeHandOver(b []byte) (HandOver, error) {
	d := decoder{b: b}
	h := HandOver{Class: d.str(), Name: d.str(), Headers: d.headers()}
	return h, d.finish()
}

// Fetch is an HTTP request a room or a front sends to another service
// (ImportFetchStart); its answer is a Response record.
type Fetch struct {
	// Method is empty for GET.
	Method, URL string
	Headers     []Header
	Body        []byte
}

// AppendFetch appends f's encoding to dst.
func AppendFetch(dst []byte, f *Fetch) []byte {
	dst = appendHeaders(appendStr(appendStr(dst, f.Method), f.URL), f.Headers)
	return appendBytes(dst, f.Body)
}

// DecodeFetch decodes a Fetch record. Body aliases b.
func DecodeFetch(b []byte) (Fetch, error) {
	d := decoder{b: b}
	f := Fetch{Method: d.str(), URL: d.str(), Headers: d.headers(), Body: d.bytes()}
	return f, d.finish()
}

func appendStr(dst []byte, s string) []byte {
	dst = binary.LittleEndian.AppendUint32(dst, uint32(len(s)))
	return append(dst, s...)
}

func appendBytes(dst []byte, b []byte) []byte {
	dst = binary.LittleEndian.AppendUint32(dst, uint32(len(b)))
	return append(dst, b...)
}

func appendHeaders(dst []byte, hs []Header) []byte {
	dst = binary.LittleEndian.AppendUint32(dst, uint32(len(hs)))
	for _, h := range hs {
		dst = appendStr(dst, h.Name)
		dst = appendStr(dst, h.Value)
	}
	return dst
}

// A MessageBatch record is a sequence of messages, each its kind (one
// byte, MessageText or MessageBinary), its length (u32, little endian) and
// its bytes; nothing before or after.

// AppendBatchedMessage appends one message to a MessageBatch record.
func AppendBatchedMessage(dst []byte, kind int, data []byte) []byte {
	dst = append(dst, byte(kind))
	return appendBytes(dst, data)
}

// NextBatchedMessage splits the first message off a MessageBatch record:
// its kind and bytes (which alias b), and the rest of the record. ok is
// false at the end of the record; err is ErrMalformed for a truncated
// message or an unknown kind.
func NextBatchedMessage(b []byte) (kind int, data, rest []byte, ok bool, err error) {
	if len(b) == 0 {
		return 0, nil, nil, false, nil
	}
	d := decoder{b: b}
	k := int(d.u8())
	data = d.bytes()
	if d.bad || (k != MessageText && k != MessageBinary) {
		return 0, nil, nil, false, ErrMalformed
	}
	return k, data, d.b, true, nil
}

// decoder reads fields in order and remembers the first failure, so record
// decoders read as straight lines and check once at the end.
type decoder struct {
	b   []byte
	bad bool
}

func (d *decoder) u32() uint32 {
	if d.bad || len(d.b) < 4 {
		d.bad = true
		return 0
	}
	v := binary.LittleEndian.Uint32(d.b)
	d.b = d.b[4:]
	return v
}

func (d *decoder) u8() byte {
	if d.bad || len(d.b) < 1 {
		d.bad = true
		return 0
	}
	v := d.b[0]
	d.b = d.b[1:]
	return v
}

func (d *decoder) bytes() []byte {
	n := d.u32()
	if d.bad || uint64(n) > uint64(len(d.b)) {
		d.bad = true
		return nil
	}
	v := d.b[:n:n]
	d.b = d.b[n:]
	return v
}

func (d *decoder) str() string { return string(d.bytes()) }

func (d *decoder) headers() []Header {
	n := d.u32()
	// Each header takes at least 8 bytes, which bounds n by the input before
	// anything is allocated for it.
	if d.bad || n > MaxHeaderCount || uint64(n)*8 > uint64(len(d.b)) {
		d.bad = true
		return nil
	}
	if n == 0 {
		return nil
	}
	hs := make([]Header, n)
	for i := range hs {
		hs[i] = Header{Name: d.str(), Value: d.str()}
	}
	return hs
}

func (d *decoder) finish() error {
	if d.bad || len(d.b) != 0 {
		return ErrMalformed
	}
	return nil
}
