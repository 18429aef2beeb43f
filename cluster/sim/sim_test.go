package sim

import (
	"fmt"
	"os"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/wasmkeep/wasmkeep/alarms"
	"github.com/wasmkeep/wasmkeep/cluster"
	"github.com/wasmkeep/wasmkeep/cluster/member"
)

// defaultSeeds is how many seeds TestSim runs unless WASMKEEP_SIM_SEEDS
// says otherwise: enough to catch every broken variant and to exercise
// every part of the protocol, in seconds. Under -race, which makes a run
// ten times slower, a quarter of them (enough to catch every variant still):
// each seed runs on one goroutine,
// so what the race detector can find (state shared between runs, the
// pool of runs itself) a few seeds find as well as many. CI runs the
// full count again without -race (.ci/run).
var defaultSeeds uint64 = 200

func init() {
	if raceEnabled {
		defaultSeeds /= 4
		checkSeeds = 1
	}
}

func envInt(t *testing.T, name string, def uint64) uint64 {
	t.Helper()
	s := os.Getenv(name)
	if s == "" {
		return def
	}
	n, err := strconv.ParseUint(s, 10, 64)
	if err != nil {
		t.Fatalf("%s=%q: %v", name, s, err)
	}
	return n
}

// runSeeds runs cfg at seeds from, from+1, …, from+n-1, on every core.
func runSeeds(cfg Config, from, n uint64) []Result {
	results := make([]Result, n)
	var next atomic.Uint64
	var wg sync.WaitGroup
	for range runtime.GOMAXPROCS(0) {
		wg.Go(func() {
			for i := next.Add(1) - 1; i < n; i = next.Add(1) - 1 {
				c := cfg
				c.Seed = from + i
				results[i] = Run(c)
			}
		})
	}
	wg.Wait()
	return results
}

// firstCaught is the first seed below n at which cfg breaks an
// invariant, or -1.
func firstCaught(cfg Config, n uint64) (int64, Result) {
	batch := uint64(4 * runtime.GOMAXPROCS(0))
	for from := uint64(0); from < n; from += batch {
		for _, r := range runSeeds(cfg, from, min(batch, n-from)) {
			if r.Violation != "" {
				return int64(r.Seed), r
			}
		}
	}
	return -1, Result{}
}

// replay is the command that replays a seed.
func replay(seed uint64, variant string) string {
	env := fmt.Sprintf("WASMKEEP_SIM_SEED=%d", seed)
	if variant != "" {
		env += " WASMKEEP_SIM_VARIANT=" + variant
	}
	return env + " go test -run TestSimSeed -v ./cluster/sim/   (add WASMKEEP_SIM_TRACE=FILE for every event)"
}

// variants are the names of every broken variant: the core's (its
// parked records' among them), the member's, then the world's.
func variants() []string {
	return slices.Concat(cluster.VariantNames, cluster.ParkVariantNames, member.VariantNames, VariantNames, []string{alarmRetryOverlaps})
}

// alarmRetryOverlaps names the alarm duty's variant (alarms.Variants).
const alarmRetryOverlaps = "AlarmRetryOverlaps"

// variantConfig is the Config with the variant of that name switched on
// ("" for none).
func variantConfig(name string) (Config, error) {
	if v, ok := variant(name); ok {
		return Config{World: v}, nil
	}
	if name == alarmRetryOverlaps {
		return Config{Alarms: alarms.Variants{RetryOverlaps: true}}, nil
	}
	if v, err := member.Variant(name); err == nil {
		return Config{Member: v}, nil
	}
	v, err := cluster.Variant(name)
	if err != nil {
		return Config{}, fmt.Errorf("%w (or one of the member's, %v, or the world's, %v)", err, member.VariantNames, VariantNames)
	}
	return Config{Broken: v}, nil
}

