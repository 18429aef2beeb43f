package socket

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"testing"
	"time"

	"github.com/gobwas/ws"
	"github.com/wasmkeep/wasmkeep/abi"
	"github.com/wasmkeep/wasmkeep/internal/limits"
	"github.com/wasmkeep/wasmkeep/internal/wstest"
)

const ms = int64(time.Millisecond)

func TestGCRA(t *testing.T) {
	g := newGCRA(10, 3) // a token per 100 ms, 3 at once
	var tat int64
	now := int64(time.Hour) // the bucket starts full whatever the clock
	for i := range 3 {
		if ok, _ := g.take(&tat, now); !ok {
			t.Fatalf("burst: take %d refused", i)
		}
	}
	ok, wait := g.take(&tat, now)
	if ok || wait != 100*time.Millisecond {
		t.Fatalf("past the burst: ok %v, wait %v; want refused, 100ms", ok, wait)
	}
	if ok, wait := g.take(&tat, now+40*ms); ok || wait != 60*time.Millisecond {
		t.Fatalf("40 ms later: ok %v, wait %v", ok, wait)
	}
	if ok, _ := g.take(&tat, now+100*ms); !ok {
		t.Fatal("one token after 100 ms: refused")
	}
	if ok, _ := g.take(&tat, now+100*ms); ok {
		t.Fatal("a second token after 100 ms")
	}
	// Long idle refills the bucket to its burst, no more.
	later := now + int64(time.Minute)
	for i := range 3 {
		if ok, _ := g.take(&tat, later); !ok {
			t.Fatalf("after idling: take %d refused", i)
		}
	}
	if ok, _ := g.take(&tat, later); ok {
		t.Fatal("after idling: more than the burst")
	}
	// A burst too large to count in nanoseconds is capped, not overflowed.
	if huge := newGCRA(1, 1<<62); huge.tolerance != int64(24*time.Hour) {
		t.Fatalf("tolerance of a huge burst: %v", time.Duration(huge.tolerance))
	}
	// Off: always.
	var off gcra
	for range 1000 {
		if ok, _ := off.take(&tat, 0); !ok {
			t.Fatal("an unlimited bucket refused")
		}
	}
}

var (
	ipA = netip.MustParseAddr("192.0.2.1")
	ipB = netip.MustParseAddr("192.0.2.2")
)

func TestAdmissionAttemptRate(t *testing.T) {
	a := newAdmission(Config{UpgradeRatePerIP: 2, UpgradeBurstPerIP: 3, MaxSockets: 100})
	now := int64(time.Hour)
	for i := range 3 {
		e, reason, _ := a.admit(ipA, now)
		if e == nil {
			t.Fatalf("attempt %d refused: %s", i, reason)
		}
		a.release(e, now)
	}
	e, reason, wait := a.admit(ipA, now)
	if e != nil || reason != rejectIPRate || wait != 500*time.Millisecond {
		t.Fatalf("fourth attempt: %v %q %v, want refused for ip_rate, 500ms", e, reason, wait)
	}
	if e, _, _ := a.admit(ipB, now); e == nil {
		t.Fatal("another address was refused")
	}
	if e, reason, _ := a.admit(ipA, now+500*ms); e == nil {
		t.Fatalf("after 500 ms: %s", reason)
	}
}

func TestAdmissionConcurrent(t *testing.T) {
	a := newAdmission(Config{MaxSocketsPerIP: 2, MaxSockets: 100})
	now := int64(time.Hour)
	e1, _, _ := a.admit(ipA, now)
	e2, _, _ := a.admit(ipA, now)
	if e1 == nil || e2 == nil {
		t.Fatal("first two refused")
	}
	if e, reason, _ := a.admit(ipA, now); e != nil || reason != rejectIPConcurrent {
		t.Fatalf("third: %v %q", e, reason)
	}
	// Refusals without a rate spend nothing: many of them change nothing.
	for range 100 {
		a.admit(ipA, now)
	}
	a.release(e1, now)
	e3, reason, _ := a.admit(ipA, now)
	if e3 == nil {
		t.Fatalf("after a release: %s", reason)
	}
	a.release(e2, now)
	a.release(e3, now)
	if n := a.size(); n != 0 {
		t.Fatalf("%d entries left after every socket closed", n)
	}
}

