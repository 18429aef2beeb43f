package rooms

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/wasmkeep/wasmkeep/abi"
	"github.com/wasmkeep/wasmkeep/host/phoenix"
	"github.com/wasmkeep/wasmkeep/host/rooms/life"
	"github.com/wasmkeep/wasmkeep/host/snapshot"
	"github.com/wasmkeep/wasmkeep/host/store"
	"github.com/wasmkeep/wasmkeep/internal/clock"
)

// The output gate and group commit.
//
// A room whose class is durable per event (or whose guest called
// checkpoint()) lets nothing an event produced leave the node before the
// state that produced it is in the store: socket sends and closes, channel
// frames, presence diffs, HTTP answers and call replies wait in the room's
// outbox. The events themselves do not wait: the worker goes on running
// them on the room's memory while one write is under way, and the write
// after it covers every event since, releasing their outputs together (a
// group commit). One write is in flight per room at a time, since each
// manifest is a delta on the one before and its conditional write names
// that one's version.
//
// Everything the host keeps about the room (its known sockets, joins,
// presence, channel sessions) changes when the event runs, as without the
// gate: only the bytes that leave the node and the answers that callers
// wait for are held. So a snapshot taken at a commit point holds exactly
// the state the held outputs came from.
//
// A write that fails fails every output it held and every output held
// behind it (the events behind it ran on its state): HTTP answers 500,
// call replies an error, the sockets whose messages were lost are closed
// with 1011, channel topics whose joins or messages were lost end with
// phx_error. The instance is dropped, so the room goes back to what the
// store holds. Nothing acknowledged is lost, and nothing lost was
// acknowledged.
//
// What the write holds is the room's dirty pages, as a hibernation's delta
// does, rather than a log of the events' inputs to replay from the last
// snapshot: docs/architecture.md says why.

// outOp is what a held output does when it is released.
type outOp uint8

const (
	outFrame     outOp = iota // SendFrame(frame)
	outBroadcast              // SendFrame(frame) to each raw socket but except, of id at most bound
	outSend                   // Send(kind, outbox.sent[at:end])
	outClose                  // Close(code, reason)
	outReply                  // done(nil), or done(err) when failed
	outOrigin                 // nothing; when failed, tells sock (or its topic) its input was lost
)

// outItem is one held output.
type outItem struct {
	op      outOp
	kind    uint8
	code    abi.CloseCode
	at, end int32
	except  uint32 // outBroadcast
	bound   uint32 // outBroadcast: the last socket id handed out when it was sent
	sock    *Socket
	frame   Frame
	reason  string // outClose
	topic   string // outOrigin: a channel's topic ("" for a raw socket)
	joinRef phoenix.Ref
	done    func(error) // outReply
}

// outbox is what a room's events sent while the state behind it was not
// yet durable, in the order it was sent.
type outbox struct {
	items []outItem
	sent  []byte // the payloads of outSend items
	size  int    // bytes held, counted like an event's output (effectCost each)
}

func (o *outbox) empty() bool { return len(o.items) == 0 }

func (o *outbox) add(it outItem, payload int) {
	o.items = append(o.items, it)
	o.size += effectCost + payload
}

// commitJob is one write of a room's state under way: the snapshot taken
// at its commit point and the outputs of the events it covers.
type commitJob struct {
	d     *snapshot.Delta
	body  []byte // d's manifest, encoded
	prev  string // the version of the manifest it follows ("" for none)
	first bool   // the first commit of its hold (manifests.go)
	// firstVersion is the version of its hold's first commit, if this
	// is not it.
	firstVersion string
	// alarm is the room's alarm as the commit stores it, prevAlarm as the
	// manifest it follows has it.
	alarm, prevAlarm alarmState
	out              outbox
	events           int
	start            int64

	cancel context.CancelFunc
	done   chan struct{} // closed when the write ended; then etag or err
	etag   string
	err    error
}

// gated reports whether the outputs of the event being handled must wait:
// it asked for durability, or outputs of earlier events wait (which it
// must not overtake, and whose state it may have read).
func (r *Room) gated() bool {
	return r.wantCommit || r.commit != nil || !r.out.empty()
}

// emitFrame queues f on s, or holds it (worker).
func (r *Room) emitFrame(s *Socket, f Frame) {
	if r.gated() {
		r.out.add(outItem{op: outFrame, sock: s, frame: f}, 0)
		return
	}
	r.send(s, f)
}

// emitBroadcast queues f on every raw socket of the room but except, or
// holds it as one item: the sockets it reaches when released are those
// that were open when it was sent (ids are handed out in order, so a
// socket opened since has a larger id) and are still open.
func (r *Room) emitBroadcast(f Frame, except uint32) {
	if r.gated() {
		r.out.add(outItem{op: outBroadcast, frame: f, except: except, bound: r.nextSocket - 1}, 0)
		return
	}
	r.broadcastNow(f, except, r.nextSocket-1)
}

