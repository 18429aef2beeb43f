package loadgen

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"net"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/wasmkeep/wasmkeep/internal/limits"
)

// HTTPConfig describes a run of HTTP requests, RunHTTP's: Clients clients,
// each with one keep-alive connection (HTTP/1.1), send requests one after
// the other, as soon as the last is answered (or paced to Rate a second in
// total), for Warmup and then Duration; only what is answered during
// Duration is counted.
//
// A zero field means its Default* constant (those of Config where the
// names are the same); limits.Off turns off Rate, Warmup and Drain.
// Prefix, Body and TargetPID have no default.
type HTTPConfig struct {
	// URL is the http:// or https:// URL requested. RoomMark in it is
	// replaced by a room, <Prefix><n>: client i's, i % Rooms, or with more
	// rooms than clients, each of rooms i, i+Clients, i+2·Clients ... in
	// turn; without it every client requests URL itself and Rooms and
	// Prefix are not used.
	URL    string
	Prefix string
	Rooms  int // rooms the clients are spread over, with RoomMark (DefaultRooms, at most Clients)

	Clients int    // clients, one connection each (DefaultClients)
	Method  string // DefaultMethod
	Body    string // sent with every request

	Rate int // requests a second in total (DefaultRate: off, back to back)

	Warmup   time.Duration // requests before measuring (DefaultWarmup; limits.Off: none)
	Duration time.Duration // measured period (DefaultDuration)
	Drain    time.Duration // waiting at the end for requests in flight (DefaultDrain; limits.Off: none)

	// DialConcurrency bounds the clients opening their connection at once
	// (DefaultDialConcurrency); DialTimeout bounds each opening, the
	// connection and its first request (DefaultDialTimeout).
	DialConcurrency int
	DialTimeout     time.Duration

	// TargetPID, if not 0, is the server's process on this machine: its
	// CPU time during the measured period is reported per request (Linux).
	TargetPID int
}

// Defaults of HTTPConfig besides Config's.
const (
	DefaultClients = 100
	DefaultMethod  = http.MethodGet
	// RoomMark, in HTTPConfig.URL, stands for each client's room.
	RoomMark = "{room}"
)

func (c HTTPConfig) withDefaults() HTTPConfig {
	limits.Default(&c.Clients, DefaultClients)
	if c.Rooms <= 0 {
		c.Rooms = min(DefaultRooms, c.Clients)
	}
	if c.Method == "" {
		c.Method = DefaultMethod
	}
	defaultRun(&c.Rate, &c.Warmup, &c.Duration, &c.Drain, &c.DialConcurrency, &c.DialTimeout)
	return c
}

// MaxClients bounds HTTPConfig.Clients.
const MaxClients = 100000

// Validate reports the first field that a run cannot take, once the
// defaults are filled in.
func (c *HTTPConfig) Validate() error {
	return c.withDefaults().validate()
}

func (c HTTPConfig) validate() error {
	u, err := url.Parse(strings.ReplaceAll(c.URL, RoomMark, "r"))
	switch {
	case err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "":
		return fmt.Errorf("--http must be an http:// or https:// URL, not %q", c.URL)
	case c.Clients < 1 || c.Clients > MaxClients:
		return fmt.Errorf("--clients must be 1–%d, not %d", MaxClients, c.Clients)
	case c.rooms() && (c.Rooms < 1 || c.Rooms > maxHTTPRooms):
		return fmt.Errorf("--rooms must be 1–%d, not %d", maxHTTPRooms, c.Rooms)
	case !validMethod(c.Method):
		return fmt.Errorf("--method must be an HTTP method (GET, POST, ...), not %q", c.Method)
	}
	return validateRun(c.Warmup, c.Duration, c.Drain, c.DialConcurrency, c.TargetPID)
}

// validMethod: upper-case letters, as the methods that servers take.
func validMethod(m string) bool {
	if m == "" || len(m) > 16 {
		return false
	}
	for _, c := range m {
		if c < 'A' || c > 'Z' {
			return false
		}
	}
	return true
}

// rooms reports whether the URL names a room per client.
func (c *HTTPConfig) rooms() bool { return strings.Contains(c.URL, RoomMark) }

// maxHTTPRooms bounds --rooms with --http: a client keeps the URL of each
// of its rooms.
const maxHTTPRooms = 1 << 20

