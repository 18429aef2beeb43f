// Package fetch sends the HTTP requests rooms and fronts make to other
// services, only where the operator allows, and never, unless allowed by
// address, to this machine or its networks.
//
// A host is allowed by name (an entry "api.example.com", or
// "*.example.com" for its subdomains, optionally with ":port") or by
// address (an entry that is an IP address or a CIDR prefix). Whatever
// the name, the address actually dialled is checked after resolution: a
// loopback, private, link-local (the cloud metadata service is one),
// carrier-grade NAT, multicast or unspecified address is refused unless an
// address entry covers it, and the connection goes to the address that
// was checked, so a name that resolves differently the second time (DNS
// rebinding) gains nothing. Every redirect is checked the same way. No
// proxy from the environment is used: it would dial for us, unchecked.
//
// The request comes from a guest, which is not trusted: its method, URL,
// headers and body are checked and bounded (Start) before anything is
// sent, and the headers that steer the connection rather than describe
// the request (Host, Connection, Transfer-Encoding...) are refused.
//
// The node makes one Fetcher from its --fetch-* flags and gives it to
// the engine, whose fetch_start, fetch_wait and fetch_result imports put
// it in rooms' and fronts' hands (docs/abi.md, docs/operations.md).
package fetch

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/wasmkeep/wasmkeep/abi"
)

// Config configures a Fetcher. A zero field means its Default*.
type Config struct {
	// Allow lists what may be fetched: host names ("api.example.com",
	// "*.example.com"), each with an optional ":port", and addresses
	// (IPs and CIDR prefixes, which also allow the private ranges they
	// cover). None: every fetch is refused.
	Allow []string
	// Timeout bounds a fetch, redirects included (DefaultTimeout).
	Timeout time.Duration
	// MaxRequest bounds a request's body (DefaultMaxRequest).
	MaxRequest int
	// MaxResponse bounds a response's body (DefaultMaxResponse).
	MaxResponse int
	// PerRoom and PerNode bound the fetches in flight of one room and of
	// the node (DefaultPerRoom, DefaultPerNode); past them a fetch is
	// refused at once.
	PerRoom, PerNode int
	// Resolver resolves host names (default net.DefaultResolver).
	Resolver interface {
		LookupNetIP(ctx context.Context, network, host string) ([]netip.Addr, error)
	}
	// Observe, if set, is told every fetch's outcome (Outcome) and how
	// long it took, refusals included: the node's metrics.
	Observe func(outcome string, took time.Duration)
}

// Defaults of Config.
const (
	DefaultTimeout     = 10 * time.Second
	DefaultMaxRequest  = 1 << 20
	DefaultMaxResponse = 1 << 20
	DefaultPerRoom     = 4
	DefaultPerNode     = 64
	maxRedirects       = 5
)

func (c Config) withDefaults() Config {
	if c.Timeout <= 0 {
		c.Timeout = DefaultTimeout
	}
	if c.MaxRequest <= 0 {
		c.MaxRequest = DefaultMaxRequest
	}
	if c.MaxResponse <= 0 {
		c.MaxResponse = DefaultMaxResponse
	}
	if c.PerRoom <= 0 {
		c.PerRoom = DefaultPerRoom
	}
	if c.PerNode <= 0 {
		c.PerNode = DefaultPerNode
	}
	if c.Resolver == nil {
		c.Resolver = net.DefaultResolver
	}
	return c
}

// Errors.
var (
	// ErrNotAllowed: the URL's host is not in the allow list.
	ErrNotAllowed = errors.New("fetch: host not allowed (--fetch-allow)")
	// ErrAddressRefused: the host resolved to an address of this
	// machine or a private network that no address entry allows.
	ErrAddressRefused = errors.New("fetch: address refused: loopback, private, link-local or reserved, and not allowed by address")
	// ErrTooLarge: a request or response body over its bound.
	ErrTooLarge = errors.New("fetch: body over the limit")
	// ErrTooMany: the room's or the node's fetches in flight are at
	// their bound.
	ErrTooMany = errors.New("fetch: too many fetches in flight")
	// ErrBadRequest: not an http or https URL, or a malformed request.
	ErrBadRequest = errors.New("fetch: bad request")
	// ErrTimeout: no whole answer within the timeout.
	ErrTimeout = errors.New("fetch: no answer within the timeout (--fetch-timeout)")
)

