// Package wstest is a small WebSocket client for tests: a real client over
// real TCP (gobwas/ws's client side), with the reads and close checks that
// end-to-end tests repeat.
package wstest

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/gobwas/ws"
	"github.com/gobwas/ws/wsutil"

	"github.com/wasmkeep/wasmkeep/abi"
)

// Timeout bounds every read a test waits on.
const Timeout = 20 * time.Second

// Client is one client-side WebSocket.
type Client struct {
	tb   testing.TB
	conn net.Conn
	rw   io.ReadWriter // reads through the dialer's buffer, which may hold early frames
}

// CloseError is a close frame the server sent.
type CloseError struct {
	Code   abi.CloseCode
	Reason string
}

func (e *CloseError) Error() string { return fmt.Sprintf("closed by server: %d %q", e.Code, e.Reason) }

// Dial opens a WebSocket to url (http:// or ws://), failing tb on error.
func Dial(tb testing.TB, url string) *Client {
	tb.Helper()
	return DialHeader(tb, url, nil)
}

// DialHeader is Dial with extra handshake headers, such as a browser's
// Origin.
func DialHeader(tb testing.TB, url string, header http.Header) *Client {
	tb.Helper()
	c, err := DialErr(url, header)
	if err != nil {
		tb.Fatalf("dial %s: %v", url, err)
	}
	c.tb = tb
	tb.Cleanup(func() { c.conn.Close() })
	return c
}

// DialErr opens a WebSocket and returns the handshake error, with the HTTP
// status for a refused upgrade.
func DialErr(url string, header http.Header) (*Client, error) {
	return DialWith(url, header, nil)
}

// DialWith is DialErr through a given dialer (nil: the default), for
// tests that open more sockets than one local address has ports.
func DialWith(url string, header http.Header, nd *net.Dialer) (*Client, error) {
	url = strings.Replace(strings.Replace(url, "http://", "ws://", 1), "https://", "wss://", 1)
	d := ws.Dialer{Timeout: Timeout}
	if nd != nil {
		nd.Timeout = Timeout
		d.NetDial = nd.DialContext
	}
	if header != nil {
		d.Header = ws.HandshakeHeaderHTTP(header)
	}
	conn, br, _, err := d.Dial(context.Background(), url)
	if err != nil {
		return nil, err
	}
	c := &Client{conn: conn, rw: conn}
	if br != nil {
		// Frames the server sent right behind its handshake are in br.
		c.rw = struct {
			io.Reader
			io.Writer
		}{io.MultiReader(br, conn), conn}
	}
	return c, nil
}

// Send sends one text message.
func (c *Client) Send(text string) {
	c.tb.Helper()
	if err := wsutil.WriteClientText(c.conn, []byte(text)); err != nil {
		c.tb.Fatalf("send: %v", err)
	}
}

// SendErr sends one text message and returns the error; for goroutines
// that must not call t.Fatal.
func (c *Client) SendErr(text string) error {
	return wsutil.WriteClientText(c.conn, []byte(text))
}

// SendBinary sends one binary message.
func (c *Client) SendBinary(data []byte) {
	c.tb.Helper()
	if err := wsutil.WriteClientBinary(c.conn, data); err != nil {
		c.tb.Fatalf("send: %v", err)
	}
}

// Read waits for the next message. A close from the server is a
// *CloseError.
func (c *Client) Read() (op ws.OpCode, data []byte, err error) {
	_ = c.conn.SetReadDeadline(time.Now().Add(Timeout))
	for {
		msgs, err := wsutil.ReadServerMessage(c.rw, nil)
		if err != nil {
			var closed wsutil.ClosedError
			if errors.As(err, &closed) {
				return 0, nil, &CloseError{Code: abi.CloseCode(closed.Code), Reason: closed.Reason}
			}
			return 0, nil, err
		}
		for _, m := range msgs {
			if m.OpCode == ws.OpText || m.OpCode == ws.OpBinary {
				return m.OpCode, m.Payload, nil
			}
			switch m.OpCode {
			case ws.OpPing:
				_ = wsutil.WriteClientMessage(c.conn, ws.OpPong, m.Payload)
			case ws.OpClose:
				code, reason := ws.ParseCloseFrameData(m.Payload)
				_ = wsutil.WriteClientMessage(c.conn, ws.OpClose, m.Payload)
				return 0, nil, &CloseError{Code: abi.CloseCode(code), Reason: reason}
			}
		}
	}
}

// ReadText waits for the next message and fails unless it is text.
func (c *Client) ReadText() string {
	c.tb.Helper()
	op, data, err := c.Read()
	if err != nil {
		c.tb.Fatalf("read: %v", err)
	}
	if op != ws.OpText {
		c.tb.Fatalf("read: got opcode %v, want text", op)
	}
	return string(data)
}

// ExpectClose waits for the server's close frame and checks its code.
func (c *Client) ExpectClose(code abi.CloseCode) *CloseError {
	c.tb.Helper()
	for {
		_, data, err := c.Read()
		var ce *CloseError
		if errors.As(err, &ce) {
			if ce.Code != code {
				c.tb.Fatalf("closed with %d %q, want %d", ce.Code, ce.Reason, code)
			}
			return ce
		}
		if err != nil {
			c.tb.Fatalf("waiting for close %d: %v", code, err)
		}
		_ = data // messages before the close are skipped
	}
}

// Close sends a close frame with code and closes the connection.
func (c *Client) Close(code abi.CloseCode) {
	_ = wsutil.WriteClientMessage(c.conn, ws.OpClose, ws.NewCloseFrameBody(ws.StatusCode(code), ""))
	_ = c.conn.Close()
}

// Conn is the underlying connection, for tests that craft frames.
func (c *Client) Conn() net.Conn { return c.conn }

// MaskedFrame builds a client frame by hand, for tests of malformed input:
// b0 is FIN, RSV and opcode; the length field says length, whatever the
// payload's size (it may lie).
func MaskedFrame(b0 byte, length uint64, payload []byte) []byte {
	b := []byte{b0}
	switch {
	case length <= 125:
		b = append(b, 0x80|byte(length))
	case length <= 0xffff:
		b = append(b, 0x80|126)
		b = binary.BigEndian.AppendUint16(b, uint16(length))
	default:
		b = append(b, 0x80|127)
		b = binary.BigEndian.AppendUint64(b, length)
	}
	mask := [4]byte{1, 2, 3, 4}
	b = append(b, mask[:]...)
	p := append([]byte(nil), payload...)
	ws.Cipher(p, mask, 0)
	return append(b, p...)
}
