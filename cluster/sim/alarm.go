package sim

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/wasmkeep/wasmkeep/abi"
	"github.com/wasmkeep/wasmkeep/alarms"
	"github.com/wasmkeep/wasmkeep/calls"
	"github.com/wasmkeep/wasmkeep/cluster"
	"github.com/wasmkeep/wasmkeep/cluster/member"
	"github.com/wasmkeep/wasmkeep/host/store"
)

// Alarms (package alarms). Every process runs the real alarm duty as one
// of its member's duties, over its own handle on the bucket (the index is
// in it, and meets its faults), delivering each alarm through its
// member's Call: served by the fake rooms here, sent over the machines'
// network to the node that holds the room, or refused. What stands in
// for the room manager (host/rooms) is this file's:
//
//   - clients on random machines ask random rooms to set an alarm a few
//     seconds ahead, or to clear theirs; the request is routed as a call
//     and runs in the room's turn, on a valid hold;
//   - a room keeps its alarm with its durable state: a commit creates the
//     new alarm's index entry, then (the owner fence: only if the hold is
//     still valid) makes the alarm the room's, tells the process's duty
//     of it, and deletes the old entry; a wake tells the duty of the
//     room's alarm, as a restore does;
//   - a delivery runs the alarm in the room's turn if it is still the
//     room's, or answers it stale: the run takes a while (sometimes
//     seconds), crashes one time in ten, and otherwise clears the alarm or
//     sets the next one, and commits that.
//
// Checked: never an alarm run without a valid hold; never two runs of a
// room's alarm at once on valid holds; never a delivery of an alarm from
// a process while another delivery of it from there is under way; and no
// alarm lost: every alarm made durable is run, cleared, replaced or
// dropped by the end of the run's tail.

const (
	// alarmEvery is the mean time between two clients' requests to set or
	// clear an alarm.
	alarmEvery = 600 * time.Millisecond
	// alarmAheadMax is how far ahead an alarm is set at most.
	alarmAheadMax = 8 * time.Second
	// alarmRunMax bounds a run; one in ten takes up to alarmLongRun.
	alarmRunMax  = 200 * time.Millisecond
	alarmLongRun = 4 * time.Second
	// alarmRequestTimeout is a client's request's timeout, and the
	// duty's delivery timeout in the simulation.
	alarmRequestTimeout = 5 * time.Second
	alarmDeliveryTime   = 10 * time.Second
	// alarmEpochMs is the wall time of virtual time 0 (Unix ms).
	alarmEpochMs = 1_800_000_000_000
)

// alarmRecord is an alarm made durable, from its commit to its end.
type alarmRecord struct {
	e alarms.Entry
	// durableAt is when it was made durable (virtual time); ended says
	// how it ended ("" while the room has it): run, cleared, replaced,
	// dropped, given up (its drop failed and its duty passed it over).
	durableAt int64
	ended     string
}

// alarmRun is a run of a room's alarm under way.
type alarmRun struct {
	p *process
	h cluster.Hold
}

// flight names the deliveries of one alarm from one process.
type flight struct {
	p   *process
	key string
}

// wallMs is the process's wall clock, in Unix ms: right when it started,
// and drifting at its machine's rate.
func (c *nodeClock) wallMs() int64 { return alarmEpochMs + (c.boot+(c.Now()-c.origin))/1e6 }

// newAlarmDuty is p's alarm duty: the real one, over p's bucket and
// member, its deliveries tasks of p.
func (w *World) newAlarmDuty(p *process) *alarms.Duty {
	p.alarmBucket = w.net.Bucket(p.name+" alarms", &p.machine.link)
	d, err := alarms.NewDuty(alarms.Config{
		Bucket: p.alarmBucket,
		Route:  w.alarmRoute(p),
		Now:    p.clock.Now, Wall: p.clock.wallMs,
		Go: func(name string, f func(ctx context.Context)) {
			w.s.Spawn(p.group, name, f)
		},
		ScanInterval: 5 * time.Second, Grace: 2 * time.Second, Tick: 250 * time.Millisecond,
		DeliveryTimeout: alarmDeliveryTime,
		Observer:        alarmObserver{w, p},
		Logger:          slog.New(slog.DiscardHandler),
		Broken:          w.cfg.Alarms,
	})
	if err != nil {
		panic(err)
	}
	return d
}