// Outcomes of a fetch, as Outcome names them.
const (
	OutcomeOK             = "ok"
	OutcomeNotAllowed     = "not_allowed"
	OutcomeAddressRefused = "address_refused"
	OutcomeTooLarge       = "too_large"
	OutcomeTooMany        = "too_many"
	OutcomeBadRequest     = "bad_request"
	OutcomeTimeout        = "timeout"
	OutcomeCanceled       = "canceled"
	OutcomeFailed         = "failed"
)

// Outcomes are every name Outcome gives, OutcomeOK first, for metrics to
// register up front.
var Outcomes = []string{OutcomeOK, OutcomeNotAllowed, OutcomeAddressRefused, OutcomeTooLarge, OutcomeTooMany,
	OutcomeBadRequest, OutcomeTimeout, OutcomeCanceled, OutcomeFailed}

// Outcome names the kind of a fetch's error (nil: OutcomeOK): one of the
// Outcome* constants, for metrics and for the status a guest is given.
// OutcomeFailed is the rest: the name did not resolve, the connection or
// TLS failed, the server broke the protocol.
func Outcome(err error) string {
	switch {
	case err == nil:
		return OutcomeOK
	case errors.Is(err, ErrNotAllowed):
		return OutcomeNotAllowed
	case errors.Is(err, ErrAddressRefused):
		return OutcomeAddressRefused
	case errors.Is(err, ErrTooLarge):
		return OutcomeTooLarge
	case errors.Is(err, ErrTooMany):
		return OutcomeTooMany
	case errors.Is(err, ErrBadRequest):
		return OutcomeBadRequest
	case errors.Is(err, ErrTimeout):
		return OutcomeTimeout
	case errors.Is(err, context.Canceled):
		return OutcomeCanceled
	}
	return OutcomeFailed
}

// Request is a fetch's request.
type Request struct {
	Method string
	URL    string
	Header http.Header
	Body   []byte
}

// Response is a fetch's answer.
type Response struct {
	Status int
	Header http.Header
	Body   []byte
}

// Fetcher makes fetches. Safe for concurrent use.
type Fetcher struct {
	cfg    Config
	names  []nameRule
	addrs  []netip.Prefix
	client *http.Client

	mu     sync.Mutex
	node   int
	byRoom map[string]int
}

type nameRule struct {
	host     string // lower case; with wildcard, the suffix after "*"
	wildcard bool
	port     string // "" for any
}

// New returns a Fetcher, or an error naming an entry of cfg.Allow that is
// none of the accepted forms.
func New(cfg Config) (*Fetcher, error) {
	cfg = cfg.withDefaults()
	f := &Fetcher{cfg: cfg, byRoom: map[string]int{}}
	for _, e := range cfg.Allow {
		e = strings.TrimSpace(e)
		if p, err := netip.ParsePrefix(e); err == nil {
			f.addrs = append(f.addrs, p.Masked())
			continue
		}
		if a, err := netip.ParseAddr(e); err == nil {
			f.addrs = append(f.addrs, netip.PrefixFrom(a.Unmap(), a.Unmap().BitLen()))
			continue
		}
		host, port := e, ""
		if h, p, err := net.SplitHostPort(e); err == nil {
			host, port = h, p
			if _, err := strconv.ParseUint(p, 10, 16); err != nil {
				return nil, fmt.Errorf("fetch: allow entry %q: bad port", e)
			}
		}
		host = strings.ToLower(host)
		r := nameRule{host: host, port: port}
		if rest, ok := strings.CutPrefix(host, "*."); ok {
			r.host, r.wildcard = "."+rest, true
		}
		if !validHostName(strings.TrimPrefix(r.host, ".")) {
			return nil, fmt.Errorf("fetch: allow entry %q is not a host name, host:port, IP address or CIDR prefix", e)
		}
		f.names = append(f.names, r)
	}
	f.client = &http.Client{
		Transport: &http.Transport{
			Proxy:               nil, // a proxy would dial unchecked
			DialContext:         f.dial,
			ForceAttemptHTTP2:   true,
			MaxIdleConns:        64,
			IdleConnTimeout:     30 * time.Second,
			TLSHandshakeTimeout: cfg.Timeout,
			// The response's headers reach the guest whole, in one record.
			MaxResponseHeaderBytes: abi.MaxFetchHeaderBytes,
		},
		CheckRedirect: func(r *http.Request, via []*http.Request) error {
			if len(via) >= maxRedirects {
				return fmt.Errorf("fetch: more than %d redirects", maxRedirects)
			}
			return f.allowedURL(r.URL)
		},
	}
	return f, nil
}

