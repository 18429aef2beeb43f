package fronts

import (
	"github.com/VictoriaMetrics/metrics"

	"github.com/wasmkeep/wasmkeep/calls"
	"github.com/wasmkeep/wasmkeep/host/engine"
)

// frontMetrics is the fronts' table of metrics. Every name is documented
// in docs/metrics.md.
type frontMetrics struct {
	requests  map[string]*metrics.Counter // by outcome
	queueFull *metrics.Counter
	crashes   map[string]*metrics.Counter // by engine.CrashCause
	starts    *metrics.Counter
	idleCalls *metrics.Counter
	seconds   *metrics.Histogram
	calls     map[string]*metrics.Counter // by calls.Outcome
}

// Outcomes of a front's request, as wasmkeep_front_requests_total labels
// them (a request refused for a full queue is counted apart, in
// wasmkeep_front_queue_full_total).
const (
	outcomeAnswered   = "answered"
	outcomeHandedOver = "handed_over"
	outcomeCrashed    = "crashed"
	outcomeNoResponse = "no_response"
	outcomeFailed     = "failed"
)

func newFrontMetrics(set *metrics.Set, f *Fronts) *frontMetrics {
	m := &frontMetrics{
		requests:  map[string]*metrics.Counter{},
		queueFull: set.NewCounter(`wasmkeep_front_queue_full_total`),
		crashes:   map[string]*metrics.Counter{},
		starts:    set.NewCounter(`wasmkeep_front_instance_starts_total`),
		idleCalls: set.NewCounter(`wasmkeep_front_idle_calls_total`),
		seconds:   set.NewHistogram(`wasmkeep_front_request_seconds`),
		calls:     map[string]*metrics.Counter{},
	}
	for _, o := range []string{outcomeAnswered, outcomeHandedOver, outcomeCrashed, outcomeNoResponse, outcomeFailed} {
		m.requests[o] = set.NewCounter(`wasmkeep_front_requests_total{outcome="` + o + `"}`)
	}
	for _, c := range engine.CrashCauses {
		m.crashes[c] = set.NewCounter(`wasmkeep_front_crashes_total{cause="` + c + `"}`)
	}
	for _, o := range calls.Outcomes() {
		m.calls[o] = set.NewCounter(`wasmkeep_front_calls_total{outcome="` + o + `"}`)
	}
	set.NewGauge(`wasmkeep_front_instances`, func() float64 {
		n, _, _ := f.counts()
		return float64(n)
	})
	set.NewGauge(`wasmkeep_front_instances_busy`, func() float64 {
		_, n, _ := f.counts()
		return float64(n)
	})
	set.NewGauge(`wasmkeep_front_requests_waiting`, func() float64 {
		_, _, n := f.counts()
		return float64(n)
	})
	return m
}