// broadcastNow queues f on every raw socket but except, of id at most
// bound.
func (r *Room) broadcastNow(f Frame, except, bound uint32) {
	for id, s := range r.sockets {
		if id != except && id <= bound && s.ch == nil {
			r.send(s, f)
		}
	}
}

// emitSend queues a message on s, or holds a copy of it (worker).
func (r *Room) emitSend(s *Socket, kind uint8, data []byte) {
	if r.gated() {
		at := len(r.out.sent)
		r.out.sent = append(r.out.sent, data...)
		r.out.add(outItem{op: outSend, sock: s, kind: kind, at: int32(at), end: int32(len(r.out.sent))}, len(data))
		return
	}
	r.cork(s)
	_ = s.conn.Send(int(kind), data)
}

// emitClose closes s, or holds the close behind what is held (worker).
func (r *Room) emitClose(s *Socket, code abi.CloseCode, reason string) {
	if r.gated() {
		r.out.add(outItem{op: outClose, sock: s, code: code, reason: reason}, len(reason))
		return
	}
	s.conn.Close(code, reason)
}

// emitReply gives an event's answer now, or when the state behind it is
// durable: done(nil) then, done(err) if it never is (worker).
func (r *Room) emitReply(done func(error)) {
	if r.gated() {
		r.out.add(outItem{op: outReply, done: done}, 0)
		return
	}
	done(nil)
}

// holdOrigin notes, among the held outputs, that s's input (on topic, for
// a channel) was taken: if the write behind it fails, s hears that it was
// lost. Nothing is noted when nothing is held: the input is as durable as
// the class asks.
func (r *Room) holdOrigin(s *Socket, topic string, joinRef phoenix.Ref) {
	if r.gated() {
		r.out.add(outItem{op: outOrigin, sock: s, topic: topic, joinRef: joinRef}, len(topic))
	}
}

// release lets the outputs of o go, in order (worker).
func (r *Room) release(o *outbox) {
	for i := range o.items {
		it := &o.items[i]
		switch it.op {
		case outFrame:
			r.send(it.sock, it.frame)
		case outBroadcast:
			r.broadcastNow(it.frame, it.except, it.bound)
		case outSend:
			r.cork(it.sock)
			_ = it.sock.conn.Send(int(it.kind), o.sent[it.at:it.end])
		case outClose:
			it.sock.conn.Close(it.code, it.reason)
		case outReply:
			it.done(nil)
		}
	}
	r.recycle(o)
}

// failOutputs drops the outputs of o and tells those who waited on them
// that they are lost (worker). Nothing may be held when it is called: what
// it sends goes out at once.
//
// err wraps ErrNotDurable: a write failed, or the room crashed or was
// dropped before the write.
func (r *Room) failOutputs(o *outbox, err error) {
	failed := 0
	for i := range o.items {
		it := &o.items[i]
		switch it.op {
		case outReply:
			failed++
			it.done(err)
		case outOrigin:
			failed++
			s := it.sock
			if r.sockets[s.id] != s {
				continue // closed, or told already
			}
			if it.topic != "" {
				if ref, joined := s.joined(it.topic); joined && ref == it.joinRef {
					r.crashTopic(s, it.topic, it.joinRef)
				}
				continue
			}
			r.dropSocket(s, abi.CloseInternalError, "the room's state could not be made durable; reconnect")
		}
	}
	r.m.met.outputsFailed.Add(failed)
	r.recycle(o)
}

// capture takes the room's next snapshot (worker): nil when nothing the
// room would wake with differs from what the store holds (an event that
// only read its state), which then needs no write.
func (r *Room) capture() (*commitJob, error) {
	m := r.m
	if r.held && !m.place.Valid(r.hold) {
		return nil, errHoldLost
	}
	st := savedState{NextSocket: r.nextSocket, Alarm: r.alarm}
	for _, id := range sortedIDs(r.known) {
		if !r.skipClose[id] {
			st.Sockets = append(st.Sockets, id)
		}
	}
	for k := range r.joins {
		st.Joins = append(st.Joins, k)
	}
	sortJoins(st.Joins)
	r.segSeq++
	segID := snapshot.SegmentID(r.hold.Generation, r.segSeq)
	d, err := r.inst.Snapshot(m.enc, r.man, r.pages, st.encode(), r.hold.Generation, segID, false)
	if err != nil {
		return nil, err
	}
	r.changed = false
	if r.etag != "" && sameState(r.man, d) {
		// The same pages, hashed anew: the engine tracks the memory's
		// writes from this snapshot's hashes on.
		r.pages = d.PageHashes
		// The stored clock readings stay older; a restore advances the
		// guest clock by the wall time since them, as after any
		// hibernation.
		m.met.snapshotsUnchanged.Inc()
		return nil, nil
	}
	return &commitJob{d: d, body: d.Manifest.Encode(), prev: r.etag, first: r.firstVersion == "", firstVersion: r.firstVersion,
		alarm: r.alarm, prevAlarm: r.storedAlarm}, nil
}