// ClientURL returns the URL client i requests first.
func (c *HTTPConfig) ClientURL(i int) string { return c.ClientURLs(i)[0] }

// ClientURLs returns the URLs client i requests, one after the other:
// its room's, or with more rooms than clients those of rooms i,
// i+Clients, i+2·Clients ...
func (c *HTTPConfig) ClientURLs(i int) []string {
	if !c.rooms() {
		return []string{c.URL}
	}
	var urls []string
	for room := i % c.Rooms; ; room += c.Clients {
		urls = append(urls, strings.ReplaceAll(c.URL, RoomMark, c.Prefix+strconv.Itoa(room)))
		if room+c.Clients >= c.Rooms {
			return urls
		}
	}
}

// HTTPResult is what an HTTP run measured. Requests, their rate and
// latencies, and the CPU times are those of the measured period (after the
// warmup), and count only requests answered without error; errors cover
// the whole run.
type HTTPResult struct {
	URL      string  `json:"url"`
	Method   string  `json:"method"`
	Body     int     `json:"body_bytes"` // bytes sent with each request
	Clients  int     `json:"clients"`
	Rooms    int     `json:"rooms,omitempty"` // with RoomMark in the URL
	Prefix   string  `json:"prefix,omitempty"`
	Rate     int     `json:"rate"`
	Warmup   float64 `json:"warmup_s"`
	Duration float64 `json:"duration_s"`
	Connect  float64 `json:"connect_s"` // every client's first request, which opens its connection
	// Connections is how many connections were opened over the run:
	// Clients when the server kept every one alive.
	Connections int64 `json:"connections"`

	Requests       int64   `json:"requests"` // answered without error (status below 400)
	RequestsPerSec float64 `json:"requests_per_s"`
	Latency        Latency `json:"latency_ms"` // sent to answer read whole, of the requests counted

	// CPU time per request counted, in microseconds: the server's (with
	// TargetPID) and the load generator's own; absent where process times
	// cannot be read.
	ServerCPU float64 `json:"server_cpu_us,omitempty"`
	LoadCPU   float64 `json:"load_cpu_us,omitempty"`

	// Errors counts requests answered with a status of 400 or more, or not
	// answered (the connection failed); ErrorsByStatus splits them by
	// status ("500"), those not answered under "failed".
	Errors         int64            `json:"errors"`
	ErrorsByStatus map[string]int64 `json:"errors_by_status,omitempty"`
	ErrorSamples   []string         `json:"error_samples,omitempty"` // the first few
	// Unanswered counts the requests still in flight at the end of the
	// drain, abandoned (not among the errors).
	Unanswered int64 `json:"unanswered"`
}

// FailedKey is the key of ErrorsByStatus for requests that had no answer.
const FailedKey = "failed"

// failPause is how long a client waits after a request that had no answer
// before its next, so that a server that is gone is not hammered.
const failPause = 10 * time.Millisecond

// httpClient is one client of a run.
type httpClient struct {
	r      *httpRunner
	idx    int
	url    string   // the URL of the request being made
	urls   []string // every URL it requests, in turn
	next   int      // the index in urls of its next request
	client *http.Client
	pace   pacer

	// The client's goroutine only (read once it has ended).
	sent       int64 // requests sent, whole run
	ok         int64 // answered without error in the measured period
	unanswered int64
	hist       Histogram
}

// httpRunner is one HTTP run in progress.
type httpRunner struct {
	cfg     HTTPConfig
	base    time.Time
	clients []*httpClient
	ctx     context.Context // canceled at the end of the drain
	conns   atomic.Int64

	winStart, winEnd time.Duration // the measured period, on the run's clock
	t0               time.Duration // sending started

	errMu    sync.Mutex
	errors   map[string]int64
	errCount int64
	errFirst []string
}

func (r *httpRunner) now() time.Duration { return time.Since(r.base) }

// fail counts a request's error.
func (r *httpRunner) fail(c *httpClient, key, msg string) {
	r.errMu.Lock()
	defer r.errMu.Unlock()
	r.errCount++
	r.errors[key]++
	if len(r.errFirst) < maxErrorSamples {
		r.errFirst = append(r.errFirst, fmt.Sprintf("client %d (%s): %s", c.idx, c.url, msg))
	}
}

