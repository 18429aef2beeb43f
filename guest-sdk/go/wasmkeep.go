package wasmkeep

import (
	"errors"
	"strconv"
	"strings"
	"time"
	"unsafe"

	"github.com/wasmkeep/wasmkeep/abi"
)

// Header is one HTTP header line. Names keep the case they arrived with;
// look them up with LookupHeader or the Header methods, which ignore case.
type Header = abi.Header

// Request is an HTTP request delivered to the room.
type Request struct {
	// Method is the HTTP method, e.g. "GET".
	Method string
	// Path is the part of the URL path below the room, beginning with "/"
	// ("/" for the room itself): for /actor/chat/lobby/history it is
	// "/history".
	Path string
	// Query is the raw query string without "?"; see QueryValue.
	Query string
	// Headers are the request's header lines in arrival order.
	Headers []Header
	// Body is the request body. It belongs to the handler, which may keep it.
	Body []byte
}

// Header returns the value of the first header named name, ignoring case,
// or "" if there is none.
func (r *Request) Header(name string) string {
	v, _ := LookupHeader(r.Headers, name)
	return v
}

// QueryValue returns the first value of the query parameter key, decoded,
// or "" if there is none.
func (r *Request) QueryValue(key string) string {
	v, _ := QueryValue(r.Query, key)
	return v
}

// Response is the room's answer to a Request.
type Response struct {
	// Status is the HTTP status code; 0 means 200.
	Status int
	// Headers are sent as given, after the host's own.
	Headers []Header
	// Body is the response body.
	Body []byte
}

// Header returns the value of the first header of r named name, ignoring
// case, or "" if there is none.
func (r *Response) Header(name string) string {
	v, _ := LookupHeader(r.Headers, name)
	return v
}

// SetHeader replaces every header of r named name (ignoring case) with one
// line name: value, and returns r so calls can be chained.
func (r *Response) SetHeader(name, value string) *Response {
	hs := r.Headers[:0:0]
	for _, h := range r.Headers {
		if !strings.EqualFold(h.Name, name) {
			hs = append(hs, h)
		}
	}
	r.Headers = append(hs, Header{Name: name, Value: value})
	return r
}

// AddHeader appends the header line name: value to r and returns r.
func (r *Response) AddHeader(name, value string) *Response {
	r.Headers = append(r.Headers, Header{Name: name, Value: value})
	return r
}

// Text returns a response with a text/plain UTF-8 body.
func Text(status int, body string) *Response {
	return Data(status, "text/plain; charset=utf-8", []byte(body))
}

// HTML returns a response with a text/html UTF-8 body.
func HTML(status int, body string) *Response {
	return Data(status, "text/html; charset=utf-8", []byte(body))
}

// Data returns a response with the given content type and body.
func Data(status int, contentType string, body []byte) *Response {
	return &Response{
		Status:  status,
		Headers: []Header{{Name: "Content-Type", Value: contentType}},
		Body:    body,
	}
}

// LookupHeader returns the value of the first header in hs named name,
// ignoring case, and whether there was one.
func LookupHeader(hs []Header, name string) (string, bool) {
	for _, h := range hs {
		if strings.EqualFold(h.Name, name) {
			return h.Value, true
		}
	}
	return "", false
}

// QueryValue returns the first value of parameter key in the raw query
// string query ("a=1&b=x%20y"), with + and %XX decoded, and whether the
// parameter was present. A parameter without "=" has the value "".
// Parameters that do not decode are skipped.
func QueryValue(query, key string) (string, bool) {
	for query != "" {
		var part string
		part, query, _ = strings.Cut(query, "&")
		k, v, _ := strings.Cut(part, "=")
		k, ok := unescape(k)
		if !ok || k != key {
			continue
		}
		if v, ok = unescape(v); ok {
			return v, true
		}
	}
	return "", false
}