// writeCommit writes a captured snapshot: its segment (created), then its
// manifest (a conditional write), as one commit (store.PutCommit). The segments the new manifest no longer
// references go to the collector. It reads only the job and the manager,
// so it runs off the room's worker.
func (m *Manager) writeCommit(ctx context.Context, key Key, job *commitJob) error {
	d := job.d
	var created []store.Object
	if d.Segment != nil {
		created = []store.Object{{Key: key.segmentKey(d.SegmentID), Body: d.Segment}}
	}
	created = append(created, alarmObjects(key, job.prevAlarm, job.alarm)...)
	etag, err := m.layout.commit(ctx, m.bucket, key, job.prev, job.first, created, job.body)
	if err != nil {
		// A commit that certainly did not land leaves what it created
		// unreferenced, if it was written at all; one whose outcome is
		// unknown may have landed.
		if !errors.Is(err, store.ErrUnknownOutcome) {
			for _, o := range created {
				m.gc.add(o.Key)
			}
		}
		return fmt.Errorf("writing the room's state: %w", err)
	}
	m.alarmLanded(key, job.prevAlarm, job.alarm)
	job.etag = etag
	written := len(d.Segment) + len(job.body)
	m.met.snapshotBytes.Add(written)
	m.met.snapshotWrites.Inc()
	if d.Compacted && len(d.Garbage) > 0 {
		m.met.compactions.Inc()
	}
	if d.Folded {
		m.met.folds.Inc()
	}
	for _, id := range d.Garbage {
		m.gc.add(key.segmentKey(id))
	}
	for _, k := range m.layout.superseded(key, job.prev, job.firstVersion) {
		m.gc.add(k)
	}
	return nil
}

// landed makes a written snapshot the room's latest (worker).
func (r *Room) landed(job *commitJob) {
	r.man, r.manBody, r.etag, r.pages = job.d.Manifest, job.body, job.etag, job.d.PageHashes
	r.storedAlarm = job.alarm
	if job.first {
		r.firstVersion = job.etag
	}
	if !r.everStored.Swap(true) {
		r.m.snapshotCreated()
	}
}

// commitPoint runs after each event: it starts the write of what the
// events since the last one changed, unless one is under way (it lands
// first) or the commit window has not passed since the last one started;
// outputs that wait on nothing are released.
func (r *Room) commitPoint() {
	if r.commit != nil {
		return
	}
	if !r.wantCommit {
		if !r.out.empty() {
			o := r.takeOutbox()
			r.release(&o)
		}
		return
	}
	if now := r.m.clock.Now(); now < r.windowEnds {
		r.armCommit(r.windowEnds, now)
		return
	}
	r.startCommit()
}

// armCommit makes the room's worker reach a commit point at due, unless
// a timer for it is already set.
func (r *Room) armCommit(due, now int64) {
	if r.commitDue == due {
		return
	}
	r.commitDue = due
	t := r.m.clock.NewTimer(time.Duration(due - now))
	go func() {
		select {
		case <-t.C():
			_ = r.enqueue(&event{kind: evCommitted}, false)
		case <-r.m.stop:
			t.Stop()
		}
	}()
}

// takeOutbox returns the room's held outputs and empties them, reusing
// the buffers of an outbox recycled before.
func (r *Room) takeOutbox() outbox {
	o := r.out
	r.out, r.spareOut = r.spareOut, outbox{}
	return o
}

// recycle keeps o's buffers for the next takeOutbox, unless they are
// large: a burst must not leave its room holding them.
func (r *Room) recycle(o *outbox) {
	if cap(o.items) > maxKeptOutItems || cap(o.sent) > maxKeptSends {
		return
	}
	clear(o.items) // what they point at may go
	r.spareOut = outbox{items: o.items[:0], sent: o.sent[:0]}
}

// maxKeptOutItems bounds the held outputs whose buffer a room keeps.
const maxKeptOutItems = 4096

