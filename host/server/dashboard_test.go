package server

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net/http/httptest"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/wasmkeep/wasmkeep/host/rooms"
	"github.com/wasmkeep/wasmkeep/host/store"
)

func TestSeriesRing(t *testing.T) {
	sr := newSeries(3)
	if got := sr.since(0); len(got) != 0 {
		t.Fatalf("empty ring: %v", got)
	}
	for i := int64(1); i <= 5; i++ {
		sr.add(Sample{T: i, Events: uint64(10 * i)})
	}
	ts := func(s []Sample) []int64 {
		var out []int64
		for _, x := range s {
			out = append(out, x.T)
		}
		return out
	}
	if got := ts(sr.since(0)); !slices.Equal(got, []int64{3, 4, 5}) {
		t.Fatalf("since(0) = %v, want the last 3, oldest first", got)
	}
	if got := ts(sr.since(4)); !slices.Equal(got, []int64{5}) {
		t.Fatalf("since(4) = %v", got)
	}
	if got := sr.since(3); got[0].Events != 40 {
		t.Fatalf("since(3) = %v", got)
	}
}

// TestDashboardPage: the page is self-contained, and its policy lets its
// own script and style run and nothing else.
func TestDashboardPage(t *testing.T) {
	page := string(dashboardHTML)
	for _, tag := range []string{"<script", "<style"} {
		if n := strings.Count(page, tag); n != 1 {
			t.Fatalf("%d %s elements, want 1 (the policy hashes one)", n, tag)
		}
	}
	for _, re := range []string{`(?i)\b(src|href)\s*=\s*["']?(https?:)?//`, `(?i)url\(\s*["']?(https?:)?//`, `@import`, `(?i)\sstyle\s*=\s*"`, `(?i)\son[a-z]+\s*=\s*"`} {
		if m := regexp.MustCompile(re).FindString(page); m != "" {
			t.Errorf("the page has %q: it must load nothing from elsewhere, and the policy blocks inline attributes", m)
		}
	}
	hashOf := func(open, close string) string {
		_, rest, _ := strings.Cut(page, open)
		body, _, _ := strings.Cut(rest, close)
		sum := sha256.Sum256([]byte(body))
		return "'sha256-" + base64.StdEncoding.EncodeToString(sum[:]) + "'"
	}
	for _, want := range []string{"default-src 'none'", "script-src " + hashOf("<script>", "</script>"), "style-src " + hashOf("<style>", "</style>"), "connect-src 'self'"} {
		if !strings.Contains(dashboardCSP, want) {
			t.Errorf("policy %q lacks %q", dashboardCSP, want)
		}
	}

	s := &Server{}
	rec := httptest.NewRecorder()
	s.dashboard(rec, httptest.NewRequest("GET", "/admin/", nil))
	if rec.Code != 200 || rec.Header().Get("Content-Security-Policy") != dashboardCSP ||
		!strings.HasPrefix(rec.Header().Get("Content-Type"), "text/html") || !bytes.Equal(rec.Body.Bytes(), dashboardHTML) {
		t.Fatalf("GET /admin/: %d %v", rec.Code, rec.Header())
	}
}