func validHostName(h string) bool {
	if h == "" || len(h) > 253 {
		return false
	}
	for _, label := range strings.Split(h, ".") {
		if label == "" || len(label) > 63 {
			return false
		}
		for _, c := range label {
			if !(c == '-' || c >= 'a' && c <= 'z' || c >= '0' && c <= '9') {
				return false
			}
		}
	}
	return true
}

// allowedURL checks a URL's scheme and host against the allow list (the
// address is checked again when dialled).
func (f *Fetcher) allowedURL(u *url.URL) error {
	if u.Scheme != "http" && u.Scheme != "https" {
		return fmt.Errorf("%w: scheme %q (http or https)", ErrBadRequest, u.Scheme)
	}
	if u.User != nil {
		return fmt.Errorf("%w: credentials in the URL", ErrBadRequest)
	}
	host, port := strings.ToLower(u.Hostname()), u.Port()
	if port == "" {
		port = map[string]string{"http": "80", "https": "443"}[u.Scheme]
	}
	if a, err := netip.ParseAddr(host); err == nil {
		if f.addressAllowed(a) {
			return nil
		}
		return fmt.Errorf("%w: %s", ErrNotAllowed, host)
	}
	for _, r := range f.names {
		match := host == r.host
		if r.wildcard {
			match = strings.HasSuffix(host, r.host)
		}
		if match && (r.port == "" || r.port == port) {
			return nil
		}
	}
	return fmt.Errorf("%w: %s", ErrNotAllowed, net.JoinHostPort(host, port))
}

// addressAllowed reports whether an address entry covers a.
func (f *Fetcher) addressAllowed(a netip.Addr) bool {
	a = a.Unmap()
	for _, p := range f.addrs {
		if p.Contains(a) {
			return true
		}
	}
	return false
}

// special are the ranges of this machine and of private networks: never
// dialled unless an address entry allows them.
var special = func() []netip.Prefix {
	var ps []netip.Prefix
	for _, s := range []string{
		"0.0.0.0/8", "10.0.0.0/8", "100.64.0.0/10", "127.0.0.0/8", "169.254.0.0/16", "172.16.0.0/12",
		"192.0.0.0/24", "192.168.0.0/16", "198.18.0.0/15", "224.0.0.0/4", "240.0.0.0/4",
		"::/128", "::1/128", "fc00::/7", "fe80::/10", "ff00::/8", "64:ff9b::/96",
	} {
		ps = append(ps, netip.MustParsePrefix(s))
	}
	return ps
}()

// refused reports whether dialling a needs an address entry.
func refused(a netip.Addr) bool {
	a = a.Unmap()
	for _, p := range special {
		if p.Contains(a) {
			return true
		}
	}
	return false
}

// dial resolves addr's host, checks each address, and connects to the
// first one allowed, by that address.
func (f *Fetcher) dial(ctx context.Context, network, addr string) (net.Conn, error) {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return nil, err
	}
	var addrs []netip.Addr
	if a, err := netip.ParseAddr(host); err == nil {
		addrs = []netip.Addr{a}
	} else if addrs, err = f.cfg.Resolver.LookupNetIP(ctx, "ip", host); err != nil {
		return nil, err
	}
	var d net.Dialer
	var last error = fmt.Errorf("%w: %s has no address", ErrAddressRefused, host)
	for _, a := range addrs {
		if refused(a) && !f.addressAllowed(a) {
			last = fmt.Errorf("%w: %s is %s", ErrAddressRefused, host, a.Unmap())
			continue
		}
		c, err := d.DialContext(ctx, network, net.JoinHostPort(a.Unmap().String(), port))
		if err == nil {
			return c, nil
		}
		last = err
	}
	return nil, last
}