func TestAdmissionForgetsIdleAddresses(t *testing.T) {
	a := newAdmission(Config{UpgradeRatePerIP: 10, UpgradeBurstPerIP: 1, MaxSockets: 100})
	// 200,000 addresses, one attempt each, one every 10 µs: each entry's
	// bucket is full again 100 ms after its attempt, so about 10,000 are
	// live at any time; the table must stay near that.
	now := int64(time.Hour)
	peak := 0
	for i := range 200_000 {
		key := netip.AddrFrom4([4]byte{10, byte(i >> 16), byte(i >> 8), byte(i)})
		e, reason, _ := a.admit(key, now)
		if e == nil {
			t.Fatalf("attempt %d refused: %s", i, reason)
		}
		a.release(e, now)
		peak = max(peak, a.size())
		now += 10 * int64(time.Microsecond)
	}
	if peak > 2*10_000+minSweepAt {
		t.Fatalf("table peaked at %d entries", peak)
	}
	now += int64(time.Second)
	a.admit(ipA, now) // a sweep happens only when the table grows
	a.mu.Lock()
	a.sweepLocked(now)
	a.mu.Unlock()
	if n := a.size(); n != 1 {
		t.Fatalf("%d entries after every bucket refilled", n)
	}
}

func TestAdmissionTableFull(t *testing.T) {
	a := newAdmission(Config{UpgradeRatePerIP: 1, MaxSockets: 1})
	a.maxEntries = 4
	now := int64(time.Hour)
	var held []*ipEntry
	for i := range 4 {
		e, reason, _ := a.admit(netip.AddrFrom4([4]byte{10, 0, 0, byte(i)}), now)
		if e == nil {
			t.Fatalf("address %d refused: %s", i, reason)
		}
		held = append(held, e)
	}
	if e, reason, _ := a.admit(ipA, now); e != nil || reason != rejectIPTableFull {
		t.Fatalf("fifth address: %v %q", e, reason)
	}
	// A known address still gets in (its bucket allows).
	if e, reason, _ := a.admit(netip.AddrFrom4([4]byte{10, 0, 0, 0}), now+int64(time.Second)); e == nil {
		t.Fatalf("known address: %s", reason)
	}
	// Released sockets whose buckets have not refilled stay until a sweep,
	// which at the cap runs at most once a second.
	for _, e := range held[1:] {
		a.release(e, now)
	}
	if e, _, _ := a.admit(ipA, now+10*ms); e != nil {
		t.Fatal("admitted before the buckets refilled")
	}
	if e, reason, _ := a.admit(ipA, now+2*int64(time.Second)); e == nil {
		t.Fatalf("after the buckets refilled: %s", reason)
	}
}

func TestClientKey(t *testing.T) {
	cases := []struct {
		remote, xff string
		trust       bool
		want        string
	}{
		{"192.0.2.7:5000", "", false, "192.0.2.7"},
		{"[::ffff:192.0.2.7]:5000", "", false, "192.0.2.7"},
		{"[2001:db8:1:2:aaaa:bbbb:cccc:dddd]:443", "", false, "2001:db8:1:2::"},
		{"[2001:db8:1:2::1]:443", "", false, "2001:db8:1:2::"},
		{"[fe80::1%eth0]:80", "", false, "fe80::"},
		{"192.0.2.7:5000", "203.0.113.9", false, "192.0.2.7"},
		{"192.0.2.7:5000", "203.0.113.9", true, "203.0.113.9"},
		{"192.0.2.7:5000", "198.51.100.1, 203.0.113.9", true, "203.0.113.9"},
		{"192.0.2.7:5000", "2001:db8:9:9::5", true, "2001:db8:9:9::"},
		{"192.0.2.7:5000", "not an address", true, "192.0.2.7"},
	}
	for _, tc := range cases {
		r := &http.Request{RemoteAddr: tc.remote, Header: http.Header{}}
		if tc.xff != "" {
			r.Header.Set("X-Forwarded-For", tc.xff)
		}
		got, ok := clientKey(r, tc.trust)
		if !ok || got.String() != tc.want {
			t.Errorf("%s xff %q trust %v: %v %v, want %s", tc.remote, tc.xff, tc.trust, got, ok, tc.want)
		}
	}
	// The last of several headers counts.
	r := &http.Request{RemoteAddr: "192.0.2.7:1", Header: http.Header{"X-Forwarded-For": {"203.0.113.1", "203.0.113.2"}}}
	if got, _ := clientKey(r, true); got.String() != "203.0.113.2" {
		t.Errorf("two headers: %v", got)
	}
	if _, ok := clientKey(&http.Request{RemoteAddr: "pipe"}, false); ok {
		t.Error("a peer that is no IP address got a key")
	}
}

