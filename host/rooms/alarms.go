package rooms

import (
	"errors"
	"time"

	"github.com/VictoriaMetrics/metrics"

	"github.com/wasmkeep/wasmkeep/abi"
	"github.com/wasmkeep/wasmkeep/alarms"
	"github.com/wasmkeep/wasmkeep/calls"
	"github.com/wasmkeep/wasmkeep/host/engine"
	"github.com/wasmkeep/wasmkeep/host/rooms/life"
	"github.com/wasmkeep/wasmkeep/host/snapshot"
	"github.com/wasmkeep/wasmkeep/host/store"
)

// Alarms (package alarms): a room keeps one alarm with its state (savedState),
// its index entry created by the commit that makes it durable, and the
// alarm scheduler is told of each alarm a commit or a wake finds here.

// AlarmScheduler is told of the alarms of this node's rooms, to fire them
// on time: Schedule when a commit made one durable or a wake found one,
// Unschedule when a commit replaced or cleared it. alarms.Duty implements
// it.
type AlarmScheduler interface {
	Schedule(e alarms.Entry)
	Unschedule(e alarms.Entry)
}

// alarmState is a room's alarm: its time (Unix ms) and index entry; the
// zero value is no alarm.
type alarmState struct {
	At    int64
	Entry string
}

func (a alarmState) set() bool { return a.Entry != "" }

func (a alarmState) entry(key Key) alarms.Entry {
	return alarms.Entry{Room: calls.Room{Class: key.Class, Name: key.Name}, At: a.At, Entry: a.Entry}
}

// SetAlarm implements engine.AlarmHost (worker, during an event).
func (r *Room) SetAlarm(atMs int64) abi.Status {
	r.alarmSeq++
	r.alarm = alarmState{At: atMs, Entry: alarms.EntryName(r.hold.Generation, r.alarmSeq)}
	r.alarmChanged = true
	return abi.Success
}

// ClearAlarm implements engine.AlarmHost.
func (r *Room) ClearAlarm() abi.Status {
	if r.alarm.set() {
		r.alarm = alarmState{}
		r.alarmChanged = true
	}
	return abi.Success
}

// Alarm implements engine.AlarmHost.
func (r *Room) Alarm() (int64, bool) { return r.alarm.At, r.alarm.set() }

// alarmObjects are the objects a commit that stores alarm a where prev
// was creates: the index entry of a new alarm.
func alarmObjects(key Key, prev, a alarmState) []store.Object {
	if !a.set() || a.Entry == prev.Entry {
		return nil
	}
	e := a.entry(key)
	return []store.Object{{Key: e.Key(), Body: []byte(e.Time().UTC().Format("2006-01-02T15:04:05.000Z"))}}
}

// alarmLanded follows a commit that stored alarm a where prev was: the
// replaced entry goes (alarmGone) and the scheduler hears of the new one
// (manager; any goroutine).
func (m *Manager) alarmLanded(key Key, prev, a alarmState) {
	if prev.Entry == a.Entry {
		return
	}
	m.alarmGone(key, prev)
	if a.set() && m.cfg.Alarms != nil {
		m.cfg.Alarms.Schedule(a.entry(key))
	}
}

// alarmGone makes alarm a's index entry garbage and unschedules it: it is
// no room's alarm any more (replaced, cleared, its room deleted).
func (m *Manager) alarmGone(key Key, a alarmState) {
	if !a.set() {
		return
	}
	m.gc.add(a.entry(key).Key())
	if m.cfg.Alarms != nil {
		m.cfg.Alarms.Unschedule(a.entry(key))
	}
}

// storedAlarmTime is the time of the alarm a stored manifest's room state
// holds, or nil.
func storedAlarmTime(man *snapshot.Manifest) *time.Time {
	st, err := decodeState(man.RoomState)
	if err != nil || !st.Alarm.set() {
		return nil
	}
	at := time.UnixMilli(st.Alarm.At).UTC()
	return &at
}

// alarmLoaded sets the room's alarm from the state it woke with, and
// tells the scheduler: this node now fires it, on time (worker).
func (r *Room) alarmLoaded(a alarmState) {
	r.alarm, r.storedAlarm, r.alarmChanged = a, a, false
	if a.set() && r.m.cfg.Alarms != nil {
		r.m.cfg.Alarms.Schedule(a.entry(r.key))
	}
}

