// Package loadgen is the WebSocket load generator behind `wasmkeep bench`,
// and the plain gobwas/ws servers it compares the node against; RunHTTP
// (http.go) is its load of HTTP requests, `wasmkeep bench --http`.
//
// A run opens Config.Sockets sockets spread round-robin over Config.Rooms
// rooms (<Target>/<Prefix><i>), then sends messages for Config.Warmup and
// Config.Duration and counts only what is sent and received during
// Duration. Each message carries the run's id, its stream, a sequence
// number and its send time (see payload.go), so that the receiver measures
// latency (send to receive, on one monotonic clock: the load generator
// sends and receives) and detects loss and reordering per stream.
//
//   - Echo: every socket is a stream; the server is expected to send every
//     message back to its sender, in order.
//   - Broadcast: the first socket of each room is the room's sender; the
//     server is expected to send every message to every socket of the room,
//     the sender included (as the chat example does), in order.
//
// A stream has at most Config.Inflight messages in flight: sent and not
// yet received by every socket that should receive it. With Config.Rate off
// (the default) senders send whenever their window allows (a closed loop: the figure is
// the throughput); with a rate they are paced to Rate messages a second in
// total, and wait for their window when it is full.
//
// A run is bounded: connecting by DialTimeout per socket, sending by
// Warmup+Duration, waiting for what is still in flight by Drain, closing by
// a second. What has not arrived by then is lost.
package loadgen

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"net"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/gobwas/ws"

	"github.com/wasmkeep/wasmkeep/internal/limits"
)

// Mode is what the server is expected to do with a message.
type Mode string

// The modes.
const (
	Echo      Mode = "echo"      // back to its sender
	Broadcast Mode = "broadcast" // to every socket of the sender's room
)

// Config describes a run. A zero field means its Default* constant;
// limits.Off turns off Rate, Warmup and Drain (internal/limits has the
// convention). Prefix and TargetPID have no default: they may be empty.
type Config struct {
	// Target is ws://host:port/actor/<class>: the rooms are
	// Target/<Prefix><i> (DefaultTarget).
	Target string
	// Prefix begins the rooms' names.
	Prefix string

	Sockets int  // sockets to open (DefaultSockets)
	Rooms   int  // rooms they are spread over, round-robin: 1 ≤ Rooms ≤ Sockets (DefaultRooms, at most Sockets)
	Mode    Mode // Echo or Broadcast (DefaultMode)
	// Rate is the messages sent a second in total (DefaultRate: off, as
	// fast as the windows allow).
	Rate     int
	Inflight int // messages in flight per stream: socket in echo, room in broadcast (DefaultInflight)
	Size     int // message size in bytes, at least MinSize (DefaultSize)

	Warmup   time.Duration // sending before measuring (DefaultWarmup; limits.Off: none)
	Duration time.Duration // measured sending (DefaultDuration)
	Drain    time.Duration // waiting at the end for messages in flight (DefaultDrain; limits.Off: none)

	DialConcurrency int           // sockets being opened at once (DefaultDialConcurrency)
	DialTimeout     time.Duration // bound on opening one socket (DefaultDialTimeout)

	// TargetPID, if not 0, is the server's process on this machine: its
	// CPU time during the measured period is reported per delivery (Linux).
	TargetPID int
}

// Defaults of Config: a small load of about 17 seconds against the echo
// class of a node on its default address.
const (
	DefaultTarget          = "ws://127.0.0.1:8080/actor/echo"
	DefaultMode            = Echo
	DefaultSockets         = 100
	DefaultRooms           = 10
	DefaultRate            = limits.Off // a closed loop: the figure is the throughput
	DefaultInflight        = 16
	DefaultSize            = 64
	DefaultWarmup          = 2 * time.Second
	DefaultDuration        = 10 * time.Second
	DefaultDrain           = 5 * time.Second
	DefaultDialConcurrency = 64
	DefaultDialTimeout     = 10 * time.Second
)