// alarmRoute is p's duty's route: its member's Call, with the check that
// the duty delivers one alarm once at a time.
func (w *World) alarmRoute(p *process) func(context.Context, *calls.Call) calls.Result {
	return func(ctx context.Context, c *calls.Call) calls.Result {
		key := alarms.Entry{Room: c.To, At: c.Alarm.At, Entry: c.Alarm.Entry}.Key()
		f := flight{p, key}
		if w.inFlight[f] > 0 {
			w.fail("%s delivers the alarm %s of room %s (retry %d) while a delivery of it from there is under way",
				p.name, c.Alarm.Entry, c.To, c.Alarm.Retry)
		}
		w.inFlight[f]++
		defer func() { w.inFlight[f]-- }()
		w.stats.AlarmDeliveries++
		return p.member.Call(ctx, c, false, w.alarmServe(p), w.alarmSend(p))
	}
}

// alarmObserver follows a process's alarm duty.
type alarmObserver struct {
	w *World
	p *process
}

// Observe implements alarms.Observer.
func (o alarmObserver) Observe(e alarms.Event) {
	w := o.w
	switch e.Kind {
	case alarms.Retried:
		w.stats.AlarmRetries++
	case alarms.Stale:
		w.stats.AlarmsStale++
	case alarms.Scanned:
		w.stats.AlarmScans++
	case alarms.Dropped:
		w.stats.AlarmsDropped++
		if rec := w.alarmLog[e.Entry.Key()]; rec != nil && e.Err != nil && rec.ended == "" {
			rec.ended = "given up"
		}
	}
}

// alarmEvent is a client on a random machine asking a random room to set
// an alarm (or, one time in five, to clear it).
func (w *World) alarmEvent() {
	if w.s.Now() < int64(w.cfg.Duration) {
		w.s.At(w.after(alarmEvery), "alarm request", w.alarmEvent)
	}
	m := w.machines[w.rng.IntN(len(w.machines))]
	room := w.rooms[w.rng.IntN(len(w.rooms))]
	payload := "clear"
	if w.rng.IntN(5) != 0 {
		payload = "set " + strconv.FormatInt(int64(w.between(0, alarmAheadMax)/time.Millisecond), 10)
	}
	p := m.proc
	if p == nil || p.hung {
		return
	}
	w.s.Spawn(p.group, "alarm request to "+room.Name, func(ctx context.Context) {
		c := &calls.Call{To: calls.Room{Class: room.Class, Name: room.Name}, Chain: calls.Chain{front},
			Payload: []byte(payload), Deadline: p.clock.Now() + int64(alarmRequestTimeout)}
		if res := p.member.Call(ctx, c, false, w.alarmServe(p), w.alarmSend(p)); res.Err == nil {
			w.stats.AlarmRequests++
		}
	})
}

// alarmSend is p's member.CallSend for alarm requests and deliveries:
// over the machines' network to the member of the process on the target
// machine, which routes it as forwarded there.
func (w *World) alarmSend(p *process) member.CallSend {
	return func(ctx context.Context, node, _ string, c *calls.Call) (calls.Result, bool) {
		giveUp := min(p.clock.trueAt(c.Deadline), w.s.Now()+p.clock.global(headerTimeout))
		if giveUp <= w.s.Now() {
			return calls.Expired(c), false
		}
		return w.sendCall(ctx, p, node, c, giveUp, "alarm call to "+c.To.Name, func(ctx context.Context, q *process, dc *calls.Call) (calls.Result, bool) {
			return q.member.Call(ctx, dc, true, w.alarmServe(q), w.alarmSend(q)), true
		})
	}
}