// Pending is a fetch under way (Start).
type Pending struct {
	done chan struct{}
	resp *Response
	err  error
}

// Done is closed once the fetch is answered or failed.
func (p *Pending) Done() <-chan struct{} { return p.done }

// Result is the answer, or why there is none; valid once Done is closed.
func (p *Pending) Result() (*Response, error) { return p.resp, p.err }

// Start checks req (check), takes one of the room's and the node's places
// in flight, and sends it on a goroutine of its own. What is wrong with
// the request, or too many fetches in flight, is known at once: the
// Pending comes back done. The fetch holds its places until it is
// answered or fails, the timeout or ctx's end at the latest. req's body
// may alias memory the caller reuses once Start returns (a guest's): Start
// copies it, once it is checked and bounded.
func (f *Fetcher) Start(ctx context.Context, room string, req Request) *Pending {
	began := time.Now()
	p := &Pending{done: make(chan struct{})}
	if req.Method == "" {
		req.Method = http.MethodGet
	}
	u, err := f.check(req)
	if err == nil && !f.acquire(room) {
		err = ErrTooMany
	}
	if err != nil {
		f.finish(p, nil, err, began)
		return p
	}
	req.Body = bytes.Clone(req.Body)
	go func() {
		resp, err := f.send(ctx, u, req)
		// The places are free before the answer is seen: whoever waited
		// for it may fetch again at once.
		f.release(room)
		f.finish(p, resp, err, began)
	}()
	return p
}

func (f *Fetcher) finish(p *Pending, resp *Response, err error, began time.Time) {
	p.resp, p.err = resp, err
	if f.cfg.Observe != nil {
		f.cfg.Observe(Outcome(err), time.Since(began))
	}
	close(p.done)
}

// Do sends req for room and returns the answer, or why not: Start, and
// the wait for its end.
func (f *Fetcher) Do(ctx context.Context, room string, req Request) (*Response, error) {
	p := f.Start(ctx, room, req)
	<-p.Done()
	return p.Result()
}

// send makes the request checked by check, within the timeout.
func (f *Fetcher) send(ctx context.Context, u *url.URL, req Request) (*Response, error) {
	ctx, cancel := context.WithTimeout(ctx, f.cfg.Timeout)
	defer cancel()
	hr, err := http.NewRequestWithContext(ctx, req.Method, u.String(), bytes.NewReader(req.Body))
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrBadRequest, err)
	}
	for k, vs := range req.Header {
		for _, v := range vs {
			hr.Header.Add(k, v)
		}
	}
	timedOut := func(err error) error {
		if errors.Is(ctx.Err(), context.DeadlineExceeded) {
			return fmt.Errorf("%w: %v", ErrTimeout, f.cfg.Timeout)
		}
		return err
	}
	resp, err := f.client.Do(hr)
	if err != nil {
		return nil, timedOut(unwrapURLError(err))
	}
	defer resp.Body.Close()
	if n := headerLines(resp.Header); n > abi.MaxHeaderCount {
		return nil, fmt.Errorf("%w: the response has %d header lines (at most %d)", ErrTooLarge, n, abi.MaxHeaderCount)
	}
	body, err := io.ReadAll(io.LimitReader(resp.Body, int64(f.cfg.MaxResponse)+1))
	if err != nil {
		return nil, timedOut(err)
	}
	if len(body) > f.cfg.MaxResponse {
		return nil, fmt.Errorf("%w: the response is over %d bytes", ErrTooLarge, f.cfg.MaxResponse)
	}
	return &Response{Status: resp.StatusCode, Header: resp.Header, Body: body}, nil
}