// serveAlarm delivers a room's alarm (a calls.Call with Alarm set): it
// runs the handler if the alarm named is still the room's, and answers
// alarms.ReplyRan, alarms.ReplyStale or alarms.ReplyDropped once the room's state says
// so durably, or an error (the handler crashed: StatusCrashed; its state
// could not be written: StatusRefused).
func (r *Room) serveAlarm(ev *event) calls.Result {
	c, a := ev.call, ev.call.Alarm
	if ev.ctx.Err() != nil {
		return calls.Expired(c)
	}
	wasResident := r.residentNow()
	r.onlyStored = true // an alarm wakes a stored room, never starts one
	err := r.ensureResident(ev.ctx)
	r.onlyStored = false
	switch {
	case errors.Is(err, errNotStored):
		return calls.Result{Reply: []byte(alarms.ReplyStale)}
	case err != nil:
		return callError(c, err)
	}
	if r.alarm.Entry != a.Entry && r.storedAlarm.Entry == a.Entry {
		// A change of it is being written: the answer waits for it.
		return calls.Fail(abi.StatusRefused, "%s: its alarm is being changed", c.To)
	}
	if r.alarm.Entry != a.Entry {
		if !wasResident && !r.alarm.set() && r.etag == "" {
			// Woken for nothing and never stored: no room to keep.
			r.dropInstance(life.EndDeleted)
		}
		return calls.Result{Reply: []byte(alarms.ReplyStale)}
	}
	if a.Drop || !r.inst.Handles(engine.EventAlarm) {
		// Cleared unrun, and durably: a class whose new version has no
		// handler keeps no alarm.
		r.alarm, r.alarmChanged = alarmState{}, true
		r.wantCommit = true
		r.pendingEvents++
		return calls.Result{Reply: []byte(alarms.ReplyDropped)}
	}
	payload := abi.AppendAlarmEvent(nil, abi.AlarmEvent{At: a.At, Retry: a.Retry})
	err = r.deliver(func(inst Instance) error {
		err := inst.Alarm(payload)
		if err == nil && r.alarm.Entry == a.Entry {
			// Done, unless the handler set it again (a new entry).
			r.alarm, r.alarmChanged = alarmState{}, true
		}
		return err
	})
	switch {
	case errors.Is(err, ErrNotDurable):
		return callError(c, err)
	case err != nil:
		return callError(c, &CrashError{Cause: err})
	}
	return calls.Result{Reply: []byte(alarms.ReplyRan)}
}

// errNotStored: an alarm's delivery found no stored state to wake (the
// room was deleted): nothing to start.
var errNotStored = errors.New("rooms: the room has no stored state")

// AlarmMetrics is an alarms.Observer that keeps a node's alarm metrics
// (docs/metrics.md, "Alarms") in set, and pending as its gauge of the
// alarms the node will deliver.
func AlarmMetrics(set *metrics.Set, pending func() int) alarms.Observer {
	set.NewGauge(`wasmkeep_alarms_pending`, func() float64 { return float64(pending()) })
	return alarmMetrics{
		fired:   set.NewCounter(`wasmkeep_alarms_fired_total`),
		late:    set.NewHistogram(`wasmkeep_alarms_late_seconds`),
		retried: set.NewCounter(`wasmkeep_alarms_retried_total`),
		dropped: set.NewCounter(`wasmkeep_alarms_dropped_total`),
		stale:   set.NewCounter(`wasmkeep_alarms_stale_total`),
		scans:   set.NewCounter(`wasmkeep_alarms_scans_total`),
	}
}

type alarmMetrics struct {
	fired, retried, dropped, stale, scans *metrics.Counter
	late                                  *metrics.Histogram
}

// Observe implements alarms.Observer.
func (a alarmMetrics) Observe(e alarms.Event) {
	switch e.Kind {
	case alarms.Delivering:
		if e.Retry == 0 {
			a.late.Update(e.Late.Seconds())
		}
	case alarms.Fired:
		a.fired.Inc()
	case alarms.Retried:
		a.retried.Inc()
	case alarms.Dropped:
		a.dropped.Inc()
	case alarms.Stale:
		a.stale.Inc()
	case alarms.Scanned:
		a.scans.Inc()
	}
}
