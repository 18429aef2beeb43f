package rooms

import (
	"github.com/VictoriaMetrics/metrics"

	"github.com/wasmkeep/wasmkeep/calls"
	"github.com/wasmkeep/wasmkeep/host/engine"
	"github.com/wasmkeep/wasmkeep/host/images"
	"github.com/wasmkeep/wasmkeep/host/rooms/life"
)

// roomMetrics is the room layer's table of metrics. Every name is
// documented in docs/metrics.md.
type roomMetrics struct {
	wakes              *metrics.Counter
	resumes            *metrics.Counter
	restores           *metrics.Counter
	imageRestores      *metrics.Counter
	imageFallbacks     *metrics.Counter
	warmDropped        map[string]*metrics.Counter
	coldStarts         *metrics.Counter
	wakeErrors         *metrics.Counter
	wakeWaits          *metrics.Counter
	wakesRefused       *metrics.Counter
	wakeSeconds        *metrics.Histogram
	hibernateSeconds   *metrics.Histogram
	snapshotBytes      *metrics.Counter
	snapshotErrors     *metrics.Counter
	snapshotConflict   *metrics.Counter
	queueFull          *metrics.Counter
	messageBatches     *metrics.Counter
	idleCalls          *metrics.Counter
	snapshotWrites     *metrics.Counter
	snapshotsUnchanged *metrics.Counter
	snapshotCorrupt    *metrics.Counter
	compactions        *metrics.Counter
	folds              *metrics.Counter
	segmentsDeleted    *metrics.Counter
	orphansDeleted     *metrics.Counter
	deletions          *metrics.Counter
	gcErrors           *metrics.Counter
	commits            *metrics.Counter
	commitErrors       *metrics.Counter
	commitSeconds      *metrics.Histogram
	commitEvents       *metrics.Counter
	outputsFailed      *metrics.Counter
	joins              map[string]*metrics.Counter
	channelMessages    *metrics.Counter
	channelDrops       map[string]*metrics.Counter
	hibernations       map[string]*metrics.Counter
	events             map[eventKind]*metrics.Counter
	crashes            map[string]*metrics.Counter
	calls              map[string]*metrics.Counter // calls made by this node's rooms, by outcome
}

