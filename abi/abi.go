// Package abi is the contract between a wasmkeep host and the actor classes
// it runs: the names a guest module exports and imports, the event kinds, the
// status codes host functions return, and the byte encodings of the records
// that cross the boundary. Both sides import it (the host natively, the Go
// guest SDK under GOOS=wasip1), so every name and number lives here once;
// the AssemblyScript SDK restates them in its own language, and host/node's
// tests check its names and status codes against this package.
//
// The rationale for each choice is in README.md beside this file.
package abi

// Version is the ABI version this package describes. A module declares the
// version it was built for by exporting a function named VersionExportPrefix
// followed by the decimal version (for v1: "wasmkeep_abi_v1"); a host refuses
// a module that declares a version it does not speak, or none.
const Version = 1

// VersionExportPrefix begins the name of the marker export that declares a
// module's ABI version. The marker is a function of type () -> (); the host
// never calls it, it only reads its name.
const VersionExportPrefix = "wasmkeep_abi_v"

// VersionExport is the marker export for Version.
const VersionExport = "wasmkeep_abi_v1"

// ImportModule is the module name under which the host provides its
// functions to the guest.
const ImportModule = "wasmkeep"

// WASIModule is the WASI preview 1 module name. The host provides it with no
// filesystem and no network; clocks and randomness come from the host.
const WASIModule = "wasi_snapshot_preview1"

// Exports a guest provides. Only ExportAlloc and the version marker are
// required; a class without a handler for an event kind does not receive that
// kind (HTTP answers 404, upgrades are refused).
const (
	// ExportAlloc is (size i32) -> (ptr i32): the guest returns a region of
	// at least size bytes. The host writes event payloads there before
	// calling handlers, and may reuse the region for every later payload that
	// fits, so it must stay valid (and untouched by the guest outside a
	// handler's reading of its payload) until the host calls ExportAlloc
	// again. It is never called with size 0.
	ExportAlloc = "wasmkeep_alloc"

	// ExportOnRequest is (ptr i32, len i32) -> (): an HTTP request, encoded
	// as a Request record. The guest answers by calling ImportHTTPRespond
	// once; a request left unanswered gets HTTP 500.
	ExportOnRequest = "wasmkeep_on_request"

	// ExportOnSocketOpen is (socket i32, ptr i32, len i32) -> (): a WebSocket
	// was accepted; the payload is a SocketOpen record.
	ExportOnSocketOpen = "wasmkeep_on_socket_open"

	// ExportOnSocketMessage is (socket i32, kind i32, ptr i32, len i32) -> ():
	// a complete message; kind is MessageText or MessageBinary.
	ExportOnSocketMessage = "wasmkeep_on_socket_message"

	// ExportOnSocketMessages is (socket i32, ptr i32, len i32) -> (), and
	// optional: several complete messages of one socket, in order, as a
	// MessageBatch record (AppendBatchedMessage). A guest that exports it
	// handles them as it would handle each alone; the host then delivers a
	// socket's queued messages in one call instead of one call each. A
	// crash during the call counts against the whole batch: the socket is
	// closed with CloseInternalError and the room rolls back, as for one
	// message.
	ExportOnSocketMessages = "wasmkeep_on_socket_messages"

	// ExportOnSocketClose is (socket i32, code i32, ptr i32, len i32) -> ():
	// the socket is gone; the payload is the close reason (UTF-8). The socket
	// id is not valid for sends any more.
	ExportOnSocketClose = "wasmkeep_on_socket_close"

	// ExportOnUpgrade is () -> (), and optional: the room's code is being
	// replaced by a newer version (an upload of its class) and is asked for
	// its state. The guest answers by calling ImportUpgradeState once with
	// the bytes the new version will start from; returning without that
	// call means this version offers no handoff (as does a module without
	// the export), and the room stays on it. The call changes nothing the
	// host keeps: what the guest sends, closes, checkpoints or deletes
	// during it is refused with StatusState, and the host drops the
	// instance afterwards, whatever the outcome, so a failed upgrade leaves
	// the room exactly as its last snapshot had it.
	ExportOnUpgrade = "wasmkeep_on_upgrade"

	// ExportOnStartFrom is (ptr i32, len i32) -> (), and optional: the
	// first event of a fresh instance that replaces an older version of
	// the room, instead of starting it empty. The payload is a StartFrom
	// record: the older version's hash and the state it handed over. The
	// guest takes it over by calling ImportUpgradeAccept; returning
	// without that call (a version that cannot read the state, or a module
	// built with an SDK whose room registered no handler) refuses it, and
	// the room stays on the older version. The room's open sockets are
	// carried over with their ids: the new version gets no open event for
	// a socket the old one had seen. A trap or a timeout fails the upgrade
	// the same way. Like ExportOnUpgrade the call runs with no room behind
	// it (sends, closes, checkpoints answer StatusState): an upgrade has no
	// client to answer, and one that fails must have changed nothing.
	ExportOnStartFrom = "wasmkeep_on_start_from"

	// ExportOnIdle is () -> (), and optional: the call a guest asked for
	// with ImportIdleCall, made once the events the room had queued when
	// it asked have been handled and their output has left the host (or
	// after a burst of events, for a room that never runs out of them).
	// It is for the guest's own housekeeping, which no client should wait
	// for: the Go SDK collects its garbage there. It runs under the
	// events' time and memory limits, with no room behind it, as
	// ExportOnUpgrade does: sends, closes, checkpoints, deletes and logs
	// answer StatusState. A trap or a timeout in it is a crash like any
	// other: the room restarts from its last snapshot. Added in v1 after
	// its first release, with ImportIdleCall.
	ExportOnIdle = "wasmkeep_on_idle"

	// ExportInitialize is the WASI reactor initializer. A fresh room runs it
	// once (after the module's start function, if any); a room woken from a
	// snapshot never runs either again.
	ExportInitialize = "_initialize"
)

