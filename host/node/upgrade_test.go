package node

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	"github.com/wasmkeep/wasmkeep/host/engine"
	"github.com/wasmkeep/wasmkeep/internal/testwasm"
	"github.com/wasmkeep/wasmkeep/internal/wstest"
)

// upgradeRow is a room's listing, with its version and upgrade state.
type upgradeRow struct {
	State, Version string
	Sockets        int
	Upgrade        *struct{ To, State, Error string }
}

func upgradeRowOf(t *testing.T, n *Node, class, name string) upgradeRow {
	t.Helper()
	var rows []struct {
		Class, Name string
		upgradeRow
	}
	if err := json.Unmarshal([]byte(expect(t, 200, "GET", n.AdminURL()+"/admin/rooms", nil)), &rows); err != nil {
		t.Fatal(err)
	}
	for _, r := range rows {
		if r.Class == class && r.Name == name {
			return r.upgradeRow
		}
	}
	t.Fatalf("room %s/%s is not listed", class, name)
	return upgradeRow{}
}

// uploadVersion uploads a guest package as a new version of class with the
// upload's query (upgrade policy and the rest) and returns its hash.
func uploadVersion(t *testing.T, n *Node, class, pkg, query string) string {
	t.Helper()
	wasm := testwasm.Build(t, pkg)
	expect(t, http.StatusCreated, http.MethodPut, n.AdminURL()+"/admin/classes/"+class+"?"+query, wasm)
	return engine.Hash(wasm)
}

// chatWithHistory opens two sockets on a chat room of v1 and sends two
// messages, each read back by both.
func chatWithHistory(t *testing.T, url string) (a, b *wstest.Client) {
	t.Helper()
	a, b = wstest.Dial(t, url), wstest.Dial(t, url)
	for _, m := range []string{"one", "two"} {
		a.Send(m)
		for _, c := range []*wstest.Client{a, b} {
			if got := c.ReadText(); got != m {
				t.Fatalf("got %q, want %q", got, m)
			}
		}
	}
	return a, b
}

// everyoneReads reads the same message on every client.
func everyoneReads(t *testing.T, want string, cs ...*wstest.Client) {
	t.Helper()
	for i, c := range cs {
		if got := c.ReadText(); got != want {
			t.Fatalf("client %d got %q, want %q", i, got, want)
		}
	}
}

func TestUpgradeKeepsHistoryAndSockets(t *testing.T) {
	t.Parallel()
	for _, policy := range []string{"lazy", "now"} {
		t.Run(policy, func(t *testing.T) {
			n := startNode(t, Config{})
			v1 := uploadVersion(t, n, "chat", "./examples/chat", "")
			url := n.URL() + "/actor/chat/lobby"
			a, b := chatWithHistory(t, url)
			if policy == "lazy" {
				hibernate(t, n, "chat", "lobby")
			}
			if row := upgradeRowOf(t, n, "chat", "lobby"); row.Version != v1 {
				t.Fatalf("the room runs %q, want v1 %s", row.Version, v1)
			}
			v2 := uploadVersion(t, n, "chat", "./testdata/guests/chatv2", "upgrade="+policy)
			if policy == "now" {
				waitFor(t, "the room on v2", func() bool { return upgradeRowOf(t, n, "chat", "lobby").Version == v2 })
				var job struct{ Total, Done int }
				if err := json.Unmarshal([]byte(expect(t, 200, "GET", n.AdminURL()+"/admin/classes/chat/upgrade", nil)), &job); err != nil {
					t.Fatal(err)
				}
				waitFor(t, "the upgrade job's end", func() bool {
					_ = json.Unmarshal([]byte(expect(t, 200, "GET", n.AdminURL()+"/admin/classes/chat/upgrade", nil)), &job)
					return job.Done == 1
				})
			}
			// The sockets opened on v1 are answered by v2, and no open event
			// replayed the history to them.
			b.Send("three")
			everyoneReads(t, "v2: three", a, b)
			if got := expect(t, 200, "GET", url+"/history", nil); got != "one\ntwo\nv2: three" {
				t.Fatalf("v2's history is %q", got)
			}
			row := upgradeRowOf(t, n, "chat", "lobby")
			if row.Version != v2 || row.Sockets != 2 || row.Upgrade != nil {
				t.Fatalf("after the upgrade: %+v", row)
			}
			// The upgraded state was written: a wake after it restores v2.
			hibernate(t, n, "chat", "lobby")
			if got := expect(t, 200, "GET", url+"/version", nil); got != "v2" {
				t.Fatalf("after another wake the room answers %q", got)
			}
			if row := upgradeRowOf(t, n, "chat", "lobby"); row.Version != v2 {
				t.Fatalf("the woken room runs %q", row.Version)
			}
		})
	}
}

