package socket

import (
	"encoding/binary"
	"strings"
	"unicode/utf8"

	"github.com/wasmkeep/wasmkeep/abi"
)

// Opcodes (RFC 6455 section 5.2).
const (
	opContinuation = 0x0
	opText         = 0x1
	opBinary       = 0x2
	opClose        = 0x8
	opPing         = 0x9
	opPong         = 0xa
)

// maxControlPayload is the largest payload of a control frame.
const maxControlPayload = 125

// pingFrame is the ping every socket gets every PingInterval. Shared and
// never modified.
var pingFrame = []byte{0x80 | opPing, 0}

// headerLen returns the length of an unmasked server frame header for a
// payload of n bytes.
func headerLen(n int) int {
	switch {
	case n <= 125:
		return 2
	case n <= 0xffff:
		return 4
	default:
		return 10
	}
}

// appendHeader appends a final, unmasked frame header.
func appendHeader(dst []byte, op byte, n int) []byte {
	b0 := 0x80 | op
	switch {
	case n <= 125:
		return append(dst, b0, byte(n))
	case n <= 0xffff:
		return append(dst, b0, 126, byte(n>>8), byte(n))
	default:
		dst = append(dst, b0, 127)
		return binary.BigEndian.AppendUint64(dst, uint64(n))
	}
}

// encodeFrame returns a complete server frame in one allocation.
func encodeFrame(op byte, p []byte) []byte {
	f := make([]byte, 0, headerLen(len(p))+len(p))
	f = appendHeader(f, op, len(p))
	return append(f, p...)
}

// encodeClose returns a close frame. A code that may not appear on the wire
// (see sendableCode) is sent as a close frame without a payload; the reason
// is made valid UTF-8 and cut to abi.MaxCloseReason bytes.
func encodeClose(code abi.CloseCode, reason string) []byte {
	if !sendableCode(code) {
		return []byte{0x80 | opClose, 0}
	}
	reason = trimReason(reason)
	f := make([]byte, 0, 4+len(reason))
	f = appendHeader(f, opClose, 2+len(reason))
	f = binary.BigEndian.AppendUint16(f, uint16(code))
	return append(f, reason...)
}

// trimReason makes a close reason valid UTF-8 and at most
// abi.MaxCloseReason bytes, cut at a rune boundary.
func trimReason(s string) string {
	if !utf8.ValidString(s) {
		s = strings.ToValidUTF8(s, "")
	}
	if len(s) <= abi.MaxCloseReason {
		return s
	}
	n := abi.MaxCloseReason
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n]
}

// sendableCode reports whether code may be carried by a close frame
// (RFC 6455 section 7.4 and the IANA registry: 1012–1014 are registered).
func sendableCode(code abi.CloseCode) bool {
	switch {
	case code >= 1000 && code <= 1003:
		return true
	case code >= 1007 && code <= 1014:
		return true
	case code >= 3000 && code <= 4999:
		return true
	}
	return false
}

// Prepared is a data message encoded once, to be queued on many sockets
// with [Conn.SendPrepared] without copying. It is immutable and safe to
// share between goroutines.
type Prepared struct {
	frame []byte
}

// Len returns the length of the encoded frame, which is what the message
// counts against an outbound byte budget.
func (p *Prepared) Len() int { return len(p.frame) }

// prepare validates a message and encodes it as a frame.
func prepare(kind int, data []byte) ([]byte, error) {
	if err := checkMessage(kind, data); err != nil {
		return nil, err
	}
	return encodeFrame(byte(kind), data), nil
}

// checkMessage validates a message's kind, and a text message's UTF-8.
func checkMessage(kind int, data []byte) error {
	switch kind {
	case abi.MessageText:
		if !utf8.Valid(data) {
			return ErrInvalidUTF8
		}
	case abi.MessageBinary:
	default:
		return ErrBadKind
	}
	return nil
}

// isDataFrame reports whether an encoded frame carries a data message (as
// opposed to a control frame), for the messages_out counter.
func isDataFrame(f []byte) bool {
	op := f[0] & 0x0f
	return op == opText || op == opBinary || op == opContinuation
}
