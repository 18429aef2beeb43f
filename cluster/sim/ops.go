package sim

import (
	"context"
	"errors"
	"slices"
	"strings"
	"time"

	"github.com/wasmkeep/wasmkeep/cluster"
	"github.com/wasmkeep/wasmkeep/cluster/member"
)

// What happens to the machines and what operators do to them: crashes,
// pauses, clean stops, deaths and hangs (each followed by an operator's
// fence by hand), degraded links to the bucket, cut links between
// machines, drains and moves.

// fault is a process crash, a pause, a clean stop, a death or a hang.
func (w *World) fault() {
	if w.s.Now() < int64(w.cfg.Duration) {
		w.s.At(w.after(15*time.Second), "fault", w.fault)
	}
	p := w.machines[w.rng.IntN(len(w.machines))].proc
	if p == nil || p.stopping || p.hung {
		return
	}
	ttl := w.cfg.TTL
	switch x := w.rng.Float64(); {
	case x < 0.3:
		w.stats.Crashes++
		w.exit(p, "crash")
	case x < 0.6:
		until := w.s.Now() + int64(w.between(ttl/2, 5*ttl/2))
		w.stats.Pauses++
		w.s.Note("pause %s until %d", p.name, until)
		w.pause(p, until)
	case x < 0.8:
		w.stop(p)
	case x < 0.9:
		w.die(p)
	default:
		w.hang(p)
	}
}

// pause stops p's tasks until until. The bounds of its events and its
// drain do not count the pause.
func (w *World) pause(p *process, until int64) {
	added := max(0, until-max(w.s.Now(), p.group.pausedUntil))
	p.paused += added
	for _, ev := range p.events {
		ev.excused += added
	}
	for _, rc := range p.calls {
		rc.excused += added
	}
	if w.drainOpen(p) {
		p.drain.excused += added
	}
	w.s.Pause(p.group, until)
}

// pausedFor is how long p stays paused from now (0 if it is not).
func (w *World) pausedFor(p *process) int64 { return max(0, p.group.pausedUntil-w.s.Now()) }

// stop stops p cleanly, then it exits: its member closes its sockets
// (1012), and its core releases its holds and parked records, then its
// lease.
func (w *World) stop(p *process) {
	w.stats.Stops++
	p.stopping = true
	w.s.Spawn(p.group, "stop", func(ctx context.Context) {
		p.member.Leave(ctx)
		w.exit(p, "stopped")
	})
}

// die crashes p for good: its machine stays down until an operator has
// fenced it by hand (the operator knows it is dead), and starts again
// after.
func (w *World) die(p *process) {
	w.stats.Deaths++
	m := p.machine
	w.kill(p, "died")
	m.down = true
	w.handFence(m, func() bool { return m.proc == nil })
	w.s.At(w.s.Now()+int64(w.between(20*time.Second, 40*time.Second)), "replace "+m.name, func() { w.replace(m, nil) })
}

// hang pauses p for good, until its machine is rebooted after an
// operator's fence by hand. Its events' clients give up (they are
// refused).
func (w *World) hang(p *process) {
	w.stats.Hangs++
	m := p.machine
	if w.cfg.World.FencePaused {
		// The operator takes a long pause for a hang.
		until := w.s.Now() + int64(w.between(w.cfg.TTL/2, 5*w.cfg.TTL/2))
		w.s.Note("pause %s until %d", p.name, until)
		w.pause(p, until)
	} else {
		p.hung = true
		w.s.Note("%s hangs", p.name)
		w.s.Pause(p.group, Forever)
		w.dropEvents(p)
		w.dropCalls(p)
		w.endDrain(p)
	}
	w.handFence(m, func() bool { return m.proc == p })
	w.s.At(w.s.Now()+int64(w.between(20*time.Second, 40*time.Second)), "reboot "+m.name, func() { w.replace(m, p) })
}

// replace starts m again once no fence by hand of it is under way: a new
// process on a machine whose process died, or a reboot of a hung one.
func (w *World) replace(m *machine, hung *process) {
	if m.fencing > 0 {
		w.s.At(w.s.Now()+int64(time.Second), "replace "+m.name, func() { w.replace(m, hung) })
		return
	}
	if hung != nil {
		w.exit(hung, "rebooted")
		return
	}
	m.down = false
	if m.proc == nil {
		w.start(m)
	}
}