// Channel exports (Phoenix Channels, served by the host on a room's
// /socket/websocket path). A class that exports none of them refuses
// Phoenix sockets.
const (
	// ExportOnJoin is (socket i32, ptr i32, len i32) -> (): a phx_join,
	// encoded as a Join record. The guest accepts or rejects it by calling
	// ImportChannelReply once; a join left unanswered is rejected.
	ExportOnJoin = "wasmkeep_on_join"
	// ExportOnChannelMessage is (socket i32, ptr i32, len i32) -> (): an
	// event on a joined topic, encoded as a ChannelMessage record. The guest
	// may answer it with ImportChannelReply (at most once).
	ExportOnChannelMessage = "wasmkeep_on_channel_message"
	// ExportOnLeave is (socket i32, ptr i32, len i32) -> (): a join ended
	// (the client left, rejoined, or its socket closed), encoded as a Leave
	// record. The topic is no longer joined when it runs.
	ExportOnLeave = "wasmkeep_on_leave"
)

// ExportOnCall is (ptr i32, len i32) -> (), and optional: another room
// (or a front) calls this one. The payload is a Call record naming the
// caller (its class, and its name: empty for a front) and carrying the
// caller's bytes. The guest answers by calling ImportCallReply at most
// once; returning without it answers an empty reply. The call is an
// event like a request: its sends, closes and checkpoint are applied when
// it returns, before the reply leaves the host, and a crash rolls the
// room back and answers the caller StatusCrashed. A class without the
// export answers every call StatusNotFound. Added in v1 after its first
// release, with the call imports.
const ExportOnCall = "wasmkeep_on_call"

// ExportOnAlarm is (ptr i32, len i32) -> (), and optional: the room's
// alarm is due. The payload is an AlarmEvent record (the time it was set
// for, and how many runs of it failed before this one). The alarm is
// cleared as the handler returns, unless the handler set it again. The
// run is an event like a request: a trap, a timeout or a refusal rolls
// the room back and the host runs it again later (at least once: a
// handler must be safe to run twice), up to a bounded number of retries.
// A class without the export keeps no alarm: ImportAlarmSet answers
// StatusUnsupported. Added in v1 after its first release, with alarms.
const ExportOnAlarm = "wasmkeep_on_alarm"

// ReservedExportPrefix begins every export name the host gives a meaning to,
// and the names the module rewriter adds ("__wk_"). A guest must not export
// other names with these prefixes.
const (
	ReservedExportPrefix = "wasmkeep_"
	RewriterExportPrefix = "__wk_"
)

