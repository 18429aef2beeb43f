package server

import (
	"fmt"
	"strings"
	"testing"

	"github.com/wasmkeep/wasmkeep/host/classes"
	"github.com/wasmkeep/wasmkeep/host/rooms"
)

// TestForClient: what a response says of an error of the room or class
// layer drops the package prefix its sentinel carries for the logs, and
// keeps everything else.
func TestForClient(t *testing.T) {
	for _, err := range []error{rooms.ErrUnknownRoom, rooms.ErrNoResponse, rooms.ErrOverloaded, rooms.ErrNodeFull,
		classes.ErrUnknownClass, fmt.Errorf("%w %q", classes.ErrBadName, "Bad.Name")} {
		got := forClient(err.Error())
		if strings.HasPrefix(got, "rooms:") || strings.HasPrefix(got, "classes:") || !strings.HasSuffix(err.Error(), got) {
			t.Errorf("forClient(%q) = %q, want it without its package", err, got)
		}
	}
	for _, msg := range []string{"reading the module: unexpected EOF", "store: not found", "too many header lines"} {
		if got := forClient(msg); got != msg {
			t.Errorf("forClient(%q) = %q, want it unchanged", msg, got)
		}
	}
}
