package sim

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"strings"
	"time"

	"github.com/wasmkeep/wasmkeep/alarms"
	"github.com/wasmkeep/wasmkeep/cluster"
	"github.com/wasmkeep/wasmkeep/cluster/member"
	"github.com/wasmkeep/wasmkeep/host/store"
)

// Config is one simulated run.
type Config struct {
	Seed uint64
	// Nodes and Rooms: how many (3 and 10 when zero).
	Nodes, Rooms int
	// Duration is the virtual time events and faults arrive for (2
	// minutes when zero); the run goes on until what is under way then
	// (events, drains) is done.
	Duration time.Duration
	// TTL is every node's lease ttl (10 s when zero); Safety and Grace
	// its margins (TTL/20 and TTL/10 when zero: half the defaults, to
	// look closer at the edge they guard).
	TTL, Safety, Grace time.Duration
	// Faults of the bucket (DefaultFaults when zero), and of the calls
	// between rooms on the machines' network (DefaultCallFaults when
	// zero).
	Faults     Faults
	CallFaults CallFaults
	// Broken is handed to every node.
	Broken cluster.Variants
	// Member is handed to every node's member: it breaks the member's
	// rules, as Broken does the core's.
	Member member.Variants
	// World breaks what the world does itself (its network, its
	// operator, its rooms).
	World Variants
	// Alarms is handed to every node's alarm duty: it breaks the duty's
	// rules.
	Alarms alarms.Variants
	// SweepInterval is every member's owner sweep interval (5 s when
	// zero: a minute would leave most runs without a sweep).
	SweepInterval time.Duration
	// Trace receives every event, if not nil.
	Trace io.Writer
	// CheckEverything checks every invariant of every process and room
	// after each step, not only what the step changed (slower; a test
	// shows both find the same).
	CheckEverything bool
}