// Host functions, imported by the guest from ImportModule. Every one returns
// an i32: Success (0) or a non-negative count where noted, otherwise one of
// the negative Status codes.
const (
	// ImportHTTPRespond is (ptr i32, len i32) -> i32: the response to the
	// request being handled, encoded as a Response record. Only valid during
	// ExportOnRequest, once.
	ImportHTTPRespond = "http_respond"

	// ImportHTTPHandOver is (ptr i32, len i32) -> i32: during a front's
	// ExportOnRequest for a WebSocket upgrade only (StatusState otherwise,
	// or after ImportHTTPRespond), hands the socket to a room named by a
	// HandOver record: the host accepts the upgrade for that room as if it
	// had come to /actor/<class>/<name>, on the room's node, with the
	// record's headers in place of the request's of the same names. The
	// request needs no response then. Added in v1 after its first
	// release, with fronts.
	ImportHTTPHandOver = "http_hand_over"

	// ImportSocketSend is (socket i32, kind i32, ptr i32, len i32) -> i32:
	// queue a message to one socket of this room.
	ImportSocketSend = "socket_send"

	// ImportSocketClose is (socket i32, code i32, ptr i32, len i32) -> i32:
	// close one socket with a close code (1000 or 3000–4999) and a reason of
	// at most MaxCloseReason bytes. The room still receives its close event.
	ImportSocketClose = "socket_close"

	// ImportSocketList is (ptr i32, cap i32) -> i32: write up to cap socket
	// ids (little-endian u32) of this room's open sockets at ptr, and return
	// how many there are in all (which may exceed cap: call again with room
	// for that many).
	ImportSocketList = "socket_list"

	// ImportBroadcast is (kind i32, ptr i32, len i32, except i32) -> i32:
	// queue a message to every open socket of this room but except (0 for
	// none). Returns the number of sockets it was queued to.
	ImportBroadcast = "broadcast"

	// ImportRoomInfo is (ptr i32, cap i32) -> i32: write this room's RoomInfo
	// record at ptr if it fits in cap, and return its length in any case.
	ImportRoomInfo = "room_info"

	// ImportLog is (level i32, ptr i32, len i32) -> i32: a log line, at most
	// MaxLogLine bytes (longer lines are cut), attributed to the room.
	ImportLog = "log"

	// ImportCheckpoint is () -> i32: make the room's state durable. The
	// state as of the end of the current event is written before any output
	// of the event (its HTTP response, socket sends) leaves the host; if the
	// write fails, the event is undone like a crash. It returns Success at
	// once: a snapshot taken in the middle of the call could not be resumed.
	ImportCheckpoint = "checkpoint"

	// ImportStateDelete is () -> i32: delete the room's state. When the
	// current event returns, the host deletes the room's stored snapshot
	// and drops its instance without writing it, before any output of the
	// event leaves the host; the room's next event starts it fresh, as if
	// it had never run. Its sockets stay open: the fresh instance gets an
	// open event for each. If the event crashes, nothing is deleted. It
	// returns Success at once. Added in v1 after its first release: a host
	// without it refuses the module at upload, as for any unknown import.
	ImportStateDelete = "state_delete"

	// ImportUpgradeState is (ptr i32, len i32) -> i32: during
	// ExportOnUpgrade only (StatusState otherwise, or on a second call),
	// hands over the room's state for its next version, at most
	// MaxUpgradeState bytes (StatusTooLarge).
	//
	// ImportUpgradeAccept is () -> i32: during ExportOnStartFrom only
	// (StatusState otherwise), the new version has taken over the state.
	//
	// Both were added in v1 after its first release, like
	// ImportStateDelete: a host without them refuses the module at upload.
	ImportUpgradeState  = "upgrade_state"
	ImportUpgradeAccept = "upgrade_accept"

	// ImportIdleCall is () -> i32: during an event, asks the host to call
	// ExportOnIdle once the room is idle (see there). Asking again before
	// that call is the same as asking once; the request is the host's, not
	// the guest's memory's, so a room that hibernates before the call may
	// never get it and should ask again. StatusUnsupported for a module
	// that does not export ExportOnIdle, StatusState outside an event.
	// Added in v1 after its first release, like ImportStateDelete: a host
	// without it refuses the module at upload.
	ImportIdleCall = "idle_call"

	// ImportCallStart is (ptr i32, len i32) -> i32: during an event,
	// starts a call to another room, named by a Call record (the callee's
	// class and name, and the payload, at most MaxCallPayload bytes), and
	// returns its handle (1 or more). The call runs while the guest goes
	// on; ImportCallWait waits for it. Calls one event makes to one room
	// run there in the order they were started (the host sends the next
	// when the one before is answered); calls to different rooms run at
	// once. It fails at once with StatusTooLarge (payload), StatusTooMany
	// (MaxCallsInFlight unanswered calls of this room), StatusInvalid (a
	// malformed record or room name) or StatusState (outside an event, or
	// during ExportOnIdle, ExportOnUpgrade or ExportOnStartFrom). A call
	// whose callee is already in its chain (StatusCycle: this room, or one
	// waiting on it) or whose chain is MaxCallDepth rooms long
	// (StatusTooDeep) is answered so at once, by ImportCallWait.
	//
	// ImportCallWait is (handle i32) -> i32: waits until the call is
	// answered and returns Success or the call's error status: StatusNotFound,
	// StatusRefused (not run: safe to retry), StatusTimeout (no answer
	// within the call timeout: it may have run), StatusCrashed,
	// StatusCycle, StatusTooDeep, StatusTooLarge (the reply). The time
	// spent waiting does not count toward the event's time limit.
	// StatusInvalid for a handle that is not one of this event's.
	//
	// ImportCallResult is (handle i32, ptr i32, cap i32) -> i32: after
	// ImportCallWait, writes the reply (or, after an error, a message
	// saying what went wrong) at ptr if it fits in cap, frees the handle,
	// and returns its length; if it does not fit, it writes nothing,
	// keeps the handle, and returns the length needed.
	//
	// ImportCallReply is (ptr i32, len i32) -> i32: during ExportOnCall
	// only (StatusState otherwise, or on a second call), the reply, at
	// most MaxCallReply bytes (StatusTooLarge).
	//
	// Handles are an event's: the host abandons the calls an event did
	// not wait for when it returns (they run, their answers are dropped)
	// and counts them as in flight until answered.
	ImportCallStart  = "call_start"
	ImportCallWait   = "call_wait"
	ImportCallResult = "call_result"
	ImportCallReply  = "call_reply"

	// ImportSecretGet is (name_ptr i32, name_len i32, buf_ptr i32, buf_cap
	// i32) -> i32: the value of the app's secret of that name (set with
	// `wasmkeep secret put`): writes it at buf_ptr if it fits in buf_cap
	// and returns its length, which may exceed buf_cap (call again with
	// room for that many). StatusNotFound: no such secret; StatusInvalid: a
	// name that is not one (1 to MaxSecretName letters, digits and
	// underscores, not starting with a digit); StatusRefused: the store
	// could not be read (safe to retry); StatusState outside an event.
	// Rooms and fronts. Added in v1 after its first release, with
	// secrets.
	ImportSecretGet = "secret_get"

	// ImportFetchStart is (ptr i32, len i32) -> i32: during an event of a
	// room or a front, starts an HTTP request to another service, given
	// as a Fetch record (method, URL, headers, body), and returns its
	// handle (1 or more). The request goes out while the guest goes on;
	// ImportFetchWait waits for it. It fails at once only with
	// StatusInvalid (a malformed record), StatusTooMany (MaxFetchHandles
	// handles of this event not yet freed), StatusUnsupported (the host
	// makes no fetches) or StatusState (outside an event, or during
	// ExportOnIdle, ExportOnUpgrade or ExportOnStartFrom); every other
	// refusal comes from ImportFetchWait, with a message.
	//
	// ImportFetchWait is (handle i32) -> i32: waits until the fetch is
	// answered and returns Success (whatever the HTTP status) or why not:
	// StatusNotAllowed (the operator allows no such host, or the address
	// it resolved to is of this machine or a private network), StatusInvalid
	// (a method, header or URL the host does not send), StatusTooLarge (the
	// request's or the answer's body, URL or headers over the host's
	// limits), StatusTooMany (the room's or the node's fetches in flight
	// at their limit: refused before it was sent), StatusTimeout (no whole
	// answer within the host's fetch timeout: it may have arrived),
	// StatusFailed (DNS, connection, TLS or protocol: it may have
	// arrived). The time spent waiting does not count toward the event's
	// time limit; the fetch timeout bounds it. StatusInvalid for a handle
	// that is not one of this event's.
	//
	// ImportFetchResult is (handle i32, ptr i32, cap i32) -> i32: after
	// ImportFetchWait, writes the answer as a Response record (or, after
	// an error, a message saying what went wrong) at ptr if it fits in
	// cap, frees the handle, and returns its length; if it does not fit,
	// it writes nothing, keeps the handle, and returns the length needed.
	//
	// Handles are an event's, as calls' are: a fetch the event did not
	// wait for goes on when it returns, its answer dropped, and counts as
	// in flight until it ends. The request leaves the host mid-event,
	// before the state of that event is durable. Rooms and fronts. Added
	// in v1 after its first release, with fetches.
	ImportFetchStart  = "fetch_start"
	ImportFetchWait   = "fetch_wait"
	ImportFetchResult = "fetch_result"

	// ImportAlarmSet is (at_ms i64) -> i32: sets the room's one alarm to
	// at_ms (Unix milliseconds), replacing the one set before. The host
	// runs ExportOnAlarm at that time (at once if it is past), on
	// whichever node runs the room then, waking it if it hibernated.
	// ImportAlarmClear is () -> i32: clears it (Success if there was none
	// too). ImportAlarmGet is (ptr i32) -> i32: writes the alarm's time
	// (at_ms, little-endian i64) at ptr and returns Success, or
	// StatusNotFound if none is set. A change is made durable with the
	// event's state, whatever the class's durability (the event's output
	// waits for it, as after ImportCheckpoint): the alarm and the state
	// that set it are never found apart. StatusState outside an event,
	// in a front, or during ExportOnIdle, ExportOnUpgrade or
	// ExportOnStartFrom; StatusInvalid for at_ms before 2001 or after
	// MaxAlarmMs. Set and clear were reserved in v1's first release (they
	// answered StatusUnsupported); get, the event and the behaviour came
	// after it, with alarms.
	ImportAlarmSet   = "alarm_set"
	ImportAlarmClear = "alarm_clear"
	ImportAlarmGet   = "alarm_get"
)

