package clusternode

import (
	"context"
	"maps"
	"strings"
	"testing"
	"time"

	"github.com/wasmkeep/wasmkeep/cluster"
	"github.com/wasmkeep/wasmkeep/host/rooms"
	"github.com/wasmkeep/wasmkeep/host/server"
	"github.com/wasmkeep/wasmkeep/host/store"
	"github.com/wasmkeep/wasmkeep/internal/wstest"
)

// TestWhere: where rooms run, as a's Where tells GET /admin/rooms: the
// room parked on a from a's own state, with no read; the others from
// their records, at most as many reads as asked, each judged by a's view
// of the leases; a room whose record cannot be read is left out.
func TestWhere(t *testing.T) {
	t.Parallel()
	bucket := store.NewMem()
	a := startMember(t, bucket, "a", 2*time.Second, idleSoon) // its rooms hibernate at once: the socket's room parks
	b := startMember(t, bucket, "b", 2*time.Second)
	for _, m := range []*member{a, b} {
		waitFor(t, 6*time.Second, m.name+" sees its peer live", func() bool {
			ps := m.mem().Status().Peers
			return len(ps) == 1 && ps[0].State == "live"
		})
	}
	putClass(t, a, "counter", "./examples/counter", false)
	putClass(t, a, "echo", "./testdata/guests/echo", false)

	ws := wstest.Dial(t, strings.Replace(a.n.URL(), "http", "ws", 1)+"/actor/echo/home")
	if got := ws.ReadText(); !strings.HasPrefix(got, "open ") {
		t.Fatalf("greeting %q", got)
	}
	parkedOn(t, a, cluster.Room{Class: "echo", Name: "home"})
	count(t, b, "onb", "1") // held on b, resident
	count(t, b, "slept", "1")
	if r := do(t, "POST", b.n.AdminURL()+"/admin/rooms/counter/slept/hibernate", nil); r.Status != 200 {
		t.Fatalf("hibernate: %d %s", r.Status, r.Body)
	}
	// Records no room wrote: one naming a node a's view does not know,
	// one naming a process of b that is not the one its lease names.
	put := func(name string, rec cluster.Record) {
		t.Helper()
		rec.Generation, rec.Nonce = 1, "test-"+name
		if _, err := bucket.Put(context.Background(), cluster.RecordKey(cluster.Room{Class: "counter", Name: name}), cluster.EncodeRecord(rec), store.Cond{}); err != nil {
			t.Fatal(err)
		}
	}
	put("stranger", cluster.Record{Node: "z", Instance: "z1"})
	put("oldb", cluster.Record{Node: "b", Instance: "not-" + b.mem().Instance()})

	key := func(class, name string) rooms.Key { return rooms.Key{Class: class, Name: name} }
	keys := []rooms.Key{key("counter", "never"), key("counter", "oldb"), key("counter", "onb"), key("counter", "slept"),
		key("counter", "stranger"), key("echo", "home")}
	place := func(p, node string) server.RoomPlace { return server.RoomPlace{Place: p, Node: node} }
	want := map[rooms.Key]server.RoomPlace{
		key("counter", "never"):    place(server.PlaceFree, ""), // no record
		key("counter", "oldb"):     place(server.PlaceFree, ""), // its process ended
		key("counter", "onb"):      place(server.PlaceHeld, "b"),
		key("counter", "slept"):    place(server.PlaceFree, ""), // released
		key("counter", "stranger"): place(server.PlaceHeld, "z"),
		key("echo", "home"):        place(server.PlaceParked, "a"),
	}
	where := func(m *member, reads int) (map[rooms.Key]server.RoomPlace, int64) {
		t.Helper()
		gets, _ := m.link.records()
		got := m.mem().Where(context.Background(), keys, reads)
		after, _ := m.link.records()
		return got, after - gets
	}
	if got, read := where(a, 100); !maps.Equal(got, want) || read != 5 {
		t.Errorf("a's Where: %v after %d record reads, want %v after 5 (none for the room parked here)", got, read, want)
	}

	// At most reads records, for the first keys that need one; the room
	// parked here needs none.
	got, read := where(a, 2)
	if read != 2 || len(got) != 3 || got[keys[0]] != want[keys[0]] || got[keys[1]] != want[keys[1]] || got[key("echo", "home")] != want[key("echo", "home")] {
		t.Errorf("a's Where with 2 reads: %v after %d record reads, want the first two and the parked room, after 2", got, read)
	}

	// From b: its own room without a read; the room parked on a as held
	// there, which is all its record says.
	got, read = where(b, 100)
	if got[key("counter", "onb")] != place(server.PlaceHeld, "b") || got[key("echo", "home")] != place(server.PlaceHeld, "a") || read != 5 {
		t.Errorf("b's Where: %v after %d record reads, want counter/onb held on b (no read) and echo/home held by a", got, read)
	}

	// Cut off the bucket: only what a knows without a read.
	a.link.cut.Store(true)
	got, _ = where(a, 100)
	a.link.cut.Store(false)
	if len(got) != 1 || got[key("echo", "home")] != want[key("echo", "home")] {
		t.Errorf("a's Where without the bucket: %v, want only the room parked here", got)
	}
}