// Stats count what a run did.
type Stats struct {
	Steps                  int
	Acquisitions, Releases uint64
	Uses                   uint64 // uses of a resident room after the event that woke it
	// Landed events are each either Answered or Refused (Reasons says
	// why); AnsweredRelayed of the answered were answered by the node
	// they were relayed to.
	Landed, Answered, Refused uint64
	AnsweredRelayed           uint64
	Reasons                   [nReasons]uint64
	// Relays are the events delivered to the node they were relayed to;
	// Dials the relays that could not connect (then Unreachable); Late
	// the answers that came after their caller had given up.
	Relays, Dials, Late uint64
	FailoverWaits       uint64 // events that waited for a room whose holder was silent or unreachable
	Faults              uint64 // bucket requests that met a fault
	Crashes, Pauses     uint64
	Stops               uint64
	// Deaths are crashes without a restart until an operator's fence by
	// hand, Hangs processes paused for good (until a reboot after it);
	// HandFences the fences by hand that landed, HandFencesFailed those
	// that did not (the operator tries a few times).
	Deaths, Hangs, HandFences, HandFencesFailed uint64
	Cuts, PeerCuts                              uint64 // degraded links to the bucket; cut links between machines
	Fenced                                      uint64 // processes that found themselves fenced
	// Drains started, and how many reported drained; DrainsEnded is
	// those whose process ended first (a crash, a fence, a stop).
	Drains, Drained, DrainsEnded uint64
	// Moves that handed their room over and asked the target; MovesDone
	// that the target took; MovesRefused were not started (the target
	// not a live, undrained peer, or the room not acted on).
	Moves, MovesDone, MovesRefused uint64
	// MovesFoundTaken ended when the look found another node holding the
	// room (the target's answer lost, or an event's node took it first);
	// MovesGivenUp ended unfinished (the look ran out, the target drained
	// or died, the owner stopped).
	MovesFoundTaken, MovesGivenUp uint64
	// LongestEvent and LongestDrain are the longest an event took to be
	// answered or refused, and a drain to report drained, besides what
	// their bounds excuse (bucket calls, pauses, outages).
	LongestEvent, LongestDrain time.Duration
	// LongestMove is the longest a move ran, its process's pauses aside.
	LongestMove time.Duration
	// Sockets (socket.go): opened on the node that ran their room, and
	// closed by their client or by their node (a lapse, a stop, a drain,
	// a move, the room found taken elsewhere); a process that dies takes
	// its own with it. Parks and wakes at home are Node.Parks and
	// Node.ParkedWakes.
	SocketsOpened, SocketsClosedByClient, SocketsClosedByNode uint64
	// LastSocketReleases are the parked records released because their
	// room's last socket here went (or the sweep found none); ParkedDrains
	// those a drain pass (or an event on a draining node) released;
	// ParkedMoves the moves of a parked room.
	LastSocketReleases, ParkedDrains, ParkedMoves uint64
	// Sweeps are the owner sweep's passes; SweepCloses the rooms whose
	// sockets it closed.
	Sweeps, SweepCloses uint64
	// Exposed are the takes of a room by another node while a node kept
	// it parked, or held its sockets, after that node's own wake had an
	// unknown outcome or found another holder: allowed, and counted.
	Exposed uint64
	// Calls between rooms (call.go): Calls made by fronts, NestedCalls by
	// the rooms they ran in; CallsDown fronts' calls on a machine with no
	// process (or a hung one), never made. Each call made is answered
	// (CallOutcomes, by CallOutcomeNames) or dropped with its process
	// (CallsDropped). CallRuns are the runs of calls in a room,
	// CallRunsSent those on another machine than the caller's;
	// CallRunsLateSent those that began after the node that sent the call
	// gave up, which only the time it took to reach the node excuses (a
	// slow leg, a paused process that read it late); CallBroadcasts what
	// the runs sent to sockets. CallsSent are the calls
	// delivered to another node, CallDials those that could not connect,
	// CallsUnsent those found past their deadline before they were sent;
	// CallBreaks the connections that broke after the call was delivered,
	// CallAnswersLost the answers lost, CallLegsSlow the slow legs.
	Calls, NestedCalls, CallsDown, CallsDropped uint64
	CallOutcomes                                [nCallOutcomes]uint64
	CallRuns, CallRunsSent, CallRunsLateSent    uint64
	CallBroadcasts                              uint64
	CallsSent, CallDials, CallsUnsent           uint64
	CallBreaks, CallAnswersLost, CallLegsSlow   uint64
	// Alarms (alarm.go): AlarmRequests the clients' requests to set or
	// clear one that were answered; AlarmsSet the alarms made durable;
	// AlarmDeliveries the duties' deliveries, AlarmRuns the runs they
	// led to (AlarmCrashes of them crashed), AlarmRetries the deliveries
	// tried again, AlarmsStale those that found the alarm gone,
	// AlarmsDropped the alarms dropped after their last retry;
	// AlarmScans the scans of the index.
	AlarmRequests, AlarmsSet, AlarmDeliveries, AlarmRuns, AlarmCrashes uint64
	AlarmRetries, AlarmsStale, AlarmsDropped, AlarmScans               uint64
	// LongestCallOver is the longest a call was answered past its
	// deadline, besides what its bound excuses (its origin's bucket calls
	// and pauses).
	LongestCallOver time.Duration
	Node            cluster.Counters
}