func (c Config) withDefaults() Config {
	if c.Target == "" {
		c.Target = DefaultTarget
	}
	if c.Mode == "" {
		c.Mode = DefaultMode
	}
	limits.Default(&c.Sockets, DefaultSockets)
	if c.Rooms <= 0 {
		c.Rooms = min(DefaultRooms, c.Sockets)
	}
	limits.Default(&c.Inflight, DefaultInflight)
	limits.Default(&c.Size, DefaultSize)
	defaultRun(&c.Rate, &c.Warmup, &c.Duration, &c.Drain, &c.DialConcurrency, &c.DialTimeout)
	return c
}

// defaultRun fills in the defaults of the fields every load shares: its
// pace, its periods and the opening of its connections.
func defaultRun(rate *int, warmup, duration, drain *time.Duration, dialConcurrency *int, dialTimeout *time.Duration) {
	limits.DefaultOrOff(rate, DefaultRate)
	limits.DefaultOrOff(warmup, DefaultWarmup)
	limits.Default(duration, DefaultDuration)
	limits.DefaultOrOff(drain, DefaultDrain)
	limits.Default(dialConcurrency, DefaultDialConcurrency)
	limits.Default(dialTimeout, DefaultDialTimeout)
}

// validateRun checks the fields every load shares, once defaulted.
func validateRun(warmup, duration, drain time.Duration, dialConcurrency, targetPID int) error {
	switch {
	case warmup > MaxDuration:
		return fmt.Errorf("--warmup must be 0–%v, not %v", MaxDuration, warmup)
	case duration <= 0 || duration > MaxDuration:
		return fmt.Errorf("--duration must be more than 0 and at most %v, not %v", MaxDuration, duration)
	case drain > MaxDuration:
		return fmt.Errorf("--drain must be 0–%v, not %v", MaxDuration, drain)
	case dialConcurrency < 1:
		return fmt.Errorf("--dial-concurrency must be at least 1, not %d", dialConcurrency)
	case targetPID < 0:
		return fmt.Errorf("--target-pid must be a process id, or 0 for none, not %d", targetPID)
	}
	return nil
}

// Bounds of a run, checked by Validate.
const (
	MaxSockets  = 100000
	MaxInflight = 4096
	MaxSize     = 16 << 20
	MaxDuration = time.Hour
)

// Validate reports the first field that a run cannot take, once the
// defaults are filled in.
func (c *Config) Validate() error {
	return c.withDefaults().validate()
}

func (c Config) validate() error {
	switch {
	case !strings.HasPrefix(c.Target, "ws://") && !strings.HasPrefix(c.Target, "wss://"):
		return fmt.Errorf("--target must be a ws:// or wss:// URL, not %q", c.Target)
	case c.Sockets < 1 || c.Sockets > MaxSockets:
		return fmt.Errorf("--sockets must be 1–%d, not %d", MaxSockets, c.Sockets)
	case c.Rooms < 1 || c.Rooms > c.Sockets:
		return fmt.Errorf("--rooms must be 1–%d (at most --sockets), not %d", c.Sockets, c.Rooms)
	case c.Mode != Echo && c.Mode != Broadcast:
		return fmt.Errorf("--mode must be echo or broadcast, not %q", c.Mode)
	case c.Inflight < 1 || c.Inflight > MaxInflight:
		return fmt.Errorf("--inflight must be 1–%d, not %d", MaxInflight, c.Inflight)
	case c.Size < MinSize || c.Size > MaxSize:
		return fmt.Errorf("--size must be %d–%d bytes (a message carries a %d-byte header), not %d", MinSize, MaxSize, MinSize, c.Size)
	}
	return validateRun(c.Warmup, c.Duration, c.Drain, c.DialConcurrency, c.TargetPID)
}

// RoomURL returns the URL of room i.
func (c *Config) RoomURL(i int) string {
	return fmt.Sprintf("%s/%s%d", strings.TrimRight(c.Target, "/"), c.Prefix, i)
}

