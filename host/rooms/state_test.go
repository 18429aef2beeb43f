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

// goldenStateWithAlarm is goldenState with an alarm, which encodes as
// version 3.
var goldenStateWithAlarm = func() savedState {
	s := goldenState
	s.Alarm = alarmState{At: 1_796_686_062_781, Entry: "66213910fee79.1"}
	return s
}()

// TestGoldenRoomState pins the room-state encoding stored in every
// snapshot's manifest (version 2, and version 3 for a room with an
// alarm): each committed file decodes to the state it was written from,
// and encoding that state still gives its bytes. A change is a new
// version that decodeState still reads the old ones under, with a new
// golden file beside these (go test -run TestGoldenRoomState
// ./host/rooms/ -update writes the current ones).
func TestGoldenRoomState(t *testing.T) {
	for file, state := range map[string]savedState{"room-state-v2.bin": goldenState, "room-state-v3.bin": goldenStateWithAlarm} {
		path := filepath.Join("testdata", "format", file)
		if *update {
			if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(path, state.encode(), 0o644); err != nil {
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
		if !reflect.DeepEqual(st, state) {
			t.Fatalf("%s decodes to %+v, want %+v", path, st, state)
		}
		if !bytes.Equal(state.encode(), b) {
			t.Fatalf("encoding the golden state no longer gives the bytes of %s: the format changed", path)
		}
		for n := range len(b) {
			if _, err := decodeState(b[:n]); err == nil {
				t.Fatalf("%s cut to %d of %d bytes decodes", file, n, len(b))
			}
		}
	}
}
