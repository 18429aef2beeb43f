package node

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/wasmkeep/wasmkeep/internal/wstest"
)

// TestExportImport moves a live room to another node: the export writes
// its current state first, the import checks the bundle, creates the class
// if needed, and the room continues exactly on the other node.
func TestExportImport(t *testing.T) {
	a := startNode(t, Config{})
	putClass(t, a, "chat", "./examples/chat")
	c := wstest.Dial(t, a.URL()+"/actor/chat/prod")
	for _, m := range []string{"one", "two", "three"} {
		c.Send(m)
		c.ReadText()
	}
	// Resident, never hibernated: the export must capture it anyway.
	bundle := []byte(expect(t, 200, "POST", a.URL()+"/admin/rooms/chat/prod/export", nil))

	var detail struct {
		State, Awake string
		AwakeDetail  string `json:"awake_detail"`
		Sockets      int
		Snapshot     *struct {
			Seq      uint64
			Segments []struct{ ID string }
		}
	}
	// The export's checkpoint ran on the room's worker: "event" until it
	// has finished, then "recent".
	waitFor(t, "the room to be idle after the export", func() bool {
		if err := json.Unmarshal([]byte(expect(t, 200, "GET", a.URL()+"/admin/rooms/chat/prod", nil)), &detail); err != nil {
			t.Fatal(err)
		}
		return detail.Awake != "event"
	})
	if detail.State != "resident" || detail.Sockets != 1 || detail.Snapshot == nil || len(detail.Snapshot.Segments) == 0 ||
		detail.Awake != "recent" || !strings.Contains(detail.AwakeDetail, "idle") {
		t.Fatalf("inspect: %+v", detail)
	}

	b := startNode(t, Config{})
	// A damaged bundle is refused, whole.
	damaged := []byte(strings.Clone(string(bundle)))
	damaged[len(damaged)/2] ^= 1
	if r := do(t, "POST", b.URL()+"/admin/rooms/import", damaged); r.Status != 400 || !strings.Contains(r.Body, "not a valid room bundle") {
		t.Fatalf("damaged bundle: %d %s", r.Status, r.Body)
	}
	if r := do(t, "POST", b.URL()+"/admin/rooms/import", []byte("hello")); r.Status != 400 {
		t.Fatalf("foreign file: %d %s", r.Status, r.Body)
	}
	expect(t, 201, "POST", b.URL()+"/admin/rooms/import?name=laptop", bundle)
	d := wstest.Dial(t, b.URL()+"/actor/chat/laptop")
	for _, want := range []string{"one", "two", "three"} {
		if got := d.ReadText(); got != want {
			t.Fatalf("history on the other node: %q, want %q", got, want)
		}
	}
	d.Send("four")
	if got := d.ReadText(); got != "four" {
		t.Fatal(got)
	}
	// The same name again: refused without replace, taken with it once the
	// room no longer runs there.
	if r := do(t, "POST", b.URL()+"/admin/rooms/import?name=laptop", bundle); r.Status != 409 {
		t.Fatalf("import over a running room: %d %s", r.Status, r.Body)
	}
	d.Close(1000)
	waitFor(t, "the room to lose its socket", func() bool { row, _ := roomRowOf(t, b, "chat", "laptop"); return row.Sockets == 0 })
	hibernate(t, b, "chat", "laptop")
	if r := do(t, "POST", b.URL()+"/admin/rooms/import?name=laptop", bundle); r.Status != 409 || !strings.Contains(r.Body, "replace") {
		t.Fatalf("import over an existing room: %d %s", r.Status, r.Body)
	}
	expect(t, 201, "POST", b.URL()+"/admin/rooms/import?name=laptop&replace=1", bundle)
	e := wstest.Dial(t, b.URL()+"/actor/chat/laptop")
	for _, want := range []string{"one", "two", "three"} {
		if got := e.ReadText(); got != want {
			t.Fatalf("after replace: %q, want %q", got, want)
		}
	}
	if r := do(t, "POST", a.URL()+"/admin/rooms/chat/nosuch/export", nil); r.Status != 404 {
		t.Fatalf("export of an unknown room: %d", r.Status)
	}
}
