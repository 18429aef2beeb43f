package socket

import (
	"io"
	"net"
	"sync"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/wasmkeep/wasmkeep/abi"
	"github.com/wasmkeep/wasmkeep/internal/wstest"
)

// fuzzHandler checks what reaches a Handler from arbitrary input.
type fuzzHandler struct {
	t      *testing.T
	max    int
	mu     sync.Mutex
	closes int
	done   chan struct{}
}

func (h *fuzzHandler) OnMessage(c *Conn, kind int, data []byte) {
	if kind != abi.MessageText && kind != abi.MessageBinary {
		h.t.Errorf("kind %d", kind)
	}
	if kind == abi.MessageText && !utf8.Valid(data) {
		h.t.Errorf("invalid UTF-8 text delivered")
	}
	if len(data) > h.max {
		h.t.Errorf("message of %d bytes over the limit %d", len(data), h.max)
	}
}

func (h *fuzzHandler) OnClose(c *Conn, code abi.CloseCode, reason string) {
	h.mu.Lock()
	h.closes++
	n := h.closes
	h.mu.Unlock()
	if n != 1 {
		h.t.Errorf("OnClose %d times", n)
	}
	if !utf8.ValidString(reason) {
		h.t.Errorf("close reason not UTF-8")
	}
	close(h.done)
}

// FuzzReader feeds arbitrary client bytes to a socket: it must never panic,
// deliver only valid messages within the limit, and report exactly one close.
func FuzzReader(f *testing.F) {
	seeds := [][]byte{
		wstest.MaskedFrame(0x80|opText, 5, []byte("hello")),
		append(wstest.MaskedFrame(opText, 3, []byte("hel")), wstest.MaskedFrame(0x80|opContinuation, 2, []byte("lo"))...),
		append(wstest.MaskedFrame(opBinary, 1, []byte{1}), append(wstest.MaskedFrame(0x80|opPing, 2, []byte("hi")), wstest.MaskedFrame(0x80|opContinuation, 1, []byte{2})...)...),
		wstest.MaskedFrame(0x80|opClose, 4, closeBody(1000, "ok")),
		wstest.MaskedFrame(0x80|opBinary, 300, make([]byte, 300)),
		wstest.MaskedFrame(0x80|opBinary, 1<<30, nil)[:14],
		{0x81, 0x02, 'h', 'i'},
		wstest.MaskedFrame(0x80|opText, 2, []byte{0xc3, 0x28}),
		wstest.MaskedFrame(0x80|opPong, 0, nil),
	}
	for _, s := range seeds {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, in []byte) {
		const maxMsg = 256
		hub := NewHub(Config{MaxMessage: maxMsg, CloseTimeout: 50 * time.Millisecond, PingInterval: time.Hour}, nil)
		defer hub.Close()
		server, client := net.Pipe()
		defer client.Close()
		hub.count.Add(1)
		c := hub.register(server, "", nil)
		h := &fuzzHandler{t: t, max: maxMsg, done: make(chan struct{})}
		c.Start(h)
		go io.Copy(io.Discard, client) // what the server writes
		client.SetWriteDeadline(time.Now().Add(time.Second))
		client.Write(in)
		client.Close()
		select {
		case <-h.done:
		case <-time.After(5 * time.Second):
			t.Fatal("no OnClose")
		}
		eventually(t, "socket unregistered", func() bool { return hub.Count() == 0 })
	})
}
