package sim

import (
	"fmt"
	"os"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/wasmkeep/wasmkeep/cluster"
)

// defaultSeeds is how many seeds TestSim runs unless WASMKEEP_SIM_SEEDS
// says otherwise: enough to catch every broken variant, few enough for
// the package's tests to take seconds under -race.
const defaultSeeds = 200

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
	if total.Acquisitions == 0 || total.Node.Fences == 0 || total.Node.ResolvedLanded == 0 || total.Node.Lapses == 0 {
		t.Errorf("the runs never exercised part of the protocol: %+v", total)
	}
	var caught []string
	for _, name := range cluster.VariantNames {
		v, err := cluster.Variant(name)
		if err != nil {
			t.Fatal(err)
		}
		seed, r := firstCaught(Config{Broken: v}, n)
		if seed < 0 {
			t.Errorf("variant %s broke no invariant in %d seeds", name, n)
			caught = append(caught, name+" not caught")
			continue
		}
		t.Logf("variant %s caught at seed %d: %s", name, seed, r.Violation)
		caught = append(caught, fmt.Sprintf("%s at seed %d", name, seed))
	}
	c := total.Node
	t.Logf("%d seeds, %d steps: %d acquisitions, %d releases (%d retried, %d moot), %d uses, %d relays, %d waits, %d for a machine down, %d without a valid lease, %d refusals; "+
		"%d faults injected, %d crashes, %d pauses, %d clean stops, %d cut links, %d fences (%d processes found themselves fenced), %d lapses; "+
		"resolver: %d landed, %d moved, %d expired; %d violations; variants caught: %s",
		n, total.Steps, total.Acquisitions, total.Releases, c.ReleaseRetries, c.ReleaseMoot, total.Uses, total.Relays, total.Waits, total.Down, total.Inactive, total.Refusals,
		total.Faults, total.Crashes, total.Pauses, total.Stops, total.Cuts, c.Fences, total.Fenced, c.Lapses,
		c.ResolvedLanded, c.ResolvedMoved, c.ResolvedExpired, violations, strings.Join(caught, ", "))
}

// TestSimSeed replays one seed (WASMKEEP_SIM_SEED, 1 by default) with the
// variant WASMKEEP_SIM_VARIANT, if set, and writes every event to the file
// WASMKEEP_SIM_TRACE, if set. Without a variant a violation fails it.
func TestSimSeed(t *testing.T) {
	seed := envInt(t, "WASMKEEP_SIM_SEED", 1)
	name := os.Getenv("WASMKEEP_SIM_VARIANT")
	v, err := cluster.Variant(name)
	if err != nil {
		t.Fatal(err)
	}
	cfg := Config{Seed: seed, Broken: v}
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

// TestChecksOfWhatChangedFindWhatCheckingEverythingFinds: the checks
// after each step look only at what the step changed; looking at
// everything finds the same first violation on the same step.
func TestChecksOfWhatChangedFindWhatCheckingEverythingFinds(t *testing.T) {
	for _, name := range append([]string{""}, cluster.VariantNames...) {
		v, _ := cluster.Variant(name)
		for seed := range uint64(3) {
			a := Run(Config{Seed: seed, Broken: v})
			b := Run(Config{Seed: seed, Broken: v, CheckEverything: true})
			if a.Violation != b.Violation || a.Hash != b.Hash {
				t.Errorf("variant %q, seed %d: %q (%016x) checking what changed, %q (%016x) checking everything", name, seed, a.Violation, a.Hash, b.Violation, b.Hash)
			}
		}
	}
}
