//go:build unix

package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestRoomExportImport moves a counter between two nodes with the CLI:
// inspect, export (of a room that is running), import under another name,
// and refusals of a damaged file and of an existing room.
func TestRoomExportImport(t *testing.T) {
	counter := guestFile(t, "./examples/counter")
	a := serveNode(t, t.TempDir())
	b := serveNode(t, t.TempDir())
	a.ok("class", "put", "counter", counter)
	for range 3 {
		expectHTTP(t, 200, "POST", a.url+"/actor/counter/prod")
	}
	if out := a.ok("room", "inspect", "counter", "prod"); !strings.Contains(out, `"state": "resident"`) || !strings.Contains(out, `"awake"`) {
		t.Fatalf("inspect: %s", out)
	}
	file := filepath.Join(t.TempDir(), "prod.wkroom")
	if out := a.ok("room", "export", "-o", file, "counter", "prod"); !strings.Contains(out, "exported to "+file) {
		t.Fatalf("export: %q", out)
	}
	if out := b.ok("room", "import", "--name", "laptop", file); out != "room counter/laptop imported\n" {
		t.Fatalf("import: %q", out)
	}
	if got := expectHTTP(t, 200, "POST", b.url+"/actor/counter/laptop"); got != "4" {
		t.Fatalf("imported counter: %q, want 4", got)
	}
	b.fails("the room is running on this node", "room", "import", "--name", "laptop", file)
	b.ok("rooms", "hibernate", "counter", "laptop")
	b.fails("already exists", "room", "import", "--name", "laptop", file)

	damaged := filepath.Join(t.TempDir(), "damaged.wkroom")
	data, _ := os.ReadFile(file)
	data[len(data)/3] ^= 0x10
	if err := os.WriteFile(damaged, data, 0o600); err != nil {
		t.Fatal(err)
	}
	b.fails("not a valid room bundle", "room", "import", damaged)
	a.fails("no such room", "room", "export", "counter", "nosuch")
}