// TestSim runs the cluster core on WASMKEEP_SIM_SEEDS seeds (200 by
// default): the correct code must keep every invariant on every seed, and
// each broken variant must be caught at one of them. With -v it prints
// what the runs did:
//
//	WASMKEEP_SIM_SEEDS=20000 go test -run 'TestSim$' -v ./cluster/sim/
func TestSim(t *testing.T) {
	n := envInt(t, "WASMKEEP_SIM_SEEDS", defaultSeeds)
	var total Stats
	violations := 0
	for _, r := range runSeeds(Config{}, 0, n) {
		total.Add(r.Stats)
		if r.Violation != "" {
			violations++
			if violations <= 5 {
				t.Errorf("seed %d: %s\n\treplay: %s", r.Seed, r.Violation, replay(r.Seed, ""))
			}
		}
	}
	c := total.Node
	if total.Landed != total.Answered+total.Refused {
		t.Errorf("%d events landed, %d answered, %d refused", total.Landed, total.Answered, total.Refused)
	}
	// Every part of the protocol and of the host was exercised.
	for what, count := range map[string]uint64{
		"acquisitions": total.Acquisitions, "fences": c.Fences, "resolved landings": c.ResolvedLanded, "lapses": c.Lapses,
		"relays": total.Relays, "relays answered": total.AnsweredRelayed, "dials in vain": total.Dials,
		"failover waits": total.FailoverWaits, "events moved": total.Reasons[refusedMoved],
		"drains": total.Drained, "moves": total.MovesDone, "fences by hand": total.HandFences, "hangs": total.Hangs,
		"sockets": total.SocketsOpened, "parks": c.Parks, "wakes at home": c.ParkedWakes,
		"releases at the last socket": total.LastSocketReleases, "drains of a parked room": total.ParkedDrains,
		"moves of a parked room": total.ParkedMoves, "sweep passes": total.Sweeps, "sockets closed by a sweep": total.SweepCloses,
		"calls answered": total.CallOutcomes[callOK], "nested calls": total.NestedCalls, "calls run on another machine": total.CallRunsSent,
		"cycles": total.CallOutcomes[callCycle], "calls timed out": total.CallOutcomes[callTimedOut], "calls refused": total.CallOutcomes[callRefused],
		"broken call connections": total.CallBreaks, "lost call answers": total.CallAnswersLost, "calls' broadcasts": total.CallBroadcasts,
		"alarms set": total.AlarmsSet, "alarm runs": total.AlarmRuns, "alarm retries": total.AlarmRetries,
		"stale alarms": total.AlarmsStale, "alarm index scans": total.AlarmScans,
	} {
		if count == 0 {
			t.Errorf("the runs never exercised %s: %+v", what, total)
		}
	}
	var caught []string
	for _, name := range variants() {
		cfg, err := variantConfig(name)
		if err != nil {
			t.Fatal(err)
		}
		seed, r := firstCaught(cfg, n)
		if seed < 0 {
			t.Errorf("variant %s broke no invariant in %d seeds", name, n)
			caught = append(caught, name+" not caught")
			continue
		}
		t.Logf("variant %s caught at seed %d: %s", name, seed, r.Violation)
		caught = append(caught, fmt.Sprintf("%s at seed %d", name, seed))
	}
	var reasons, outcomes []string
	for i, count := range total.Reasons {
		reasons = append(reasons, fmt.Sprintf("%d %s", count, ReasonNames[i]))
	}
	for i, count := range total.CallOutcomes {
		outcomes = append(outcomes, fmt.Sprintf("%d %s", count, CallOutcomeNames[i]))
	}
	t.Logf("%d seeds, %d steps: %d acquisitions, %d releases (%d retried, %d moot), %d uses of resident rooms; "+
		"%d events landed: %d answered (%d by the node they were relayed to), %d refused (%s); "+
		"%d relays, %d dials in vain, %d late answers, %d failover waits; the longest event %v (bound %v); "+
		"%d drains (%d drained, %d ended first; the longest %v, bound %v), %d moves (%d taken, %d found taken by the look, %d given up, %d refused; the longest %v, less pauses), %d stray records a move released; "+
		"%d faults injected, %d crashes, %d pauses, %d clean stops, %d deaths, %d hangs, %d degraded links, %d cut links between machines; "+
		"%d fences (%d processes found themselves fenced), %d by hand (%d failed), %d lapses; "+
		"resolver: %d landed, %d moved, %d expired; "+
		"%d sockets opened (%d closed by their client, %d by their node), %d parks, %d wakes at home, "+
		"%d parked records released (%d at the last socket, %d by a drain), %d moves of a parked room, %d sweep passes (%d rooms' sockets closed), "+
		"%d exposed takeovers; "+
		"%d calls by fronts (%d more on machines with no process), %d by rooms: %s, %d dropped with their process; "+
		"%d runs (%d on another machine than the caller's, %d of them begun after their sender gave up, as the call reached the node late; %d broadcasts), %d calls sent to another node, %d dials in vain, %d found past their deadline unsent, "+
		"%d broken connections, %d lost answers, %d slow legs; the latest answer %v past its deadline (slack %v); "+
		"%d alarm requests answered, %d alarms made durable, %d deliveries, %d runs (%d crashed), %d retries, %d stale, %d dropped, %d scans of the index; "+
		"%d violations; variants caught: %s",
		n, total.Steps, total.Acquisitions, total.Releases, c.ReleaseRetries, c.ReleaseMoot, total.Uses,
		total.Landed, total.Answered, total.AnsweredRelayed, total.Refused, strings.Join(reasons, ", "),
		total.Relays, total.Dials, total.Late, total.FailoverWaits, total.LongestEvent, eventBound+eventSlack,
		total.Drains, total.Drained, total.DrainsEnded, total.LongestDrain, newWorld(Config{}).drainBound(), total.Moves, total.MovesDone, total.MovesFoundTaken, total.MovesGivenUp, total.MovesRefused, total.LongestMove, c.MoveStrayReleases,
		total.Faults, total.Crashes, total.Pauses, total.Stops, total.Deaths, total.Hangs, total.Cuts, total.PeerCuts,
		c.Fences, total.Fenced, total.HandFences, total.HandFencesFailed, c.Lapses,
		c.ResolvedLanded, c.ResolvedMoved, c.ResolvedExpired,
		total.SocketsOpened, total.SocketsClosedByClient, total.SocketsClosedByNode, c.Parks, c.ParkedWakes,
		c.ParkedReleases, total.LastSocketReleases, total.ParkedDrains, total.ParkedMoves, total.Sweeps, total.SweepCloses,
		total.Exposed,
		total.Calls, total.CallsDown, total.NestedCalls, strings.Join(outcomes, ", "), total.CallsDropped,
		total.CallRuns, total.CallRunsSent, total.CallRunsLateSent, total.CallBroadcasts, total.CallsSent, total.CallDials, total.CallsUnsent,
		total.CallBreaks, total.CallAnswersLost, total.CallLegsSlow, total.LongestCallOver, callAnswerSlack,
		total.AlarmRequests, total.AlarmsSet, total.AlarmDeliveries, total.AlarmRuns, total.AlarmCrashes, total.AlarmRetries,
		total.AlarmsStale, total.AlarmsDropped, total.AlarmScans,
		violations, strings.Join(caught, ", "))
}