// RunHTTP runs the HTTP load described by cfg and returns what it
// measured. It returns an error, and no result, if a client's first
// request has no answer or is refused (a status from 400 to 499: the URL,
// method or body is wrong), or if ctx ends first. A first request answered
// with a status of 500 or more is counted as an error and the run goes on:
// that is the server's to answer for.
func RunHTTP(ctx context.Context, cfg HTTPConfig) (*HTTPResult, error) {
	cfg = cfg.withDefaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	cfg.Rate, cfg.Warmup, cfg.Drain = max(cfg.Rate, 0), max(cfg.Warmup, 0), max(cfg.Drain, 0)
	if cfg.TargetPID != 0 {
		if _, err := processCPU(cfg.TargetPID); err != nil {
			return nil, fmt.Errorf("--target-pid: %w", err)
		}
	}
	runCtx, abandon := context.WithCancel(ctx)
	defer abandon()
	r := &httpRunner{cfg: cfg, base: time.Now(), ctx: runCtx, errors: map[string]int64{}}
	for i := range cfg.Clients {
		urls := cfg.ClientURLs(i)
		c := &httpClient{r: r, idx: i, url: urls[0], urls: urls, client: r.newClient()}
		if cfg.Rate > 0 {
			c.pace = newPacer(cfg.Rate, i, cfg.Clients)
		}
		r.clients = append(r.clients, c)
	}
	defer func() {
		for _, c := range r.clients {
			c.client.CloseIdleConnections()
		}
	}()

	started := time.Now()
	if err := r.open(ctx); err != nil {
		return nil, err
	}
	connect := time.Since(started)

	r.t0 = r.now()
	r.winStart, r.winEnd = r.t0+cfg.Warmup, r.t0+cfg.Warmup+cfg.Duration
	var wg sync.WaitGroup
	for _, c := range r.clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c.loop()
		}()
	}
	cpu := measureCPU(ctx, cfg.Warmup, cfg.Duration, cfg.TargetPID)
	// The clients stop sending at winEnd by themselves; what is in flight
	// has the drain to be answered.
	waitUntil(&wg, r.base.Add(r.winEnd+cfg.Drain))
	abandon()
	wg.Wait()
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	res := r.result(connect)
	res.LoadCPU, res.ServerCPU = cpu.per(res.Requests)
	return res, nil
}

// newClient returns a client with a transport of its own that keeps one
// connection (HTTP/1.1, no redirects followed).
func (r *httpRunner) newClient() *http.Client {
	d := &net.Dialer{Timeout: r.cfg.DialTimeout, KeepAlive: 30 * time.Second}
	tr := &http.Transport{
		DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
			conn, err := d.DialContext(ctx, network, addr)
			if err == nil {
				r.conns.Add(1)
			}
			return conn, err
		},
		MaxIdleConns:        1,
		MaxIdleConnsPerHost: 1,
		MaxConnsPerHost:     1,
		IdleConnTimeout:     time.Minute,
		TLSHandshakeTimeout: r.cfg.DialTimeout,
		DisableCompression:  true,
		ForceAttemptHTTP2:   false,
	}
	return &http.Client{
		Transport:     tr,
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	}
}

// open sends every client's first request, DialConcurrency at a time,
// which opens its connection. The first failure stops it.
func (r *httpRunner) open(ctx context.Context) error {
	return openEach(ctx, len(r.clients), r.cfg.DialConcurrency, "connections", func(ctx context.Context, i int) error {
		c := r.clients[i]
		if err := c.first(ctx); err != nil {
			return fmt.Errorf("%s %s: %w", r.cfg.Method, c.url, err)
		}
		return nil
	})
}

// first sends the client's first request.
func (c *httpClient) first(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, c.r.cfg.DialTimeout)
	defer cancel()
	status, body, err := c.do(ctx)
	switch {
	case err != nil:
		return explainHTTP(err)
	case status >= 400 && status < 500:
		msg := fmt.Sprintf("the server refused the request: HTTP %d", status)
		if body != "" {
			msg += " (" + body + ")"
		}
		if status == http.StatusNotFound {
			msg += "; is the class uploaded (`wasmkeep class put`) and --http right?"
		}
		return errors.New(msg)
	case status >= 500:
		c.r.fail(c, strconv.Itoa(status), httpError(status, body))
	}
	return nil
}