// alarmServe is p's fake of the room manager's ServeCall for alarm
// requests and deliveries: the room is acquired or woken through the
// member, the call waits for the room's turn and runs on a valid hold in
// a task of its own, answered by the deadline.
func (w *World) alarmServe(p *process) func(context.Context, *calls.Call) calls.Result {
	return func(ctx context.Context, c *calls.Call) calls.Result {
		room := cluster.Room{Class: c.To.Class, Name: c.To.Name}
		if p.clock.Now() >= c.Deadline {
			return calls.Expired(c)
		}
		// AlarmWithoutHold: a room manager that runs an alarm on the
		// hold it has, without asking whether it is still valid.
		h, held := p.holds[room]
		broken := held && c.Alarm != nil && w.cfg.World.AlarmWithoutHold
		if !broken {
			if r := w.serve(ctx, p, room); !r.answered {
				return calls.Fail(abi.StatusRefused, "%s refused: %s", c.To, ReasonNames[r.why])
			}
		}
		if !w.takeTurn(ctx, p, room, c.Deadline) {
			return calls.Expired(c)
		}
		if !broken {
			h, held = p.holds[room]
			switch {
			case p.clock.Now() >= c.Deadline:
				w.giveTurn(p, room)
				return calls.Expired(c)
			case !held || !p.member.Valid(h):
				w.giveTurn(p, room)
				return calls.Fail(abi.StatusRefused, "%s is not resident here any more", c.To)
			}
		}
		return w.runInTurn(ctx, p, room, c, "run alarm call in "+room.Name, func(ctx context.Context) calls.Result {
			return w.alarmRun(ctx, p, h, room, c)
		})
	}
}

// alarmRun runs an alarm request or delivery in room on p, on hold h.
func (w *World) alarmRun(ctx context.Context, p *process, h cluster.Hold, room cluster.Room, c *calls.Call) calls.Result {
	sl := sleeper{p}
	if c.Alarm == nil {
		sl.Sleep(ctx, w.between(time.Millisecond, alarmRunMax))
		var next *alarms.Entry
		if ms, ok := strings.CutPrefix(string(c.Payload), "set "); ok {
			in, _ := strconv.ParseInt(ms, 10, 64)
			next = w.newAlarm(p, h, room, p.clock.wallMs()+in)
		}
		if err := w.commitAlarm(ctx, p, h, room, next, "cleared"); err != nil {
			return calls.Fail(abi.StatusRefused, "%s: %v", c.To, err)
		}
		return calls.Result{Reply: []byte("ok")}
	}
	a := c.Alarm
	cur := w.alarmOf[room]
	if cur == nil || cur.Entry != a.Entry {
		return calls.Result{Reply: []byte(alarms.ReplyStale)}
	}
	if a.Drop {
		if err := w.commitAlarm(ctx, p, h, room, nil, "dropped"); err != nil {
			return calls.Fail(abi.StatusRefused, "%s: %v", c.To, err)
		}
		return calls.Result{Reply: []byte(alarms.ReplyDropped)}
	}
	w.checkAlarmRun(p, h, room, a)
	run := &alarmRun{p: p, h: h}
	w.alarmRuns[room] = append(w.alarmRuns[room], run)
	defer func() {
		w.alarmRuns[room] = slices.DeleteFunc(w.alarmRuns[room], func(r *alarmRun) bool { return r == run })
	}()
	w.stats.AlarmRuns++
	d := w.between(time.Millisecond, alarmRunMax)
	if w.rng.IntN(10) == 0 {
		d = w.between(alarmRunMax, alarmLongRun)
	}
	sl.Sleep(ctx, d)
	if w.rng.IntN(10) == 0 {
		w.stats.AlarmCrashes++
		return calls.Fail(abi.StatusCrashed, "%s crashed running its alarm", c.To)
	}
	var next *alarms.Entry
	if w.rng.IntN(4) == 0 { // set again, as a recurring alarm does
		next = w.newAlarm(p, h, room, p.clock.wallMs()+int64(w.between(0, alarmAheadMax)/time.Millisecond))
	}
	if err := w.commitAlarm(ctx, p, h, room, next, "run"); err != nil {
		return calls.Fail(abi.StatusRefused, "%s could not make its state durable: %v", c.To, err)
	}
	return calls.Result{Reply: []byte(alarms.ReplyRan)}
}