// unescape decodes a query component: "+" is a space and %XX a byte.
func unescape(s string) (string, bool) {
	if !strings.ContainsAny(s, "%+") {
		return s, true
	}
	b := make([]byte, 0, len(s))
	for i := 0; i < len(s); i++ {
		switch c := s[i]; c {
		case '+':
			b = append(b, ' ')
		case '%':
			if i+2 >= len(s) {
				return "", false
			}
			hi, ok1 := unhex(s[i+1])
			lo, ok2 := unhex(s[i+2])
			if !ok1 || !ok2 {
				return "", false
			}
			b = append(b, hi<<4|lo)
			i += 2
		default:
			b = append(b, c)
		}
	}
	return string(b), true
}

func unhex(c byte) (byte, bool) {
	switch {
	case '0' <= c && c <= '9':
		return c - '0', true
	case 'a' <= c && c <= 'f':
		return c - 'a' + 10, true
	case 'A' <= c && c <= 'F':
		return c - 'A' + 10, true
	}
	return 0, false
}

// SocketOpen describes a WebSocket the host accepted for the room.
type SocketOpen struct {
	// Path is the URL path below the room, as in Request.
	Path string
	// Query is the raw query string of the upgrade request, without "?".
	Query string
	// Headers are the upgrade request's header lines.
	Headers []Header
	// Remote is the client's address as the host saw it.
	Remote string
}

// Header returns the value of the first upgrade header named name, ignoring
// case, or "" if there is none.
func (o *SocketOpen) Header(name string) string {
	v, _ := LookupHeader(o.Headers, name)
	return v
}

// QueryValue returns the first value of the upgrade request's query
// parameter key, decoded, or "" if there is none.
func (o *SocketOpen) QueryValue(key string) string {
	v, _ := QueryValue(o.Query, key)
	return v
}

// MessageKind tells text messages from binary ones.
type MessageKind int32

// Message kinds (the WebSocket opcodes).
const (
	TextMessage   MessageKind = abi.MessageText
	BinaryMessage MessageKind = abi.MessageBinary
)

// Message is one complete WebSocket message.
type Message struct {
	// Kind is TextMessage or BinaryMessage.
	Kind MessageKind
	// Data is the payload. It is only valid until the handler returns (the
	// SDK reuses the memory for the next event): copy it to keep it, for
	// example with Text.
	Data []byte
}

// IsText reports whether m is a text message.
func (m Message) IsText() bool { return m.Kind == TextMessage }

// Text returns a copy of the payload as a string, safe to keep.
func (m Message) Text() string { return string(m.Data) }

// Socket is the id of one of the room's WebSockets. Ids are never 0, so 0
// can mean "no socket" (as in Broadcast).
type Socket uint32

// Send queues a text message to s.
func (s Socket) Send(text string) error {
	return status("socket_send", hostSocketSend(uint32(s), abi.MessageText, strPtr(text), uint32(len(text))))
}

// SendText queues data as a text message to s without making a string of
// it: a text message's Data can be sent on as it is, where Send(m.Text())
// copies it into the heap first, which the Go runtime's allocator and
// collector make a quarter of an echo room's CPU per message
// (docs/PERFORMANCE.md). data must be valid UTF-8 (the host refuses it
// otherwise, with ErrInvalid), and the host copies it before the call
// returns.
func (s Socket) SendText(data []byte) error {
	return status("socket_send", hostSocketSend(uint32(s), abi.MessageText, bytesPtr(data), uint32(len(data))))
}

// SendBinary queues a binary message to s.
func (s Socket) SendBinary(data []byte) error {
	return status("socket_send", hostSocketSend(uint32(s), abi.MessageBinary, bytesPtr(data), uint32(len(data))))
}

// Close closes s with a close code (1000 or 3000–4999) and a reason of at
// most 123 bytes. The room still receives the socket's close event.
func (s Socket) Close(code int, reason string) error {
	return status("socket_close", hostSocketClose(uint32(s), int32(code), strPtr(reason), uint32(len(reason))))
}

