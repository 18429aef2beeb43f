package clusternode

import (
	"errors"

	"github.com/VictoriaMetrics/metrics"

	"github.com/wasmkeep/wasmkeep/cluster"
	cm "github.com/wasmkeep/wasmkeep/cluster/member"
)

// memberMetrics are the member's own counters; the core's counts are read
// by gauges at each scrape.
type memberMetrics struct {
	set     *metrics.Set
	lapses  *metrics.Counter
	moves   *metrics.Counter
	acquire map[string]*metrics.Counter
	// sweepUnreadable counts records the owner sweep could not decode.
	sweepUnreadable *metrics.Counter
	parkedReleases  map[string]*metrics.Counter
	ownerClosed     map[string]*metrics.Counter
	waits           map[string]*metrics.Counter
}

var acquireOutcomes = []string{"acquired", "contended", "unknown", "refused", "error"}

func newMemberMetrics(set *metrics.Set, m *Member) memberMetrics {
	mm := memberMetrics{set: set, lapses: set.NewCounter("wasmkeep_cluster_lapses_total"),
		moves: set.NewCounter("wasmkeep_cluster_moves_total"), acquire: map[string]*metrics.Counter{},
		sweepUnreadable: set.NewCounter("wasmkeep_websocket_sweep_unreadable_total")}
	for _, o := range acquireOutcomes {
		mm.acquire[o] = set.NewCounter(`wasmkeep_cluster_acquisitions_total{outcome="` + o + `"}`)
	}
	mm.parkedReleases, mm.ownerClosed = map[string]*metrics.Counter{}, map[string]*metrics.Counter{}
	for _, r := range parkedReleaseReasons {
		mm.parkedReleases[r] = set.NewCounter(`wasmkeep_parked_releases_total{reason="` + r + `"}`)
	}
	for _, r := range ownerCloseReasons {
		mm.ownerClosed[r] = set.NewCounter(`wasmkeep_websocket_owner_closes_total{reason="` + r + `"}`)
	}
	mm.waits = map[string]*metrics.Counter{}
	for _, o := range waitOutcomes {
		mm.waits[o] = set.NewCounter(`wasmkeep_cluster_failover_waits_total{outcome="` + o + `"}`)
	}
	counts := func(f func(cluster.Counters) uint64) func() float64 {
		return func() float64 { return float64(f(m.core.Counts())) }
	}
	set.NewGauge(`wasmkeep_cluster_lease_renewals_total{outcome="ok"}`, counts(func(c cluster.Counters) uint64 { return c.Renewals }))
	set.NewGauge(`wasmkeep_cluster_lease_renewals_total{outcome="failed"}`, counts(func(c cluster.Counters) uint64 { return c.RenewalsFailed }))
	set.NewGauge(`wasmkeep_cluster_fences_total`, counts(func(c cluster.Counters) uint64 { return c.Fences }))
	set.NewGauge(`wasmkeep_cluster_releases_landed_total`, counts(func(c cluster.Counters) uint64 { return c.Released + c.ReleaseMoot }))
	set.NewGauge(`wasmkeep_cluster_release_retries_total`, counts(func(c cluster.Counters) uint64 { return c.ReleaseRetries }))
	status := func(f func(s cluster.Status) int) func() float64 {
		return func() float64 { return float64(f(m.core.Status())) }
	}
	set.NewGauge(`wasmkeep_cluster_holds`, status(func(s cluster.Status) int { return len(s.Holds) }))
	set.NewGauge(`wasmkeep_parked_records`, status(func(s cluster.Status) int { return len(s.Parked) }))
	set.NewGauge(`wasmkeep_parked_wakes_total`, counts(func(c cluster.Counters) uint64 { return c.ParkedWakes }))
	set.NewGauge(`wasmkeep_parked_releases_total{reason="lapse"}`, counts(func(c cluster.Counters) uint64 { return c.ParkedLapsed }))
	set.NewGauge(`wasmkeep_parked_releases_total{reason="stop"}`, counts(func(c cluster.Counters) uint64 { return c.ParkedStopped }))
	set.NewGauge(`wasmkeep_cluster_pending_releases`, status(func(s cluster.Status) int { return len(s.Pending) }))
	set.NewGauge(`wasmkeep_cluster_unresolved_acquisitions`, status(func(s cluster.Status) int { return len(s.Unresolved) }))
	set.NewGauge(`wasmkeep_cluster_lease_valid`, func() float64 {
		if m.core.LeaseValid() {
			return 1
		}
		return 0
	})
	return mm
}

func (mm memberMetrics) acquisition(err error) {
	o := "error"
	switch {
	case err == nil:
		o = "acquired"
	case errors.Is(err, cluster.ErrContended):
		o = "contended"
	case errors.Is(err, cluster.ErrUnknown):
		o = "unknown"
	case errors.Is(err, cluster.ErrHeld), errors.Is(err, cluster.ErrDraining), errors.Is(err, cluster.ErrNotActive):
		o = "refused"
	}
	mm.acquire[o].Inc()
}

// The reasons of wasmkeep_parked_releases_total the member counts (a
// lapse's and a clean stop's are the core's), and of
// wasmkeep_websocket_owner_closes_total.
var (
	parkedReleaseReasons = []string{"last_socket", "drain", "move"}
	ownerCloseReasons    = []string{"sweep", "elsewhere", "drain", "move", "lapse", "fenced", "stop"}
	waitOutcomes         = []string{"here", "elsewhere", "timeout"}
)

// Observe implements cm.Observer: the member's events as metrics.
func (mm memberMetrics) Observe(e cm.Event) {
	switch e.Kind {
	case cm.Released:
		mm.set.GetOrCreateCounter(`wasmkeep_cluster_releases_total{reason="` + e.Why + `"}`).Inc()
	case cm.ParkedReleased:
		mm.parkedReleases[e.Why].Inc()
	case cm.OwnerClosed:
		// The rooms whose sockets this node closed, for why.
		mm.ownerClosed[e.Why].Add(e.Rooms)
	case cm.Acquired:
		mm.acquisition(e.Err)
	case cm.Lapsed:
		mm.lapses.Inc()
	case cm.MoveBegun:
		mm.moves.Inc()
	case cm.Unreadable:
		mm.sweepUnreadable.Inc()
	case cm.Waited:
		mm.waits[e.Why].Inc()
	}
}
