// Command wsclient is the smallest WebSocket client the getting-started
// guide (docs/getting-started.md) needs: it opens a socket to a room, sends
// each message given on the command line as a text message, prints every
// text message the room sends back, one a line, and closes the socket
// (code 1000) once it has printed as many as it sent, or -n.
//
//	go run ./docs/examples/wsclient ws://127.0.0.1:8080/actor/hits/a hello
//
// It uses the standard library only, so that trying a room needs nothing
// but Go, and is deliberately plain: no TLS (ws:// only), no extensions, no
// fragmented sends. A refused upgrade prints the node's status, its
// Retry-After if any, and its message; a socket the node closes prints the
// close code. Either exits with code 1.
package main

import (
	"bufio"
	"crypto/rand"
	"crypto/sha1"
	"encoding/base64"
	"encoding/binary"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"strings"
	"time"
)

// acceptGUID is RFC 6455's constant for Sec-WebSocket-Accept.
const acceptGUID = "258EAFA5-E914-47DA-95CA-C5AB0DC85B11"

// Opcodes of RFC 6455.
const (
	opContinuation = 0x0
	opText         = 0x1
	opBinary       = 0x2
	opClose        = 0x8
	opPing         = 0x9
	opPong         = 0xA
)

func main() {
	n := flag.Int("n", -1, "text messages to print before closing (default: as many as were sent)")
	timeout := flag.Duration("timeout", 10*time.Second, "give up after this long")
	flag.Usage = func() {
		fmt.Fprintln(os.Stderr, "usage: wsclient [-n N] [-timeout D] ws://HOST/actor/CLASS/NAME [MESSAGE...]")
		flag.PrintDefaults()
	}
	flag.Parse()
	if flag.NArg() < 1 {
		flag.Usage()
		os.Exit(2)
	}
	want := *n
	if want < 0 {
		want = flag.NArg() - 1
	}
	if err := run(flag.Arg(0), flag.Args()[1:], want, *timeout); err != nil {
		fmt.Fprintln(os.Stderr, "wsclient:", err)
		os.Exit(1)
	}
}

// run opens the socket, sends msgs, prints want text messages, then closes.
func run(rawURL string, msgs []string, want int, timeout time.Duration) error {
	u, err := url.Parse(rawURL)
	if err != nil {
		return err
	}
	if u.Scheme != "ws" {
		return fmt.Errorf("%s: only ws:// URLs are supported", rawURL)
	}
	host := u.Host
	if u.Port() == "" {
		host = net.JoinHostPort(u.Hostname(), "80")
	}
	conn, err := net.DialTimeout("tcp", host, timeout)
	if err != nil {
		return err
	}
	defer conn.Close()
	// One deadline for the whole exchange: the client never hangs.
	if err := conn.SetDeadline(time.Now().Add(timeout)); err != nil {
		return err
	}
	r := bufio.NewReader(conn)
	if err := handshake(conn, r, u); err != nil {
		return err
	}
	for _, m := range msgs {
		if err := writeFrame(conn, opText, []byte(m)); err != nil {
			return err
		}
	}
	for got := 0; got < want; {
		op, payload, err := readMessage(conn, r)
		if err != nil {
			return err
		}
		switch op {
		case opText:
			fmt.Println(string(payload))
			got++
		case opBinary:
			fmt.Printf("(%d bytes of binary)\n", len(payload))
		case opClose:
			return closeError(payload)
		}
	}
	// A clean close: ours, then the node's answer.
	if err := writeFrame(conn, opClose, binary.BigEndian.AppendUint16(nil, 1000)); err != nil {
		return err
	}
	for {
		op, _, err := readMessage(conn, r)
		if err != nil || op == opClose {
			return nil
		}
	}
}

