package socket

import (
	"bytes"
	"sync"
	"testing"

	"github.com/gobwas/ws"

	"github.com/wasmkeep/wasmkeep/abi"
	"github.com/wasmkeep/wasmkeep/internal/limits"
)

// keeper is a BatchHandler that keeps every message's data as given, to
// see that a message's payload is its own after later reads.
type keeper struct {
	mu   sync.Mutex
	kept [][]byte
}

func (h *keeper) OnMessage(_ *Conn, _ int, data []byte) { h.keep(data) }

func (h *keeper) OnMessages(_ *Conn, msgs []Message) {
	for _, m := range msgs {
		h.keep(m.Data)
	}
}

func (h *keeper) keep(data []byte) {
	h.mu.Lock()
	h.kept = append(h.kept, data)
	h.mu.Unlock()
}

func (h *keeper) OnClose(*Conn, abi.CloseCode, string) {}

func (h *keeper) count() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return len(h.kept)
}

// TestMessagesOfOneReadAreTheirOwn: the messages of one read share an
// allocation, but each payload stays as it arrived after later reads, and
// appending to one does not write into the next.
func TestMessagesOfOneReadAreTheirOwn(t *testing.T) {
	for _, mode := range []ReadMode{ReadEpoll, ReadGoroutine} {
		t.Run(mode.String(), func(t *testing.T) {
			h := &keeper{}
			s := newServer(t, Config{Reader: mode, MessageRate: limits.Off}, h)
			c := dial(t, s.url)
			const writes, each = 4, 100
			var want [][]byte
			for w := range writes {
				var b []byte
				for i := range each {
					m := bytes.Repeat([]byte{byte(w*each + i)}, 1+(i*13)%200)
					want = append(want, m)
					b = append(b, ws.MustCompileFrame(ws.MaskFrame(ws.NewBinaryFrame(m)))...)
				}
				c.writeRaw(b)
				eventually(t, "the write's messages", func() bool { return h.count() == (w+1)*each })
			}
			h.mu.Lock()
			defer h.mu.Unlock()
			// A message carved from a shared chunk must have no capacity
			// past its bytes: an append to it has to reallocate rather
			// than write into the next message (a message read on its own
			// may have spare capacity of its own).
			for i := range len(h.kept) - 1 {
				_ = append(h.kept[i], ^want[i+1][0])
			}
			for i, got := range h.kept {
				if !bytes.Equal(got, want[i]) {
					t.Fatalf("message %d is %x…, want %x…", i, got[:min(8, len(got))], want[i][:min(8, len(want[i]))])
				}
			}
		})
	}
}