// startCommit takes the snapshot and starts its write; the events behind
// it go on while it is under way.
func (r *Room) startCommit() {
	r.wantCommit = false
	job, err := r.capture()
	if err != nil {
		r.rollBack(err)
		return
	}
	if job == nil {
		o := r.takeOutbox()
		r.release(&o)
		return
	}
	job.out, job.events, r.pendingEvents = r.takeOutbox(), r.pendingEvents, 0
	job.start = r.m.clock.Now()
	job.done = make(chan struct{})
	r.windowEnds, r.commit = job.start+int64(r.m.cfg.CommitWindow), job
	ctx, cancel := clock.WithTimeout(r.m.clock, r.m.ctx, commitTimeout)
	job.cancel = cancel
	go func() {
		defer cancel()
		job.err = r.m.writeCommit(ctx, r.key, job)
		close(job.done)
		// The worker looks at the job between events; this wakes (or
		// starts) it when it has none.
		_ = r.enqueue(&event{kind: evCommitted}, false)
	}()
}

// finishCommit ends the job in flight once its write ended (worker): on
// success its outputs go; on failure they, and every output held behind
// them, fail, and the error is returned for the caller to roll back.
func (r *Room) finishCommit() error {
	job := r.commit
	r.commit = nil
	m := r.m
	m.met.commitSeconds.Update(m.since(job.start))
	if job.err == nil {
		m.met.commits.Inc()
		m.met.commitEvents.Add(job.events)
		r.landed(job)
		r.release(&job.out)
		return nil
	}
	m.met.commitErrors.Inc()
	err := fmt.Errorf("%w: %w", ErrNotDurable, job.err)
	behind := r.takeOutbox()
	r.wantCommit, r.pendingEvents = false, 0
	r.failOutputs(&job.out, err)
	r.failOutputs(&behind, err)
	return err
}

// pollCommit finishes the write in flight if it has ended, and starts the
// next one if events wait for it (worker).
func (r *Room) pollCommit() {
	if r.commit == nil {
		return
	}
	select {
	case <-r.commit.done:
	default:
		return
	}
	if err := r.finishCommit(); err != nil {
		r.rollBack(err)
		return
	}
	r.commitPoint()
}

// waitCommit waits for the write in flight and finishes it (worker).
func (r *Room) waitCommit() {
	if r.commit == nil {
		return
	}
	r.awaitWrite()
	if err := r.finishCommit(); err != nil {
		r.rollBack(err)
	}
}

// awaitWrite waits for the write in flight to end. During a stop, the
// stop's deadline ends it.
func (r *Room) awaitWrite() {
	job := r.commit
	select {
	case <-job.done:
		return
	case <-r.m.stop: // a stop began: its context (workCtx) bounds the rest
	case <-r.workCtx().Done():
	}
	select {
	case <-job.done:
	case <-r.workCtx().Done():
		job.cancel()
		<-job.done
	}
}

// commitTimeout bounds one write of a group commit: a store that hangs
// fails the outputs it holds rather than holding them for ever.
const commitTimeout = 30 * time.Second

// settle makes every held output final, whatever the commit window: it
// waits for the write in flight, then writes what is left. It reports
// false if a failed write rolled the room back (its instance is gone).
func (r *Room) settle() bool {
	for r.inst != nil {
		switch {
		case r.commit != nil:
			r.waitCommit()
		case r.wantCommit:
			r.startCommit()
		case !r.out.empty():
			o := r.takeOutbox()
			r.release(&o)
		default:
			return true
		}
	}
	return false
}

// abandon settles the held outputs of a room whose instance is being
// dropped unwritten: the write in flight ends as it ends, and what is held
// behind it (state that is about to be lost) fails with err.
func (r *Room) abandon(err error) {
	if r.commit != nil {
		r.awaitWrite()
		if r.finishCommit() != nil {
			return // it failed what was held behind it too
		}
	}
	r.wantCommit, r.pendingEvents = false, 0
	if !r.out.empty() {
		o := r.takeOutbox()
		r.failOutputs(&o, err)
	}
}

// rollBack drops the instance after a write that failed, or a snapshot
// that could not be taken: the room goes back to what the store holds.
func (r *Room) rollBack(err error) {
	m := r.m
	why := life.EndCrash
	switch {
	case errors.Is(err, errHoldLost):
		why = life.EndDropped
	case errors.Is(err, store.ErrPrecondition):
		// Someone else wrote this room's snapshot: it is not ours to run.
		m.met.snapshotConflict.Inc()
		m.log.Error("room snapshot changed underneath this node; dropping the instance", "room", r.key.String())
	default:
		m.met.snapshotErrors.Inc()
		m.log.Warn("room state could not be made durable; its held outputs failed and it rolls back to its last snapshot",
			"room", r.key.String(), "err", err)
	}
	if !errors.Is(err, ErrNotDurable) {
		err = fmt.Errorf("%w: %w", ErrNotDurable, err)
	}
	r.abandon(err)
	r.known, r.joins = nil, nil
	r.dropInstance(why)
}
