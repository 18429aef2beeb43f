package socket

import (
	"net/http"
	"net/netip"
	"strings"
	"sync"
	"time"
)

// Reasons an upgrade is refused, the values of the reason label of
// wasmkeep_socket_upgrades_rejected_total.
const (
	rejectNone         = ""
	rejectCap          = "cap"
	rejectIPRate       = "ip_rate"
	rejectIPConcurrent = "ip_concurrent"
	rejectIPTableFull  = "ip_table_full"
	rejectBadRequest   = "bad_request"
	rejectShutdown     = "shutdown"
)

// gcra is a token bucket kept as one number, the generic cell rate
// algorithm's theoretical arrival time: a bucket of burst tokens refilled
// one token per interval. The zero value is a full bucket. Times are on the
// hub's monotonic clock, in nanoseconds.
type gcra struct {
	interval  int64 // nanoseconds per token; 0: no limit
	tolerance int64 // (burst-1) * interval
}

func newGCRA(perSecond, burst int) gcra {
	if perSecond <= 0 {
		return gcra{}
	}
	interval := max(int64(time.Second)/int64(perSecond), 1)
	extra := int64(max(burst, 1) - 1)
	// A burst so large that its tolerance would overflow is a day's worth.
	extra = min(extra, int64(24*time.Hour)/interval)
	return gcra{interval: interval, tolerance: extra * interval}
}

// take spends one token of the bucket whose state is *tat at time now. It
// reports whether there was one; if not, wait is how long until there is.
func (g gcra) take(tat *int64, now int64) (ok bool, wait time.Duration) {
	if g.interval == 0 {
		return true, 0
	}
	t := max(*tat, now)
	if early := t - g.tolerance - now; early > 0 {
		return false, time.Duration(early)
	}
	*tat = t + g.interval
	return true, 0
}

// ipEntry is what admission knows of one client address.
type ipEntry struct {
	key  netip.Addr
	tat  int64 // attempt bucket (gcra)
	open int   // sockets admitted from the address and not yet released
}

// idle reports whether the entry holds nothing a fresh one would not: no
// open socket and a full bucket. Such an entry can be forgotten.
func (e *ipEntry) idle(now int64) bool { return e.open == 0 && e.tat <= now }

// admission applies the per-address limits on upgrades: an attempt rate
// (token bucket) and a number of open sockets. It is pure bookkeeping: the
// caller passes the time, so tests drive it with a fake clock.
//
// Its table holds an entry for each address with an open socket or a bucket
// not yet full again. An entry is forgotten as soon as it is idle (its last
// socket closes after its bucket refilled) or by a sweep (its bucket
// refilled after its last socket closed). The table never holds more than
// maxEntries: an attempt from a new address while it is full (after a
// sweep) is refused.
type admission struct {
	rate       gcra
	perIP      int // open sockets per address; 0: no limit
	maxEntries int

	mu        sync.Mutex
	m         map[netip.Addr]*ipEntry
	sweepAt   int   // sweep when the table reaches this size
	lastSweep int64 // time of the last sweep
}

// Sweeps: when the table has doubled since the last one (so their cost is
// constant per entry added), or, at the cap, at most once per sweepEvery.
const (
	minSweepAt = 1024
	sweepEvery = int64(time.Second)
)

// newAdmission returns nil when no per-address limit is set: nothing is
// tracked then.
func newAdmission(cfg Config) *admission {
	if cfg.UpgradeRatePerIP <= 0 && cfg.MaxSocketsPerIP <= 0 {
		return nil
	}
	return &admission{
		rate:       newGCRA(cfg.UpgradeRatePerIP, cfg.UpgradeBurstPerIP),
		perIP:      max(cfg.MaxSocketsPerIP, 0),
		maxEntries: cfg.MaxSockets + ipTableSlack,
		m:          make(map[netip.Addr]*ipEntry),
		sweepAt:    minSweepAt,
	}
}

