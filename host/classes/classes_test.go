package classes

import (
	"context"
	"encoding/json"
	"errors"
	"testing"
	"time"

	"github.com/wasmkeep/wasmkeep/host/engine"
	"github.com/wasmkeep/wasmkeep/host/store"
	"github.com/wasmkeep/wasmkeep/internal/clock"
)

// putRecord writes a class record as another node's registry would.
func putRecord(t *testing.T, b store.Bucket, rec Record) {
	t.Helper()
	body, _ := json.Marshal(rec)
	if _, err := b.Put(context.Background(), nameKey(rec.Name), body, store.Cond{}); err != nil {
		t.Fatal(err)
	}
}

// TestRecordsAreReadAgain: a class uploaded or removed through another
// node sharing the bucket is seen within RecordTTL, and a record goes on
// being used while the bucket cannot be read.
func TestRecordsAreReadAgain(t *testing.T) {
	ctx := context.Background()
	clk := clock.NewManual(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	eng, err := engine.New(ctx, engine.Config{Clock: clk})
	if err != nil {
		t.Fatal(err)
	}
	defer eng.Close(ctx)
	faulty := store.WithFaults(store.NewMem(), nil)
	r := New(faulty, eng, 0)
	hash := func(name string) string {
		t.Helper()
		rec, err := r.Get(ctx, name)
		if errors.Is(err, ErrUnknownClass) {
			return "unknown"
		}
		if err != nil {
			t.Fatal(err)
		}
		return rec.Hash
	}

	putRecord(t, faulty, Record{Name: "chat", Hash: "sha256:v1"})
	if got := hash("chat"); got != "sha256:v1" {
		t.Fatalf("first read: %s", got)
	}
	putRecord(t, faulty, Record{Name: "chat", Hash: "sha256:v2"}) // uploaded elsewhere
	clk.Advance(RecordTTL - time.Millisecond)
	if got := hash("chat"); got != "sha256:v1" {
		t.Fatalf("within RecordTTL: %s, want the record read first", got)
	}
	clk.Advance(time.Millisecond)
	if got := hash("chat"); got != "sha256:v2" {
		t.Fatalf("after RecordTTL: %s, want the new upload", got)
	}

	// The bucket fails: the record read last goes on, and is not asked
	// for again until another RecordTTL has passed.
	faulty.SetFaults(func(store.Op) store.Fault { return store.FailBefore(errors.New("bucket down")) })
	clk.Advance(RecordTTL)
	if got := hash("chat"); got != "sha256:v2" {
		t.Fatalf("with the bucket down: %s", got)
	}
	faulty.SetFaults(nil)

	// Removed elsewhere: unknown once the record is read again.
	if err := faulty.Delete(ctx, nameKey("chat"), ""); err != nil {
		t.Fatal(err)
	}
	if got := hash("chat"); got != "sha256:v2" {
		t.Fatalf("removed, within RecordTTL: %s", got)
	}
	clk.Advance(RecordTTL)
	if got := hash("chat"); got != "unknown" {
		t.Fatalf("removed, after RecordTTL: %s, want unknown", got)
	}
}
