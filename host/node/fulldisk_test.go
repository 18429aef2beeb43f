package node

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"syscall"
	"testing"

	"github.com/wasmkeep/wasmkeep/abi"
	"github.com/wasmkeep/wasmkeep/host/store"
	"github.com/wasmkeep/wasmkeep/internal/wstest"
)

// outOfSpace fails every write under rooms/ as a full disk does.
func outOfSpace(op store.Op) store.Fault {
	if op.Kind == store.OpPut && strings.HasPrefix(op.Key, "rooms/") {
		return store.FailBefore(fmt.Errorf("write %s: %w", op.Key, syscall.ENOSPC))
	}
	return store.Fault{}
}

// TestFullDiskAnswers: with the store full, an event under per-event
// durability that changed the room is undone and answered 507 (it was 500,
// as if the room had crashed); one that changed nothing (a guest that
// echoes the same message again) needs no write and is answered; and a
// clean stop names every room whose latest state it could not write.
func TestFullDiskAnswers(t *testing.T) {
	t.Parallel()
	faulty := store.WithFaults(store.NewMem(), nil)
	n := startNode(t, Config{Bucket: faulty})
	expect(t, http.StatusCreated, "PUT", n.URL()+"/admin/classes/durable?durability=event", buildGuest(t, "./examples/counter"))
	expect(t, http.StatusCreated, "PUT", n.URL()+"/admin/classes/raw?durability=event", buildGuest(t, "./testdata/guests/rawecho"))
	putHibernateClass(t, n, "counter", "./examples/counter") // written at the stop
	durable := n.URL() + "/actor/durable/a"
	if got := expect(t, 200, "POST", durable, nil); got != "1" {
		t.Fatalf("first increment: %q", got)
	}
	expect(t, 200, "POST", n.URL()+"/actor/counter/b", nil)
	echo := wstest.Dial(t, n.URL()+"/actor/raw/e")
	for range 2 { // the first message also allocates the guest's inbox
		echo.Send("same")
		if got := echo.ReadText(); got != "same" {
			t.Fatalf("echo: %q", got)
		}
	}

	faulty.SetFaults(outOfSpace)
	for _, method := range []string{"POST", "GET"} { // a Go room's read changes its heap too
		if r := do(t, method, durable, nil); r.Status != http.StatusInsufficientStorage {
			t.Fatalf("%s on a full disk: %d %q, want 507", method, r.Status, r.Body)
		}
	}
	unchanged := metric(t, n, "wasmkeep_snapshot_unchanged_total")
	echo.Send("same")
	if got := echo.ReadText(); got != "same" {
		t.Fatalf("an event that changed nothing, on a full disk: %q", got)
	}
	if got := metric(t, n, "wasmkeep_snapshot_unchanged_total"); got != unchanged+1 {
		t.Fatalf("wasmkeep_snapshot_unchanged_total went from %v to %v, want one more", unchanged, got)
	}

	closed := answerClose(t, echo, abi.CloseServiceRestart)
	err := n.Stop(context.Background())
	n.http = nil
	closed()
	if err == nil || !strings.Contains(err.Error(), "counter/b") || !strings.Contains(err.Error(), "could not be written") {
		t.Fatalf("stop on a full disk: %v; want an error naming counter/b", err)
	}
	faulty.SetFaults(nil)
	n = startNode(t, Config{Bucket: faulty})
	if got := expect(t, 200, "GET", n.URL()+"/actor/durable/a", nil); got != "1" {
		t.Fatalf("after the full disk: %q, want the state of the last durable event", got)
	}
}
