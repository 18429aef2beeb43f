package classes

import (
	"context"
	"errors"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/wasmkeep/wasmkeep/host/engine"
	"github.com/wasmkeep/wasmkeep/host/store"
	"github.com/wasmkeep/wasmkeep/internal/testwasm"
)

// testRegistry is a registry on an in-memory bucket. Its engine keeps the
// real clock: a Go guest's initialization sleeps, which a manual clock
// would never end.
func testRegistry(t *testing.T) (*Registry, store.Bucket) {
	t.Helper()
	ctx := context.Background()
	eng, err := engine.New(ctx, engine.Config{CacheDir: testwasm.CompileCacheDir(t)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { eng.Close(ctx) })
	b := store.NewMem()
	return New(b, eng, 0), b
}

func hashes(vs []Version) []string {
	var out []string
	for _, v := range vs {
		out = append(out, v.Hash)
	}
	return out
}

// TestVersionsAndRollback: every upload is kept as a version, the
// current first, with what its module can do in an upgrade; a rollback
// makes the one before current again, lazy by default as an upload.
func TestVersionsAndRollback(t *testing.T) {
	ctx := context.Background()
	r, _ := testRegistry(t)
	chat, echo := testwasm.Build(t, "./examples/chat"), testwasm.Build(t, "./testdata/guests/echo")
	v1, err := r.Put(ctx, "c", echo, Options{})
	if err != nil {
		t.Fatal(err)
	}
	v2, err := r.Put(ctx, "c", chat, Options{Upgrade: UpgradeNow, ResetWithoutHandoff: true})
	if err != nil {
		t.Fatal(err)
	}
	if got := hashes(v2.Versions); !slices.Equal(got, []string{v2.Hash, v1.Hash}) {
		t.Fatalf("versions %v, want v2 then v1", got)
	}
	if cur := v2.Versions[0]; !cur.Offers || !cur.Takes || cur.Retired != nil {
		t.Fatalf("chat's version: %+v, want it to give and take a handoff, not retired", cur)
	}
	if old := v2.Versions[1]; old.Offers || old.Takes || old.Retired == nil {
		t.Fatalf("echo's version: %+v, want no handoff either way (no handler registered), and retired", old)
	}
	if v2.Policy() != UpgradeNow || !v2.ResetWithoutHandoff {
		t.Fatalf("policy %q reset %v", v2.Policy(), v2.ResetWithoutHandoff)
	}
	back, err := r.Rollback(ctx, "c", "", Options{})
	if err != nil {
		t.Fatal(err)
	}
	if back.Hash != v1.Hash || back.Policy() != UpgradeLazy || len(back.Versions) != 2 {
		t.Fatalf("after the rollback: %s %s %v", back.Hash, back.Policy(), hashes(back.Versions))
	}
	if _, err := r.Rollback(ctx, "c", "sha256:nope", Options{}); !errors.Is(err, ErrUnknownVersion) {
		t.Fatalf("rollback to an unknown version: %v", err)
	}
	if _, err := r.Put(ctx, "c", echo, Options{Upgrade: UpgradeNever, ResetWithoutHandoff: true}); !errors.Is(err, ErrBadOption) {
		t.Fatalf("never with a reset: %v", err)
	}
}

// TestConcurrentUploadsKeepEveryVersion: uploads of one class through
// several registries on one bucket (several nodes) all land in its list.
func TestConcurrentUploadsKeepEveryVersion(t *testing.T) {
	ctx := context.Background()
	r1, b := testRegistry(t)
	eng, err := engine.New(ctx, engine.Config{CacheDir: testwasm.CompileCacheDir(t)})
	if err != nil {
		t.Fatal(err)
	}
	defer eng.Close(ctx)
	r2 := New(b, eng, 0)
	mods := [][]byte{testwasm.Build(t, "./examples/chat"), testwasm.Build(t, "./testdata/guests/echo"),
		testwasm.Build(t, "./examples/counter"), testwasm.Build(t, "./testdata/guests/chatv2")}
	var wg sync.WaitGroup
	for i, m := range mods {
		reg := []*Registry{r1, r2}[i%2]
		wg.Go(func() {
			if _, err := reg.Put(ctx, "c", m, Options{}); err != nil {
				t.Error(err)
			}
		})
	}
	wg.Wait()
	rec, err := r1.update(ctx, "c", false, func(*Record) error { return nil })
	if err != nil {
		t.Fatal(err)
	}
	if len(rec.Versions) != len(mods) {
		t.Fatalf("versions after %d concurrent uploads: %v", len(mods), hashes(rec.Versions))
	}
}

// TestCollectUnusedVersions: a version no room uses is collected once its
// grace has passed, its module deleted unless another class keeps it; the
// current version and versions in use stay.
func TestCollectUnusedVersions(t *testing.T) {
	ctx := context.Background()
	r, b := testRegistry(t)
	echo, counter, chat := testwasm.Build(t, "./testdata/guests/echo"), testwasm.Build(t, "./examples/counter"), testwasm.Build(t, "./examples/chat")
	v1, _ := r.Put(ctx, "c", echo, Options{})
	v2, _ := r.Put(ctx, "c", counter, Options{})
	v3, err := r.Put(ctx, "c", chat, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := r.Put(ctx, "other", counter, Options{}); err != nil { // shares v2's module
		t.Fatal(err)
	}
	inUse := func(h string) bool { return h == v1.Hash }
	if gone, err := r.Collect(ctx, "c", inUse, time.Hour); err != nil || len(gone) != 0 {
		t.Fatalf("within the grace: collected %v (%v)", gone, err)
	}
	gone, err := r.Collect(ctx, "c", inUse, 0)
	if err != nil || !slices.Equal(gone, []string{v2.Hash}) {
		t.Fatalf("collected %v (%v), want only v2", gone, err)
	}
	rec, _ := r.update(ctx, "c", false, func(*Record) error { return nil })
	if got := hashes(rec.Versions); !slices.Equal(got, []string{v3.Hash, v1.Hash}) {
		t.Fatalf("kept %v, want v3 (current) and v1 (in use)", got)
	}
	if _, _, err := b.Get(ctx, moduleKey(v2.Hash)); err != nil {
		t.Fatalf("v2's module, which class other uses, was deleted: %v", err)
	}
	// Once nothing uses v1, it goes, module and all.
	if gone, _ := r.Collect(ctx, "c", func(string) bool { return false }, 0); !slices.Equal(gone, []string{v1.Hash}) {
		t.Fatalf("collected %v, want v1", gone)
	}
	if _, _, err := b.Get(ctx, moduleKey(v1.Hash)); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("v1's module after its collection: %v", err)
	}
}

// TestDurabilityKeptUnlessNamed: an upload that names no durability
// keeps its class's; one that names it changes it; a new class without
// one is durable per event, while a record written before that default
// with no choice ("") keeps meaning hibernate, through new versions too.
func TestDurabilityKeptUnlessNamed(t *testing.T) {
	ctx := context.Background()
	r, _ := testRegistry(t)
	chat, echo := testwasm.Build(t, "./examples/chat"), testwasm.Build(t, "./testdata/guests/echo")
	durable := func(want bool, what string) {
		t.Helper()
		if got, err := r.Durable(ctx, "c"); err != nil || got != want {
			t.Fatalf("%s: durable per event %v (%v), want %v", what, got, err, want)
		}
	}
	if _, err := r.Put(ctx, "c", echo, Options{}); err != nil {
		t.Fatal(err)
	}
	durable(true, "a new class, none named")
	// A record from before per-event durability was the default.
	if _, err := r.update(ctx, "c", false, func(rec *Record) error { rec.Durability = ""; return nil }); err != nil {
		t.Fatal(err)
	}
	durable(false, "a record with no choice")
	if rec, err := r.Put(ctx, "c", chat, Options{}); err != nil || rec.Durability != "" {
		t.Fatalf("a new version of a record with no choice: %q, %v; want it kept", rec.Durability, err)
	}
	durable(false, "a new version of a record with no choice")
	if _, err := r.Put(ctx, "c", chat, Options{Durability: DurabilityEvent}); err != nil {
		t.Fatal(err)
	}
	durable(true, "named event")
	rec, err := r.Put(ctx, "c", echo, Options{})
	if err != nil {
		t.Fatal(err)
	}
	durable(true, "a new version naming none")
	if rec.Durability != DurabilityEvent {
		t.Fatalf("the record says %q", rec.Durability)
	}
	if _, err := r.Rollback(ctx, "c", "", Options{}); err != nil {
		t.Fatal(err)
	}
	durable(true, "a rollback")
	if _, err := r.Put(ctx, "c", chat, Options{Durability: DurabilityHibernate}); err != nil {
		t.Fatal(err)
	}
	durable(false, "named hibernate")
	if _, err := r.Put(ctx, "c", chat, Options{Durability: "always"}); !errors.Is(err, ErrBadOption) {
		t.Fatalf("durability always: %v", err)
	}
}