// handFence has an operator fence m's dead process by hand,
// through the admin API of a live node, soon after it died; dead tells
// whether it still is (the operator fences nothing else). It tries a few
// times; the machine is not started again while a fence is under way.
func (w *World) handFence(m *machine, dead func() bool) {
	tries := 0
	var attempt func()
	attempt = func() {
		tries++
		var live []*process
		for _, o := range w.machines {
			if q := o.proc; o != m && q != nil && !q.hung && !q.stopping && !q.member.Core().Ended() {
				live = append(live, q)
			}
		}
		if len(live) == 0 || !dead() {
			return
		}
		q := live[w.rng.IntN(len(live))]
		m.fencing++
		w.s.Spawn(q.group, "fence by hand "+m.name, func(ctx context.Context) {
			defer func() { m.fencing-- }() // also when q dies meanwhile
			if !dead() {
				return
			}
			l, err := q.member.FenceByHand(ctx, m.name)
			if err != nil {
				w.stats.HandFencesFailed++
				if tries < 3 {
					w.s.At(w.s.Now()+int64(time.Second), "fence by hand "+m.name, attempt)
				}
				return
			}
			// The lease names the dead process, or the one before it if
			// it died joining behind that one: dead too. Either must
			// never run again (check).
			w.stats.HandFences++
			w.handFenced[l.Instance] = true
		})
	}
	w.s.At(w.s.Now()+int64(w.between(time.Second, 8*time.Second)), "fence by hand "+m.name, attempt)
}

// degrade makes a machine's link to the bucket slow for a while, then
// cuts it: links degrade before they break.
func (w *World) degrade() {
	if w.s.Now() < int64(w.cfg.Duration) {
		w.s.At(w.after(20*time.Second), "degrade", w.degrade)
	}
	m := w.machines[w.rng.IntN(len(w.machines))]
	ttl := w.cfg.TTL
	l := &m.link
	l.SlowFrom = w.s.Now()
	l.CutFrom = l.SlowFrom + int64(w.between(0, 3*ttl/2))
	l.CutUntil = l.CutFrom + int64(w.between(time.Second, 5*ttl/2))
	w.stats.Cuts++
	w.s.Note("%s's link slow until %d, cut until %d", m.name, l.CutFrom, l.CutUntil)
	if p := m.proc; p != nil && w.drainOpen(p) {
		p.drain.excused += l.CutUntil - l.SlowFrom // a drain waits on its bucket
	}
}

// partition cuts the link between two machines, or every link of one,
// for a while; their links to the bucket stay as they were.
func (w *World) partition() {
	if w.s.Now() < int64(w.cfg.Duration) {
		w.s.At(w.after(20*time.Second), "partition", w.partition)
	}
	a := w.machines[w.rng.IntN(len(w.machines))]
	until := w.s.Now() + int64(w.between(time.Second, 3*w.cfg.TTL))
	others := []*machine{w.machines[(a.idx+1+w.rng.IntN(len(w.machines)-1))%len(w.machines)]}
	if w.rng.IntN(3) == 0 {
		others = slices.DeleteFunc(slices.Clone(w.machines), func(b *machine) bool { return b == a })
	}
	for _, b := range others {
		a.cutUntil[b.idx] = max(a.cutUntil[b.idx], until)
		b.cutUntil[a.idx] = a.cutUntil[b.idx]
		w.s.Note("the link between %s and %s is cut until %d", a.name, b.name, until)
	}
	w.stats.PeerCuts++
}

// excuseFault adds the wait of a faulted bucket request to the drain of
// the process that made it: a drain's bound allows for one failed attempt
// of each kind, and a run of them (a ~10% fault rate makes five in a row
// about once in 20,000 seeds) is the environment's, not the drain's.
func (w *World) excuseFault(name string, wait int64) {
	m := w.machineNamed[strings.SplitN(name, ".", 2)[0]]
	if m == nil || m.proc == nil || m.proc.name != name || !w.drainOpen(m.proc) {
		return
	}
	m.proc.drain.excused += wait
}

// drainState is one drain of a process.
type drainState struct {
	start int64
	// excused is time its bound does not count: pauses and the outages
	// of the machine's link to the bucket.
	excused int64
	// done: drained; over: the process ended first.
	done, over bool
}