// Add adds o to s.
func (s *Stats) Add(o Stats) {
	s.Steps += o.Steps
	s.Acquisitions += o.Acquisitions
	s.Releases += o.Releases
	s.Uses += o.Uses
	s.Landed += o.Landed
	s.Answered += o.Answered
	s.Refused += o.Refused
	s.AnsweredRelayed += o.AnsweredRelayed
	for i := range s.Reasons {
		s.Reasons[i] += o.Reasons[i]
	}
	s.Relays += o.Relays
	s.Dials += o.Dials
	s.Late += o.Late
	s.FailoverWaits += o.FailoverWaits
	s.Faults += o.Faults
	s.Crashes += o.Crashes
	s.Pauses += o.Pauses
	s.Stops += o.Stops
	s.Deaths += o.Deaths
	s.Hangs += o.Hangs
	s.HandFences += o.HandFences
	s.HandFencesFailed += o.HandFencesFailed
	s.Cuts += o.Cuts
	s.PeerCuts += o.PeerCuts
	s.Fenced += o.Fenced
	s.Drains += o.Drains
	s.Drained += o.Drained
	s.DrainsEnded += o.DrainsEnded
	s.Moves += o.Moves
	s.MovesDone += o.MovesDone
	s.MovesRefused += o.MovesRefused
	s.MovesFoundTaken += o.MovesFoundTaken
	s.MovesGivenUp += o.MovesGivenUp
	s.SocketsOpened += o.SocketsOpened
	s.SocketsClosedByClient += o.SocketsClosedByClient
	s.SocketsClosedByNode += o.SocketsClosedByNode
	s.LastSocketReleases += o.LastSocketReleases
	s.ParkedDrains += o.ParkedDrains
	s.ParkedMoves += o.ParkedMoves
	s.Sweeps += o.Sweeps
	s.SweepCloses += o.SweepCloses
	s.Exposed += o.Exposed
	s.Calls += o.Calls
	s.NestedCalls += o.NestedCalls
	s.CallsDown += o.CallsDown
	s.CallsDropped += o.CallsDropped
	for i := range s.CallOutcomes {
		s.CallOutcomes[i] += o.CallOutcomes[i]
	}
	s.CallRuns += o.CallRuns
	s.CallRunsSent += o.CallRunsSent
	s.CallRunsLateSent += o.CallRunsLateSent
	s.CallBroadcasts += o.CallBroadcasts
	s.CallsSent += o.CallsSent
	s.CallDials += o.CallDials
	s.CallsUnsent += o.CallsUnsent
	s.CallBreaks += o.CallBreaks
	s.CallAnswersLost += o.CallAnswersLost
	s.CallLegsSlow += o.CallLegsSlow
	s.AlarmRequests += o.AlarmRequests
	s.AlarmsSet += o.AlarmsSet
	s.AlarmDeliveries += o.AlarmDeliveries
	s.AlarmRuns += o.AlarmRuns
	s.AlarmCrashes += o.AlarmCrashes
	s.AlarmRetries += o.AlarmRetries
	s.AlarmsStale += o.AlarmsStale
	s.AlarmsDropped += o.AlarmsDropped
	s.AlarmScans += o.AlarmScans
	s.LongestCallOver = max(s.LongestCallOver, o.LongestCallOver)
	s.LongestEvent = max(s.LongestEvent, o.LongestEvent)
	s.LongestDrain = max(s.LongestDrain, o.LongestDrain)
	s.LongestMove = max(s.LongestMove, o.LongestMove)
	addCounters(&s.Node, o.Node)
}

func addCounters(a *cluster.Counters, b cluster.Counters) {
	a.Renewals += b.Renewals
	a.RenewalsFailed += b.RenewalsFailed
	a.Lapses += b.Lapses
	a.Parks += b.Parks
	a.ParkedWakes += b.ParkedWakes
	a.ParkedReleases += b.ParkedReleases
	a.Fences += b.Fences
	a.Acquired += b.Acquired
	a.AcquireContended += b.AcquireContended
	a.AcquireUnknown += b.AcquireUnknown
	a.AcquireRefused += b.AcquireRefused
	a.Released += b.Released
	a.ReleaseMoot += b.ReleaseMoot
	a.ReleaseRetries += b.ReleaseRetries
	a.ResolvedLanded += b.ResolvedLanded
	a.ResolvedMoved += b.ResolvedMoved
	a.ResolvedExpired += b.ResolvedExpired
}

// Result is the outcome of a run.
type Result struct {
	Seed uint64
	// Hash is the trace's hash: the same for every run of one Config.
	Hash  uint64
	Stats Stats
	// Violation is the first invariant broken, "" if none was.
	Violation string
}

// World is a simulated cluster: machines, each running one process (a
// cluster.Node and what the host would do with it) at a time, on one
// bucket, reaching each other over links that may be cut.
type World struct {
	cfg      Config
	rng      *rand.Rand
	s        *Scheduler
	net      *Network
	machines []*machine
	rooms    []cluster.Room
	// recordKeys are the rooms' record keys; roomOf and machineOf map a
	// record or lease key back, machineNamed a node's name.
	recordKeys   []string
	roomOf       map[string]int
	machineOf    map[string]*machine
	machineNamed map[string]*machine
	procs        map[*Group]*process
	touched      []string                 // keys of the records and leases written in this step
	records      map[string]storedRecord  // the rooms' records, as the bucket has them
	leases       map[string]cluster.Lease // the nodes' leases, as the bucket has them
	granted      map[cluster.Room]map[uint64]string
	// events counts the events landed; open are those not yet answered
	// or refused; sockets counts the sockets opened.
	events  int
	open    int
	sockets int
	// calls are every call between rooms made, by id (the id less one);
	// openCalls those made and not yet answered nor dropped.
	calls     []*roomCall
	openCalls int
	// handFenced are the instances an operator fenced by hand: none of
	// them may run again.
	handFenced map[string]bool
	// Alarms (alarm.go): each room's alarm as its durable state has it,
	// every alarm made durable by its index key, the runs under way by
	// room, the deliveries under way by process and alarm, and the
	// sequence that names new alarms.
	alarmOf   map[cluster.Room]*alarms.Entry
	alarmLog  map[string]*alarmRecord
	alarmRuns map[cluster.Room][]*alarmRun
	inFlight  map[flight]int
	alarmSeq  uint64
	stats     Stats
	failure   string
}