// Sockets returns the ids of the room's open sockets, or nil if the host
// refuses to list them.
func Sockets() []Socket {
	ids := make([]Socket, 16)
	for {
		n := hostSocketList(unsafe.Pointer(unsafe.SliceData(ids)), uint32(len(ids)))
		if n < 0 {
			return nil
		}
		if int(n) <= len(ids) {
			return ids[:n:n]
		}
		ids = make([]Socket, n)
	}
}

// Secret returns the value of the app's secret name, which an operator
// set with `wasmkeep secret put NAME`: ErrNotFound if there is none,
// ErrRefused if the node could not read it now (try again). The value is
// in the room's memory once read, and so in its snapshots: keep it in a
// local variable rather than in the room's state if that matters.
func Secret(name string) (string, error) {
	buf := make([]byte, 256)
	for {
		n := hostSecretGet(strPtr(name), uint32(len(name)), unsafe.Pointer(unsafe.SliceData(buf)), uint32(len(buf)))
		if n < 0 {
			return "", &HostError{Func: "secret_get", Status: abi.Status(n)}
		}
		if int(n) <= len(buf) {
			return string(buf[:n]), nil
		}
		buf = make([]byte, n)
	}
}

// Broadcast queues a text message to every open socket of the room except
// except (0 for none), and returns how many sockets it was queued to.
func Broadcast(text string, except Socket) (int, error) {
	n := hostBroadcast(abi.MessageText, strPtr(text), uint32(len(text)), uint32(except))
	return count("broadcast", n)
}

// BroadcastBinary is Broadcast for a binary message.
func BroadcastBinary(data []byte, except Socket) (int, error) {
	n := hostBroadcast(abi.MessageBinary, bytesPtr(data), uint32(len(data)), uint32(except))
	return count("broadcast", n)
}

// RoomInfo names the room this instance runs as.
type RoomInfo struct {
	// Class is the actor class name, Name the room's name within it.
	Class, Name string
}

// room caches Room's answer: a room's identity never changes, and the cache
// survives hibernation with the rest of memory.
var room *RoomInfo

// Room returns the room this instance runs as. It asks the host once and
// caches the answer; it returns a zero RoomInfo (and asks again next time)
// if the host fails.
func Room() RoomInfo {
	if room != nil {
		return *room
	}
	b := make([]byte, 128)
	for {
		n := hostRoomInfo(unsafe.Pointer(unsafe.SliceData(b)), uint32(len(b)))
		if n < 0 {
			return RoomInfo{}
		}
		if int(n) > len(b) {
			b = make([]byte, n)
			continue
		}
		rec, err := abi.DecodeRoomInfo(b[:n])
		if err != nil {
			return RoomInfo{}
		}
		room = &RoomInfo{Class: rec.Class, Name: rec.Name}
		return *room
	}
}

// Level is a log level.
type Level int32

// Log levels.
const (
	LevelDebug Level = abi.LogDebug
	LevelInfo  Level = abi.LogInfo
	LevelWarn  Level = abi.LogWarn
	LevelError Level = abi.LogError
)

// Log writes a log line attributed to the room. The host cuts lines longer
// than 4096 bytes.
func Log(level Level, msg string) {
	hostLog(int32(level), strPtr(msg), uint32(len(msg)))
}

// Debug logs msg at LevelDebug.
func Debug(msg string) { Log(LevelDebug, msg) }

// Info logs msg at LevelInfo.
func Info(msg string) { Log(LevelInfo, msg) }

// Warn logs msg at LevelWarn.
func Warn(msg string) { Log(LevelWarn, msg) }

// Error logs msg at LevelError.
func Error(msg string) { Log(LevelError, msg) }

// Checkpoint asks the host to make the room's state durable now. ABI v1
// hosts answer ErrUnsupported.
func Checkpoint() error {
	return status("checkpoint", hostCheckpoint())
}

// DeleteState deletes the room's state: when the current handler returns,
// the host deletes the room's stored snapshot and drops its memory without
// writing it, before any of the handler's output (response, sends) leaves
// the host. The room's next event starts it fresh, from init, as if it had
// never run; its sockets stay open, and the fresh room gets an open event
// for each. Use it for a room that is done (a finished game, a closed
// ticket) so that it costs no storage. If the handler panics, nothing is
// deleted.
func DeleteState() error {
	return status("state_delete", hostStateDelete())
}

