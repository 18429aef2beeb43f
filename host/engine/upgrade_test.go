package engine

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/wasmkeep/wasmkeep/abi"
)

func TestUpgradeHandsStateToTheNextVersion(t *testing.T) {
	e := newEngine(t, Config{})
	v1, v2 := compile(t, e, "./examples/chat"), compile(t, e, "./testdata/guests/chatv2")
	if !v1.Handles(EventUpgrade) || !v2.Handles(EventStartFrom) {
		t.Fatal("the SDK's upgrade exports are missing")
	}
	h := &fakeHost{}
	old, err := v1.Start(context.Background(), h)
	if err != nil {
		t.Fatal(err)
	}
	defer old.Close()
	for _, m := range []string{"one", "two"} {
		if err := old.SocketMessage(1, abi.MessageText, []byte(m)); err != nil {
			t.Fatal(err)
		}
	}
	state, err := old.Upgrade()
	if err != nil {
		t.Fatal(err)
	}
	next, err := v2.Start(context.Background(), &fakeHost{})
	if err != nil {
		t.Fatal(err)
	}
	defer next.Close()
	if err := next.StartFrom(v1.Hash, state); err != nil {
		t.Fatal(err)
	}
	if got := request(t, next, getRoot); got != "one\ntwo" {
		t.Errorf("v2's history is %q, want v1's", got)
	}
}

func TestUpgradeRefusals(t *testing.T) {
	e := newEngine(t, Config{})
	echo, fail, chat := compile(t, e, "./testdata/guests/echo"), compile(t, e, "./testdata/guests/startfail"), compile(t, e, "./examples/chat")

	// A version whose room registered no HandleUpgrade offers nothing.
	inst, _ := echo.Start(context.Background(), &fakeHost{})
	defer inst.Close()
	if _, err := inst.Upgrade(); !errors.Is(err, ErrNoHandoff) {
		t.Errorf("echo's upgrade: %v, want ErrNoHandoff", err)
	}
	// A version without HandleStartFrom takes nothing over.
	other, _ := echo.Start(context.Background(), &fakeHost{})
	defer other.Close()
	if err := other.StartFrom(chat.Hash, []byte("x")); !errors.Is(err, ErrNotTakenOver) {
		t.Errorf("echo's start from: %v, want ErrNotTakenOver", err)
	}
	// A start that panics is a trap, and kills its instance.
	f, _ := fail.Start(context.Background(), &fakeHost{})
	if err := f.StartFrom(chat.Hash, []byte("x")); !errors.Is(err, ErrTrap) || !f.Dead() {
		t.Errorf("startfail: %v (dead %v), want a trap", err, f.Dead())
	}
	// Chat refuses a handoff it cannot read rather than starting empty.
	c, _ := chat.Start(context.Background(), &fakeHost{})
	if err := c.StartFrom(echo.Hash, []byte("not a history")); !errors.Is(err, ErrTrap) {
		t.Errorf("chat from garbage: %v, want a trap", err)
	}
}

// TestUpgradeTimeLimit: a start that never returns is ended by the event
// time limit, as any event.
func TestUpgradeTimeLimit(t *testing.T) {
	e := newEngine(t, Config{EventTimeout: 200 * time.Millisecond})
	fail := compile(t, e, "./testdata/guests/startfail")
	inst, err := fail.Start(context.Background(), &fakeHost{})
	if err != nil {
		t.Fatal(err)
	}
	if err := inst.StartFrom("sha256:00", []byte("loop")); !errors.Is(err, ErrTimeout) {
		t.Fatalf("a start that spins: %v, want ErrTimeout", err)
	}
}