type storedRecord struct {
	rec  cluster.Record
	etag string
}

// machine is a simulated host: a name, a clock rate, a link to the
// bucket, links to the other machines, and the process running on it, if
// any.
type machine struct {
	idx  int
	name string
	ppm  int64 // how much faster than virtual time its clocks run, in millionths
	link Link
	// cutUntil[j] is when the link to machine j heals (virtual time).
	cutUntil []int64
	proc     *process
	starts   int
	// down: its process died for good; it starts again only once an
	// operator's fence by hand is over (fencing counts those under way).
	down    bool
	fencing int
}

// process is one run of a node: its cluster member (and core), its
// clock, its tasks and the holds its rooms run on.
type process struct {
	machine  *machine
	name     string
	member   *member.Member
	clock    *nodeClock
	group    *Group
	holds    map[cluster.Room]cluster.Hold
	stopping bool
	// hung: paused for good (until its machine is rebooted); it never
	// runs again, so it acts on nothing whatever its clock says.
	hung bool
	// draining: an operator asked it to drain (drain is that drain's
	// state); the world's word, not the node's flag, so that a host that
	// forgets to tell its core is caught.
	draining bool
	// drainFlips counts the changes of draining: a take that saw it
	// draining at its start and no change by its end ran wholly while the
	// core was draining.
	drainFlips int
	// paused is how long the process has been paused in all.
	paused int64
	drain  *drainState
	// events are the events landed here and not yet answered; serving
	// the relays, takes and calls it is handling for other machines.
	events  []*request
	serving []*call
	// calls are the calls between rooms made here and not yet answered;
	// turns the rooms' turns (one call runs in a room at a time).
	calls []*roomCall
	turns map[cluster.Room]*turn
	// sockets are the WebSockets open here, in the order they opened
	// (socket.go).
	sockets []*socket
	// moveStarts are the moves an operator began here and not yet ended;
	// movesBegun counts the moves the member began.
	moveStarts map[cluster.Room]moveStart
	movesBegun int
	// exposed are the rooms whose wake here had an unknown outcome or
	// found another holder, until the room is taken or parked here again
	// (checkTaken).
	exposed map[cluster.Room]bool
	// alarms is the process's alarm duty (alarm.go), over alarmBucket.
	alarms      *alarms.Duty
	alarmBucket store.Bucket
}

// nodeClock is a process's monotonic clock: its own origin, its
// machine's rate.
type nodeClock struct {
	s      *Scheduler
	origin int64
	boot   int64
	ppm    int64
}

// Now implements cluster.Clock.
func (c *nodeClock) Now() int64 { return c.origin + (c.s.now-c.boot)*(1e6+c.ppm)/1e6 }

// global turns a duration on this clock into virtual time, rounded up.
func (c *nodeClock) global(d time.Duration) int64 {
	return (int64(d)*1e6 + 1e6 + c.ppm - 1) / (1e6 + c.ppm)
}

// at is what the clock reads at virtual time t.
func (c *nodeClock) at(t int64) int64 { return c.origin + (t-c.boot)*(1e6+c.ppm)/1e6 }

// trueAt is the virtual time at which the clock reads v (the first
// nanosecond it reads v or more).
func (c *nodeClock) trueAt(v int64) int64 { return c.boot + c.global(time.Duration(v-c.origin)) }

// sleeper is a process's cluster.Sleeper: its task blocks in virtual
// time.
type sleeper struct{ p *process }

func (s sleeper) Sleep(ctx context.Context, d time.Duration) error {
	t := TaskOf(ctx)
	t.BlockUntil(t.s.Now() + s.p.clock.global(d))
	return nil
}