func TestUpgradeWithoutHandoffStaysThenResets(t *testing.T) {
	t.Parallel()
	n := startNode(t, Config{})
	v1 := uploadVersion(t, n, "c", "./testdata/guests/echo", "")
	url := n.URL() + "/actor/c/r"
	s := wstest.Dial(t, url)
	if got := s.ReadText(); !strings.HasPrefix(got, "open ") {
		t.Fatalf("echo's open: %q", got)
	}
	hibernate(t, n, "c", "r")
	v2 := uploadVersion(t, n, "c", "./testdata/guests/chatv2", "")
	// Listed as staying before any wake tried: echo hands over nothing.
	if row := upgradeRowOf(t, n, "c", "r"); row.Upgrade == nil || row.Upgrade.State != "no-handoff" {
		t.Fatalf("before a wake, a room on a version without handoff: %+v", row)
	}
	s.Send("ping")
	if got := s.ReadText(); got != "ping" {
		t.Fatalf("the room on v1 answers %q, want echo's", got)
	}
	row := upgradeRowOf(t, n, "c", "r")
	if row.Version != v1 || row.Upgrade == nil || row.Upgrade.State != "no-handoff" || row.Upgrade.To != v2 {
		t.Fatalf("a room without handoff: %+v", row)
	}
	var vs struct {
		Versions []struct {
			Hash      string
			Rooms     int
			NoHandoff int `json:"rooms_without_handoff"`
		}
	}
	if err := json.Unmarshal([]byte(expect(t, 200, "GET", n.AdminURL()+"/admin/classes/c/versions", nil)), &vs); err != nil {
		t.Fatal(err)
	}
	if len(vs.Versions) != 2 || vs.Versions[1].Hash != v1 || vs.Versions[1].Rooms != 1 || vs.Versions[1].NoHandoff != 1 || vs.Versions[0].Rooms != 0 {
		t.Fatalf("versions: %+v", vs.Versions)
	}

	// Asked to reset rooms without a handoff, the node starts the room
	// fresh on v2; its socket stays open and gets v2's open.
	uploadVersion(t, n, "c", "./testdata/guests/chatv2", "upgrade=now&reset_without_handoff=true")
	waitFor(t, "the reset room on v2", func() bool { return upgradeRowOf(t, n, "c", "r").Version == v2 })
	s.Send("after")
	if got := s.ReadText(); got != "v2: after" {
		t.Fatalf("the reset room answers %q", got)
	}
	// No room uses v1 now: it is collected (its grace cut to nothing).
	var col struct{ Collected []string }
	if err := json.Unmarshal([]byte(expect(t, 200, "POST", n.AdminURL()+"/admin/classes/c/collect?grace=0s", nil)), &col); err != nil {
		t.Fatal(err)
	}
	if len(col.Collected) != 1 || col.Collected[0] != v1 {
		t.Fatalf("collected %v, want v1 %s", col.Collected, v1)
	}
	if err := json.Unmarshal([]byte(expect(t, 200, "POST", n.AdminURL()+"/admin/classes/c/collect?grace=0s", nil)), &col); err != nil || len(col.Collected) != 0 {
		t.Fatalf("a second collection: %v (%v)", col.Collected, err)
	}
}

func TestFailedUpgradeKeepsTheRoomOnItsVersion(t *testing.T) {
	t.Parallel()
	n := startNode(t, Config{})
	// Every event durable: what a client was answered is in the store.
	v1 := uploadVersion(t, n, "chat", "./examples/chat", "durability=event")
	url := n.URL() + "/actor/chat/lobby"
	a, b := chatWithHistory(t, url)
	hibernate(t, n, "chat", "lobby")
	uploadVersion(t, n, "chat", "./testdata/guests/startfail", "durability=event")
	a.Send("three")
	everyoneReads(t, "three", a, b) // v1 answered: the start of v2 trapped
	row := upgradeRowOf(t, n, "chat", "lobby")
	if row.Version != v1 || row.Upgrade == nil || row.Upgrade.State != "failed" || !strings.Contains(row.Upgrade.Error, "trap") {
		t.Fatalf("after a failed upgrade: %+v", row)
	}
	if got := metric(t, n, `wasmkeep_room_upgrades_total{outcome="failed"}`); got != 1 {
		t.Fatalf("failed upgrades: %v", got)
	}
	// Within the backoff, wakes do not try again.
	hibernate(t, n, "chat", "lobby")
	a.Send("four")
	everyoneReads(t, "four", a, b)
	if got := metric(t, n, `wasmkeep_room_upgrades_total{outcome="failed"}`); got != 1 {
		t.Fatalf("failed upgrades after a wake within the backoff: %v", got)
	}
	// Nothing acknowledged was lost: a new socket gets the whole history.
	c := wstest.Dial(t, url)
	for _, want := range []string{"one", "two", "three", "four"} {
		if got := c.ReadText(); got != want {
			t.Fatalf("history: %q, want %q", got, want)
		}
	}
	// Rolling back makes v1 current again: the room is no longer pending.
	var rec struct{ Hash string }
	if err := json.Unmarshal([]byte(expect(t, 200, "POST", n.AdminURL()+"/admin/classes/chat/rollback", nil)), &rec); err != nil {
		t.Fatal(err)
	}
	if rec.Hash != v1 {
		t.Fatalf("rolled back to %s, want v1 %s", rec.Hash, v1)
	}
	hibernate(t, n, "chat", "lobby")
	a.Send("five")
	everyoneReads(t, "five", a, b, c)
	if row := upgradeRowOf(t, n, "chat", "lobby"); row.Version != v1 {
		t.Fatalf("after the rollback: %+v", row)
	}
}
