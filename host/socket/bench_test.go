package socket

import (
	"bufio"
	"fmt"
	"testing"
	"time"

	"github.com/gobwas/ws"

	"github.com/wasmkeep/wasmkeep/abi"
	"github.com/wasmkeep/wasmkeep/internal/limits"
)

// echoHandler echoes every message.
type echoHandler struct{}

func (echoHandler) OnMessage(c *Conn, kind int, data []byte) { _ = c.Send(kind, data) }
func (echoHandler) OnClose(*Conn, abi.CloseCode, string)     {}

// BenchmarkEcho64 measures round trips of 64-byte binary messages on one
// socket: the client waits for each echo before sending the next.
func BenchmarkEcho64(b *testing.B) { forEachReader(b, echo64) }

func echo64(b *testing.B, mode ReadMode) {
	c := benchClient(b, mode)
	frame := ws.MustCompileFrame(ws.MaskFrame(ws.NewBinaryFrame(make([]byte, 64))))
	b.SetBytes(64)
	b.ResetTimer()
	start := time.Now()
	for range b.N {
		c.writeRaw(frame)
		c.readMsg()
	}
	b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "msgs/s")
}

// BenchmarkEcho64Pipelined measures the throughput of 64-byte echoes on one
// socket with up to 128 messages in flight, written 32 per write.
func BenchmarkEcho64Pipelined(b *testing.B) { forEachReader(b, echo64Pipelined) }

func echo64Pipelined(b *testing.B, mode ReadMode) {
	const window, perWrite = 128, 32
	c := benchClient(b, mode)
	frame := ws.MustCompileFrame(ws.MaskFrame(ws.NewBinaryFrame(make([]byte, 64))))
	batch := make([]byte, 0, perWrite*len(frame))
	for range perWrite {
		batch = append(batch, frame...)
	}
	credits := make(chan struct{}, window)
	for range window {
		credits <- struct{}{}
	}
	b.SetBytes(64)
	b.ResetTimer()
	start := time.Now()
	done := make(chan error, 1)
	go func() {
		for i := 0; i < b.N; i++ {
			h, p, err := c.readFrame()
			if err == nil && h.OpCode == ws.OpClose {
				code, reason := ws.ParseCloseFrameData(p)
				err = fmt.Errorf("closed by the server: %d %q", code, reason)
			}
			if err == nil && h.OpCode == ws.OpPing {
				i-- // the hub's keepalive
				continue
			}
			if err == nil && h.OpCode != ws.OpBinary {
				err = fmt.Errorf("opcode %v", h.OpCode)
			}
			if err != nil {
				done <- fmt.Errorf("echo %d of %d: %w", i, b.N, err)
				return
			}
			credits <- struct{}{}
		}
		done <- nil
	}()
	for sent := 0; sent < b.N; {
		k := min(perWrite, b.N-sent)
		for range k {
			select {
			case <-credits:
			case err := <-done:
				b.Fatal(err)
			}
		}
		c.writeRaw(batch[:k*len(frame)])
		sent += k
	}
	if err := <-done; err != nil {
		b.Fatal(err)
	}
	b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "msgs/s")
}

// forEachReader runs a benchmark once per read mode.
func forEachReader(b *testing.B, bench func(*testing.B, ReadMode)) {
	for _, mode := range []ReadMode{ReadEpoll, ReadGoroutine} {
		b.Run(mode.String(), func(b *testing.B) { bench(b, mode) })
	}
}

func benchClient(b *testing.B, mode ReadMode) *client {
	b.Helper()
	// The message rate is off: the default bucket (1000 a second) would
	// measure itself.
	s := newServer(b, Config{MessageRate: limits.Off, Reader: mode}, echoHandler{})
	c := dial(b, s.url)
	c.r = bufio.NewReaderSize(c.r, 64<<10) // the client's reads are not what we measure
	return c
}
