package node

import (
	"fmt"
	"math/rand/v2"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/wasmkeep/wasmkeep/host/rooms"
	"github.com/wasmkeep/wasmkeep/internal/kvmodel"
)

// The model test drives kv rooms (testdata/guests/kv) with random writes,
// reads, hibernations, crashes, evictions and restarts, and checks every
// answer against a model of what each room must hold.
//
// Set WASMKEEP_MODEL_SEED to replay a run (the seed is logged at the start
// and again on failure) and WASMKEEP_MODEL_OPS to change its length.
const (
	envModelSeed = "WASMKEEP_MODEL_SEED"
	envModelOps  = "WASMKEEP_MODEL_OPS"
)

// kvState is one state of a kv room.
type kvState = kvmodel.State

// kvRoomModel is what the test knows of one room: its state now, and its
// state as of its last snapshot, to which a crash rolls it back.
type kvRoomModel struct {
	cur, snap *kvState
}

// modelSeed is WASMKEEP_MODEL_SEED, or one taken from the clock; either
// way it is logged, and logged again if the test fails.
func modelSeed(t *testing.T) uint64 {
	t.Helper()
	seed := uint64(time.Now().UnixNano())
	if s := os.Getenv(envModelSeed); s != "" {
		v, err := strconv.ParseUint(s, 10, 64)
		if err != nil {
			t.Fatalf("%s=%q: %v", envModelSeed, s, err)
		}
		seed = v
	}
	t.Logf("seed %d (replay with %s=%d)", seed, envModelSeed, seed)
	return seed
}

// TestKVModel runs thousands of random operations over 20 kv rooms on a
// node that keeps at most 5 resident, so most wakes evict another room:
// PUT, DELETE and GET of keys, GET /state, admin hibernations, traps (the
// room rolls back to its last snapshot) and clean restarts on the same data
// directory (every room's state survives). Every answer is compared with
// the model, exactly.
//
// Keeping the model exact with asynchronous evictions: waking a room on a
// node at its resident bound queues the hibernation of one other room (the
// least recently used) before the waking event runs, so when a request has
// returned, the eviction it caused is queued, and no later one can happen
// without another wake. The test predicts which operations wake a room
// (those on a room not listed resident, hibernate excepted) and, before
// the next operation, waits until the node's eviction count reaches the
// prediction (a crash right after a wake drops the resident count at once,
// so the count of resident rooms alone would not do). Then it lists the
// rooms: one listed hibernated has been snapshotted since its last change,
// so its snapshot is its current state. A room's state only changes
// through the test's own requests to it, one at a time, so checking before
// every operation catches every snapshot that matters.
func TestKVModel(t *testing.T) { runKVModel(t, "hibernate") }

// TestKVModelDurable is TestKVModel on a class durable per event (the
// default): every answered write is in the store before its answer, so a
// crash goes back to the last answered state.
func TestKVModelDurable(t *testing.T) { runKVModel(t, "event") }

