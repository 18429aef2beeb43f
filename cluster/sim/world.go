package sim

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"strings"
	"time"

	"github.com/wasmkeep/wasmkeep/cluster"
	"github.com/wasmkeep/wasmkeep/host/store"
)

// Config is one simulated run.
type Config struct {
	Seed uint64
	// Nodes and Rooms: how many (3 and 10 when zero).
	Nodes, Rooms int
	// Duration is the virtual time events and faults arrive for (2
	// minutes when zero).
	Duration time.Duration
	// TTL is every node's lease ttl (10 s when zero); Safety and Grace
	// its margins (TTL/20 and TTL/10 when zero: half the defaults, to
	// look closer at the edge they guard).
	TTL, Safety, Grace time.Duration
	// Faults of the bucket (DefaultFaults when zero).
	Faults Faults
	// Broken is handed to every node.
	Broken cluster.Variants
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
	Uses                   uint64 // events served by a hold already here
	Relays                 uint64 // events for a room a live peer holds
	Waits                  uint64 // events for a room whose holder is neither live nor dead yet
	Down                   uint64 // events for a machine with no process running
	Inactive               uint64 // events refused for want of a valid lease (joining, lapsed, stopping)
	Refusals               uint64 // events refused otherwise (contended, unknown outcome, busy, bucket errors)
	Faults                 uint64 // bucket requests that met a fault
	Crashes, Pauses, Stops uint64
	Cuts, Fenced           uint64 // link cuts; processes that found themselves fenced
	Node                   cluster.Counters
}

// Add adds o to s.
func (s *Stats) Add(o Stats) {
	s.Steps += o.Steps
	s.Acquisitions += o.Acquisitions
	s.Releases += o.Releases
	s.Uses += o.Uses
	s.Relays += o.Relays
	s.Waits += o.Waits
	s.Down += o.Down
	s.Inactive += o.Inactive
	s.Refusals += o.Refusals
	s.Faults += o.Faults
	s.Crashes += o.Crashes
	s.Pauses += o.Pauses
	s.Stops += o.Stops
	s.Cuts += o.Cuts
	s.Fenced += o.Fenced
	addCounters(&s.Node, o.Node)
}

func addCounters(a *cluster.Counters, b cluster.Counters) {
	a.Renewals += b.Renewals
	a.RenewalsFailed += b.RenewalsFailed
	a.Lapses += b.Lapses
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
// bucket.
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
	stats        Stats
	failure      string
}

type storedRecord struct {
	rec  cluster.Record
	etag string
}

// machine is a simulated host: a name, a clock rate, a link to the bucket
// and the process running on it, if any.
type machine struct {
	idx    int
	name   string
	ppm    int64 // how much faster than virtual time its clocks run, in millionths
	link   Link
	proc   *process
	starts int
}