// Result is what a run measured. Counts of messages sent and delivered,
// and the latencies, are those of the measured period (after the warmup);
// errors, lost and reordered cover the whole run, but for what a socket
// missed before the first message of its stream it received (sent while it
// was joining its room).
type Result struct {
	Target   string  `json:"target"`
	Prefix   string  `json:"prefix"`
	Mode     Mode    `json:"mode"`
	Sockets  int     `json:"sockets"`
	Rooms    int     `json:"rooms"`
	Inflight int     `json:"inflight"`
	Rate     int     `json:"rate"`
	Size     int     `json:"size"`
	Warmup   float64 `json:"warmup_s"`
	Duration float64 `json:"duration_s"`
	Connect  float64 `json:"connect_s"` // opening every socket

	Sent            int64   `json:"sent"` // messages sent
	SentPerSec      float64 `json:"sent_per_s"`
	Delivered       int64   `json:"delivered"` // messages received (in broadcast, one per receiving socket)
	DeliveredPerSec float64 `json:"delivered_per_s"`
	Latency         Latency `json:"latency_ms"` // send to receive, of the deliveries counted

	// CPU time per delivery during the measured period, in microseconds:
	// the server's (with Config.TargetPID) and the load generator's own.
	// Absent where process times cannot be read. With both on one machine,
	// these are the figures that noise from other processes disturbs least.
	ServerCPU float64 `json:"server_cpu_us,omitempty"`
	LoadCPU   float64 `json:"load_cpu_us,omitempty"`

	Errors       int64    `json:"errors"`                  // sockets that failed (read, write, closed by the server)
	ErrorSamples []string `json:"error_samples,omitempty"` // the first few errors
	Lost         int64    `json:"lost"`                    // deliveries that never came, from each socket's first on
	Reordered    int64    `json:"reordered"`               // deliveries that came after a later message of their stream
	Other        int64    `json:"other"`                   // messages that were not this run's (a greeting, a chat room's history)
}

// Latency holds quantiles in milliseconds.
type Latency struct {
	P50  float64 `json:"p50"`
	P90  float64 `json:"p90"`
	P99  float64 `json:"p99"`
	P999 float64 `json:"p999"`
	Max  float64 `json:"max"`
	Mean float64 `json:"mean"`
}

func latencyOf(h *Histogram) Latency {
	ms := func(d time.Duration) float64 { return math.Round(float64(d)/1e3) / 1e3 }
	return Latency{
		P50: ms(h.Quantile(0.50)), P90: ms(h.Quantile(0.90)), P99: ms(h.Quantile(0.99)),
		P999: ms(h.Quantile(0.999)), Max: ms(h.Max()), Mean: ms(h.Mean()),
	}
}

const (
	maxBatch        = 64       // messages a sender writes with one flush
	bufferSize      = 8 << 10  // each socket's read and write buffers
	maxFrame        = 64 << 20 // larger frames from the server fail the socket
	closeWait       = time.Second
	maxErrorSamples = 5
)

// stream is one sender's sequence of messages and its window.
type stream struct {
	id      uint32
	sender  *sock
	members uint32 // sockets that receive each message
	pace    pacer

	// credits holds the window's free places: a sender takes one per
	// message; the receiver that completes a message gives it back.
	credits chan struct{}
	// slots[seq % Inflight] counts the receivers a message still waits
	// for: seq<<32 | remaining.
	slots []atomic.Uint64

	// Sender's goroutine only (read once it has ended).
	sent    int64 // messages sent, whole run
	sentWin int64 // in the measured period
}

// arm records that message seq is about to be sent.
func (st *stream) arm(seq uint32) {
	st.slots[seq%uint32(len(st.slots))].Store(uint64(seq)<<32 | uint64(st.members))
}

// received counts one receiver of message seq; the last one frees its
// place in the window.
func (st *stream) received(seq uint32) {
	slot := &st.slots[seq%uint32(len(st.slots))]
	for {
		v := slot.Load()
		if uint32(v>>32) != seq || uint32(v) == 0 {
			return // a stale message: its place was reused
		}
		if slot.CompareAndSwap(v, v-1) {
			if uint32(v) == 1 {
				st.credits <- struct{}{}
			}
			return
		}
	}
}

