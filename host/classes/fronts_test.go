package classes

import (
	"context"
	"errors"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/wasmkeep/wasmkeep/host/engine"
	"github.com/wasmkeep/wasmkeep/host/store"
	"github.com/wasmkeep/wasmkeep/internal/clock"
)

func TestCleanPrefix(t *testing.T) {
	for _, c := range []struct{ in, want string }{
		{"/app", "/app"},
		{"/app/", "/app"},
		{"/app/v1.2/x_y~z", "/app/v1.2/x_y~z"},
		{"/", "/"},
		{"/a:b@c", "/a:b@c"},
	} {
		got, err := CleanPrefix(c.in)
		if err != nil || got != c.want {
			t.Errorf("CleanPrefix(%q) = %q, %v; want %q", c.in, got, err, c.want)
		}
	}
	for _, in := range []string{"", "app", "//app", "/app//x", "/app/../admin", "/./app", "/app?x=1", "/app#x", "/a%20b", "/a b", "/" + strings.Repeat("a", MaxPrefixLen)} {
		if got, err := CleanPrefix(in); !errors.Is(err, ErrBadOption) {
			t.Errorf("CleanPrefix(%q) = %q, %v; want ErrBadOption", in, got, err)
		}
	}
}

func TestCheckPrefixes(t *testing.T) {
	got, err := checkPrefixes([]string{"/b", "/a/", "/a"})
	if err != nil || strings.Join(got, " ") != "/a /b" {
		t.Fatalf("checkPrefixes: %q, %v; want /a /b", got, err)
	}
	for _, c := range []struct {
		in   []string
		want error
		says string
	}{
		{[]string{"/"}, ErrPrefixHeld, "landing page"},
		{[]string{"/admin"}, ErrPrefixHeld, "/admin is the node's own"},
		{[]string{"/actor/x"}, ErrPrefixHeld, "it serves /actor itself"},
		{[]string{"/healthz/"}, ErrPrefixHeld, "/healthz"},
		{[]string{"/app", "/app/x"}, ErrBadOption, "overlap"},
		{[]string{"nope"}, ErrBadOption, `must start with "/"`},
	} {
		_, err := checkPrefixes(c.in)
		if !errors.Is(err, c.want) || !strings.Contains(err.Error(), c.says) {
			t.Errorf("checkPrefixes(%q): %v, want %v saying %q", c.in, err, c.want, c.says)
		}
	}
	var many []string
	for i := range MaxFrontPrefixes + 1 {
		many = append(many, "/p"+string(rune('a'+i)))
	}
	if _, err := checkPrefixes(many); !errors.Is(err, ErrBadOption) {
		t.Errorf("%d prefixes: %v, want ErrBadOption", len(many), err)
	}
	// /actors and /adminx are not under /actor and /admin.
	if _, err := checkPrefixes([]string{"/actors", "/adminx"}); err != nil {
		t.Errorf("/actors and /adminx: %v", err)
	}
}

func TestFrontTableMatch(t *testing.T) {
	table := newFrontTable(frontIndex{Prefixes: map[string]string{"/app": "shop", "/api/v1": "api", "/a:b": "odd"}}, 0)
	for path, want := range map[string]string{
		"/app": "shop", "/app/": "shop", "/app/x/y": "shop", "/apple": "", "/ap": "",
		"/api/v1": "api", "/api/v1/users": "api", "/api": "", "/api/v2": "",
		"/a:b/c": "odd", "/": "", "": "", "/x/app": "",
	} {
		got, ok := table.Match(path)
		if got != want || ok != (want != "") {
			t.Errorf("Match(%q) = %q, %v; want %q", path, got, ok, want)
		}
	}
	if got := strings.Join(table.Fronts(), " "); got != "api odd shop" {
		t.Errorf("Fronts() = %q", got)
	}
	if got := table.Prefixes("shop"); len(got) != 1 || got[0] != "/app" {
		t.Errorf("Prefixes(shop) = %q", got)
	}
}