func newRoomMetrics(set *metrics.Set, m *Manager) *roomMetrics {
	rm := &roomMetrics{
		wakes:              set.NewCounter(`wasmkeep_room_wakes_total`),
		resumes:            set.NewCounter(`wasmkeep_room_resumes_total`),
		restores:           set.NewCounter(`wasmkeep_room_restores_total`),
		imageRestores:      set.NewCounter(`wasmkeep_room_image_restores_total`),
		imageFallbacks:     set.NewCounter(`wasmkeep_room_image_fallbacks_total`),
		warmDropped:        map[string]*metrics.Counter{},
		coldStarts:         set.NewCounter(`wasmkeep_room_cold_starts_total`),
		wakeErrors:         set.NewCounter(`wasmkeep_room_wake_errors_total`),
		wakeWaits:          set.NewCounter(`wasmkeep_room_wake_waits_total`),
		wakesRefused:       set.NewCounter(`wasmkeep_room_wakes_refused_total`),
		wakeSeconds:        set.NewHistogram(`wasmkeep_room_wake_seconds`),
		hibernateSeconds:   set.NewHistogram(`wasmkeep_room_hibernate_seconds`),
		snapshotBytes:      set.NewCounter(`wasmkeep_snapshot_bytes_written_total`),
		snapshotErrors:     set.NewCounter(`wasmkeep_snapshot_write_errors_total`),
		snapshotConflict:   set.NewCounter(`wasmkeep_snapshot_conflicts_total`),
		queueFull:          set.NewCounter(`wasmkeep_room_queue_full_total`),
		messageBatches:     set.NewCounter(`wasmkeep_room_message_batches_total`),
		idleCalls:          set.NewCounter(`wasmkeep_room_idle_calls_total`),
		snapshotWrites:     set.NewCounter(`wasmkeep_snapshot_writes_total`),
		snapshotsUnchanged: set.NewCounter(`wasmkeep_snapshot_unchanged_total`),
		snapshotCorrupt:    set.NewCounter(`wasmkeep_snapshot_unreadable_total`),
		compactions:        set.NewCounter(`wasmkeep_snapshot_compactions_total`),
		folds:              set.NewCounter(`wasmkeep_snapshot_folds_total`),
		segmentsDeleted:    set.NewCounter(`wasmkeep_snapshot_segments_deleted_total`),
		orphansDeleted:     set.NewCounter(`wasmkeep_snapshot_orphans_deleted_total`),
		deletions:          set.NewCounter(`wasmkeep_rooms_deleted_total`),
		gcErrors:           set.NewCounter(`wasmkeep_snapshot_gc_errors_total`),
		commits:            set.NewCounter(`wasmkeep_room_commits_total`),
		commitErrors:       set.NewCounter(`wasmkeep_room_commit_errors_total`),
		commitSeconds:      set.NewHistogram(`wasmkeep_room_commit_seconds`),
		commitEvents:       set.NewCounter(`wasmkeep_room_commit_events_total`),
		outputsFailed:      set.NewCounter(`wasmkeep_room_outputs_failed_total`),
		hibernations:       map[string]*metrics.Counter{},
		events:             map[eventKind]*metrics.Counter{},
		crashes:            map[string]*metrics.Counter{},
		joins:              map[string]*metrics.Counter{},
		channelMessages:    set.NewCounter(`wasmkeep_channel_messages_total`),
		channelDrops:       map[string]*metrics.Counter{},
	}
	for _, r := range []string{"accepted", "rejected", "crashed"} {
		rm.joins[r] = set.NewCounter(`wasmkeep_channel_joins_total{result="` + r + `"}`)
	}
	for _, r := range []string{"malformed", "message_rate", "join_rate", "topic_limit", "invalid_join", "stale", "unmatched"} {
		rm.channelDrops[r] = set.NewCounter(`wasmkeep_channel_drops_total{reason="` + r + `"}`)
	}
	for _, r := range []life.EndReason{life.EndIdle, life.EndEvict, life.EndAdmin, life.EndStop, life.EndDrain, life.EndMove} {
		rm.hibernations[r.String()] = set.NewCounter(`wasmkeep_room_hibernations_total{reason="` + r.String() + `"}`)
	}
	for _, r := range []string{warmExpired, warmMemory, warmChanged, warmStop} {
		rm.warmDropped[r] = set.NewCounter(`wasmkeep_rooms_warm_dropped_total{reason="` + r + `"}`)
	}
	set.NewGauge(`wasmkeep_rooms_warm`, func() float64 {
		n, _ := m.warmCounts()
		return float64(n)
	})
	set.NewGauge(`wasmkeep_rooms_warm_bytes`, func() float64 {
		_, b := m.warmCounts()
		return float64(b)
	})
	imageStat := func(f func(images.Stats) int64) func() float64 {
		return func() float64 {
			if m.images == nil {
				return 0
			}
			return float64(f(m.images.Stats()))
		}
	}
	set.NewGauge(`wasmkeep_images`, imageStat(func(s images.Stats) int64 { return int64(s.Files) }))
	set.NewGauge(`wasmkeep_images_bytes`, imageStat(func(s images.Stats) int64 { return s.Bytes }))
	set.NewGauge(`wasmkeep_image_writes_total`, imageStat(func(s images.Stats) int64 { return s.Writes }))
	set.NewGauge(`wasmkeep_image_bytes_written_total`, imageStat(func(s images.Stats) int64 { return s.BytesWritten }))
	set.NewGauge(`wasmkeep_image_evictions_total`, imageStat(func(s images.Stats) int64 { return s.Evictions }))
	set.NewGauge(`wasmkeep_image_errors_total`, imageStat(func(s images.Stats) int64 { return s.Errors }))
	for k, name := range eventNames {
		if name != "" {
			rm.events[eventKind(k)] = set.NewCounter(`wasmkeep_room_events_total{kind="` + name + `"}`)
		}
	}
	rm.calls = map[string]*metrics.Counter{}
	for _, o := range calls.Outcomes() {
		rm.calls[o] = set.NewCounter(`wasmkeep_room_calls_total{outcome="` + o + `"}`)
	}
	for _, c := range engine.CrashCauses {
		rm.crashes[c] = set.NewCounter(`wasmkeep_room_crashes_total{cause="` + c + `"}`)
	}
	set.NewGauge(`wasmkeep_rooms_resident`, func() float64 {
		return float64(m.Counts().Resident)
	})
	set.NewGauge(`wasmkeep_rooms_waking`, func() float64 {
		return float64(m.Counts().Waking)
	})
	set.NewGauge(`wasmkeep_rooms_hibernated`, func() float64 {
		return float64(m.Counts().Hibernated)
	})
	set.NewGauge(`wasmkeep_rooms_hibernated_with_sockets`, func() float64 {
		return float64(m.Counts().HibernatedWithSockets)
	})
	set.NewGauge(`wasmkeep_snapshot_gc_pending`, func() float64 {
		return float64(m.gc.size())
	})
	set.NewGauge(`wasmkeep_rooms_known`, func() float64 {
		return float64(m.Counts().Known)
	})
	return rm
}