// Bounds of an alarm's time (Unix milliseconds), as ImportAlarmSet checks
// them: a time before MinAlarmMs is surely a mistake of units (seconds
// given for milliseconds), one after MaxAlarmMs does not fit the host's
// index.
const (
	MinAlarmMs = 978307200000  // 2001-01-01T00:00:00Z
	MaxAlarmMs = 9999999999999 // 2286-11-20T17:46:39.999Z
)

// Channel host functions. Each returns a Status.
const (
	// ImportChannelReply is (status i32, ptr i32, len i32) -> i32: answers
	// the join or message being handled with a JSON response. For a join,
	// ReplyOK accepts it and ReplyError rejects it; for a message the
	// status is the reply's ("ok" or "error"). Once per event; StatusState
	// outside ExportOnJoin and ExportOnChannelMessage.
	ImportChannelReply = "channel_reply"
	// ImportChannelPush is (socket i32, ptr i32, len i32) -> i32: sends a
	// ChannelOut record to one socket, on a topic it has joined.
	ImportChannelPush = "channel_push"
	// ImportChannelBroadcast is (except i32, ptr i32, len i32) -> i32: sends
	// a ChannelOut record to every socket of the room joined to its topic
	// but except (0: none); returns how many.
	ImportChannelBroadcast = "channel_broadcast"
	// ImportChannelClose is (socket i32, ptr i32, len i32) -> i32: the
	// server ends a socket's join of the topic (given as the record's only
	// string); the client gets phx_close and the guest a leave.
	ImportChannelClose = "channel_close"
	// ImportPresenceTrack is (socket i32, ptr i32, len i32) -> i32: tracks a
	// Presence record (topic, key, JSON meta) for a socket that joined the
	// topic. Every socket on the topic gets a presence_diff; a socket that
	// joins later gets presence_state. Tracks end with the join.
	ImportPresenceTrack = "presence_track"
	// ImportPresenceUntrack is (socket i32, ptr i32, len i32) -> i32: ends
	// the track of a Presence record's topic and key (its meta is ignored).
	ImportPresenceUntrack = "presence_untrack"
)