// Run simulates cfg and checks the invariants after every step.
func Run(cfg Config) Result {
	w := newWorld(cfg)
	defer w.s.Close()
	for _, m := range w.machines {
		w.start(m)
	}
	end := int64(w.cfg.Duration)
	w.s.At(w.after(150*time.Millisecond), "event", w.event)
	w.s.At(w.after(15*time.Second), "fault", w.fault)
	w.s.At(w.after(20*time.Second), "degrade", w.degrade)
	w.s.At(w.after(20*time.Second), "partition", w.partition)
	w.s.At(w.after(25*time.Second), "drain", w.startDrain)
	w.s.At(w.after(6*time.Second), "move", w.move)
	w.s.At(w.after(socketEvery), "socket", w.connect)
	w.s.At(w.after(callEvery), "call", w.callEvent)
	w.s.At(w.after(alarmEvery), "alarm request", w.alarmEvent)
	for w.failure == "" && w.step(end) {
	}
	// Nothing arrives any more; what is under way ends, answered,
	// refused or caught by its deadline (each of which is bounded).
	for w.failure == "" && w.busy() {
		if !w.step(end + int64(tailMax)) {
			if n := len(w.openAlarms()); n > 0 {
				w.fail("%d alarms lost: made durable, due, and neither run, cleared nor dropped %v after the end: %s", n, tailMax, w.lostAlarms())
				break
			}
			w.fail("%d events and %d calls still open, or drains or moves still under way, %v after the end", w.open, w.openCalls, tailMax)
			break
		}
	}
	if w.failure == "" && w.stats.Landed != w.stats.Answered+w.stats.Refused {
		w.fail("%d events landed, %d answered and %d refused", w.stats.Landed, w.stats.Answered, w.stats.Refused)
	}
	if answered := sum(w.stats.CallOutcomes[:]); w.failure == "" && w.stats.Calls+w.stats.NestedCalls != answered+w.stats.CallsDropped {
		w.fail("%d calls made, %d answered and %d dropped", w.stats.Calls+w.stats.NestedCalls, answered, w.stats.CallsDropped)
	}
	w.stats.Steps = w.s.Steps()
	w.stats.Faults = w.net.Injected
	for _, m := range w.machines {
		if p := m.proc; p != nil {
			addCounters(&w.stats.Node, p.member.Core().Counts())
			w.stats.Sweeps += uint64(p.member.Sweeps())
			if !w.drainOpen(p) {
				w.endDrain(p) // its node ended, not yet its process
			}
		}
	}
	return Result{Seed: cfg.Seed, Hash: w.s.Hash(), Stats: w.stats, Violation: w.failure}
}

// step runs the next event at or before end, then the checks; it
// reports whether there was an event.
func (w *World) step(end int64) bool {
	g, ok := w.s.Step(end)
	if !ok {
		return false
	}
	w.check(w.procs[g])
	return true
}

// tailMax bounds the run after Duration: every event, drain and move has
// a deadline well under it.
const tailMax = 10 * time.Minute

// busy reports whether an event, a call, a drain or a move is still
// under way.
func (w *World) busy() bool {
	if w.open > 0 || w.openCalls > 0 || len(w.openAlarms()) > 0 {
		return true
	}
	for _, m := range w.machines {
		if p := m.proc; p != nil && (w.drainOpen(p) || w.movesOpen(p)) {
			return true
		}
	}
	return false
}

// movesOpen reports whether p has moves under way that must end: each
// ends within its look (checkMoveEnded), so the tail waits for them.
func (w *World) movesOpen(p *process) bool {
	return !p.hung && !p.member.Core().Ended() && len(p.member.Core().Moves()) > 0
}