// explainHTTP makes a request's error say what to check.
func explainHTTP(err error) error {
	var ue *url.Error
	if errors.As(err, &ue) {
		err = ue.Err
	}
	return explainDial(err, "")
}

// loop sends the client's requests until the measured period ends.
func (c *httpClient) loop() {
	r := c.r
	paced := r.cfg.Rate > 0
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	for {
		if paced {
			if wait := r.t0 + c.pace.at(c.sent) - r.now(); wait > 0 {
				timer.Reset(wait)
				select {
				case <-timer.C:
				case <-r.ctx.Done():
					return
				}
			}
		}
		began := r.now()
		if began >= r.winEnd || r.ctx.Err() != nil {
			return
		}
		c.sent++
		status, body, err := c.do(r.ctx)
		done := r.now()
		switch {
		case err != nil && r.ctx.Err() != nil:
			c.unanswered++
			return
		case err != nil:
			r.fail(c, FailedKey, explainHTTP(err).Error())
			select {
			case <-time.After(failPause):
			case <-r.ctx.Done():
				return
			}
		case status >= 400:
			r.fail(c, strconv.Itoa(status), httpError(status, body))
		case done >= r.winStart && done < r.winEnd:
			c.ok++
			c.hist.Record(done - began)
		}
	}
}

// httpError describes an answer with an error status.
func httpError(status int, body string) string {
	msg := fmt.Sprintf("HTTP %d", status)
	if body != "" {
		msg += " (" + body + ")"
	}
	return msg
}

// errorBodyBytes is how much of an error's body is kept for its sample.
const errorBodyBytes = 200

// do sends one request and reads its answer whole; for a status of 400 or
// more it returns the beginning of the body too.
func (c *httpClient) do(ctx context.Context) (status int, body string, err error) {
	var rd io.Reader
	if c.r.cfg.Body != "" {
		rd = strings.NewReader(c.r.cfg.Body)
	}
	c.url = c.urls[c.next]
	c.next = (c.next + 1) % len(c.urls)
	req, err := http.NewRequestWithContext(ctx, c.r.cfg.Method, c.url, rd)
	if err != nil {
		return 0, "", err
	}
	resp, err := c.client.Do(req)
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	if resp.StatusCode >= 400 {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, errorBodyBytes))
		body = strings.Join(strings.Fields(string(b)), " ") // one line
	}
	if _, err := io.Copy(io.Discard, resp.Body); err != nil {
		return 0, "", err
	}
	return resp.StatusCode, body, nil
}

// result adds up the clients' counts.
func (r *httpRunner) result(connect time.Duration) *HTTPResult {
	cfg := &r.cfg
	res := &HTTPResult{
		URL: cfg.URL, Method: cfg.Method, Body: len(cfg.Body), Clients: cfg.Clients, Rate: cfg.Rate,
		Warmup: cfg.Warmup.Seconds(), Duration: cfg.Duration.Seconds(), Connect: connect.Seconds(),
		Connections: r.conns.Load(),
		Errors:      r.errCount, ErrorSamples: r.errFirst,
	}
	if cfg.rooms() {
		res.Rooms, res.Prefix = cfg.Rooms, cfg.Prefix
	}
	if len(r.errors) > 0 {
		res.ErrorsByStatus = r.errors
	}
	var hist Histogram
	for _, c := range r.clients {
		res.Requests += c.ok
		res.Unanswered += c.unanswered
		hist.Merge(&c.hist)
	}
	res.RequestsPerSec = math.Round(float64(res.Requests) / cfg.Duration.Seconds())
	res.Latency = latencyOf(&hist)
	return res
}

// StatusKeys returns the keys of ErrorsByStatus in order: statuses, then
// FailedKey.
func (r *HTTPResult) StatusKeys() []string {
	keys := make([]string, 0, len(r.ErrorsByStatus))
	for k := range r.ErrorsByStatus {
		keys = append(keys, k)
	}
	slices.SortFunc(keys, func(a, b string) int {
		if (a == FailedKey) != (b == FailedKey) {
			if a == FailedKey {
				return 1
			}
			return -1
		}
		return strings.Compare(a, b)
	})
	return keys
}