// twoNodes are two registries over one bucket, as two nodes of a cluster
// have, on one manual clock.
func twoNodes(t *testing.T) (a, b *Registry, clk *clock.Manual, bucket *store.Faulty) {
	t.Helper()
	ctx := context.Background()
	clk = clock.NewManual(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	eng, err := engine.New(ctx, engine.Config{Clock: clk})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { eng.Close(ctx) })
	bucket = store.WithFaults(store.NewMem(), nil)
	return New(bucket, eng, 0), New(bucket, eng, 0), clk, bucket
}

// TestFrontClaims: a prefix, one under it or one above it, held by one
// front is refused to another, naming the holder, whichever node either
// was uploaded through; a front's upload replaces its own prefixes; a
// removal frees them.
func TestFrontClaims(t *testing.T) {
	ctx := context.Background()
	a, b, clk, _ := twoNodes(t)
	if err := a.claim(ctx, "shop", []string{"/app"}); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct{ prefix, says string }{
		{"/app", "front shop holds /app"},
		{"/app/cart", "/app/cart is under /app, which front shop holds"},
	} {
		err := b.claim(ctx, "blog", []string{"/blog", c.prefix})
		if !errors.Is(err, ErrPrefixHeld) || !strings.Contains(err.Error(), c.says) {
			t.Errorf("blog claims %s: %v, want it refused saying %q", c.prefix, err, c.says)
		}
	}
	if err := b.claim(ctx, "blog", []string{"/blog", "/apple"}); err != nil {
		t.Fatalf("blog claims /blog and /apple: %v", err)
	}
	err := a.claim(ctx, "all", []string{"/blog/x"})
	if !errors.Is(err, ErrPrefixHeld) || !strings.Contains(err.Error(), "front blog") {
		t.Errorf("a prefix under blog's: %v", err)
	}
	// A prefix above another front's: /x holds blog's /x/y.
	if err := b.claim(ctx, "blog", []string{"/x/y"}); err != nil {
		t.Fatal(err)
	}
	err = a.claim(ctx, "shop", []string{"/x"})
	if !errors.Is(err, ErrPrefixHeld) || !strings.Contains(err.Error(), "/x holds /x/y, which front blog holds") {
		t.Errorf("a prefix above blog's: %v", err)
	}
	// shop replaces its own: /app goes, /shop comes; blog may take /app.
	if err := a.claim(ctx, "shop", []string{"/shop"}); err != nil {
		t.Fatal(err)
	}
	if err := b.claim(ctx, "blog", []string{"/app", "/x/y"}); err != nil {
		t.Fatalf("blog takes /app once shop gave it up: %v", err)
	}

	// a sees b's claims once it reads the prefixes again.
	table, err := a.Fronts(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if got, ok := table.Match("/app/x"); ok {
		t.Fatalf("a's table within RecordTTL of its own last claim: /app/x is %q's, want nobody's (shop gave it up, and a has not seen blog take it)", got)
	}
	if got, _ := table.Match("/shop"); got != "shop" {
		t.Fatalf("a's table: /shop is %q's, want shop's", got)
	}
	clk.Advance(RecordTTL)
	table, _ = a.Fronts(ctx)
	if got, _ := table.Match("/app/x"); got != "blog" {
		t.Fatalf("a's table after RecordTTL: /app/x is %q's, want blog's", got)
	}
	if front, _ := a.IsFront(ctx, "blog"); !front {
		t.Fatal("blog is not a front")
	}

	// blog has no record (its claims were made alone): removing it frees
	// its prefixes all the same.
	if err := b.Remove(ctx, "blog"); err != nil {
		t.Fatalf("removing a name that only holds prefixes: %v", err)
	}
	if err := a.claim(ctx, "shop", []string{"/app"}); err != nil {
		t.Fatalf("/app after blog's removal: %v", err)
	}
	if err := b.Remove(ctx, "blog"); !errors.Is(err, ErrUnknownClass) {
		t.Fatalf("removing blog again: %v, want ErrUnknownClass", err)
	}
}

// unclaimAll gives up name's prefixes (a test's cleanup).
func (r *Registry) unclaimAll(ctx context.Context, name string) error {
	_, err := r.unclaim(ctx, name)
	return err
}

// TestFrontClaimsRace: two uploads through two nodes at once claim
// overlapping prefixes: exactly one gets them.
func TestFrontClaimsRace(t *testing.T) {
	ctx := context.Background()
	a, b, _, _ := twoNodes(t)
	for i := range 20 {
		p := "/r" + string(rune('a'+i))
		var wg sync.WaitGroup
		errs := make([]error, 2)
		wg.Go(func() { errs[0] = a.claim(ctx, "one", []string{p}) })
		wg.Go(func() { errs[1] = b.claim(ctx, "two", []string{p + "/sub"}) })
		wg.Wait()
		if (errs[0] == nil) == (errs[1] == nil) {
			t.Fatalf("%s and %s/sub claimed at once: %v, %v; want exactly one refused", p, p, errs[0], errs[1])
		}
		for _, err := range errs {
			if err != nil && !errors.Is(err, ErrPrefixHeld) {
				t.Fatalf("the refusal: %v", err)
			}
		}
		if err := a.unclaimAll(ctx, "one"); err != nil {
			t.Fatal(err)
		}
		if err := a.unclaimAll(ctx, "two"); err != nil {
			t.Fatal(err)
		}
	}
}

// TestFrontsReadAgain: the prefixes go on being used while the bucket
// cannot be read.
func TestFrontsReadAgain(t *testing.T) {
	ctx := context.Background()
	a, b, clk, bucket := twoNodes(t)
	if err := a.claim(ctx, "shop", []string{"/app"}); err != nil {
		t.Fatal(err)
	}
	if front, err := b.IsFront(ctx, "shop"); err != nil || !front {
		t.Fatalf("b: shop is a front: %v, %v", front, err)
	}
	bucket.SetFaults(func(store.Op) store.Fault { return store.FailBefore(errors.New("bucket down")) })
	clk.Advance(RecordTTL)
	if front, err := b.IsFront(ctx, "shop"); err != nil || !front {
		t.Fatalf("b, with the bucket down: shop is a front: %v, %v", front, err)
	}
	bucket.SetFaults(nil)
	if _, err := a.unclaim(ctx, "shop"); err != nil {
		t.Fatal(err)
	}
	if front, _ := b.IsFront(ctx, "shop"); !front {
		t.Fatal("b read the prefixes again within RecordTTL of its last try")
	}
	clk.Advance(RecordTTL)
	if front, _ := b.IsFront(ctx, "shop"); front {
		t.Fatal("b still has shop a front after RecordTTL")
	}
	// A node that never read them fails while the bucket does.
	_, c, _, cbucket := twoNodes(t)
	cbucket.SetFaults(func(store.Op) store.Fault { return store.FailBefore(errors.New("bucket down")) })
	if _, err := c.Fronts(ctx); err == nil {
		t.Fatal("a first read of the prefixes with the bucket down succeeded")
	}
}

// TestFrontsMissedReadSooner: a path no front holds has the prefixes read
// again once they are FrontMissTTL old, not RecordTTL: a front uploaded
// through another node serves within a moment; within FrontMissTTL the
// bucket is not asked again.
func TestFrontsMissedReadSooner(t *testing.T) {
	ctx := context.Background()
	a, b, clk, bucket := twoNodes(t)
	if _, err := b.Fronts(ctx); err != nil {
		t.Fatal(err)
	}
	if err := a.claim(ctx, "shop", []string{"/app"}); err != nil {
		t.Fatal(err)
	}
	gets := 0
	bucket.SetFaults(func(op store.Op) store.Fault {
		if op.Kind == store.OpGet {
			gets++
		}
		return store.Fault{}
	})
	if table, _ := b.FrontsMissed(ctx); len(table.Fronts()) != 0 || gets != 0 {
		t.Fatalf("within FrontMissTTL: fronts %v after %d GETs, want none read", table.Fronts(), gets)
	}
	clk.Advance(FrontMissTTL)
	if table, _ := b.FrontsMissed(ctx); !slices.Equal(table.Fronts(), []string{"shop"}) || gets != 1 {
		t.Fatalf("after FrontMissTTL: fronts %v after %d GETs, want shop after one", table.Fronts(), gets)
	}
}