// process is one run of a node: its cluster.Node, its clock, its tasks
// and the holds its host runs rooms on.
type process struct {
	machine  *machine
	name     string
	node     *cluster.Node
	clock    *nodeClock
	group    *Group
	holds    map[cluster.Room]cluster.Hold
	stopping bool
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
	for w.failure == "" {
		g, ok := w.s.Step(end)
		if !ok {
			break
		}
		w.check(w.procs[g])
	}
	w.stats.Steps = w.s.Steps()
	w.stats.Faults = w.net.Injected
	for _, m := range w.machines {
		if m.proc != nil {
			addCounters(&w.stats.Node, m.proc.node.Counts())
		}
	}
	return Result{Seed: cfg.Seed, Hash: w.s.Hash(), Stats: w.stats, Violation: w.failure}
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
	if cfg.Faults == (Faults{}) {
		cfg.Faults = DefaultFaults
	}
	rng := rand.New(rand.NewPCG(cfg.Seed, 0x5eed))
	w := &World{
		cfg: cfg, rng: rng, s: NewScheduler(rand.New(rand.NewPCG(rng.Uint64(), rng.Uint64())), cfg.Trace),
		records: map[string]storedRecord{}, leases: map[string]cluster.Lease{},
		roomOf: map[string]int{}, machineOf: map[string]*machine{}, machineNamed: map[string]*machine{},
		procs: map[*Group]*process{}, granted: map[cluster.Room]map[uint64]string{},
	}
	w.net = NewNetwork(w.s, w.rng, store.NewMem(), cfg.Faults)
	w.net.detail = cfg.Trace != nil
	w.net.applied = w.noteWrite
	for i := range cfg.Rooms {
		w.rooms = append(w.rooms, cluster.Room{Class: "c", Name: fmt.Sprintf("r%d", i)})
		w.recordKeys = append(w.recordKeys, cluster.RecordKey(w.rooms[i]))
		w.roomOf[w.recordKeys[i]] = i
	}
	for i := range cfg.Nodes {
		m := &machine{idx: i, name: fmt.Sprintf("n%d", i+1), ppm: w.rng.Int64N(40001) - 20000}
		w.machines = append(w.machines, m)
		w.machineOf[cluster.LeaseKey(m.name)], w.machineNamed[m.name] = m, m
	}
	return w
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

// start runs a new process on m: a new instance with a new clock.
func (w *World) start(m *machine) {
	m.starts++
	p := &process{machine: m, name: fmt.Sprintf("%s.%d", m.name, m.starts), holds: map[cluster.Room]cluster.Hold{}}
	p.clock = &nodeClock{s: w.s, origin: w.rng.Int64N(1 << 50), boot: w.s.Now(), ppm: m.ppm}
	p.group = &Group{Name: p.name}
	w.procs[p.group] = p
	node, err := cluster.New(cluster.Config{
		Node: m.name, Address: m.name + ":8080", TTL: w.cfg.TTL, Safety: w.cfg.Safety, Grace: w.cfg.Grace,
		Bucket: w.net.Bucket(p.name, &m.link), Clock: p.clock,
		Rand:   rand.New(rand.NewPCG(w.rng.Uint64(), w.rng.Uint64())),
		Broken: w.cfg.Broken,
	})
	if err != nil {
		panic(err)
	}
	p.node = node
	m.proc = p
	for i, duty := range node.Duties() {
		lease := i == 0
		w.s.Spawn(p.group, []string{"lease", "peers", "settle"}[i], func(ctx context.Context) {
			node.Run(ctx, sleeper{p}, duty)
			if lease && node.Lost() {
				w.stats.Fenced++
				w.exit(p, "fenced")
			}
		})
	}
}

// exit ends p as a crash does (its memory is gone) and starts its machine
// again a little later.
func (w *World) exit(p *process, why string) {
	m := p.machine
	if m.proc != p {
		return
	}
	addCounters(&w.stats.Node, p.node.Counts())
	w.s.Kill(p.group)
	m.proc = nil
	w.s.Note("%s exits: %s", p.name, why)
	w.s.At(w.s.Now()+int64(w.between(500*time.Millisecond, 20*time.Second)), "restart "+m.name, func() {
		if m.proc == nil {
			w.start(m)
		}
	})
}

// event is a request for a random room landing on a random machine.
func (w *World) event() {
	if w.s.Now() < int64(w.cfg.Duration) {
		w.s.At(w.after(150*time.Millisecond), "event", w.event)
	}
	m := w.machines[w.rng.IntN(len(w.machines))]
	room := w.rooms[w.rng.IntN(len(w.rooms))]
	p := m.proc
	if p == nil {
		w.stats.Down++
		return
	}
	w.s.Spawn(p.group, "event "+room.Name, func(ctx context.Context) { w.serve(ctx, p, room) })
}

// serve is what a host does with an event: run it on the room's hold
// here, or acquire the room, hold it for a while, and release it.
func (w *World) serve(ctx context.Context, p *process, room cluster.Room) {
	node := p.node
	if h, ok := p.holds[room]; ok {
		if node.Valid(h) {
			w.stats.Uses++
			return
		}
		delete(p.holds, room) // dropped: the host's instance goes, unwritten
		node.Release(ctx, h)
		w.stats.Refusals++
		return
	}
	h, err := node.Acquire(ctx, room)
	var held *cluster.HeldError
	switch {
	case errors.As(err, &held) && held.Live:
		w.stats.Relays++
		return
	case errors.As(err, &held):
		w.stats.Waits++
		return
	case errors.Is(err, cluster.ErrNotActive):
		w.stats.Inactive++
		return
	case err != nil:
		w.stats.Refusals++
		return
	}
	w.stats.Acquisitions++
	gens := w.granted[room]
	if gens == nil {
		gens = map[uint64]string{}
		w.granted[room] = gens
	}
	if other, dup := gens[h.Generation]; dup {
		w.fail("room %s: generation %d granted twice, to %s and to %s", room, h.Generation, other, p.name)
	}
	gens[h.Generation] = p.name
	p.holds[room] = h
	sl := sleeper{p}
	// Most rooms stay for a few events; some stay resident for long
	// (a busy room), outliving lease renewals, cut links and fences.
	uses := 1 + w.rng.IntN(6)
	if w.rng.IntN(3) == 0 {
		uses = 10 + w.rng.IntN(20)
	}
	for range uses {
		sl.Sleep(ctx, w.between(100*time.Millisecond, 2*time.Second))
		if !node.Valid(h) {
			break
		}
		w.stats.Uses++
	}
	if p.holds[room] == h {
		delete(p.holds, room)
		node.Release(ctx, h)
		w.stats.Releases++
	}
}

// fault is a process crash, a pause or a clean stop.
func (w *World) fault() {
	if w.s.Now() < int64(w.cfg.Duration) {
		w.s.At(w.after(15*time.Second), "fault", w.fault)
	}
	p := w.machines[w.rng.IntN(len(w.machines))].proc
	if p == nil || p.stopping {
		return
	}
	ttl := w.cfg.TTL
	switch x := w.rng.Float64(); {
	case x < 0.4:
		w.stats.Crashes++
		w.exit(p, "crash")
	case x < 0.75:
		until := w.s.Now() + int64(w.between(ttl/2, 5*ttl/2))
		w.stats.Pauses++
		w.s.Note("pause %s until %d", p.name, until)
		w.s.Pause(p.group, until)
	default:
		w.stats.Stops++
		p.stopping = true
		w.s.Spawn(p.group, "stop", func(ctx context.Context) {
			p.node.Stop(ctx, sleeper{p})
			w.exit(p, "stopped")
		})
	}
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
}
