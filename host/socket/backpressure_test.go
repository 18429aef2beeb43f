//go:build unix

package socket

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"testing"
	"time"

	"github.com/gobwas/ws"
	"github.com/wasmkeep/wasmkeep/abi"
	"github.com/wasmkeep/wasmkeep/internal/limits"
	"github.com/wasmkeep/wasmkeep/internal/wstest"
)

// numbered returns n masked binary frames of size bytes, in one slice,
// each payload starting with its index.
func numbered(n, size int) []byte {
	var b []byte
	p := make([]byte, size)
	for i := range n {
		binary.BigEndian.PutUint32(p, uint32(i))
		b = append(b, wstest.MaskedFrame(0x80|opBinary, uint64(size), p)...)
	}
	return b
}

// writeAll writes b from a goroutine, since the server's backpressure
// may hold the write until the test reads; the error comes on the channel.
func (c *client) writeAll(b []byte) <-chan error {
	done := make(chan error, 1)
	go func() {
		_ = c.conn.SetWriteDeadline(time.Now().Add(waitTimeout))
		_, err := c.conn.Write(b)
		done <- err
	}()
	return done
}

// TestBackpressure: a client that sends far more than its outbound queue
// can hold, and does not read its answers at first, is not evicted: when
// the queue reaches its budget (frames or bytes) the socket stops being
// read, the client's writes wait, and reading resumes when the client
// reads; every answer arrives, in order.
func TestBackpressure(t *testing.T) {
	budgets := []struct {
		name string
		cfg  Config
		size int // of each message
	}{
		{"frames", Config{OutboundFrames: 16}, 512},
		{"bytes", Config{OutboundBytes: 64 << 10}, 8 << 10},
	}
	for _, mode := range []ReadMode{ReadEpoll, ReadGoroutine} {
		for _, b := range budgets {
			t.Run(mode.String()+"/"+b.name, func(t *testing.T) {
				cfg := b.cfg
				cfg.Reader = mode
				cfg.MessageRate = limits.Off
				cfg.SlowTimeout = time.Hour
				const n = 2000
				burst := numbered(n, b.size)
				rec := newRecorder(t, true)
				s := newTightServer(t, 8<<10, cfg, rec)
				c := dialTight(t, s.url, 8<<10)
				s.conn(t)
				written := c.writeAll(burst)
				eventually(t, "the socket to stop being read", func() bool {
					return s.metric(t, "wasmkeep_socket_read_pauses_total") >= 1
				})
				select {
				case err := <-written:
					t.Fatalf("the client wrote all its %d messages while its answers waited (%v)", n, err)
				default:
				}

				for i := range n {
					op, p := c.readMsg()
					if op != ws.OpBinary || len(p) != b.size || binary.BigEndian.Uint32(p) != uint32(i) {
						t.Fatalf("answer %d: %v of %d bytes, numbered %d", i, op, len(p), binary.BigEndian.Uint32(p))
					}
				}
				if err := <-written; err != nil {
					t.Fatalf("client write: %v", err)
				}
				select {
				case e := <-rec.closes:
					t.Fatalf("socket closed with %d %q", e.code, e.reason)
				default:
				}
				// The last resume comes once the queue behind the last
				// answer has drained, which the client may read first.
				var pauses float64
				eventually(t, "every pause of the reader to be resumed", func() bool {
					pauses = s.metric(t, "wasmkeep_socket_read_pauses_total")
					return s.metric(t, "wasmkeep_socket_read_resumes_total") == pauses
				})
				t.Logf("%d messages of %d bytes answered; the reader paused %v times", n, b.size, pauses)
			})
		}
	}
}

// TestOutboundPauseIsNotDeath: a socket the node has stopped reading for
// its outbound budget is not closed as dead, however many ping intervals
// pass without a frame read from it (the client answers no ping, since
// nothing of it is read). The client's buffers take its whole burst at
// once and leave little room for the answers, so the node reaches the
// pause without waiting for the client to be scheduled again.
func TestOutboundPauseIsNotDeath(t *testing.T) {
	const interval = 100 * time.Millisecond
	burst := numbered(200, 512)
	rec := newRecorder(t, true)
	cfg := Config{OutboundFrames: 8, SlowTimeout: time.Hour, PingInterval: interval, CloseTimeout: 100 * time.Millisecond}
	s := newBufferedServer(t, 1<<20, 4<<10, cfg, rec)
	c := dialBuffered(t, s.url, 4<<10, 1<<20)
	s.conn(t)
	c.writeAll(burst)
	eventually(t, "the socket to stop being read", func() bool {
		return s.metric(t, "wasmkeep_socket_read_pauses_total") >= 1
	})
	pings := s.hub.m.pingsSent.Get()
	eventually(t, "six ping intervals", func() bool { return s.hub.m.pingsSent.Get() >= pings+6 })
	if got := s.hub.m.evictDead.Get(); got != 0 {
		t.Fatal("a socket the node does not read was closed as dead")
	}
	select {
	case e := <-rec.closes:
		t.Fatalf("closed with %d %q", e.code, e.reason)
	default:
	}
}

