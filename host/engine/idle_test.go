package engine

import (
	"testing"

	"github.com/wasmkeep/wasmkeep/abi"
)

// TestIdleCollects: a Go room whose heap has allocated past the SDK's
// budget asks for an idle call (abi.ImportIdleCall) rather than
// collecting within its event, and collects when the call comes.
func TestIdleCollects(t *testing.T) {
	e := newEngine(t, Config{})
	c := compile(t, e, "./testdata/guests/echo")
	inst := startRoom(t, c)
	defer inst.Close()
	if !inst.Handles(EventIdle) {
		t.Fatal("a Go SDK guest does not export " + abi.ExportOnIdle)
	}
	// 32 events (the SDK looks every 32) of 32 KiB: a MiB, past the
	// budget of 512 KiB but short of the four budgets after which the
	// SDK collects at once.
	garbage := abi.AppendRequest(nil, &abi.Request{Method: "POST", Path: "/garbage", Query: "kb=32"})
	for n := 1; n <= 32; n++ {
		if got := request(t, inst, garbage); got != "ok" {
			t.Fatalf("garbage: %q", got)
		}
		if inst.IdleRequested() != (n == 32) {
			t.Fatalf("after %d events of 32 KiB: idle call requested %v", n, inst.IdleRequested())
		}
	}
	collections := abi.AppendRequest(nil, &abi.Request{Method: "GET", Path: "/collections"})
	if got := request(t, inst, collections); got != "0" {
		t.Fatalf("collections before the idle call: %s", got)
	}
	if err := inst.Idle(); err != nil {
		t.Fatal(err)
	}
	if inst.IdleRequested() {
		t.Fatal("still requested after the call")
	}
	if got := request(t, inst, collections); got != "1" {
		t.Fatalf("collections after the idle call: %s", got)
	}
	if err := inst.Idle(); err != nil { // not requested: nothing runs
		t.Fatal(err)
	}
	if got := request(t, inst, collections); got != "1" {
		t.Fatalf("collections after an idle call nobody asked for: %s", got)
	}
}
