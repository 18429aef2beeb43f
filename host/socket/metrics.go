package socket

import "github.com/VictoriaMetrics/metrics"

// hubMetrics are the counters of one Hub. Every metric the package exports
// is defined in the table in newHubMetrics, and nowhere else.
type hubMetrics struct {
	messagesIn      *metrics.Counter
	messagesOut     *metrics.Counter
	messagesDropped *metrics.Counter
	bytesIn         *metrics.Counter
	bytesOut        *metrics.Counter
	pingsSent       *metrics.Counter
	readPauses      *metrics.Counter
	readResumes     *metrics.Counter

	evictSlowReader   *metrics.Counter
	evictQueueLimit   *metrics.Counter
	evictWriteTimeout *metrics.Counter
	evictDead         *metrics.Counter
	evictTooBig       *metrics.Counter
	evictProtocol     *metrics.Counter

	rejectCap          *metrics.Counter
	rejectIPRate       *metrics.Counter
	rejectIPConcurrent *metrics.Counter
	rejectIPTableFull  *metrics.Counter
	rejectBad          *metrics.Counter
	rejectShutdown     *metrics.Counter
}

// Eviction reasons, the values of the reason label of
// wasmkeep_socket_evictions_total.
const (
	evictNone         = ""
	evictSlowReader   = "slow_reader"
	evictQueueLimit   = "queue_limit"
	evictWriteTimeout = "write_timeout"
	evictDead         = "dead"
	evictTooBig       = "too_big"
	evictProtocol     = "protocol"
)

// gauges are the hub's readings taken when the metrics are written.
type gauges struct {
	open      func() float64 // sockets open
	addresses func() float64 // client addresses the admission table tracks
	queued    func() queueTotals
}

func newHubMetrics(set *metrics.Set, g gauges) *hubMetrics {
	m := &hubMetrics{}
	// The table: name (with labels) and where the counter goes.
	//
	// Bytes are wire bytes of WebSocket frames (headers included, the HTTP
	// handshake excluded); messages are complete data messages (text or
	// binary), after reassembly for the inbound side.
	counters := []struct {
		name string
		dst  **metrics.Counter
	}{
		{`wasmkeep_socket_messages_in_total`, &m.messagesIn},
		{`wasmkeep_socket_messages_out_total`, &m.messagesOut},
		{`wasmkeep_socket_messages_dropped_total{reason="rate"}`, &m.messagesDropped},
		{`wasmkeep_socket_bytes_in_total`, &m.bytesIn},
		{`wasmkeep_socket_bytes_out_total`, &m.bytesOut},
		{`wasmkeep_socket_pings_sent_total`, &m.pingsSent},
		// A reader stopped because its socket's outbound queue reached
		// the budget, and let go again once it drained (or closed).
		{`wasmkeep_socket_read_pauses_total`, &m.readPauses},
		{`wasmkeep_socket_read_resumes_total`, &m.readResumes},
		{`wasmkeep_socket_evictions_total{reason="slow_reader"}`, &m.evictSlowReader},
		{`wasmkeep_socket_evictions_total{reason="queue_limit"}`, &m.evictQueueLimit},
		{`wasmkeep_socket_evictions_total{reason="write_timeout"}`, &m.evictWriteTimeout},
		{`wasmkeep_socket_evictions_total{reason="dead"}`, &m.evictDead},
		{`wasmkeep_socket_evictions_total{reason="too_big"}`, &m.evictTooBig},
		{`wasmkeep_socket_evictions_total{reason="protocol"}`, &m.evictProtocol},
		{`wasmkeep_socket_upgrades_rejected_total{reason="cap"}`, &m.rejectCap},
		{`wasmkeep_socket_upgrades_rejected_total{reason="ip_rate"}`, &m.rejectIPRate},
		{`wasmkeep_socket_upgrades_rejected_total{reason="ip_concurrent"}`, &m.rejectIPConcurrent},
		{`wasmkeep_socket_upgrades_rejected_total{reason="ip_table_full"}`, &m.rejectIPTableFull},
		{`wasmkeep_socket_upgrades_rejected_total{reason="bad_request"}`, &m.rejectBad},
		{`wasmkeep_socket_upgrades_rejected_total{reason="shutdown"}`, &m.rejectShutdown},
	}
	for _, c := range counters {
		*c.dst = set.NewCounter(c.name)
	}
	// Sockets open on this node, including those in their handshake.
	set.NewGauge(`wasmkeep_sockets_open`, g.open)
	// Client addresses tracked by the per-address limits (0 when off).
	set.NewGauge(`wasmkeep_socket_tracked_addresses`, g.addresses)
	// Queue occupancy summed over the open sockets, read from every socket
	// when the metrics are written: outbound frames not yet written (the
	// rest of the batch being written included, as for the budget) and
	// their bytes, and inbound messages read and not yet delivered.
	set.NewGauge(`wasmkeep_socket_outbound_queued_frames`, func() float64 { return float64(g.queued().outFrames) })
	set.NewGauge(`wasmkeep_socket_outbound_queued_bytes`, func() float64 { return float64(g.queued().outBytes) })
	set.NewGauge(`wasmkeep_socket_inbound_queued_messages`, func() float64 { return float64(g.queued().inMessages) })
	return m
}

// evicted counts an eviction by reason.
func (m *hubMetrics) evicted(reason string) {
	switch reason {
	case evictSlowReader:
		m.evictSlowReader.Inc()
	case evictQueueLimit:
		m.evictQueueLimit.Inc()
	case evictWriteTimeout:
		m.evictWriteTimeout.Inc()
	case evictDead:
		m.evictDead.Inc()
	case evictTooBig:
		m.evictTooBig.Inc()
	case evictProtocol:
		m.evictProtocol.Inc()
	}
}

// rejected counts a refused upgrade by reason.
func (m *hubMetrics) rejected(reason string) {
	switch reason {
	case rejectCap:
		m.rejectCap.Inc()
	case rejectIPRate:
		m.rejectIPRate.Inc()
	case rejectIPConcurrent:
		m.rejectIPConcurrent.Inc()
	case rejectIPTableFull:
		m.rejectIPTableFull.Inc()
	case rejectBadRequest:
		m.rejectBad.Inc()
	case rejectShutdown:
		m.rejectShutdown.Inc()
	}
}