// newAlarm is a new alarm of room, at (Unix ms), set on hold h.
func (w *World) newAlarm(p *process, h cluster.Hold, room cluster.Room, at int64) *alarms.Entry {
	w.alarmSeq++
	return &alarms.Entry{Room: calls.Room{Class: room.Class, Name: room.Name}, At: at, Entry: alarms.EntryName(h.Generation, w.alarmSeq)}
}

// errHoldGone: a commit found its hold no longer valid (the owner fence
// refuses its write).
var errHoldGone = errors.New("the room's hold is no longer valid")

// commitAlarm makes next the alarm of room (nil: none) as a commit on hold
// h does: the new entry is created in the index, then, if the hold is
// still valid, the alarm is the room's durable state's, and the old entry
// goes. why is how the alarm it replaces ended, if next is nil.
func (w *World) commitAlarm(ctx context.Context, p *process, h cluster.Hold, room cluster.Room, next *alarms.Entry, why string) error {
	b := p.alarmBucket
	if next != nil {
		if _, err := b.Put(ctx, next.Key(), []byte("alarm"), store.IfNoneMatch()); err != nil {
			return err
		}
	}
	if p.holds[room] != h || !p.member.Valid(h) || p.machine.proc != p {
		if next != nil {
			_ = b.Delete(ctx, next.Key(), "")
		}
		return errHoldGone
	}
	prev := w.alarmOf[room]
	if prev != nil {
		if rec := w.alarmLog[prev.Key()]; rec != nil && rec.ended == "" {
			rec.ended = why
			if next != nil {
				rec.ended = "replaced"
			}
		}
		p.alarms.Unschedule(*prev)
	}
	if next == nil {
		delete(w.alarmOf, room)
	} else {
		w.alarmOf[room] = next
		w.alarmLog[next.Key()] = &alarmRecord{e: *next, durableAt: w.s.Now()}
		w.stats.AlarmsSet++
		p.alarms.Schedule(*next)
	}
	if prev != nil {
		_ = b.Delete(ctx, prev.Key(), "")
	}
	return nil
}

// alarmWoken tells p's duty of room's alarm as it wakes there, as a
// restore does.
func (w *World) alarmWoken(p *process, room cluster.Room) {
	if a := w.alarmOf[room]; a != nil && p.alarms != nil {
		p.alarms.Schedule(*a)
	}
}

// checkAlarmRun checks a run of room's alarm a on p, on hold h, as it
// starts: on a valid hold, and while no other run of it is under way on
// a hold still valid.
func (w *World) checkAlarmRun(p *process, h cluster.Hold, room cluster.Room, a *calls.Alarm) {
	if !p.member.Valid(h) {
		w.fail("the alarm %s of room %s ran on %s without a valid hold (generation %d)", a.Entry, room, p.name, h.Generation)
		return
	}
	for _, r := range w.alarmRuns[room] {
		if r.p.machine.proc == r.p && !r.p.hung && r.p.member.Valid(r.h) {
			w.fail("two runs of the alarm of room %s at once: on %s (generation %d) and on %s (generation %d)",
				room, r.p.name, r.h.Generation, p.name, h.Generation)
			return
		}
	}
}

// openAlarms are the alarms made durable, due by now, that have not
// ended: the run's tail waits for them, and those left after it are lost.
func (w *World) openAlarms() []*alarmRecord {
	now := alarmEpochMs + w.s.Now()/1e6
	var open []*alarmRecord
	for _, rec := range w.alarmLog {
		if rec.ended == "" && rec.e.At <= now {
			open = append(open, rec)
		}
	}
	return open
}

// lostAlarms describes the alarms still open.
func (w *World) lostAlarms() string {
	var out []string
	for _, rec := range w.openAlarms() {
		out = append(out, fmt.Sprintf("%s's %s, due %v and durable since %v", rec.e.Room, rec.e.Entry,
			time.Duration(rec.e.At-alarmEpochMs)*time.Millisecond, time.Duration(rec.durableAt)))
	}
	slices.Sort(out)
	return strings.Join(out, "; ")
}