// newWorld is cfg's world with its machines, none of them started.
func newWorld(cfg Config) *World {
	if cfg.Nodes == 0 {
		cfg.Nodes = 3
	}
	if cfg.Rooms == 0 {
		cfg.Rooms = 10
	}
	if cfg.Duration == 0 {
		cfg.Duration = 2 * time.Minute
	}
	if cfg.TTL == 0 {
		cfg.TTL = cluster.DefaultTTL
	}
	if cfg.Safety == 0 {
		cfg.Safety = cfg.TTL / 20
	}
	if cfg.Grace == 0 {
		cfg.Grace = cfg.TTL / 10
	}
	if cfg.SweepInterval == 0 {
		cfg.SweepInterval = 5 * time.Second
	}
	if cfg.CallFaults == (CallFaults{}) {
		cfg.CallFaults = DefaultCallFaults
	}
	rng := rand.New(rand.NewPCG(cfg.Seed, 0x5eed))
	if cfg.Faults == (Faults{}) {
		cfg.Faults = DefaultFaults
		if rng.IntN(3) == 0 {
			// A calm bucket, one run in three: with a request in ten
			// going wrong, a node's watch of its peers is stalled
			// much of the time, and the fences come long after the
			// lease's edge, which a calm run reaches.
			cfg.Faults = cfg.Faults.Scaled(0.1)
		}
	}
	w := &World{
		cfg: cfg, rng: rng, s: NewScheduler(rand.New(rand.NewPCG(rng.Uint64(), rng.Uint64())), cfg.Trace),
		records: map[string]storedRecord{}, leases: map[string]cluster.Lease{},
		roomOf: map[string]int{}, machineOf: map[string]*machine{}, machineNamed: map[string]*machine{},
		procs: map[*Group]*process{}, granted: map[cluster.Room]map[uint64]string{}, handFenced: map[string]bool{},
		alarmOf: map[cluster.Room]*alarms.Entry{}, alarmLog: map[string]*alarmRecord{},
		alarmRuns: map[cluster.Room][]*alarmRun{}, inFlight: map[flight]int{},
	}
	w.net = NewNetwork(w.s, w.rng, store.NewMem(), cfg.Faults)
	w.net.detail = cfg.Trace != nil
	w.net.applied = w.noteWrite
	w.net.faulted = w.excuseFault
	for i := range cfg.Rooms {
		w.rooms = append(w.rooms, cluster.Room{Class: "c", Name: fmt.Sprintf("r%d", i)})
		w.recordKeys = append(w.recordKeys, cluster.RecordKey(w.rooms[i]))
		w.roomOf[w.recordKeys[i]] = i
	}
	for i := range cfg.Nodes {
		// Clocks run 1.5% to 2% fast or slow, near either edge: two
		// nodes whose clocks drift apart fastest are where the lease's
		// margins are thinnest.
		ppm := 15000 + w.rng.Int64N(5001)
		if w.rng.IntN(2) == 0 {
			ppm = -ppm
		}
		m := &machine{idx: i, name: fmt.Sprintf("n%d", i+1), ppm: ppm, cutUntil: make([]int64, cfg.Nodes)}
		w.machines = append(w.machines, m)
		w.machineOf[cluster.LeaseKey(m.name)], w.machineNamed[m.name] = m, m
	}
	return w
}

func sum(xs []uint64) uint64 {
	var n uint64
	for _, x := range xs {
		n += x
	}
	return n
}

// after is an exponentially distributed delay of mean d, from now.
func (w *World) after(mean time.Duration) int64 {
	return w.s.Now() + int64(w.rng.ExpFloat64()*float64(mean))
}

// between is a uniform duration in [lo, hi).
func (w *World) between(lo, hi time.Duration) time.Duration {
	return lo + time.Duration(w.rng.Int64N(int64(hi-lo)))
}

// fail records the first violation; the run ends after the step.
func (w *World) fail(format string, args ...any) {
	if w.failure == "" {
		w.failure = fmt.Sprintf("at %v: ", time.Duration(w.s.Now())) + fmt.Sprintf(format, args...)
		w.s.Note("VIOLATION %s", w.failure)
	}
}

// noteWrite keeps the records and leases the checks look at up to date,
// and notes what the step changed.
func (w *World) noteWrite(key string, body []byte, etag string) {
	switch {
	case strings.HasSuffix(key, "/owner"):
		rec, err := cluster.DecodeRecord(body)
		if err != nil {
			w.fail("undecodable record written at %s: %v", key, err)
			return
		}
		w.records[key] = storedRecord{rec: rec, etag: etag}
		if !rec.Free {
			w.checkTaken(w.roomOf[key], rec)
		}
	case strings.HasPrefix(key, "nodes/"):
		l, err := cluster.DecodeLease(body)
		if err != nil {
			w.fail("undecodable lease written at %s: %v", key, err)
			return
		}
		w.leases[l.Node] = l
	}
	w.touched = append(w.touched, key)
}