// ipTableSlack is how many more addresses than MaxSockets the table holds:
// the addresses whose attempts were counted recently and that have no
// socket open.
const ipTableSlack = 100_000

// admit counts an upgrade attempt from key at now. If it is admitted, the
// returned entry holds one socket of the address until release. If not,
// reason says why and wait is a hint for Retry-After (0: use the default).
func (a *admission) admit(key netip.Addr, now int64) (e *ipEntry, reason string, wait time.Duration) {
	a.mu.Lock()
	defer a.mu.Unlock()
	e = a.m[key]
	if e == nil {
		if len(a.m) >= a.sweepAt || (len(a.m) >= a.maxEntries && now-a.lastSweep >= sweepEvery) {
			a.sweepLocked(now)
		}
		if len(a.m) >= a.maxEntries {
			return nil, rejectIPTableFull, 0
		}
		e = &ipEntry{key: key}
		a.m[key] = e
	}
	if ok, w := a.rate.take(&e.tat, now); !ok {
		return nil, rejectIPRate, w // the entry is not idle: its bucket is empty
	}
	if a.perIP > 0 && e.open >= a.perIP {
		return nil, rejectIPConcurrent, 0
	}
	e.open++
	return e, rejectNone, 0
}

// release gives back the socket an admitted attempt holds.
func (a *admission) release(e *ipEntry, now int64) {
	a.mu.Lock()
	e.open--
	a.forgetIfIdle(e, now)
	a.mu.Unlock()
}

func (a *admission) forgetIfIdle(e *ipEntry, now int64) {
	if e.idle(now) {
		delete(a.m, e.key)
	}
}

func (a *admission) sweepLocked(now int64) {
	for k, e := range a.m {
		if e.idle(now) {
			delete(a.m, k)
		}
	}
	a.lastSweep = now
	a.sweepAt = max(2*len(a.m), minSweepAt)
}

// size is the number of addresses tracked.
func (a *admission) size() int {
	a.mu.Lock()
	defer a.mu.Unlock()
	return len(a.m)
}

// clientKey is the address the per-address limits count a request under:
// the TCP peer (RemoteAddr), or with trustForwarded the last address of the
// last X-Forwarded-For header (the one the proxy in front of the node
// added), if it parses. IPv4-mapped IPv6 addresses count as IPv4. An IPv6
// address counts as its /64: a host is commonly given a whole /64, so
// counting single addresses would let it pass every limit by changing
// address.
func clientKey(r *http.Request, trustForwarded bool) (netip.Addr, bool) {
	var addr netip.Addr
	if trustForwarded {
		if xs := r.Header.Values("X-Forwarded-For"); len(xs) > 0 {
			last := xs[len(xs)-1]
			if i := strings.LastIndexByte(last, ','); i >= 0 {
				last = last[i+1:]
			}
			if a, err := netip.ParseAddr(strings.TrimSpace(last)); err == nil {
				addr = a
			}
		}
	}
	if !addr.IsValid() {
		ap, err := netip.ParseAddrPort(r.RemoteAddr)
		if err != nil {
			return netip.Addr{}, false
		}
		addr = ap.Addr()
	}
	return keyOf(addr), true
}

// keyOf maps an address to its table key (see clientKey).
func keyOf(addr netip.Addr) netip.Addr {
	addr = addr.Unmap().WithZone("")
	if addr.Is6() {
		p, _ := addr.Prefix(64)
		return p.Addr()
	}
	return addr
}

// ClientAddr is the address the per-address limits count r under: its TCP
// peer, or with Config.TrustForwardedFor the address its proxy gave; an
// IPv6 address as its /64. ok is false for a request without an IP peer.
// Other per-address limits of the node (on HTTP request bodies) count
// clients the same way.
func (h *Hub) ClientAddr(r *http.Request) (addr netip.Addr, ok bool) {
	return clientKey(r, h.cfg.TrustForwardedFor)
}