// Reply statuses for ImportChannelReply.
const (
	ReplyOK    = 0
	ReplyError = 1
)

// MaxSecretName bounds a secret's name (ImportSecretGet).
const MaxSecretName = 128

// ValidSecretName reports whether name can be a secret's: 1 to
// MaxSecretName letters, digits and underscores, not starting with a
// digit, as environment variables are named.
func ValidSecretName(name string) bool {
	if len(name) == 0 || len(name) > MaxSecretName || name[0] >= '0' && name[0] <= '9' {
		return false
	}
	for i := 0; i < len(name); i++ {
		c := name[i]
		if !(c == '_' || c >= '0' && c <= '9' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z') {
			return false
		}
	}
	return true
}

// Import names reserved for later minor versions with signatures not yet
// fixed. A module importing one of them is refused at upload by a host that
// does not provide it, with an error naming the function.
var ReservedImports = []string{"socket_tag"}

// Status is the value a host function returns. Zero and positive values mean
// success (a count where the function says so); negative values are errors.
type Status int32

// Status codes.
const (
	Success           Status = 0
	StatusInvalid     Status = -1 // a pointer or length outside memory, or a malformed record
	StatusNoSocket    Status = -2 // the socket id is not an open socket of this room
	StatusTooLarge    Status = -3 // over a documented size limit
	StatusUnsupported Status = -4 // reserved function not provided by this host yet
	StatusState       Status = -5 // not valid now (e.g. a second http_respond, or outside a request)
	StatusOverloaded  Status = -6 // an outbound queue is full; the socket is being closed

	// The errors of a call (ImportCallStart, ImportCallWait).
	StatusNotFound Status = -7  // no such class, or it takes no calls
	StatusRefused  Status = -8  // refused before it ran (overloaded, draining, no node): safe to retry
	StatusTimeout  Status = -9  // no answer within the call timeout: it may have run
	StatusCrashed  Status = -10 // the callee crashed handling it; its state rolled back
	StatusCycle    Status = -11 // the callee is already in the call's chain
	StatusTooDeep  Status = -12 // the chain is MaxCallDepth rooms long already
	StatusTooMany  Status = -13 // MaxCallsInFlight calls of this room are unanswered (for a fetch: its limit in flight)

	// The errors of a fetch (ImportFetchWait), besides StatusInvalid,
	// StatusTooLarge, StatusTooMany and StatusTimeout.
	StatusNotAllowed Status = -14 // the operator does not allow the host, or the address it resolved to
	StatusFailed     Status = -15 // DNS, connection, TLS or protocol failure: the request may have arrived
)

