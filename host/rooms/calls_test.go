package rooms

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/wasmkeep/wasmkeep/abi"
	"github.com/wasmkeep/wasmkeep/calls"
	"github.com/wasmkeep/wasmkeep/host/classes"
	"github.com/wasmkeep/wasmkeep/host/engine"
)

// TestCallErrors: what a failed call answers its caller, by the cause.
// Refused only where the call provably did not run: a full mailbox, a
// node full or stopping, a room elsewhere or that cannot wake, a state
// that could not be made durable (the event was undone).
func TestCallErrors(t *testing.T) {
	c := &calls.Call{To: calls.Room{Class: "game", Name: "g1"}}
	for _, tc := range []struct {
		err  error
		want abi.Status
	}{
		{fmt.Errorf("%w: game", classes.ErrUnknownClass), abi.StatusNotFound},
		{ErrOverloaded, abi.StatusRefused},
		{ErrNodeFull, abi.StatusRefused},
		{ErrStopping, abi.StatusRefused},
		{ErrElsewhere, abi.StatusRefused},
		{fmt.Errorf("%w: its snapshot is unreadable", ErrUnavailable), abi.StatusRefused},
		{fmt.Errorf("%w: disk full", ErrNotDurable), abi.StatusRefused},
		{&CrashError{Cause: engine.ErrTrap}, abi.StatusCrashed},
		{context.DeadlineExceeded, abi.StatusTimeout},
		{context.Canceled, abi.StatusTimeout},
	} {
		res := callError(c, tc.err)
		if res.Err == nil || res.Err.Status != tc.want {
			t.Errorf("%v: answered %+v, want %s", tc.err, res.Err, tc.want)
		}
		if res.Err != nil && res.Err.Retryable() != (tc.want == abi.StatusRefused) {
			t.Errorf("%v: retryable %v", tc.err, res.Err.Retryable())
		}
	}
	if res := callError(c, errors.New("something new")); res.Err == nil {
		t.Error("an unknown error answered no error")
	}
}
