package rooms

import (
	"bytes"
	"flag"
	"os"
	"path/filepath"
	"reflect"
	"testing"
)

var update = flag.Bool("update", false, "rewrite the golden files of testdata/format from the current encoders")

// goldenState is the host-side room state of the golden file: sockets the
// guest knows, the next socket id, and accepted channel joins.
var goldenState = savedState{
	NextSocket: 42,
	Sockets:    []uint32{1, 7, 41},
	Joins: []joinKey{
		{socket: 7, topic: "room:lobby", joinRef: "3"},
		{socket: 41, topic: "room:ünïcode", joinRef: "12"},
	},
}

// TestGoldenRoomState pins the room-state encoding stored in every
// snapshot's manifest (version 2): the committed file decodes to the
// state it was written from, and encoding that state still gives its
// bytes. A change is a new version that decodeState still reads version
// 2 under, with a new golden file beside this one (go test -run
// TestGoldenRoomState ./host/rooms/ -update writes the current one).
func TestGoldenRoomState(t *testing.T) {
	path := filepath.Join("testdata", "format", "room-state-v2.bin")
	if *update {
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, goldenState.encode(), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	st, err := decodeState(b)
	if err != nil {
		t.Fatalf("decoding %s: %v", path, err)
	}
	if !reflect.DeepEqual(st, goldenState) {
		t.Fatalf("%s decodes to %+v, want %+v", path, st, goldenState)
	}
	if !bytes.Equal(goldenState.encode(), b) {
		t.Fatalf("encoding the golden state no longer gives the bytes of %s: the format changed", path)
	}
	for n := range len(b) {
		if _, err := decodeState(b[:n]); err == nil {
			t.Fatalf("a room state cut to %d of %d bytes decodes", n, len(b))
		}
	}
}