// sock is one client socket.
type sock struct {
	r    *runner
	idx  int
	conn net.Conn
	br   *bufio.Reader
	recv *stream // the stream this socket receives

	wmu     sync.Mutex // bw and the frames written through it
	bw      *bufio.Writer
	hb      [ws.MaxHeaderSize]byte // a frame header being written
	payload []byte                 // the message, unmasked; its header is rewritten per message
	masked  []byte

	closing    atomic.Bool
	readerDone chan struct{}
	joined     atomic.Bool // got a join probe of its stream (broadcast)

	// Reader's goroutine only (read once it has ended).
	next   uint32 // next sequence number expected
	got    int64  // messages of its stream received, whole run
	gotWin int64  // in the measured period
	// first is the seq of the first message of its stream it received (-1
	// before one came): losses count from there, since a socket may miss
	// what its room sent before it had joined (its handshake done, the
	// server not yet done adding it to the room).
	first     int64
	reordered int64
	other     int64
	hist      Histogram
	msg       []byte // a fragmented message being reassembled
	rbuf      []byte
}

// runner is one run in progress.
type runner struct {
	cfg     Config
	runID   uint32
	base    time.Time // the run's clock starts here
	socks   []*sock
	streams []*stream

	// Measured period, on the run's clock; math.MaxInt64 until sending starts.
	winStart, winEnd atomic.Int64
	t0               time.Duration // sending started
	stop             chan struct{} // closed when sending ends

	errors   atomic.Int64
	errMu    sync.Mutex
	errFirst []string
}

func (r *runner) now() time.Duration { return time.Since(r.base) }

// fail counts a socket's failure, unless the run is closing it.
func (r *runner) fail(s *sock, format string, args ...any) {
	if s.closing.Load() {
		return
	}
	r.errors.Add(1)
	r.errMu.Lock()
	if len(r.errFirst) < maxErrorSamples {
		r.errFirst = append(r.errFirst, fmt.Sprintf("socket %d (%s): ", s.idx, r.cfg.RoomURL(s.idx%r.cfg.Rooms))+fmt.Sprintf(format, args...))
	}
	r.errMu.Unlock()
}

// Run runs the load described by cfg and returns what it measured. It
// returns an error, and no result, if a socket cannot be opened or ctx ends
// first.
func Run(ctx context.Context, cfg Config) (*Result, error) {
	cfg = cfg.withDefaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	// From here on, none is zero: a run counts in rates and durations.
	cfg.Rate, cfg.Warmup, cfg.Drain = max(cfg.Rate, 0), max(cfg.Warmup, 0), max(cfg.Drain, 0)
	if cfg.TargetPID != 0 {
		if _, err := processCPU(cfg.TargetPID); err != nil {
			return nil, fmt.Errorf("--target-pid: %w", err)
		}
	}
	r := &runner{cfg: cfg, runID: rand.Uint32() | 1, base: time.Now(), stop: make(chan struct{})}
	r.winStart.Store(math.MaxInt64)
	r.winEnd.Store(math.MaxInt64)
	r.plan()

	var readers, writers sync.WaitGroup
	started := time.Now()
	err := r.connect(ctx, &readers)
	connect := time.Since(started)
	if err != nil {
		r.closeAll()
		readers.Wait()
		return nil, err
	}

	if cfg.Mode == Broadcast {
		if err := r.join(ctx); err != nil {
			r.closeAll()
			readers.Wait()
			return nil, err
		}
	}

	// Send for warmup + duration.
	r.t0 = r.now()
	r.winStart.Store(int64(r.t0 + cfg.Warmup))
	r.winEnd.Store(int64(r.t0 + cfg.Warmup + cfg.Duration))
	for _, st := range r.streams {
		writers.Add(1)
		go r.sendLoop(st, &writers)
	}
	cpu := measureCPU(ctx, cfg.Warmup, cfg.Duration, cfg.TargetPID)
	close(r.stop)

	// Wait for what is in flight, then close.
	deadline := time.Now().Add(cfg.Drain)
	waitUntil(&writers, deadline)
	for ctx.Err() == nil && time.Now().Before(deadline) && !r.drained() {
		time.Sleep(5 * time.Millisecond)
	}
	r.closeAll()
	readers.Wait()
	writers.Wait()
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	res := r.result(connect)
	res.LoadCPU, res.ServerCPU = cpu.per(res.Delivered)
	return res, nil
}