// handshake sends the upgrade request and checks the answer.
func handshake(conn net.Conn, r *bufio.Reader, u *url.URL) error {
	var nonce [16]byte
	if _, err := rand.Read(nonce[:]); err != nil {
		return err
	}
	key := base64.StdEncoding.EncodeToString(nonce[:])
	req := "GET " + u.RequestURI() + " HTTP/1.1\r\n" +
		"Host: " + u.Host + "\r\n" +
		"Upgrade: websocket\r\nConnection: Upgrade\r\n" +
		"Sec-WebSocket-Key: " + key + "\r\nSec-WebSocket-Version: 13\r\n\r\n"
	if _, err := io.WriteString(conn, req); err != nil {
		return err
	}
	resp, err := http.ReadResponse(r, &http.Request{Method: http.MethodGet})
	if err != nil {
		return err
	}
	if resp.StatusCode != http.StatusSwitchingProtocols {
		body, _ := io.ReadAll(io.LimitReader(resp.Body, 1024))
		msg := fmt.Sprintf("upgrade refused: HTTP %d", resp.StatusCode)
		if ra := resp.Header.Get("Retry-After"); ra != "" {
			msg += " (Retry-After: " + ra + ")"
		}
		return errors.New(msg + ": " + strings.TrimSpace(string(body)))
	}
	sum := sha1.Sum([]byte(key + acceptGUID))
	if resp.Header.Get("Sec-WebSocket-Accept") != base64.StdEncoding.EncodeToString(sum[:]) {
		return errors.New("the server's Sec-WebSocket-Accept does not match")
	}
	return nil
}

// writeFrame writes one final, masked frame (clients must mask).
func writeFrame(w io.Writer, op byte, payload []byte) error {
	hdr := []byte{0x80 | op}
	switch n := len(payload); {
	case n < 126:
		hdr = append(hdr, 0x80|byte(n))
	case n <= 0xFFFF:
		hdr = binary.BigEndian.AppendUint16(append(hdr, 0x80|126), uint16(n))
	default:
		hdr = binary.BigEndian.AppendUint64(append(hdr, 0x80|127), uint64(n))
	}
	var mask [4]byte
	if _, err := rand.Read(mask[:]); err != nil {
		return err
	}
	hdr = append(hdr, mask[:]...)
	masked := make([]byte, len(payload))
	for i, b := range payload {
		masked[i] = b ^ mask[i%4]
	}
	_, err := w.Write(append(hdr, masked...))
	return err
}

// readMessage returns the next whole message or close frame, answering
// pings on the way.
func readMessage(w io.Writer, r *bufio.Reader) (byte, []byte, error) {
	var msgOp byte
	var msg []byte
	for {
		fin, op, payload, err := readFrame(r)
		if err != nil {
			return 0, nil, err
		}
		switch op {
		case opPing:
			if err := writeFrame(w, opPong, payload); err != nil {
				return 0, nil, err
			}
			continue
		case opPong:
			continue
		case opClose:
			return opClose, payload, nil
		case opContinuation:
			msg = append(msg, payload...)
		default:
			msgOp, msg = op, payload
		}
		if fin {
			return msgOp, msg, nil
		}
	}
}

// readFrame reads one frame from the server (unmasked).
func readFrame(r *bufio.Reader) (fin bool, op byte, payload []byte, err error) {
	var h [2]byte
	if _, err = io.ReadFull(r, h[:]); err != nil {
		return
	}
	fin, op = h[0]&0x80 != 0, h[0]&0x0F
	n := uint64(h[1] & 0x7F)
	switch n {
	case 126:
		var b [2]byte
		if _, err = io.ReadFull(r, b[:]); err != nil {
			return
		}
		n = uint64(binary.BigEndian.Uint16(b[:]))
	case 127:
		var b [8]byte
		if _, err = io.ReadFull(r, b[:]); err != nil {
			return
		}
		n = binary.BigEndian.Uint64(b[:])
	}
	if n > 64<<20 {
		return false, 0, nil, fmt.Errorf("a frame of %d bytes: too large for this client", n)
	}
	payload = make([]byte, n)
	_, err = io.ReadFull(r, payload)
	return
}

// closeError describes a close frame from the node.
func closeError(payload []byte) error {
	if len(payload) < 2 {
		return errors.New("the node closed the socket")
	}
	return fmt.Errorf("the node closed the socket: %d %s", binary.BigEndian.Uint16(payload), payload[2:])
}