// TestSimSeed replays one seed (WASMKEEP_SIM_SEED, 1 by default) with the
// variant WASMKEEP_SIM_VARIANT, if set, and writes every event to the file
// WASMKEEP_SIM_TRACE, if set. Without a variant a violation fails it.
func TestSimSeed(t *testing.T) {
	seed := envInt(t, "WASMKEEP_SIM_SEED", 1)
	name := os.Getenv("WASMKEEP_SIM_VARIANT")
	cfg, err := variantConfig(name)
	if err != nil {
		t.Fatal(err)
	}
	cfg.Seed = seed
	if path := os.Getenv("WASMKEEP_SIM_TRACE"); path != "" {
		f, err := os.Create(path)
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		cfg.Trace = f
	}
	r := Run(cfg)
	t.Logf("seed %d: hash %016x, %d steps, %+v", seed, r.Hash, r.Stats.Steps, r.Stats)
	switch {
	case r.Violation != "" && name == "":
		t.Errorf("seed %d: %s", seed, r.Violation)
	case r.Violation != "":
		t.Logf("variant %s: %s", name, r.Violation)
	case name != "":
		t.Logf("variant %s broke nothing at seed %d", name, seed)
	}
}

func TestSimReplaysExactly(t *testing.T) {
	a, b, c := Run(Config{Seed: 42}), Run(Config{Seed: 42}), Run(Config{Seed: 43})
	if a.Hash != b.Hash || a.Stats != b.Stats {
		t.Errorf("seed 42 ran twice: hashes %016x and %016x, stats %+v and %+v", a.Hash, b.Hash, a.Stats, b.Stats)
	}
	if a.Hash == c.Hash {
		t.Errorf("seeds 42 and 43 have one hash, %016x", a.Hash)
	}
	if a.Stats.Steps < 1000 || a.Stats.Acquisitions < 10 {
		t.Errorf("seed 42 did little: %+v", a.Stats)
	}
	// A broken variant's violation replays too.
	v, _ := cluster.Variant("AcquireLive")
	x, y := Run(Config{Seed: 0, Broken: v}), Run(Config{Seed: 0, Broken: v})
	if x.Violation == "" || x.Violation != y.Violation || x.Hash != y.Hash {
		t.Errorf("a violation did not replay: %q (%016x), %q (%016x)", x.Violation, x.Hash, y.Violation, y.Hash)
	}
}

// checkSeeds is how many seeds of each variant (and of the correct code)
// TestChecksOfWhatChangedFindWhatCheckingEverythingFinds runs; one under
// -race, for the reason defaultSeeds gives, and CI runs it again without.
var checkSeeds uint64 = 3

// TestChecksOfWhatChangedFindWhatCheckingEverythingFinds: the checks
// after each step look only at what the step changed; looking at
// everything finds the same first violation on the same step.
func TestChecksOfWhatChangedFindWhatCheckingEverythingFinds(t *testing.T) {
	type run struct {
		name string
		cfg  Config
		a, b Result
	}
	var runs []*run
	for _, name := range append([]string{""}, variants()...) {
		cfg, err := variantConfig(name)
		if err != nil {
			t.Fatal(err)
		}
		for seed := range checkSeeds {
			cfg.Seed = seed
			runs = append(runs, &run{name: name, cfg: cfg})
		}
	}
	// Each pair of runs on a core of its own.
	var next atomic.Int64
	var wg sync.WaitGroup
	for range runtime.GOMAXPROCS(0) {
		wg.Go(func() {
			for i := next.Add(1) - 1; i < int64(len(runs)); i = next.Add(1) - 1 {
				r := runs[i]
				r.a = Run(r.cfg)
				all := r.cfg
				all.CheckEverything = true
				r.b = Run(all)
			}
		})
	}
	wg.Wait()
	for _, r := range runs {
		if r.a.Violation != r.b.Violation || r.a.Hash != r.b.Hash {
			t.Errorf("variant %q, seed %d: %q (%016x) checking what changed, %q (%016x) checking everything", r.name, r.cfg.Seed, r.a.Violation, r.a.Hash, r.b.Violation, r.b.Hash)
		}
	}
}