// sleepCtx waits for d, or until ctx ends; it reports whether d passed.
func sleepCtx(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}

// cpuSample is the CPU time of this process and of the target.
type cpuSample struct {
	self, target time.Duration
	ok, targetOK bool
}

// sampleCPU reads the CPU time of this process and of process pid (none
// if 0).
func sampleCPU(pid int) cpuSample {
	var s cpuSample
	var err error
	s.self, err = processCPU(0)
	s.ok = err == nil
	if pid != 0 {
		s.target, err = processCPU(pid)
		s.targetOK = err == nil
	}
	return s
}

// measureCPU waits for warmup, then for duration, and returns the CPU
// time this process and process pid used during duration; nothing (ok
// false) if ctx ended first.
func measureCPU(ctx context.Context, warmup, duration time.Duration, pid int) cpuSample {
	if !sleepCtx(ctx, warmup) {
		return cpuSample{}
	}
	start := sampleCPU(pid)
	if !sleepCtx(ctx, duration) {
		return cpuSample{}
	}
	return sampleCPU(pid).since(start)
}

// per returns the CPU times of s, this process's and the target's, per
// one of n things done, in microseconds; 0 for what was not measured.
func (s cpuSample) per(n int64) (self, target float64) {
	if !s.ok || n <= 0 {
		return 0, 0
	}
	per := func(d time.Duration) float64 { return math.Round(float64(d)/float64(n)) / 1e3 }
	self = per(s.self)
	if s.targetOK {
		target = per(s.target)
	}
	return self, target
}

// since returns the CPU used from start to s.
func (s cpuSample) since(start cpuSample) cpuSample {
	return cpuSample{
		self: s.self - start.self, target: s.target - start.target,
		ok: s.ok && start.ok, targetOK: s.targetOK && start.targetOK,
	}
}

// plan makes the sockets and streams: socket i is in room i % Rooms.
func (r *runner) plan() {
	cfg := &r.cfg
	r.socks = make([]*sock, cfg.Sockets)
	for i := range r.socks {
		r.socks[i] = &sock{r: r, idx: i, readerDone: make(chan struct{}), first: -1}
	}
	newStream := func(id int, sender *sock, members int, n int) *stream {
		st := &stream{
			id: uint32(id), sender: sender, members: uint32(members),
			credits: make(chan struct{}, cfg.Inflight),
			slots:   make([]atomic.Uint64, cfg.Inflight),
		}
		for range cfg.Inflight {
			st.credits <- struct{}{}
		}
		if cfg.Rate > 0 {
			st.pace = newPacer(cfg.Rate, id, n)
		}
		return st
	}
	if cfg.Mode == Echo {
		for i, s := range r.socks {
			s.recv = newStream(i, s, 1, cfg.Sockets)
			r.streams = append(r.streams, s.recv)
		}
		return
	}
	for room := range cfg.Rooms {
		members := (cfg.Sockets - room + cfg.Rooms - 1) / cfg.Rooms
		r.streams = append(r.streams, newStream(room, r.socks[room], members, cfg.Rooms))
	}
	for i, s := range r.socks {
		s.recv = r.streams[i%cfg.Rooms]
	}
}

// probeSeq is the sequence number of a join probe: a message that tells
// its receivers they are in its sender's room, and is not counted.
const probeSeq = math.MaxUint32

// joinWait bounds how long the sockets of a room may take to join it.
const joinWait = 10 * time.Second