// TestSlowTimeout: a client that does not read while its queue is at the
// budget is evicted with 4008 once it has taken nothing for SlowTimeout,
// not sooner; with both readers.
func TestSlowTimeout(t *testing.T) {
	for _, mode := range []ReadMode{ReadEpoll, ReadGoroutine} {
		t.Run(mode.String(), func(t *testing.T) {
			const slow = 400 * time.Millisecond
			rec := newRecorder(t, true)
			s := newTightServer(t, 8<<10, Config{Reader: mode, OutboundBytes: 64 << 10, SlowTimeout: slow, MessageRate: limits.Off}, rec)
			c := dialTight(t, s.url, 8<<10) // sends, never reads
			s.conn(t)
			written := c.writeAll(numbered(2000, 8<<10))
			eventually(t, "the socket to stop being read", func() bool {
				return s.metric(t, "wasmkeep_socket_read_pauses_total") >= 1
			})
			paused := time.Now()
			e := rec.nextClose(t)
			waited := time.Since(paused)
			if e.code != abi.CloseSlowReader {
				t.Fatalf("closed with %d %q, want %d", e.code, e.reason, abi.CloseSlowReader)
			}
			// The stall is timed from when the queue reached its budget,
			// just before the reader stopped, or from the last bytes the
			// kernel took after that, and looked at every quarter of it.
			if limit := 2*slow + 500*time.Millisecond; waited < slow*3/4 || waited > limit {
				t.Errorf("evicted %v after the reader stopped, want %v to %v", waited, slow, limit)
			}
			if got := s.metric(t, `wasmkeep_socket_evictions_total{reason="slow_reader"}`); got != 1 {
				t.Errorf("slow_reader evictions %v", got)
			}
			if err := <-written; err == nil {
				t.Error("the client wrote everything to a socket that stopped reading it")
			}
			t.Logf("evicted %v after the reader stopped (slow timeout %v)", waited, slow)
		})
	}
}

// TestFrameBudgetStall: a queue at its frame budget, sent to from elsewhere
// while the client takes nothing, is not refused anything, and the client
// is evicted with 4008 once it has taken nothing for SlowTimeout.
func TestFrameBudgetStall(t *testing.T) {
	const slow = 200 * time.Millisecond
	rec := newRecorder(t, false)
	s := newTightServer(t, 4<<10, Config{OutboundFrames: 4, SlowTimeout: slow, WriteTimeout: time.Minute}, rec)
	dialTight(t, s.url, 4<<10) // never reads
	sc := s.conn(t)
	// 64 KiB, against kernel buffers of about 16 KiB: most frames stay
	// queued, far past the budget.
	frame := make([]byte, 1<<10)
	for i := range 64 {
		if err := sc.Send(abi.MessageBinary, frame); err != nil {
			t.Fatalf("send %d: %v", i, err)
		}
	}
	full := time.Now()
	if n := queued(sc); n < 4 {
		t.Fatalf("%d frames queued after 64 KiB sent to a client that does not read", n)
	}
	e := rec.nextClose(t)
	if waited := time.Since(full); e.code != abi.CloseSlowReader || waited < slow*3/4 {
		t.Fatalf("closed with %d %q after %v, want %d after %v", e.code, e.reason, waited, abi.CloseSlowReader, slow)
	}
	if got := s.metric(t, `wasmkeep_socket_evictions_total{reason="slow_reader"}`); got != 1 {
		t.Errorf("slow_reader evictions %v", got)
	}
}

// TestSlowTimeoutSparesATrickle: a client that takes a little at a time is
// slow, not stuck: one frame whose write takes several SlowTimeouts, at the
// budget all along, is written whole, since bytes leave within each
// timeout.
func TestSlowTimeoutSparesATrickle(t *testing.T) {
	const budget, slow = 512 << 10, time.Second
	rec := newRecorder(t, false)
	s := newTightServer(t, 4<<10, Config{OutboundBytes: budget, SlowTimeout: slow}, rec)
	c := dialTight(t, s.url, 4<<10)
	sc := s.conn(t)
	payload := make([]byte, budget-headerLen(budget))
	for i := range payload {
		payload[i] = byte(i)
	}
	start := time.Now()
	if err := sc.Send(abi.MessageBinary, payload); err != nil {
		t.Fatal(err)
	}
	// The client reads 2 KiB every 10 ms: about 200 KB/s.
	h, err := ws.ReadHeader(c.r)
	if err != nil || h.OpCode != ws.OpBinary || h.Length != int64(len(payload)) {
		t.Fatalf("header %+v, %v", h, err)
	}
	got := make([]byte, len(payload))
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for off := 0; off < len(got); {
		<-tick.C
		k, err := io.ReadFull(c.r, got[off:min(off+2<<10, len(got))])
		if err != nil {
			t.Fatalf("after %d bytes: %v", off, err)
		}
		off += k
	}
	took := time.Since(start)
	if !bytes.Equal(got, payload) {
		t.Fatal("the frame arrived damaged")
	}
	if took < 2*slow {
		t.Fatalf("the frame was read in %v: not long enough to test a %v timeout", took, slow)
	}
	select {
	case e := <-rec.closes:
		t.Fatalf("closed with %d %q while the client read", e.code, e.reason)
	default:
	}
	if err := sc.Send(abi.MessageText, []byte("still open")); err != nil {
		t.Fatal(err)
	}
	if _, p := c.readMsg(); string(p) != "still open" {
		t.Fatalf("got %q", p)
	}
	t.Logf("a %d-byte frame read in %v (slow timeout %v)", len(payload), took, slow)
}