// start runs a new process on m: a new instance with a new clock, its
// core and its member, and the duties of both.
func (w *World) start(m *machine) {
	m.starts++
	p := &process{machine: m, name: fmt.Sprintf("%s.%d", m.name, m.starts), holds: map[cluster.Room]cluster.Hold{},
		exposed: map[cluster.Room]bool{}, moveStarts: map[cluster.Room]moveStart{}, turns: map[cluster.Room]*turn{}}
	p.clock = &nodeClock{s: w.s, origin: w.rng.Int64N(1 << 50), boot: w.s.Now(), ppm: m.ppm}
	p.group = &Group{Name: p.name}
	w.procs[p.group] = p
	core, err := cluster.New(cluster.Config{
		Node: m.name, Address: m.name + ":8080", TTL: w.cfg.TTL, Safety: w.cfg.Safety, Grace: w.cfg.Grace, AckLapses: true,
		WatchEvery: w.cfg.TTL / 100,
		Bucket:     w.net.Bucket(p.name, &m.link), Clock: p.clock,
		Rand:   rand.New(rand.NewPCG(w.rng.Uint64(), w.rng.Uint64())),
		Broken: w.cfg.Broken,
	})
	if err != nil {
		panic(err)
	}
	p.alarms = w.newAlarmDuty(p)
	p.member, err = member.New(member.Config{
		Core: core, Rooms: fakeRooms{w, p}, Peers: fakePeers{w, p}, Clock: p.clock, Sleeper: sleeper{p},
		TTL: w.cfg.TTL, SweepInterval: w.cfg.SweepInterval, Observer: observer{w, p}, Alarms: p.alarms,
		Logger: slog.New(slog.DiscardHandler), Broken: w.cfg.Member,
	})
	if err != nil {
		panic(err)
	}
	m.proc = p
	for i, duty := range p.member.Duties() {
		lease := i == 0
		w.s.Spawn(p.group, fmt.Sprintf("duty %d", i), func(ctx context.Context) {
			core.Run(ctx, sleeper{p}, duty)
			if lease && core.Lost() {
				w.stats.Fenced++
				w.exit(p, "fenced")
			}
		})
	}
}

// observer follows what a process's member does: statistics, and the
// checks made as it acts.
type observer struct {
	w *World
	p *process
}

// Observe implements member.Observer.
func (o observer) Observe(e member.Event) {
	w, p := o.w, o.p
	switch e.Kind {
	case member.Released:
		w.stats.Releases++
	case member.ParkedReleased:
		switch e.Why {
		case "last_socket":
			w.stats.LastSocketReleases++
		case "drain":
			w.stats.ParkedDrains++
		case "move":
			w.stats.ParkedMoves++
		}
	case member.Waited:
		w.stats.FailoverWaits++
	case member.Routed:
		w.checkNotAway(p, e.Room, e.Node)
	case member.OwnerClosed:
		if e.Why == "sweep" {
			w.stats.SweepCloses++
			w.checkSweepClose(p, e.Room)
		}
	case member.MoveBegun:
		w.stats.Moves++
		p.movesBegun++
	case member.MoveEnded:
		w.moveEnded(p, e)
	}
}

// exit ends p as a crash does (its memory is gone) and starts its machine
// again a little later.
func (w *World) exit(p *process, why string) {
	if w.kill(p, why) {
		m := p.machine
		w.s.At(w.s.Now()+int64(w.between(500*time.Millisecond, 20*time.Second)), "restart "+m.name, func() {
			if m.proc == nil && !m.down {
				w.start(m)
			}
		})
	}
}

// kill ends p: its tasks, its memory, the events landed on it (refused:
// their client's connection is gone), the calls between rooms it made
// (dropped) and the calls it was serving (their callers get a reset). It reports whether p was still running.
func (w *World) kill(p *process, why string) bool {
	m := p.machine
	if m.proc != p {
		return false
	}
	addCounters(&w.stats.Node, p.member.Core().Counts())
	w.stats.Sweeps += uint64(p.member.Sweeps())
	w.s.Kill(p.group)
	m.proc = nil
	w.s.Note("%s exits: %s", p.name, why)
	w.dropEvents(p)
	w.dropCalls(p)
	w.forgetSockets(p)
	for _, c := range p.serving {
		w.answer(c, reply{}, errReset)
	}
	p.serving = nil
	w.endDrain(p)
	return true
}