// drainBound is how long a drain may take, besides its process's pauses
// and bucket outages: an acquisition under way when it started may lose
// its answer (a timeout) and is then watched for the resolve window (the
// core's default, 2·ttl), read at most a back-off (ttl/2) after it ends,
// the read taking up to a timeout; a release may take a timeout and be
// retried; and the lease may lapse meanwhile (ttl).
func (w *World) drainBound() time.Duration {
	return 2*w.cfg.TTL + 3*w.cfg.Faults.Timeout + w.cfg.TTL + w.cfg.TTL/2
}

// drainOpen reports whether p has a drain under way that must end.
func (w *World) drainOpen(p *process) bool {
	d := p.drain
	return d != nil && !d.done && !d.over && !p.hung && !p.member.Core().Ended() && p.machine.proc == p
}

// endDrain notes that p's drain, if one is under way, ended with p.
func (w *World) endDrain(p *process) {
	if d := p.drain; d != nil && !d.done && !d.over {
		d.over = true
		w.stats.DrainsEnded++
	}
}

// startDrain has an operator drain a running process (its member's
// Drain, as `cluster drain --wait` does) and wait until it is drained;
// then the operator stops it cleanly, or has it take rooms again a little
// later.
func (w *World) startDrain() {
	if w.s.Now() < int64(w.cfg.Duration) {
		w.s.At(w.after(25*time.Second), "drain", w.startDrain)
	}
	var ps []*process
	for _, m := range w.machines {
		if p := m.proc; p != nil && !p.hung && !p.stopping && !p.draining && !w.drainOpen(p) && p.member.Core().LeaseValid() {
			ps = append(ps, p)
		}
	}
	if len(ps) == 0 {
		return
	}
	p := ps[w.rng.IntN(len(ps))]
	d := &drainState{start: w.s.Now(), excused: w.pausedFor(p)}
	p.drain = d
	w.stats.Drains++
	w.s.Note("drain %s", p.name)
	w.s.At(d.start+int64(w.drainBound()), "drain deadline", func() { w.drainDeadline(p, d) })
	w.s.Spawn(p.group, "drain", func(ctx context.Context) {
		// The operator's word, the moment the member hears it: the
		// core's draining flag is set before Drain's first bucket call.
		p.draining = true
		p.drainFlips++
		p.member.Drain(ctx, true)
		sl, core := sleeper{p}, p.member.Core()
		for !core.Ended() && !p.member.Drained() {
			sl.Sleep(ctx, w.cfg.TTL/20)
		}
		if core.Ended() {
			w.endDrain(p)
			return
		}
		w.checkDrained(p)
		d.done = true
		w.stats.Drained++
		w.stats.LongestDrain = max(w.stats.LongestDrain, time.Duration(w.s.Now()-d.start-d.excused))
		w.s.Note("%s drained", p.name)
		sl.Sleep(ctx, w.between(2*time.Second, 20*time.Second))
		if p.stopping {
			return
		}
		if w.rng.IntN(2) == 0 {
			w.stop(p)
			return
		}
		p.draining = false
		p.drainFlips++
		p.member.Drain(ctx, false)
	})
}

// checkDrained checks, as p's member reports it drained, that no record
// names p: nothing it holds, parks or has yet to release.
func (w *World) checkDrained(p *process) {
	for i, room := range w.rooms {
		if r := w.records[w.recordKeys[i]].rec; !r.Free && r.Instance == p.member.Core().Instance() {
			w.fail("%s reports drained, but room %s's record names it (generation %d)", p.name, room, r.Generation)
			return
		}
	}
}

// drainDeadline checks that d, a drain of p, reported drained within
// drainBound besides what it excuses, unless p ended first.
func (w *World) drainDeadline(p *process, d *drainState) {
	if p.drain != d || !w.drainOpen(p) {
		return
	}
	if due := d.start + int64(w.drainBound()) + d.excused; w.s.Now() < due {
		w.s.At(due, "drain deadline", func() { w.drainDeadline(p, d) })
		return
	}
	s := p.member.Core().Status()
	w.fail("%s, draining since %v, is not drained after %v: %d holds, %d parked, %d pending releases, %d unresolved acquisitions",
		p.name, time.Duration(d.start), time.Duration(w.s.Now()-d.start), len(s.Holds), len(s.Parked), len(s.Pending), len(s.Unresolved))
}