// TestQueueLimit: what a socket is sent from elsewhere is not slowed by its
// reader stopping, so a client that does not read is evicted by the send
// that would take its queue past the hard cap (QueueLimitFactor budgets),
// at once and not before.
func TestQueueLimit(t *testing.T) {
	const budget = 64 << 10
	rec := newRecorder(t, false)
	s := newTightServer(t, 4<<10, Config{OutboundBytes: budget, SlowTimeout: time.Hour, WriteTimeout: time.Hour}, rec)
	dialTight(t, s.url, 4<<10) // never reads
	sc := s.conn(t)
	frame := make([]byte, 4<<10)
	held := 0 // bytes queued before the last send
	var err error
	for sent := 0; err == nil; sent++ {
		if sent == 1000 {
			t.Fatalf("%d sends of %d bytes to a client that does not read, no eviction", sent, len(frame))
		}
		sc.mu.Lock()
		held = sc.outBytes
		sc.mu.Unlock()
		err = sc.Send(abi.MessageBinary, frame)
	}
	if !errors.Is(err, ErrSlowReader) {
		t.Fatalf("send: %v, want ErrSlowReader", err)
	}
	limit := QueueLimitFactor * budget
	if held <= limit-budget || held > limit {
		t.Errorf("evicted with %d bytes queued, want within a budget (%d) of the hard cap (%d)", held, budget, limit)
	}
	if e := rec.nextClose(t); e.code != abi.CloseSlowReader {
		t.Errorf("closed with %d %q", e.code, e.reason)
	}
	if got := s.metric(t, `wasmkeep_socket_evictions_total{reason="queue_limit"}`); got != 1 {
		t.Errorf("queue_limit evictions %v", got)
	}
	t.Logf("evicted with %d bytes queued (budget %d, hard cap %d)", held, budget, limit)
}

// TestInboundQueueFollowsOutboundBudget: the messages read and not yet
// delivered, which are also the largest batch, are at most a quarter of
// the outbound budgets.
func TestInboundQueueFollowsOutboundBudget(t *testing.T) {
	for _, tc := range []struct {
		cfg            Config
		messages, size int
	}{
		{Config{OutboundFrames: 16}, 4, DefaultInboundBytes},
		{Config{OutboundBytes: 64 << 10}, DefaultInboundMessages, 16 << 10},
		{Config{}, DefaultInboundMessages, DefaultInboundBytes},
	} {
		t.Run(fmt.Sprint(tc.cfg.OutboundFrames, "frames-", tc.cfg.OutboundBytes, "bytes"), func(t *testing.T) {
			got := NewHub(tc.cfg, nil)
			defer got.Close()
			if cfg := got.Config(); cfg.InboundMessages != tc.messages || cfg.InboundBytes != tc.size {
				t.Errorf("inbound queue of %d messages and %d bytes, want %d and %d", cfg.InboundMessages, cfg.InboundBytes, tc.messages, tc.size)
			}
		})
	}
}

// TestCorkYieldsAtBudget: a corked queue is written once it reaches its
// budget, without waiting for Uncork (its socket's reader waits for it to
// drain); below the budget it waits.
func TestCorkYieldsAtBudget(t *testing.T) {
	const budget = 8
	rec := newRecorder(t, false)
	s := newServer(t, Config{OutboundFrames: budget}, rec)
	c := dial(t, s.url)
	sc := s.conn(t)
	sc.Cork()
	for i := range budget {
		if err := sc.Send(abi.MessageText, []byte(fmt.Sprint("m", i))); err != nil {
			t.Fatal(err)
		}
		if i == budget-2 {
			if n := queued(sc); n != budget-1 {
				t.Fatalf("%d frames queued below the budget while corked, want %d", n, budget-1)
			}
		}
	}
	for i := range budget {
		if _, p := c.readMsg(); string(p) != fmt.Sprint("m", i) {
			t.Fatalf("message %d: %q", i, p)
		}
	}
	sc.Uncork()
}