// join waits until every socket of every room receives what the room's
// sender sends. A server may add a socket to its room a moment after the
// handshake that opened it (the plain server does; so may a room's
// guest): a message sent before then never reaches it, and a window
// waiting for its delivery would stall the sender for the whole run. So
// each sender sends a probe, again every joinProbeEvery, until all of its
// room has had one.
func (r *runner) join(ctx context.Context) error {
	const joinProbeEvery = 20 * time.Millisecond
	probe := newPayload(r.cfg.Size)
	deadline := time.Now().Add(joinWait)
	for {
		waiting := 0
		for _, st := range r.streams {
			missing := 0
			for _, s := range r.socks {
				if s.recv == st && !s.joined.Load() {
					missing++
				}
			}
			if missing == 0 {
				continue
			}
			waiting++
			if time.Now().After(deadline) {
				return fmt.Errorf("%s: %d of its %d sockets received nothing its sender sent within %v", r.cfg.RoomURL(int(st.id)), missing, st.members, joinWait)
			}
			encode(probe, header{run: r.runID, stream: st.id, seq: probeSeq, sent: int64(r.now())})
			if err := st.sender.writeNow(ws.OpText, probe); err != nil {
				return fmt.Errorf("%s: a join probe: %w", r.cfg.RoomURL(int(st.id)), err)
			}
		}
		if waiting == 0 {
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(joinProbeEvery):
		}
	}
}

// connect opens every socket, DialConcurrency at a time, and starts their
// readers. The first failure stops it.
func (r *runner) connect(ctx context.Context, readers *sync.WaitGroup) error {
	return openEach(ctx, r.cfg.Sockets, r.cfg.DialConcurrency, "sockets", func(ctx context.Context, i int) error {
		if err := r.dial(ctx, r.socks[i]); err != nil {
			return fmt.Errorf("%s: %w", r.cfg.RoomURL(i%r.cfg.Rooms), err)
		}
		readers.Add(1)
		go r.readLoop(r.socks[i], readers)
		return nil
	})
}

// openEach calls open for 0 to n-1, concurrency at a time, until one
// fails: that failure, with how many of the n things named what were
// opened before it, is the error.
func openEach(ctx context.Context, n, concurrency int, what string, open func(ctx context.Context, i int) error) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var (
		wg       sync.WaitGroup
		mu       sync.Mutex
		firstErr error
		opened   atomic.Int64
	)
	jobs := make(chan int)
	for range min(concurrency, n) {
		wg.Go(func() {
			for i := range jobs {
				if ctx.Err() != nil {
					continue
				}
				if err := open(ctx, i); err != nil {
					mu.Lock()
					if firstErr == nil {
						firstErr = err
					}
					mu.Unlock()
					cancel()
					continue
				}
				opened.Add(1)
			}
		})
	}
feed:
	for i := range n {
		select {
		case jobs <- i:
		case <-ctx.Done():
			break feed
		}
	}
	close(jobs)
	wg.Wait()
	if firstErr != nil {
		return fmt.Errorf("opened %d of %d %s, then %w", opened.Load(), n, what, firstErr)
	}
	return ctx.Err()
}

// dial opens one socket.
func (r *runner) dial(ctx context.Context, s *sock) error {
	var refusal string
	d := ws.Dialer{
		Timeout:        r.cfg.DialTimeout,
		ReadBufferSize: bufferSize,
		OnStatusError: func(status int, _ []byte, resp io.Reader) {
			refusal = readRefusal(resp)
		},
	}
	conn, br, _, err := d.Dial(ctx, r.cfg.RoomURL(s.idx%r.cfg.Rooms))
	if err != nil {
		return explainDial(err, refusal)
	}
	if br == nil {
		br = bufio.NewReaderSize(conn, bufferSize)
	}
	// Else br holds frames the server sent right behind its handshake.
	s.conn = conn
	s.br = br
	s.bw = bufio.NewWriterSize(conn, bufferSize)
	s.payload = newPayload(r.cfg.Size)
	s.masked = make([]byte, r.cfg.Size)
	return nil
}

// readRefusal returns the body of a refused upgrade, shortened.
func readRefusal(resp io.Reader) string {
	res, err := http.ReadResponse(bufio.NewReader(io.LimitReader(resp, 4096)), nil)
	if err != nil {
		return ""
	}
	defer res.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(res.Body, 200))
	return strings.TrimSpace(string(body))
}

