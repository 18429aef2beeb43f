package socket

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"runtime"
	"sync"
	"testing"

	"github.com/gobwas/ws"

	"github.com/wasmkeep/wasmkeep/abi"
	"github.com/wasmkeep/wasmkeep/internal/limits"
)

// chunkMessage is the i-th message of a sender in TestSendChunksKeep...:
// its size crosses minOutChunk often and maxChunkedFrame now and then, and its bytes say which
// message it is, so that a frame overwritten by a later one shows.
func chunkMessage(sender, i int) []byte {
	// Up to a chunked frame of 1,004 bytes, past a small chunk; hashed so
	// that a small message is as often followed by a large one as not.
	size := 1 + int(uint32(i)*2654435761>>16)%1000
	if i%50 == 0 {
		size = maxChunkedFrame + i%200 // encoded on its own, not in a chunk
	}
	b := make([]byte, size)
	for j := range b {
		b[j] = byte(sender*31 + i + j)
	}
	return b
}

// TestSendChunksKeepMessagesWhole: messages that Send encodes into a
// socket's chunk arrive whole and in order, through corked bursts and
// uncorked sends, mixed with large and prepared messages, while several
// sockets take chunks from the free lists and give them back, with both
// readers.
func TestSendChunksKeepMessagesWhole(t *testing.T) {
	for _, mode := range []ReadMode{ReadEpoll, ReadGoroutine} {
		t.Run(mode.String(), func(t *testing.T) {
			s := newServer(t, Config{Reader: mode, OutboundFrames: 1 << 16, OutboundBytes: 8 << 20}, newRecorder(t, false))
			const sockets, n = 4, 2000
			prepared, err := s.hub.Prepare(abi.MessageText, []byte("prepared"))
			if err != nil {
				t.Fatal(err)
			}
			var wg sync.WaitGroup
			errs := make(chan error, 2*sockets)
			for k := range sockets {
				c := dial(t, s.url)
				sc := s.conn(t)
				read := make(chan int, n) // how many messages the client has read
				wg.Add(2)
				go func() { // the room's side
					defer wg.Done()
					rng := rand.New(rand.NewPCG(uint64(k), 1))
					for i := 0; i < n; {
						burst := 1 + rng.IntN(40)
						if rng.IntN(4) == 0 {
							burst = 1 // a burst that may fit a small chunk
						}
						corked := rng.IntN(3) > 0
						if corked {
							sc.Cork()
						}
						for ; burst > 0 && i < n; burst-- {
							if err := sc.Send(abi.MessageBinary, chunkMessage(k, i)); err != nil {
								errs <- fmt.Errorf("socket %d: send %d: %w", k, i, err)
								return
							}
							if i%97 == 0 {
								if err := sc.SendPrepared(prepared); err != nil {
									errs <- err
									return
								}
							}
							i++
						}
						if corked {
							sc.Uncork()
						}
						if rng.IntN(4) == 0 {
							// Let the writer empty the queue and give its
							// chunk back, so that the next burst takes a
							// fresh one, small or large.
							for got := 0; got < i; {
								var ok bool
								if got, ok = <-read; !ok {
									return // the client failed
								}
							}
							waitWriterDone(sc)
						}
					}
				}()
				go func() { // the client's
					defer wg.Done()
					defer close(read)
					for i := 0; i < n; i++ {
						h, p, err := c.readFrame()
						if err != nil {
							errs <- fmt.Errorf("socket %d: read %d: %w", k, i, err)
							return
						}
						if h.OpCode == ws.OpText {
							if string(p) != "prepared" {
								errs <- fmt.Errorf("socket %d: prepared message %q", k, p)
								return
							}
							i-- // not one of the sent messages
							continue
						}
						if want := chunkMessage(k, i); h.OpCode != ws.OpBinary || !h.Fin || !bytes.Equal(p, want) {
							errs <- fmt.Errorf("socket %d: message %d: %v fin=%v %d bytes, want %d bytes %x…", k, i, h.OpCode, h.Fin, len(p), len(want), want[:min(8, len(want))])
							return
						}
						read <- i + 1
					}
				}()
			}
			wg.Wait()
			close(errs)
			for err := range errs {
				t.Error(err)
			}
		})
	}
}

// waitWriterDone waits until c's writer has exited, which it does once it
// has written the queue and given back its chunk (or the socket is gone).
func waitWriterDone(c *Conn) {
	for {
		c.mu.Lock()
		writing := c.writing
		c.mu.Unlock()
		if !writing {
			return
		}
		runtime.Gosched()
	}
}

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