// getStatus makes a plain GET (which reaches Upgrade like any request) and
// returns its status and Retry-After.
func getStatus(t *testing.T, s *testServer) (int, string) {
	t.Helper()
	resp, err := http.Get(s.srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	return resp.StatusCode, resp.Header.Get("Retry-After")
}

func dialStatus(url string) (int, error) {
	conn, _, _, err := ws.Dial(context.Background(), url)
	if err == nil {
		conn.Close()
		return http.StatusSwitchingProtocols, nil
	}
	var se ws.StatusError
	if errors.As(err, &se) {
		return int(se), nil
	}
	return 0, err
}

func TestUpgradeAttemptRate(t *testing.T) {
	rec := newRecorder(t, false)
	s := newServer(t, Config{UpgradeRatePerIP: 1, UpgradeBurstPerIP: 2}, rec)
	dial(t, s.url)
	dial(t, s.url)
	status, retry := getStatus(t, s)
	if status != http.StatusTooManyRequests || retry != "1" {
		t.Fatalf("third attempt: %d, Retry-After %q; want 429, 1", status, retry)
	}
	if st, err := dialStatus(s.url); st != http.StatusTooManyRequests {
		t.Fatalf("fourth attempt: %d %v", st, err)
	}
	if got := s.hub.m.rejectIPRate.Get(); got != 2 {
		t.Errorf("ip_rate rejections %d, want 2", got)
	}
	if s.hub.Count() != 2 {
		t.Errorf("count %d", s.hub.Count())
	}
	// The attempts were refused before the handshake: no bad request.
	if got := s.hub.m.rejectBad.Get(); got != 0 {
		t.Errorf("bad_request rejections %d", got)
	}
}

func TestUpgradeSocketsPerIP(t *testing.T) {
	rec := newRecorder(t, false)
	s := newServer(t, Config{MaxSocketsPerIP: 2, RetryAfter: 3 * time.Second, CloseTimeout: 100 * time.Millisecond}, rec)
	a := dial(t, s.url)
	dial(t, s.url)
	if st, err := dialStatus(s.url); st != http.StatusTooManyRequests {
		t.Fatalf("third socket: %d %v", st, err)
	}
	if status, retry := getStatus(t, s); status != http.StatusTooManyRequests || retry != "3" {
		t.Fatalf("status %d, Retry-After %q", status, retry)
	}
	if got := s.hub.m.rejectIPConcurrent.Get(); got != 2 {
		t.Errorf("ip_concurrent rejections %d", got)
	}
	if n := s.hub.adm.size(); n != 1 {
		t.Errorf("tracked addresses %d", n)
	}
	// A socket that closes frees its slot once its close is reported.
	a.write(ws.OpClose, true, closeBody(1000, ""))
	rec.nextClose(t)
	eventually(t, "slot freed", func() bool { return s.hub.Count() == 1 })
	dial(t, s.url)
	if got := s.hub.m.rejectIPConcurrent.Get(); got != 2 {
		t.Errorf("ip_concurrent rejections %d after the slot freed", got)
	}
	ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	defer cancel()
	if err := s.hub.CloseAll(ctx, abi.CloseServiceRestart, ""); err != nil {
		t.Fatal(err)
	}
	if n := s.hub.adm.size(); n != 0 {
		t.Errorf("tracked addresses %d after every socket closed", n)
	}
}

func TestMessageRateDropsAndResumes(t *testing.T) {
	rec := newRecorder(t, false)
	s := newServer(t, Config{MessageRate: 20, MessageBurst: 5}, rec)
	c := dial(t, s.url)
	s.conn(t)
	// 50 messages in one write: the burst passes, the rest is dropped (but
	// for a token or so refilled while they are read).
	var flood []byte
	for i := range 50 {
		flood = append(flood, wstest.MaskedFrame(0x80|opText, uint64(len(fmt.Sprint(i))), []byte(fmt.Sprint(i)))...)
	}
	c.writeRaw(flood)
	eventually(t, "flood read", func() bool { return s.hub.m.messagesIn.Get() == 50 })
	dropped := int(s.hub.m.messagesDropped.Get())
	delivered := 50 - dropped
	if delivered < 5 || delivered > 10 {
		t.Fatalf("%d of 50 delivered (%d dropped), want the burst of 5 and a few", delivered, dropped)
	}
	for i := range delivered {
		// The burst is the first five; a refilled token may pass any later.
		if e := rec.nextMsg(t); i < 5 && string(e.data) != fmt.Sprint(i) {
			t.Fatalf("message %d: %q", i, e.data)
		}
	}
	// The socket is still open and delivers again once the bucket refills
	// (a token every 50 ms): poll by sending until a message gets through.
	deadline := time.Now().Add(waitTimeout)
	for got := false; !got; {
		if time.Now().After(deadline) {
			t.Fatal("no message delivered after the flood")
		}
		c.write(ws.OpText, true, []byte("again"))
		select {
		case e := <-rec.msgs:
			if string(e.data) != "again" {
				t.Fatalf("got %q", e.data)
			}
			got = true
		case <-time.After(20 * time.Millisecond):
		}
	}
	select {
	case e := <-rec.closes:
		t.Fatalf("socket closed: %d", e.code)
	default:
	}
}

func TestMessageRateUnlimited(t *testing.T) {
	rec := newRecorder(t, false)
	s := newServer(t, Config{MessageRate: limits.Off, MessageBurst: 1}, rec)
	c := dial(t, s.url)
	var flood []byte
	for range 500 {
		flood = append(flood, wstest.MaskedFrame(0x80|opBinary, 1, []byte{1})...)
	}
	c.writeRaw(flood)
	for range 500 {
		rec.nextMsg(t)
	}
	if got := s.hub.m.messagesDropped.Get(); got != 0 {
		t.Fatalf("%d dropped", got)
	}
}

func TestQueueGauges(t *testing.T) {
	rec := newRecorder(t, false)
	release := make(chan struct{})
	rec.block = func([]byte) { <-release }
	s := newServer(t, Config{OutboundBytes: 64 << 20, OutboundFrames: 1 << 20, WriteTimeout: time.Minute, InboundMessages: 3}, rec)
	c := dial(t, s.url) // never reads
	sc := s.conn(t)
	gauge := func(name string) int {
		v := s.metric(t, name)
		if v < 0 {
			t.Fatalf("no metric %s", name)
		}
		return int(v)
	}
	// Outbound: fill the kernel buffers, then the queue.
	chunk := make([]byte, 64<<10)
	eventually(t, "outbound frames queued", func() bool {
		if err := sc.Send(abi.MessageBinary, chunk); err != nil {
			t.Fatal(err)
		}
		return queued(sc) >= 4
	})
	frames := gauge("wasmkeep_socket_outbound_queued_frames")
	size := gauge("wasmkeep_socket_outbound_queued_bytes")
	if frames != queued(sc) || size < frames*len(chunk) {
		t.Errorf("gauges: %d frames, %d bytes; the socket has %d frames queued", frames, size, queued(sc))
	}
	// Inbound: the handler holds one message, three wait.
	for range 5 {
		c.write(ws.OpBinary, true, []byte{1})
	}
	eventually(t, "inbound queue full", func() bool { return gauge("wasmkeep_socket_inbound_queued_messages") == 3 })
	close(release)
	eventually(t, "inbound queue drained", func() bool { return gauge("wasmkeep_socket_inbound_queued_messages") == 0 })
	c.conn.Close() // the server's blocked write fails at once
	rec.nextClose(t)
	eventually(t, "outbound gauge back to 0", func() bool { return gauge("wasmkeep_socket_outbound_queued_frames") == 0 })
}

// TestCloseAllClosesLateRegistrations: a socket whose handshake was under
// way when CloseAll read the registry is closed too when it registers, so
// CloseAll does not wait for it until its context ends.
func TestCloseAllClosesLateRegistrations(t *testing.T) {
	hub := NewHub(Config{CloseTimeout: 50 * time.Millisecond}, nil)
	defer hub.Close()
	hub.count.Add(1) // an upgrade in its handshake
	done := make(chan error, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
		defer cancel()
		done <- hub.CloseAll(ctx, abi.CloseServiceRestart, "restart")
	}()
	eventually(t, "CloseAll under way", func() bool { return hub.closing.Load() != nil })
	server, client := net.Pipe()
	defer client.Close()
	go io.Copy(io.Discard, client)
	rec := newRecorder(t, false)
	hub.register(server, "", nil).Start(rec)
	if e := rec.nextClose(t); e.code != abi.CloseServiceRestart {
		t.Errorf("OnClose %d, want %d", e.code, abi.CloseServiceRestart)
	}
	if err := waitFor(t, done, "CloseAll"); err != nil {
		t.Fatal(err)
	}
	if hub.closing.Load() != nil {
		t.Error("the close cause outlived CloseAll")
	}
}