// explainDial makes a dial error say what to check.
func explainDial(err error, refusal string) error {
	var status ws.StatusError
	switch {
	case errors.As(err, &status):
		msg := fmt.Sprintf("the server refused the WebSocket: HTTP %d", int(status))
		if refusal != "" {
			msg += " (" + refusal + ")"
		}
		if status == http.StatusNotFound {
			msg += "; is the class uploaded (`wasmkeep class put`) and --target right?"
		}
		return errors.New(msg)
	case errors.Is(err, syscall.ECONNREFUSED):
		return fmt.Errorf("%w: nothing listens there (is the node running?)", err)
	case errors.Is(err, context.DeadlineExceeded), isTimeout(err):
		return fmt.Errorf("no answer to the WebSocket handshake in time: %w", err)
	}
	return err
}

func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

// sendLoop sends a stream's messages until the run stops sending.
func (r *runner) sendLoop(st *stream, wg *sync.WaitGroup) {
	defer wg.Done()
	s := st.sender
	paced := r.cfg.Rate > 0
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	end := time.Duration(r.winEnd.Load())
	for {
		if paced {
			if wait := r.t0 + st.pace.at(st.sent) - r.now(); wait > 0 {
				timer.Reset(wait)
				select {
				case <-timer.C:
				case <-r.stop:
					return
				}
			}
		}
		select {
		case <-st.credits:
		case <-r.stop:
			return
		}
		n, limit := int64(1), int64(maxBatch)
		if paced {
			limit = min(limit, st.pace.due(r.now()-r.t0)-st.sent)
		}
	batch:
		for n < limit {
			select {
			case <-st.credits:
				n++
			default:
				break batch
			}
		}
		now := r.now()
		if now >= end {
			for range n {
				st.credits <- struct{}{} // unused: the window is whole again
			}
			return
		}
		if err := s.sendBatch(st, n, now); err != nil {
			r.fail(s, "write: %v", err)
			return
		}
		if start := time.Duration(r.winStart.Load()); now >= start {
			st.sentWin += n
		}
	}
}

// sendBatch writes n messages of st, stamped now, with one flush.
func (s *sock) sendBatch(st *stream, n int64, now time.Duration) error {
	s.wmu.Lock()
	defer s.wmu.Unlock()
	for range n {
		seq := uint32(st.sent)
		st.arm(seq)
		encode(s.payload, header{run: s.r.runID, stream: st.id, seq: seq, sent: int64(now)})
		if err := s.writeFrame(ws.OpText, s.payload); err != nil {
			return err
		}
		st.sent++
	}
	return s.bw.Flush()
}

// writeFrame writes one masked client frame into bw (under wmu).
func (s *sock) writeFrame(op ws.OpCode, p []byte) error {
	mask := ws.NewMask()
	h := ws.Header{Fin: true, OpCode: op, Masked: true, Mask: mask, Length: int64(len(p))}
	if err := ws.WriteHeaderBuffer(s.bw, h, s.hb[:]); err != nil {
		return err
	}
	buf := s.masked
	if len(p) > len(buf) {
		buf = make([]byte, len(p))
	}
	buf = buf[:len(p)]
	copy(buf, p)
	ws.Cipher(buf, mask, 0)
	_, err := s.bw.Write(buf)
	return err
}

// writeNow writes one frame at once (a control frame, a join probe).
func (s *sock) writeNow(op ws.OpCode, p []byte) error {
	s.wmu.Lock()
	defer s.wmu.Unlock()
	if err := s.writeFrame(op, p); err != nil {
		return err
	}
	return s.bw.Flush()
}

// readLoop reads a socket until it fails or is closed.
func (r *runner) readLoop(s *sock, wg *sync.WaitGroup) {
	defer wg.Done()
	defer close(s.readerDone)
	var hb [ws.MaxHeaderSize]byte
	for {
		h, err := ws.ReadHeaderBuffer(s.br, hb[:])
		if err != nil {
			r.fail(s, "read: %v", err)
			return
		}
		if h.Length > maxFrame || h.Length < 0 {
			r.fail(s, "read: a frame of %d bytes", h.Length)
			return
		}
		p := s.rbuf
		if int64(cap(p)) < h.Length {
			p = make([]byte, h.Length)
			if h.Length <= bufferSize {
				s.rbuf = p
			}
		}
		p = p[:h.Length]
		if _, err := io.ReadFull(s.br, p); err != nil {
			r.fail(s, "read: %v", err)
			return
		}
		if h.Masked {
			ws.Cipher(p, h.Mask, 0)
		}
		switch h.OpCode {
		case ws.OpPing:
			pong := append([]byte(nil), p...)
			go func() { _ = s.writeNow(ws.OpPong, pong) }() // never blocks the reader
		case ws.OpPong:
		case ws.OpClose:
			code, reason := ws.ParseCloseFrameData(p)
			r.fail(s, "closed by the server: %d %q", code, reason)
			return
		case ws.OpContinuation:
			s.msg = append(s.msg, p...)
			if h.Fin {
				s.message(s.msg)
				s.msg = s.msg[:0]
			}
		default:
			if h.Fin {
				s.message(p)
			} else {
				s.msg = append(s.msg[:0], p...)
			}
		}
	}
}

