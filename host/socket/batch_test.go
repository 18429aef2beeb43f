package socket

import (
	"fmt"
	"slices"
	"sync"
	"testing"

	"github.com/gobwas/ws"

	"github.com/wasmkeep/wasmkeep/abi"
	"github.com/wasmkeep/wasmkeep/internal/limits"
)

// batchRecorder is a BatchHandler that records what it was given and how.
type batchRecorder struct {
	mu      sync.Mutex
	got     []string
	batches int
}

func (h *batchRecorder) OnMessage(_ *Conn, _ int, data []byte) {
	h.mu.Lock()
	h.got = append(h.got, string(data))
	h.mu.Unlock()
}

func (h *batchRecorder) OnMessages(_ *Conn, msgs []Message) {
	h.mu.Lock()
	h.batches++
	for _, m := range msgs {
		h.got = append(h.got, string(m.Data))
	}
	h.mu.Unlock()
}

func (h *batchRecorder) OnClose(*Conn, abi.CloseCode, string) {}

// TestBatchDelivery: messages that arrive together are queued whole before
// delivery and handed to a BatchHandler in batches, in wire order, with
// both readers.
func TestBatchDelivery(t *testing.T) {
	for _, mode := range []ReadMode{ReadEpoll, ReadGoroutine} {
		t.Run(mode.String(), func(t *testing.T) {
			h := &batchRecorder{}
			s := newServer(t, Config{Reader: mode, MessageRate: limits.Off}, h)
			c := dial(t, s.url)
			const n = 300
			var b []byte
			var want []string
			for i := range n {
				m := fmt.Sprint("m", i)
				want = append(want, m)
				b = append(b, ws.MustCompileFrame(ws.MaskFrame(ws.NewTextFrame([]byte(m))))...)
			}
			c.writeRaw(b)
			eventually(t, "every message delivered", func() bool {
				h.mu.Lock()
				defer h.mu.Unlock()
				return len(h.got) == n
			})
			h.mu.Lock()
			defer h.mu.Unlock()
			if !slices.Equal(h.got, want) {
				t.Fatalf("delivered out of order: %q", h.got)
			}
			if h.batches == 0 {
				t.Fatalf("%d messages written at once were delivered one by one", n)
			}
		})
	}
}
