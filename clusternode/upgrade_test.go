package clusternode

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/wasmkeep/wasmkeep/host/engine"
	"github.com/wasmkeep/wasmkeep/internal/testwasm"
	"github.com/wasmkeep/wasmkeep/internal/wstest"
)

// upload puts pkg as a new version of class through m with query, and
// returns its hash and the upload's answer.
func upload(t *testing.T, m *member, class, pkg, query string) (string, map[string]any) {
	t.Helper()
	wasm := testwasm.Build(t, pkg)
	r := do(t, "PUT", m.n.AdminURL()+"/admin/classes/"+class+"?"+query, wasm)
	if r.Status != http.StatusCreated {
		t.Fatalf("PUT %s: %d %s", class, r.Status, r.Body)
	}
	var ans map[string]any
	if err := json.Unmarshal([]byte(r.Body), &ans); err != nil {
		t.Fatal(err)
	}
	return engine.Hash(wasm), ans
}

// versionOn is the version m's listing gives for class/name.
func versionOn(t *testing.T, m *member, class, name string) string {
	t.Helper()
	var rows []struct{ Class, Name, Version string }
	r := do(t, "GET", m.n.AdminURL()+"/admin/rooms", nil)
	if err := json.Unmarshal([]byte(r.Body), &rows); err != nil {
		t.Fatalf("%s's rooms: %v (%s)", m.name, err, r.Body)
	}
	for _, row := range rows {
		if row.Class == class && row.Name == name {
			return row.Version
		}
	}
	return ""
}

// TestUpgradeOnTheNodeThatWakesTheRoom: a version uploaded through one
// node moves a room at its next wake on the node that holds it (the class
// record is the bucket's, the version the manifest's); an upgrade now
// started on a node that does not hold the room counts it as elsewhere,
// and the holder moves it at its next wake.
func TestUpgradeOnTheNodeThatWakesTheRoom(t *testing.T) {
	t.Parallel()
	_, ms := startCluster(t, time.Second, "a", "b")
	a, b := ms[0], ms[1]
	v1, _ := upload(t, a, "chat", "./examples/chat", "")
	ws := wstest.Dial(t, strings.Replace(b.n.URL(), "http", "ws", 1)+"/actor/chat/lobby")
	ws.Send("one")
	if got := ws.ReadText(); got != "one" {
		t.Fatalf("got %q", got)
	}
	if !holds(b, "chat", "lobby") {
		t.Fatal("b does not hold the room its socket opened")
	}
	hibernate := func() {
		t.Helper()
		if r := do(t, "POST", b.n.AdminURL()+"/admin/rooms/chat/lobby/hibernate", nil); r.Status != 200 {
			t.Fatalf("hibernate on b: %d %s", r.Status, r.Body)
		}
	}
	hibernate()
	v2, _ := upload(t, a, "chat", "./testdata/guests/chatv2", "")
	// b reads the class record again within its cache's lifetime.
	waitFor(t, 10*time.Second, "b to see v2 as current", func() bool {
		var rec struct{ Hash string }
		_ = json.Unmarshal([]byte(do(t, "GET", b.n.AdminURL()+"/admin/classes/chat", nil).Body), &rec)
		return rec.Hash == v2
	})
	ws.Send("two")
	if got := ws.ReadText(); got != "v2: two" {
		t.Fatalf("after the upload through a, b's wake answers %q", got)
	}
	if got := versionOn(t, b, "chat", "lobby"); got != v2 {
		t.Fatalf("b runs the room on %s, want v2 %s", got, v2)
	}

	// v1's code again, uploaded through a with upgrade now while b runs
	// the room: a leaves it to b and says so; b moves it at its next wake.
	_, ans := upload(t, a, "chat", "./examples/chat", "upgrade=now")
	if ans["upgrade_job"] == nil {
		t.Fatalf("upload with upgrade now started no job: %v", ans)
	}
	var job struct{ Total, Elsewhere int }
	waitFor(t, 30*time.Second, "a's upgrade job to end", func() bool {
		var j struct {
			Total, Elsewhere int
			Finished         *time.Time
		}
		_ = json.Unmarshal([]byte(do(t, "GET", a.n.AdminURL()+"/admin/classes/chat/upgrade", nil).Body), &j)
		job.Total, job.Elsewhere = j.Total, j.Elsewhere
		return j.Finished != nil
	})
	if job.Total != 1 || job.Elsewhere != 1 {
		t.Fatalf("a's job: %+v, want the one room counted elsewhere: %s", job, do(t, "GET", a.n.AdminURL()+"/admin/classes/chat/upgrade", nil).Body)
	}
	waitFor(t, 10*time.Second, "b to see v1 as current again", func() bool {
		var rec struct{ Hash string }
		_ = json.Unmarshal([]byte(do(t, "GET", b.n.AdminURL()+"/admin/classes/chat", nil).Body), &rec)
		return rec.Hash == v1
	})
	hibernate()
	ws.Send("three")
	if got := ws.ReadText(); got != "three" {
		t.Fatalf("after the second upgrade, b's room answers %q", got)
	}
	// A socket opened now gets the whole history, across both upgrades.
	c := wstest.Dial(t, strings.Replace(b.n.URL(), "http", "ws", 1)+"/actor/chat/lobby")
	for _, want := range []string{"one", "v2: two", "three"} {
		if got := c.ReadText(); got != want {
			t.Fatalf("history: %q, want %q", got, want)
		}
	}
}