// message accounts for one message received.
func (s *sock) message(p []byte) {
	h, ok := decode(p)
	st := s.recv
	if !ok || h.run != s.r.runID || h.stream != st.id {
		s.other++
		return
	}
	if h.seq == probeSeq {
		s.joined.Store(true)
		return
	}
	now := s.r.now()
	s.got++
	if s.first < 0 {
		s.first = int64(h.seq)
	}
	switch {
	case h.seq == s.next:
		s.next++
	case h.seq > s.next:
		s.next = h.seq + 1 // those skipped are counted as reordered if they come, lost if not
	default:
		s.reordered++
	}
	if int64(now) >= s.r.winStart.Load() && int64(now) < s.r.winEnd.Load() {
		s.gotWin++
		s.hist.Record(now - time.Duration(h.sent))
	}
	st.received(h.seq)
}

// drained reports whether no stream has messages in flight.
func (r *runner) drained() bool {
	for _, st := range r.streams {
		if len(st.credits) != cap(st.credits) {
			return false
		}
	}
	return true
}

// closeAll closes every open socket: a close frame, the server's answer
// (for at most closeWait), then TCP.
func (r *runner) closeAll() {
	var wg sync.WaitGroup
	for _, s := range r.socks {
		if s.conn == nil {
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			s.closing.Store(true)
			_ = s.conn.SetWriteDeadline(time.Now().Add(closeWait)) // a writer blocked by the server gives up
			if s.writeNow(ws.OpClose, ws.NewCloseFrameBody(ws.StatusNormalClosure, "")) == nil {
				select {
				case <-s.readerDone:
				case <-time.After(closeWait):
				}
			}
			_ = s.conn.Close()
		}()
	}
	wg.Wait()
}

// result adds up the sockets' and streams' counts.
func (r *runner) result(connect time.Duration) *Result {
	cfg := &r.cfg
	res := &Result{
		Target: cfg.Target, Prefix: cfg.Prefix, Mode: cfg.Mode, Sockets: cfg.Sockets, Rooms: cfg.Rooms,
		Inflight: cfg.Inflight, Rate: cfg.Rate, Size: cfg.Size,
		Warmup: cfg.Warmup.Seconds(), Duration: cfg.Duration.Seconds(), Connect: connect.Seconds(),
		Errors: r.errors.Load(), ErrorSamples: r.errFirst,
	}
	var hist Histogram
	for _, st := range r.streams {
		res.Sent += st.sentWin
	}
	for _, s := range r.socks {
		res.Delivered += s.gotWin
		res.Reordered += s.reordered
		res.Other += s.other
		res.Lost += max(s.recv.sent-max(s.first, 0)-s.got, 0)
		hist.Merge(&s.hist)
	}
	sec := cfg.Duration.Seconds()
	res.SentPerSec = math.Round(float64(res.Sent) / sec)
	res.DeliveredPerSec = math.Round(float64(res.Delivered) / sec)
	res.Latency = latencyOf(&hist)
	return res
}

// waitUntil waits for wg, or until deadline.
func waitUntil(wg *sync.WaitGroup, deadline time.Time) {
	done := make(chan struct{})
	go func() {
		wg.Wait()
		close(done)
	}()
	t := time.NewTimer(time.Until(deadline))
	defer t.Stop()
	select {
	case <-done:
	case <-t.C:
	}
}
