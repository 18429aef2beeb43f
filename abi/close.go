package abi

import "strconv"

// CloseCode is a WebSocket close code (RFC 6455 section 7.4). The host's
// codes carry advice for the client that gets one: Reconnect says whether
// it should open a new socket, as docs/operations.md's table of close codes
// says for each. The numbers are part of the contract and never change.
type CloseCode uint16

// Close codes the host uses and documents (RFC 6455 and its registry).
const (
	CloseNormal        CloseCode = 1000
	CloseGoingAway     CloseCode = 1001
	CloseProtocolError CloseCode = 1002
	// CloseNoStatus and CloseAbnormal never appear on the wire: they are
	// what a room is told when a client's close frame had no code, and when
	// the connection ended without a close frame.
	CloseNoStatus        CloseCode = 1005
	CloseAbnormal        CloseCode = 1006
	CloseInvalidData     CloseCode = 1007 // a text message or close reason that is not UTF-8
	ClosePolicyViolation CloseCode = 1008
	CloseTooBig          CloseCode = 1009
	CloseInternalError   CloseCode = 1011 // the room crashed while handling this socket's event
	CloseServiceRestart  CloseCode = 1012 // node stopping, draining or moving the room
	CloseTryAgainLater   CloseCode = 1013 // overloaded
	// CloseSlowReader is sent to a socket whose outbound queue passed its
	// budget. It is a private-use code (4000–4999) so clients can tell it apart.
	CloseSlowReader CloseCode = 4008
)

// closeAdvice is what the host says of each of its codes: a short name
// for logs, and whether the client should reconnect. A code the client is
// told to reconnect after says nothing against the client itself (the node
// or the room had a problem, or the connection did); a code that blames the
// client's own frames would only come back on the next socket.
var closeAdvice = map[CloseCode]struct {
	name      string
	reconnect bool
}{
	CloseNormal:          {"normal", false},
	CloseGoingAway:       {"going away", true},
	CloseProtocolError:   {"protocol error", false},
	CloseNoStatus:        {"no status", false},
	CloseAbnormal:        {"abnormal", true},
	CloseInvalidData:     {"invalid data", false},
	ClosePolicyViolation: {"policy violation", false},
	CloseTooBig:          {"too big", true},
	CloseInternalError:   {"internal error", true},
	CloseServiceRestart:  {"service restart", true},
	CloseTryAgainLater:   {"try again later", true},
	CloseSlowReader:      {"slow reader", true},
}

// Reconnect reports whether a client whose socket closed with c should
// open a new one, after a pause and with backoff. A room's own codes (1000,
// and 3000–4999 but 4008) answer false: the host has no advice on them,
// the application gives its own.
func (c CloseCode) Reconnect() bool { return closeAdvice[c].reconnect }

// String is the code's number, and the name of a code of the host's
// ("1012 (service restart)"), so that a log line says both.
func (c CloseCode) String() string {
	if a, ok := closeAdvice[c]; ok {
		return strconv.Itoa(int(c)) + " (" + a.name + ")"
	}
	return strconv.Itoa(int(c))
}

// ValidGuestCloseCode reports whether a guest may close a socket with code.
// It takes an int since a guest's code comes as an i32, which must be
// checked before it is narrowed to a CloseCode.
func ValidGuestCloseCode(code int) bool {
	return code == int(CloseNormal) || (code >= 3000 && code <= 4999)
}