func headerLines(h http.Header) int {
	n := 0
	for _, vs := range h {
		n += len(vs)
	}
	return n
}

// methods a guest may send: not CONNECT, which would make the node a
// tunnel, nor TRACE, which echoes what the node added.
var methods = map[string]bool{
	http.MethodGet: true, http.MethodHead: true, http.MethodPost: true, http.MethodPut: true,
	http.MethodPatch: true, http.MethodDelete: true, http.MethodOptions: true,
}

// refusedHeaders steer the connection, its framing or a proxy rather than
// describe the request; net/http sets those it needs itself, from the URL
// and the body. A guest that sets one is refused rather than ignored.
var refusedHeaders = map[string]bool{
	"Host": true, "Connection": true, "Keep-Alive": true, "Proxy-Connection": true,
	"Proxy-Authorization": true, "Te": true, "Trailer": true, "Transfer-Encoding": true,
	"Upgrade": true, "Content-Length": true,
}

// check parses and checks a guest's request: every length bounded (the
// URL, the headers, the body), the method one of methods, header names
// tokens and values without control characters, no refusedHeaders, and
// the URL allowed (allowedURL; the address is checked when dialled).
func (f *Fetcher) check(req Request) (*url.URL, error) {
	if len(req.URL) > abi.MaxFetchURL {
		return nil, fmt.Errorf("%w: a URL of %d bytes (at most %d)", ErrTooLarge, len(req.URL), abi.MaxFetchURL)
	}
	if len(req.Body) > f.cfg.MaxRequest {
		return nil, fmt.Errorf("%w: a request body of %d bytes (at most %d)", ErrTooLarge, len(req.Body), f.cfg.MaxRequest)
	}
	if !methods[req.Method] {
		return nil, fmt.Errorf("%w: method %.32q (GET, HEAD, POST, PUT, PATCH, DELETE or OPTIONS)", ErrBadRequest, req.Method)
	}
	size := 0
	for k, vs := range req.Header {
		if !validToken(k) {
			return nil, fmt.Errorf("%w: header name %.64q", ErrBadRequest, k)
		}
		if refusedHeaders[http.CanonicalHeaderKey(k)] || strings.HasPrefix(http.CanonicalHeaderKey(k), "Proxy-") {
			return nil, fmt.Errorf("%w: header %s is the host's to set", ErrBadRequest, k)
		}
		for _, v := range vs {
			if !validValue(v) {
				return nil, fmt.Errorf("%w: header %s has a control character", ErrBadRequest, k)
			}
			size += len(k) + len(v)
		}
	}
	if n := headerLines(req.Header); n > abi.MaxHeaderCount || size > abi.MaxFetchHeaderBytes {
		return nil, fmt.Errorf("%w: %d header lines of %d bytes (at most %d lines, %d bytes)", ErrTooLarge, n, size, abi.MaxHeaderCount, abi.MaxFetchHeaderBytes)
	}
	u, err := url.Parse(req.URL)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrBadRequest, err)
	}
	return u, f.allowedURL(u)
}

// validToken reports whether s is an RFC 9110 token, as a header name
// must be.
func validToken(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || strings.IndexByte("!#$%&'*+-.^_`|~", c) >= 0) {
			return false
		}
	}
	return true
}

// validValue reports whether a header value has no control character
// but tab: a CR or LF would end the header line where the guest chose.
func validValue(s string) bool {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < ' ' && c != '\t' || c == 0x7f {
			return false
		}
	}
	return true
}

// unwrapURLError keeps the reason of a client error (a refused redirect
// or address) rather than net/http's wrapping of it.
func unwrapURLError(err error) error {
	var ue *url.Error
	if errors.As(err, &ue) && ue.Err != nil {
		return ue.Err
	}
	return err
}

func (f *Fetcher) acquire(room string) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.node >= f.cfg.PerNode || f.byRoom[room] >= f.cfg.PerRoom {
		return false
	}
	f.node++
	f.byRoom[room]++
	return true
}

func (f *Fetcher) release(room string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.node--
	if f.byRoom[room]--; f.byRoom[room] == 0 {
		delete(f.byRoom, room)
	}
}