// SetAlarm sets the room's one alarm to t (to the millisecond),
// replacing the one set before: at t the host runs the handler given to
// HandleAlarm, waking the room wherever it sleeps, on whichever node runs
// it then. A time in the past runs it at once. The alarm is made durable
// with the event that set it, before any of its output leaves the host,
// whatever the class's durability. ErrInvalid for a time before 2001 or
// after 2286.
func SetAlarm(t time.Time) error {
	return status("alarm_set", hostAlarmSet(t.UnixMilli()))
}

// ClearAlarm clears the room's alarm, if one is set.
func ClearAlarm() error {
	return status("alarm_clear", hostAlarmClear())
}

// GetAlarm returns the time of the room's alarm, and false if none is
// set.
func GetAlarm() (time.Time, bool) {
	var at int64
	if hostAlarmGet(unsafe.Pointer(&at)) != 0 {
		return time.Time{}, false
	}
	return time.UnixMilli(at), true
}

// Alarm is what the alarm handler is told: the time the alarm was set for,
// and how many runs of it failed before this one (0 the first time).
type Alarm struct {
	At    time.Time
	Retry int
}

// onAlarmFunc is the room's alarm handler, nil when not registered.
var onAlarmFunc func(Alarm)

// HandleAlarm registers the handler that runs when the room's alarm is
// due. The alarm is cleared when it returns, unless it called SetAlarm
// (a recurring alarm sets the next one). A panic in it is a crash like
// any other: the room rolls back and the host runs it again later, after
// 2 s, then twice as long each time, at most 6 times (Alarm.Retry counts
// them); so it may run more than once for one alarm. Without a handler
// an alarm that comes due is cleared.
func HandleAlarm(h func(Alarm)) { onAlarmFunc = h }

//go:wasmexport wasmkeep_on_alarm
func onAlarm(ptr unsafe.Pointer, n uint32) {
	a, err := abi.DecodeAlarmEvent(payload(ptr, n))
	switch {
	case err != nil:
		Error("wasmkeep: malformed alarm record from the host")
	case onAlarmFunc != nil:
		onAlarmFunc(Alarm{At: time.UnixMilli(a.At), Retry: int(a.Retry)})
	}
	collectIfDue()
}

// Errors that host functions report, one per abi.Status. Errors returned by
// this package wrap one of them: test with errors.Is.
var (
	ErrInvalid     = errors.New("wasmkeep: " + abi.StatusInvalid.String())
	ErrNoSocket    = errors.New("wasmkeep: " + abi.StatusNoSocket.String())
	ErrTooLarge    = errors.New("wasmkeep: " + abi.StatusTooLarge.String())
	ErrUnsupported = errors.New("wasmkeep: " + abi.StatusUnsupported.String())
	ErrState       = errors.New("wasmkeep: " + abi.StatusState.String())
	ErrOverloaded  = errors.New("wasmkeep: " + abi.StatusOverloaded.String())
	// ErrUnknownStatus is wrapped for negative statuses this SDK does not
	// know (from a newer host).
	ErrUnknownStatus = errors.New("wasmkeep: unknown status")
)

// HostError is a host function's failure.
type HostError struct {
	// Func is the host function's name, e.g. "socket_send".
	Func string
	// Status is the negative status it returned.
	Status abi.Status
}

// Error describes e.
func (e *HostError) Error() string {
	return "wasmkeep: " + e.Func + ": " + e.Status.String() + " (" + strconv.Itoa(int(e.Status)) + ")"
}

// Unwrap returns the sentinel error for e.Status, such as ErrNoSocket.
func (e *HostError) Unwrap() error { return statusError(e.Status) }