// move has an operator move a room from the process that holds it, or
// keeps it parked, to another node (the member's Move, as `cluster move`
// does). The member takes it on from there (its move duty); the world
// follows it through the member's events (moveEnded).
func (w *World) move() {
	if w.s.Now() < int64(w.cfg.Duration) {
		w.s.At(w.after(6*time.Second), "move", w.move)
	}
	type held struct {
		p    *process
		room cluster.Room
	}
	var hs []held
	for _, m := range w.machines {
		if p := m.proc; p != nil && !p.hung && !p.stopping && !p.draining {
			for _, room := range w.rooms {
				_, parked := p.member.Core().Parked(room)
				if _, ok := p.holds[room]; ok || parked {
					hs = append(hs, held{p, room})
				}
			}
		}
	}
	if len(hs) == 0 {
		return
	}
	x := hs[w.rng.IntN(len(hs))]
	p, room := x.p, x.room
	to := w.machines[(p.machine.idx+1+w.rng.IntN(len(w.machines)-1))%len(w.machines)]
	w.s.Spawn(p.group, "move "+room.Name+" to "+to.name, func(ctx context.Context) {
		if _, under := p.moveStarts[room]; under {
			if _, moving := p.member.Core().Moving(room); moving {
				return // one move of a room at a time: the operator waits for it
			}
		}
		p.moveStarts[room] = moveStart{at: w.s.Now(), paused: p.paused}
		begun := p.movesBegun
		_, err := p.member.Move(ctx, room, to.name)
		if err != nil && !errors.Is(err, member.ErrMoveUnderWay) && p.movesBegun == begun {
			w.stats.MovesRefused++
			delete(p.moveStarts, room)
		}
	})
}

// moveStart is when a move began, and how long its process had been
// paused by then.
type moveStart struct{ at, paused int64 }

// moveEnded follows the end of p's move of room, which the member
// reports: it ended within its bound, and, if another node holds the room
// now, the record does not name p.
func (w *World) moveEnded(p *process, e member.Event) {
	start, ok := p.moveStarts[e.Room]
	delete(p.moveStarts, e.Room)
	switch {
	case e.Err != nil:
		w.stats.MovesGivenUp++
	case e.By != e.Node:
		w.stats.MovesFoundTaken++
	}
	if e.By != "" {
		if r := w.records[cluster.RecordKey(e.Room)].rec; !r.Free && r.Instance == p.member.Core().Instance() {
			w.fail("%s's move of room %s to %s ended as taken by %s, but the record names %s (generation %d)", p.name, e.Room, e.Node, e.By, p.name, r.Generation)
		}
	}
	if ok && p.machine.proc == p && !p.member.Core().Ended() {
		w.checkMoveEnded(p, e.Room, time.Duration(w.s.Now()-start.at-(p.paused-start.paused)))
	}
}

// checkMoveEnded checks that p's move of room ended within its look, less
// the time p was paused: past the look the next step gives up, and a
// step is one move pass, two reads and a take's call at most.
func (w *World) checkMoveEnded(p *process, room cluster.Room, took time.Duration) {
	w.stats.LongestMove = max(w.stats.LongestMove, took)
	if bound := w.moveBound(p); took > bound {
		w.fail("%s's move of room %s ran %v, past its bound of %v", p.name, room, took, bound)
	}
}

// moveBound bounds a move on p, pauses aside (see checkMoveEnded), with
// a lease time for the drift of p's clock and the scheduler's leg times.
func (w *World) moveBound(p *process) time.Duration {
	return p.member.Core().LookFor() + w.cfg.TTL/10 + 2*w.cfg.Faults.Timeout + headerTimeout + w.cfg.TTL
}

// checkMove checks a move of room from p to machine to, which answered
// that it took the room at generation gen: the record is that hold's
// (or free after it), or a later hold's (another node took the room
// since, which the other checks judge); and p does not act on it.
func (w *World) checkMove(p *process, to *machine, room cluster.Room, gen uint64) {
	r := w.records[cluster.RecordKey(room)]
	switch {
	case r.rec.Generation > gen:
		return
	case r.rec.Generation < gen, !r.rec.Free && r.rec.Node != to.name:
		w.fail("room %s moved from %s to %s at generation %d, but its record is at generation %d naming %q", room, p.name, to.name, gen, r.rec.Generation, r.rec.Node)
	case p.member.Core().Acting(room) && p.machine.proc == p:
		w.fail("room %s moved from %s to %s, which still acts on it", room, p.name, to.name)
	}
}
