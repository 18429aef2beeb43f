package main

import (
	"strings"
	"testing"

	"github.com/wasmkeep/wasmkeep/internal/wstest"
)

// TestClassVersionsAndUpgradeCommands: a chat room with two open sockets
// is moved to a new version with --upgrade now (a progress line to the
// end), the versions table and rooms --version show where it is, and a
// rollback makes the first version current again.
func TestClassVersionsAndUpgradeCommands(t *testing.T) {
	t.Parallel()
	n := serveNode(t, t.TempDir())
	n.ok("class", "put", "chat", guestFile(t, "./examples/chat"))
	url := "ws://" + strings.TrimPrefix(n.url, "http://") + "/actor/chat/lobby"
	a, b := wstest.Dial(t, url), wstest.Dial(t, url)
	a.Send("hello")
	for _, c := range []*wstest.Client{a, b} {
		if got := c.ReadText(); got != "hello" {
			t.Fatalf("got %q", got)
		}
	}

	out := n.ok("class", "put", "--upgrade", "now", "chat", guestFile(t, "./testdata/guests/chatv2"))
	if !strings.Contains(out, "upgrade: now: moving every room of chat") || !strings.Contains(out, "1/1 rooms: 1 moved, done") {
		t.Fatalf("class put --upgrade now printed:\n%s", out)
	}
	b.Send("again")
	for _, c := range []*wstest.Client{a, b} {
		if got := c.ReadText(); got != "v2: again" {
			t.Fatalf("after the upgrade: %q", got)
		}
	}

	rows := table(t, n.ok("class", "versions", "chat"), "CURRENT", "HASH", "UPLOADED", "SIZE", "HANDOFF", "ROOMS", "NO-HANDOFF", "FAILED", "MOVED-OFF")
	if len(rows) != 2 || rows[0][0] != "*" || rows[0][4] != "gives+takes" || rows[0][5] != "1" || rows[1][0] != "-" || rows[1][5] != "0" || rows[1][8] != "1" {
		t.Fatalf("class versions: %q", rows)
	}
	v2, v1 := rows[0][1], rows[1][1]
	room := table(t, n.ok("rooms", "--version"), append(roomsHeader, "VERSION", "UPGRADE")...)
	if v := len(roomsHeader); len(room) != 1 || room[0][v] != v2 || room[0][v+1] != "-" {
		t.Fatalf("rooms --version: %q, want the room on %s", room, v2)
	}
	classes := table(t, n.ok("class", "list"), "NAME", "HASH", "SIZE", "ABI", "UPLOADED", "VERSIONS", "ROOMS", "ON-OLDER", "DURABLE", "FRONT")
	if len(classes) != 1 || classes[0][5] != "2" || classes[0][6] != "1" || classes[0][7] != "0" {
		t.Fatalf("class list: %q", classes)
	}

	out = n.ok("class", "rollback", "chat")
	if !strings.Contains(out, "is current again") || !strings.Contains(out, "upgrade: lazy: each room moves to") {
		t.Fatalf("class rollback printed:\n%s", out)
	}
	if rows := table(t, n.ok("class", "versions", "chat"), "CURRENT", "HASH", "UPLOADED", "SIZE", "HANDOFF", "ROOMS", "NO-HANDOFF", "FAILED", "MOVED-OFF"); rows[0][1] != v1 || rows[0][0] != "*" {
		t.Fatalf("after the rollback: %q", rows)
	}
	n.fails("has no version", "class", "rollback", "--back-to", "ffff", "chat")
	n.fails("invalid class option", "class", "put", "--upgrade", "sometimes", "chat", guestFile(t, "./examples/chat"))
}