// statusError is the sentinel error for a negative status.
func statusError(st abi.Status) error {
	switch st {
	case abi.StatusInvalid:
		return ErrInvalid
	case abi.StatusNoSocket:
		return ErrNoSocket
	case abi.StatusTooLarge:
		return ErrTooLarge
	case abi.StatusUnsupported:
		return ErrUnsupported
	case abi.StatusState:
		return ErrState
	case abi.StatusOverloaded:
		return ErrOverloaded
	case abi.StatusNotFound:
		return ErrNotFound
	case abi.StatusRefused:
		return ErrRefused
	case abi.StatusTimeout:
		return ErrTimeout
	case abi.StatusCrashed:
		return ErrCrashed
	case abi.StatusCycle:
		return ErrCycle
	case abi.StatusTooDeep:
		return ErrTooDeep
	case abi.StatusTooMany:
		return ErrTooMany
	case abi.StatusNotAllowed:
		return ErrNotAllowed
	case abi.StatusFailed:
		return ErrFailed
	}
	return ErrUnknownStatus
}

func status(fn string, st int32) error {
	if st >= 0 {
		return nil
	}
	return &HostError{Func: fn, Status: abi.Status(st)}
}

func count(fn string, st int32) (int, error) {
	if st < 0 {
		return 0, status(fn, st)
	}
	return int(st), nil
}

func strPtr(s string) unsafe.Pointer { return unsafe.Pointer(unsafe.StringData(s)) }

func bytesPtr(b []byte) unsafe.Pointer { return unsafe.Pointer(unsafe.SliceData(b)) }

// Handlers registered by the guest, nil when not registered.
var (
	onRequestFunc       func(*Request) *Response
	onSocketOpenFunc    func(Socket, *SocketOpen)
	onSocketMessageFunc func(Socket, Message)
	onSocketCloseFunc   func(Socket, int, string)
	onUpgradeFunc       func() []byte
	onStartFromFunc     func(prev []byte, fromVersion string)
)

// HandleRequest registers the room's HTTP handler, replacing any earlier
// one. The handler's answer is sent when it returns; a nil answer is sent as
// 500 "handler returned no response". Without a handler every request is
// answered 404 "no request handler".
func HandleRequest(h func(*Request) *Response) { onRequestFunc = h }

// HandleSocketOpen registers the handler called when the host accepted a
// WebSocket for the room. Without one, opens are ignored (the socket stays
// open).
func HandleSocketOpen(h func(Socket, *SocketOpen)) { onSocketOpenFunc = h }

// HandleSocketMessage registers the handler called for every complete
// message a socket of the room receives. Without one, messages are ignored.
func HandleSocketMessage(h func(Socket, Message)) { onSocketMessageFunc = h }

// HandleSocketClose registers the handler called when a socket of the room
// is gone, with its close code and reason. The socket can no longer be sent
// to. Without one, closes are ignored.
func HandleSocketClose(h func(s Socket, code int, reason string)) { onSocketCloseFunc = h }

// HandleUpgrade offers the room's state to the next version of its class.
// When a newer version is uploaded, the host calls h on the room's current
// version and starts the new version from what it returns (see
// HandleStartFrom); the room's sockets stay open through the change. h
// should encode what the room must keep (a history, scores) in a form the
// next version can read, a version number first being the usual way.
// Returning nil offers no handoff: the room stays on this version. Anything
// else h does (sends, checkpoints, changes to the room's variables) is
// dropped with the instance it ran in, whatever the outcome: the room either
// continues on the new version or stays exactly as it was. Without a
// handler, rooms of this version offer no handoff and stay on it until an
// operator resets them.
func HandleUpgrade(h func() []byte) { onUpgradeFunc = h }

// HandleStartFrom registers how this version takes over a room from an
// older one: h gets the state that version's HandleUpgrade returned and
// that version's hash ("sha256:<hex>"), and runs instead of the room's
// first event, after init. The room's open sockets are carried over: their
// ids stay valid and no open event comes for them. If h panics, the upgrade
// fails and the room stays on the older version with its state (the host
// tries again later). Without a handler, this version takes over no state
// and rooms of older versions stay where they are.
func HandleStartFrom(h func(prev []byte, fromVersion string)) { onStartFromFunc = h }