func runKVModel(t *testing.T, durability string) {
	t.Parallel()
	seed := modelSeed(t)
	// 3000 operations take about 20 s on 2 idle cores. On a busy machine
	// the run stops early at the budget (saying so), unless the number of
	// operations was given.
	ops, budget := 3000, 50*time.Second
	if testing.Short() || raceEnabled {
		ops = 300
	}
	if s := os.Getenv(envModelOps); s != "" {
		v, err := strconv.Atoi(s)
		if err != nil {
			t.Fatalf("%s=%q: %v", envModelOps, s, err)
		}
		ops, budget = v, 0
	}
	rng := rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))

	const (
		nRooms      = 20
		maxResident = 5
		nKeys       = 10
	)
	cfg := Config{DataDir: t.TempDir(), Rooms: rooms.Config{MaxResident: maxResident}}
	n := startNode(t, cfg)
	expect(t, 201, "PUT", n.AdminURL()+"/admin/classes/kv?durability="+durability, buildGuest(t, "./testdata/guests/kv"))
	durable := durability == "event"

	model := make([]kvRoomModel, nRooms)
	for i := range model {
		model[i] = kvRoomModel{cur: kvmodel.Empty, snap: kvmodel.Empty}
	}
	roomName := func(i int) string { return fmt.Sprintf("r%02d", i) }
	roomURL := func(i int) string { return n.URL() + "/actor/kv/" + roomName(i) }

	// The last operations, for the failure message.
	var recent []string
	note := func(format string, args ...any) {
		if len(recent) == 40 {
			recent = recent[1:]
		}
		recent = append(recent, fmt.Sprintf(format, args...))
	}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("seed %d (replay with %s=%d); last operations:\n%s", seed, envModelSeed, seed, strings.Join(recent, "\n"))
		}
	})

	// observe waits until the evictions the last operation caused are
	// done, then records which rooms are hibernated and which resident
	// ("" for rooms not listed).
	listed := make([]string, nRooms)
	var evictions float64 // that this node must have done by now
	resident := 0
	observe := func() {
		t.Helper()
		deadline := time.Now().Add(30 * time.Second)
		for {
			got := metric(t, n, `wasmkeep_room_hibernations_total{reason="evict"}`)
			if got == evictions {
				break
			}
			if got > evictions || time.Now().After(deadline) {
				t.Fatalf("%v evictions, want %v", got, evictions)
			}
			time.Sleep(time.Millisecond)
		}
		clear(listed)
		resident = 0
		for _, row := range listRooms(t, n) {
			i, err := strconv.Atoi(strings.TrimPrefix(row.Name, "r"))
			if row.Class != "kv" || err != nil || i < 0 || i >= nRooms {
				t.Fatalf("unexpected room listed: %+v", row)
			}
			listed[i] = row.State
			switch row.State {
			case "hibernated":
				model[i].snap = model[i].cur
			case "resident":
				resident++
			}
		}
		if resident > maxResident {
			t.Fatalf("%d rooms resident, over the bound of %d", resident, maxResident)
		}
	}
	// wakes counts the eviction that waking room i causes, if it is not
	// resident and the node is at its bound: the wake queues the
	// hibernation of one other room before its event runs, even if the
	// event then crashes and leaves the room asleep again.
	wakes := func(i int) {
		if listed[i] != "resident" && resident == maxResident {
			evictions++
		}
	}
	checkState := func(i int) {
		t.Helper()
		if got, want := expect(t, 200, "GET", roomURL(i)+"/state", nil), model[i].cur.Dump(); got != want {
			t.Fatalf("room %s: GET /state:\n%s\nwant:\n%s", roomName(i), got, want)
		}
	}

	counts := map[string]int{}
	// tally adds the node's wakes, evictions and crashes to counts.
	tally := func() {
		counts["node-wakes"] += int(metric(t, n, "wasmkeep_room_wakes_total"))
		counts["node-evictions"] += int(metric(t, n, `wasmkeep_room_hibernations_total{reason="evict"}`))
		counts["node-crashes"] += int(metric(t, n, `wasmkeep_room_crashes_total{cause="trap"}`))
	}
	start := time.Now()
	done := 0
	for step := range ops {
		if budget > 0 && time.Since(start) > budget {
			t.Logf("stopping after %d of %d operations: the %v budget is spent (machine busy?)", step, ops, budget)
			break
		}
		done++
		observe()
		i := rng.IntN(nRooms)
		m := &model[i]
		url := roomURL(i)
		key := "k" + strconv.Itoa(rng.IntN(nKeys))
		switch p := rng.Float64(); {
		case p < 0.38:
			wakes(i)
			v := randomValue(rng)
			note("%d: PUT %s/k/%s (%d bytes) [%s]", step, roomName(i), key, len(v), listed[i])
			m.cur = m.cur.With(key, &v)
			if got := expect(t, 200, "PUT", url+"/k/"+key, []byte(v)); got != strconv.FormatUint(m.cur.Version, 10) {
				t.Fatalf("PUT %s/k/%s answered version %q, want %d", roomName(i), key, got, m.cur.Version)
			}
			if durable {
				m.snap = m.cur
			}
			counts["put"]++
		case p < 0.53:
			wakes(i)
			note("%d: DELETE %s/k/%s [%s]", step, roomName(i), key, listed[i])
			m.cur = m.cur.With(key, nil)
			if got := expect(t, 200, "DELETE", url+"/k/"+key, nil); got != strconv.FormatUint(m.cur.Version, 10) {
				t.Fatalf("DELETE %s/k/%s answered version %q, want %d", roomName(i), key, got, m.cur.Version)
			}
			if durable {
				m.snap = m.cur
			}
			counts["delete"]++
		case p < 0.78:
			wakes(i)
			note("%d: GET %s/k/%s [%s]", step, roomName(i), key, listed[i])
			r := do(t, "GET", url+"/k/"+key, nil)
			want, ok := m.cur.Values[key]
			switch {
			case ok && (r.Status != 200 || r.Body != want):
				t.Fatalf("GET %s/k/%s: %d %.80q, want 200 %.80q", roomName(i), key, r.Status, r.Body, want)
			case !ok && r.Status != 404:
				t.Fatalf("GET %s/k/%s: %d %.80q, want 404", roomName(i), key, r.Status, r.Body)
			}
			counts["get"]++
		case p < 0.85:
			wakes(i)
			note("%d: GET %s/state [%s]", step, roomName(i), listed[i])
			checkState(i)
			counts["state"]++
		case p < 0.88:
			wakes(i)
			note("%d: GET %s/version [%s]", step, roomName(i), listed[i])
			if got := expect(t, 200, "GET", url+"/version", nil); got != strconv.FormatUint(m.cur.Version, 10) {
				t.Fatalf("GET %s/version: %q, want %d", roomName(i), got, m.cur.Version)
			}
			counts["version"]++
		case p < 0.94:
			note("%d: hibernate %s [%s]", step, roomName(i), listed[i])
			if listed[i] == "" {
				// Neither resident nor stored: it never ran, or it crashed
				// before its first snapshot; either way it is empty.
				if m.cur != kvmodel.Empty || m.snap != kvmodel.Empty {
					t.Fatalf("room %s is not listed, but the model has it at version %d (snapshot %d)", roomName(i), m.cur.Version, m.snap.Version)
				}
				if r := do(t, "POST", n.URL()+"/admin/rooms/kv/"+roomName(i)+"/hibernate", nil); r.Status != 404 && r.Status != 200 {
					t.Fatalf("hibernate unlisted room %s: %d %s", roomName(i), r.Status, r.Body)
				}
				counts["hibernate-unknown"]++
				break
			}
			hibernate(t, n, "kv", roomName(i))
			m.snap = m.cur
			counts["hibernate"]++
		case p < 0.995:
			wakes(i)
			note("%d: trap %s [%s] (back from v%d to v%d)", step, roomName(i), listed[i], m.cur.Version, m.snap.Version)
			r := do(t, "POST", url+"/trap", nil)
			if r.Status != 500 || !strings.Contains(r.Body, "guest trapped") {
				t.Fatalf("POST %s/trap: %d %s", roomName(i), r.Status, r.Body)
			}
			m.cur = m.snap
			counts["trap"]++
		default:
			note("%d: restart", step)
			tally()
			stop(t, n) // hibernates every resident room
			for j := range model {
				model[j].snap = model[j].cur
			}
			n = startNode(t, cfg)
			evictions = 0
			for j := range model {
				observe()
				wakes(j)
				checkState(j)
			}
			counts["restart"]++
		}
	}
	for j := range model {
		observe()
		wakes(j)
		checkState(j)
	}
	tally()
	t.Logf("%d operations in %v: %v", done, time.Since(start).Round(time.Millisecond), counts)
}

// randomValue is a value of a random length: mostly short, sometimes a few
// KiB, rarely tens of KiB (spanning snapshot chunks); empty now and then.
func randomValue(rng *rand.Rand) string {
	const alphabet = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_.=+"
	var n int
	switch p := rng.Float64(); {
	case p < 0.03:
		n = 0
	case p < 0.75:
		n = 1 + rng.IntN(32)
	case p < 0.97:
		n = 100 + rng.IntN(4000)
	default:
		n = 16<<10 + rng.IntN(48<<10)
	}
	b := make([]byte, n)
	for i := range b {
		b[i] = alphabet[rng.IntN(len(alphabet))]
	}
	return string(b)
}