// TestDashboardCluster: the overview names the node's cluster, which is
// what makes the page show its Cluster panel, and only in a cluster; every
// element the page's script looks up by id exists.
func TestDashboardCluster(t *testing.T) {
	for _, c := range []struct {
		cluster *Cluster
		want    string
	}{
		{nil, ""},
		{&Cluster{Node: "n1", Secret: testSecret, Member: &fakeMember{}}, "n1"},
	} {
		s := newTestServer(t, Config{Cluster: c.cluster})
		rec := httptest.NewRecorder()
		req := httptest.NewRequest("GET", "http://127.0.0.1:8080/admin/overview", nil)
		req.RemoteAddr = "127.0.0.1:5000"
		s.ServeHTTP(rec, req)
		var o map[string]any
		if err := json.Unmarshal(rec.Body.Bytes(), &o); err != nil || rec.Code != 200 {
			t.Fatalf("GET /admin/overview: %d %v %s", rec.Code, err, rec.Body)
		}
		got, has := o["cluster_node"]
		if (c.want == "") == has || (has && got != c.want) {
			t.Fatalf("cluster %v: the overview's cluster_node is %v (given: %v), want %q", c.cluster != nil, got, has, c.want)
		}
	}

	page := string(dashboardHTML)
	ids := map[string]bool{}
	for _, m := range regexp.MustCompile(`\sid="([^"]+)"`).FindAllStringSubmatch(page, -1) {
		ids[m[1]] = true
	}
	used := regexp.MustCompile(`\$\("([^"]+)"\)`).FindAllStringSubmatch(page, -1)
	for _, m := range used {
		if !ids[m[1]] {
			t.Errorf("the script looks up #%s, which the page does not have", m[1])
		}
	}
	for _, id := range []string{"cluster-panel", "cluster", "cluster-count", "cluster-error", "f-node"} {
		if !slices.ContainsFunc(used, func(m []string) bool { return m[1] == id }) {
			t.Errorf("the script never fills #%s", id)
		}
	}
	if !strings.Contains(page, `id="cluster-panel" aria-label="cluster" hidden`) || !strings.Contains(page, `get("/admin/cluster")`) {
		t.Error("the Cluster panel should start hidden and be filled from GET /admin/cluster")
	}
}

// TestRoomsWhere: in a cluster, GET /admin/rooms says where each room
// runs, as the membership places it, having asked it to read at most
// maxWhereReads records; a room it did not place has no "where". Without
// a cluster no room has one.
func TestRoomsWhere(t *testing.T) {
	bucket := store.NewMem()
	for _, name := range []string{"a", "b", "c", "d"} {
		if _, err := bucket.Put(context.Background(), "rooms/counter/"+name+"/manifest", []byte("not read here"), store.Cond{}); err != nil {
			t.Fatal(err)
		}
	}
	key := func(name string) rooms.Key { return rooms.Key{Class: "counter", Name: name} }
	m := &fakeMember{status: ClusterNode{Node: "n1"}, where: map[rooms.Key]RoomPlace{
		key("a"): {Place: PlaceHeld, Node: "n2"},
		key("b"): {Place: PlaceParked, Node: "n1"},
		key("c"): {Place: PlaceFree},
	}}
	list := func(cluster *Cluster) map[string]map[string]any {
		t.Helper()
		s := newTestServerOn(t, Config{Cluster: cluster}, bucket)
		rec := httptest.NewRecorder()
		req := httptest.NewRequest("GET", "http://127.0.0.1:8080/admin/rooms", nil)
		req.RemoteAddr = "127.0.0.1:5000"
		s.ServeHTTP(rec, req)
		var rows []map[string]any
		if err := json.Unmarshal(rec.Body.Bytes(), &rows); err != nil || rec.Code != 200 {
			t.Fatalf("GET /admin/rooms: %d %v %s", rec.Code, err, rec.Body)
		}
		out := map[string]map[string]any{}
		for _, r := range rows {
			if r["state"] != "hibernated" {
				t.Errorf("room %v: the listing's state is this node's view, hibernated", r)
			}
			out[r["name"].(string)] = r
		}
		return out
	}

	got := list(&Cluster{Node: "n1", Secret: testSecret, Member: m})
	want := map[string]any{
		"a": map[string]any{"place": "held", "node": "n2"},
		"b": map[string]any{"place": "parked", "node": "n1"},
		"c": map[string]any{"place": "free"},
	}
	for _, name := range []string{"a", "b", "c", "d"} {
		w, has := got[name]["where"]
		if fmt.Sprint(w) != fmt.Sprint(want[name]) || has != (want[name] != nil) {
			t.Errorf("counter/%s: where %v (given: %v), want %v", name, w, has, want[name])
		}
	}
	if m.reads != maxWhereReads {
		t.Errorf("the listing let the membership read %d records, want maxWhereReads (%d)", m.reads, maxWhereReads)
	}

	for name, r := range list(nil) {
		if w, has := r["where"]; has {
			t.Errorf("without a cluster, counter/%s has a where: %v", name, w)
		}
	}
}