// String names a status for error messages.
func (s Status) String() string {
	switch s {
	case Success:
		return "ok"
	case StatusInvalid:
		return "invalid argument"
	case StatusNoSocket:
		return "no such socket"
	case StatusTooLarge:
		return "too large"
	case StatusUnsupported:
		return "unsupported by this host"
	case StatusState:
		return "not valid in this state"
	case StatusOverloaded:
		return "overloaded"
	case StatusNotFound:
		return "not found"
	case StatusRefused:
		return "refused"
	case StatusTimeout:
		return "timed out"
	case StatusCrashed:
		return "the callee crashed"
	case StatusCycle:
		return "call cycle"
	case StatusTooDeep:
		return "call chain too deep"
	case StatusTooMany:
		return "too many calls in flight"
	case StatusNotAllowed:
		return "not allowed"
	case StatusFailed:
		return "failed"
	}
	if s > 0 {
		return "ok"
	}
	return "unknown status"
}

// Message kinds, equal to the WebSocket opcodes for the same frames.
const (
	MessageText   = 1
	MessageBinary = 2
)

// Log levels for ImportLog.
const (
	LogDebug = 0
	LogInfo  = 1
	LogWarn  = 2
	LogError = 3
)

// Limits that are part of the contract (hosts may be configured lower for
// bodies and messages, never for these).
const (
	MaxCloseReason = 123 // RFC 6455: a close frame's payload is at most 125 bytes with the code
	MaxLogLine     = 4096
	MaxHeaderCount = 256
	// MaxUpgradeState bounds the state one version hands to the next: it
	// is copied whole into the new instance's memory, so it must fit there
	// with room to spare.
	MaxUpgradeState = 64 << 20

	// MaxCallPayload and MaxCallReply bound what one call carries each
	// way: both are copied whole, and may cross the network.
	MaxCallPayload = 1 << 20
	MaxCallReply   = 1 << 20
	// MaxCallDepth is how many rooms a chain of calls may hold, the
	// first caller included: a room whose chain is that long gets
	// StatusTooDeep for any call it makes.
	MaxCallDepth = 8
	// MaxCallsInFlight is how many unanswered calls a room may have.
	MaxCallsInFlight = 16

	// MaxFetchURL bounds a fetch's URL, and MaxFetchHeaderBytes the
	// bytes of its headers' names and values, each way (at most
	// MaxHeaderCount lines): a guest's request is refused past them, a
	// server's answer is refused past them.
	MaxFetchURL         = 8 << 10
	MaxFetchHeaderBytes = 64 << 10
	// MaxFetchHandles is how many fetches an event may hold, started and
	// not yet freed by ImportFetchResult: each may hold its answer, up to
	// the host's response limit, until then.
	MaxFetchHandles = 16
)
