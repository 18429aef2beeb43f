package store_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/wasmkeep/wasmkeep/host/store"
	"github.com/wasmkeep/wasmkeep/host/store/storetest"
)

// The test binary re-executes itself as a child process when childEnv is
// set: "cas <n>" does n increments of casKey, "crash <seed>" writes until it
// is killed, "hold" holds the directory (HoldDir) until its standard input
// ends. dirEnv names the bucket's directory.
const (
	childEnv = "WASMKEEP_STORE_TEST_CHILD"
	dirEnv   = "WASMKEEP_STORE_TEST_DIR"
	casKey   = "procs/counter"
)

func TestMain(m *testing.M) {
	if mode := os.Getenv(childEnv); mode != "" {
		if err := child(mode, os.Getenv(dirEnv)); err != nil {
			fmt.Fprintln(os.Stderr, "child:", err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	os.Exit(m.Run())
}

func child(mode, dir string) error {
	if mode == "hold" {
		return holdChild(dir)
	}
	d, err := store.OpenDir(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	ctx := context.Background()
	verb, arg, _ := strings.Cut(mode, " ")
	n, err := strconv.ParseUint(arg, 10, 64)
	if err != nil {
		return err
	}
	switch verb {
	case "cas":
		for range n {
			if _, err := storetest.Increment(ctx, d, casKey); err != nil {
				return err
			}
		}
		return nil
	case "crash":
		return crashWriter(ctx, d, n)
	case "jcrash":
		// OpenDir above replayed what the last round left; this one
		// keeps a journal, small enough to checkpoint often.
		if err := d.Close(); err != nil {
			return err
		}
		if d, err = store.OpenDirWith(dir, store.DirOptions{Journal: true, JournalSize: 1 << 20}); err != nil {
			return err
		}
		return crashWriter(ctx, d, n)
	}
	return fmt.Errorf("unknown mode %q", mode)
}

// crashKeys are written by crashWriter: the first three by Puts (half of
// them conditional), the last by a Put/Delete cycle.
var crashKeys = []string{"crash/a", "crash/b/deep/er", "crash/" + strings.Repeat("long", 60), "crash/cycle/k"}

// crashWriter writes self-checking bodies of up to 1 MiB until it is
// killed, printing "ok <key> <etag>" after each acknowledged Put.
func crashWriter(ctx context.Context, d *store.Dir, seed uint64) error {
	r := rand.New(rand.NewPCG(seed, uint64(os.Getpid())))
	out := bufio.NewWriter(os.Stdout)
	for seq := 0; ; seq++ {
		key := crashKeys[seq%len(crashKeys)]
		body := storetest.SelfChecking(r, os.Getpid(), seq, r.IntN(1<<20))
		cond := store.Cond{}
		if key == crashKeys[3] || seq%2 == 0 {
			_, etag, err := d.Get(ctx, key)
			switch {
			case errors.Is(err, store.ErrNotFound):
				cond = store.IfNoneMatch()
			case err != nil:
				return err
			default:
				cond = store.IfMatch(etag)
			}
		}
		if key == crashKeys[3] && cond.IfMatch != "" {
			if err := d.Delete(ctx, key, cond.IfMatch); err != nil {
				return err
			}
			continue
		}
		etag, err := d.Put(ctx, key, body, cond)
		if err != nil {
			return err
		}
		fmt.Fprintf(out, "ok %s %s\n", key, etag)
		if err := out.Flush(); err != nil {
			return err
		}
	}
}

// childCmd returns a command that runs this test binary in child mode.
func childCmd(t *testing.T, mode, dir string) *exec.Cmd {
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), childEnv+"="+mode, dirEnv+"="+dir)
	cmd.Stderr = os.Stderr
	return cmd
}

func openDir(t testing.TB, path string, o store.DirOptions) *store.Dir {
	t.Helper()
	d, err := store.OpenDirWith(path, o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := d.Close(); err != nil {
			t.Error(err)
		}
	})
	return d
}

// The suites below and TestDirCrash mostly wait on the disk (fsync), each
// on directories of its own, so they run side by side.

func TestDir(t *testing.T) {
	t.Parallel()
	storetest.Run(t, func(t *testing.T) store.Bucket { return openDir(t, t.TempDir(), store.DirOptions{}) })
}

func TestDirNoSync(t *testing.T) {
	t.Parallel()
	storetest.Run(t, func(t *testing.T) store.Bucket { return openDir(t, t.TempDir(), store.DirOptions{NoSync: true}) })
}

// TestDirTwoHandles runs the suite on two Dirs open on one directory, each
// call going to one of them in turn: what one process writes, the other
// sees, and their locks exclude each other.
func TestDirTwoHandles(t *testing.T) {
	t.Parallel()
	storetest.Run(t, func(t *testing.T) store.Bucket {
		path := t.TempDir()
		return &alternating{bs: [2]store.Bucket{openDir(t, path, store.DirOptions{}), openDir(t, path, store.DirOptions{})}}
	})
}

type alternating struct {
	bs [2]store.Bucket
	n  atomic.Uint64
}

func (a *alternating) next() store.Bucket { return a.bs[a.n.Add(1)%2] }

func (a *alternating) Get(ctx context.Context, key string) ([]byte, string, error) {
	return a.next().Get(ctx, key)
}

func (a *alternating) Put(ctx context.Context, key string, body []byte, cond store.Cond) (string, error) {
	return a.next().Put(ctx, key, body, cond)
}

func (a *alternating) Delete(ctx context.Context, key, ifMatch string) error {
	return a.next().Delete(ctx, key, ifMatch)
}

func (a *alternating) List(ctx context.Context, prefix string) ([]string, error) {
	return a.next().List(ctx, prefix)
}

func (a *alternating) ListPage(ctx context.Context, prefix, after string, limit int) ([]store.Entry, bool, error) {
	return a.next().ListPage(ctx, prefix, after, limit)
}

func TestDirReopen(t *testing.T) {
	ctx := t.Context()
	path := t.TempDir()
	d, err := store.OpenDir(path)
	if err != nil {
		t.Fatal(err)
	}
	e1, err := d.Put(ctx, "rooms/a", []byte("state"), store.IfNoneMatch())
	if err != nil {
		t.Fatal(err)
	}
	if err := d.Close(); err != nil {
		t.Fatal(err)
	}
	if _, _, err := d.Get(ctx, "rooms/a"); err == nil {
		t.Fatal("Get on a closed Dir succeeded")
	}

	d = openDir(t, path, store.DirOptions{})
	body, etag, err := d.Get(ctx, "rooms/a")
	if err != nil || string(body) != "state" || etag != e1 {
		t.Fatalf("after reopen: %q, %q, %v; want %q, %q", body, etag, err, "state", e1)
	}
	e2, err := d.Put(ctx, "rooms/a", []byte("state 2"), store.IfMatch(e1))
	if err != nil {
		t.Fatal(err)
	}
	v1, _ := store.ParseDirETag(e1)
	v2, ok := store.ParseDirETag(e2)
	if !ok || v2 != v1+1 {
		t.Fatalf("ETag %q after %q: version does not advance by one", e2, e1)
	}
}

func TestDirLayout(t *testing.T) {
	ctx := t.Context()
	path := t.TempDir()
	d := openDir(t, path, store.DirOptions{})
	for _, k := range []string{"a", "a/b", "a/b/c"} {
		if _, err := d.Put(ctx, k, []byte(k), store.Cond{}); err != nil {
			t.Fatal(err)
		}
	}
	for _, f := range []string{"a@", "a/b@", "a/b/c@", "@store/format"} {
		if fi, err := os.Stat(filepath.Join(path, f)); err != nil || !fi.Mode().IsRegular() {
			t.Errorf("%s: %v", f, err)
		}
	}
	if got, want := d.ObjectFile("a/b"), filepath.Join(path, "a", "b@"); got != want {
		t.Errorf("ObjectFile = %q, want %q", got, want)
	}
	// Deleting every key leaves only the internals.
	for _, k := range []string{"a/b/c", "a/b", "a"} {
		if err := d.Delete(ctx, k, ""); err != nil {
			t.Fatal(err)
		}
	}
	entries, err := os.ReadDir(path)
	if err != nil {
		t.Fatal(err)
	}
	if len(entries) != 1 || entries[0].Name() != "@store" {
		t.Fatalf("after deleting everything the root holds %v", entries)
	}
}

func TestDirRefusesForeignDirectory(t *testing.T) {
	path := t.TempDir()
	if err := os.WriteFile(filepath.Join(path, "notes.txt"), []byte("mine"), 0o644); err != nil {
		t.Fatal(err)
	}
	if d, err := store.OpenDir(path); err == nil {
		d.Close()
		t.Fatal("OpenDir adopted a non-empty directory that is not a bucket")
	}
	if err := os.MkdirAll(filepath.Join(path, "b", "@store"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(path, "b", "@store", "format"), []byte("v99\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if d, err := store.OpenDir(filepath.Join(path, "b")); err == nil {
		d.Close()
		t.Fatal("OpenDir accepted an unknown format")
	}
}

func TestDirStaleTemps(t *testing.T) {
	ctx := t.Context()
	path := t.TempDir()
	d := openDir(t, path, store.DirOptions{})
	if _, err := d.Put(ctx, "x/k", []byte("v"), store.Cond{}); err != nil {
		t.Fatal(err)
	}
	old := filepath.Join(path, "x", "k@tmp-0000000000000001")
	fresh := filepath.Join(path, "x", "k@tmp-0000000000000002")
	for _, f := range []string{old, fresh} {
		if err := os.WriteFile(f, []byte("partial"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	past := time.Now().Add(-2 * store.StaleTempAge)
	if err := os.Chtimes(old, past, past); err != nil {
		t.Fatal(err)
	}
	keys, err := d.List(ctx, "")
	if err != nil || len(keys) != 1 || keys[0] != "x/k" {
		t.Fatalf("List = %q, %v; want only x/k", keys, err)
	}
	openDir(t, path, store.DirOptions{})
	if _, err := os.Stat(old); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("stale temporary file survived OpenDir: %v", err)
	}
	if _, err := os.Stat(fresh); err != nil {
		t.Errorf("recent temporary file removed by OpenDir: %v", err)
	}
}

func TestDirCorruptObject(t *testing.T) {
	ctx := t.Context()
	d := openDir(t, t.TempDir(), store.DirOptions{})
	etag, err := d.Put(ctx, "k", []byte("precious bytes"), store.Cond{})
	if err != nil {
		t.Fatal(err)
	}
	f := d.ObjectFile("k")
	raw, err := os.ReadFile(f)
	if err != nil {
		t.Fatal(err)
	}
	raw[len(raw)-1] ^= 1
	if err := os.WriteFile(f, raw, 0o644); err != nil {
		t.Fatal(err)
	}
	if _, _, err := d.Get(ctx, "k"); err == nil || errors.Is(err, store.ErrNotFound) {
		t.Fatalf("Get of a corrupt object: err = %v, want a corruption error", err)
	}
	if err := os.WriteFile(f, raw[:10], 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := d.Put(ctx, "k", []byte("x"), store.IfMatch(etag)); err == nil {
		t.Fatal("conditional Put over an unreadable object succeeded")
	}
	if _, err := d.Put(ctx, "k", []byte("healed"), store.Cond{}); err != nil {
		t.Fatalf("unconditional Put over a corrupt object: %v", err)
	}
	if body, _, err := d.Get(ctx, "k"); err != nil || string(body) != "healed" {
		t.Fatalf("after healing: %q, %v", body, err)
	}
}

// TestDirLockWaitHonoursContext holds a key's lock file the way another
// process would and checks that a Put waits for it, gives up when its
// context ends, and then works once the lock is released.
func TestDirLockWaitHonoursContext(t *testing.T) {
	d := openDir(t, t.TempDir(), store.DirOptions{})
	if _, err := d.Put(t.Context(), "k", []byte("v1"), store.Cond{}); err != nil {
		t.Fatal(err)
	}
	other, err := os.OpenFile(d.LockFile("k"), os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	if ok, err := store.Flock(other, false); !ok || err != nil {
		t.Fatalf("flock: %v, %v", ok, err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 100*time.Millisecond)
	defer cancel()
	if _, err := d.Put(ctx, "k", []byte("v2"), store.Cond{}); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Put under a foreign lock: err = %v, want DeadlineExceeded", err)
	}
	if err := store.Funlock(other); err != nil {
		t.Fatal(err)
	}
	if _, err := d.Put(t.Context(), "k", []byte("v3"), store.Cond{}); err != nil {
		t.Fatalf("Put after the foreign lock was released: %v", err)
	}
	if body, _, err := d.Get(t.Context(), "k"); err != nil || string(body) != "v3" {
		t.Fatalf("Get = %q, %v; want v3", body, err)
	}
}

// TestDirProcesses runs 4 processes that each increment one counter 50
// times with compare-and-swap.
func TestDirProcesses(t *testing.T) {
	if testing.Short() {
		t.Skip("starts processes")
	}
	const procs, each = 4, 50
	path := t.TempDir()
	openDir(t, path, store.DirOptions{}) // create it before the children race to
	var cmds []*exec.Cmd
	for range procs {
		cmd := childCmd(t, fmt.Sprintf("cas %d", each), path)
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		cmds = append(cmds, cmd)
	}
	for i, cmd := range cmds {
		if err := cmd.Wait(); err != nil {
			t.Errorf("child %d: %v", i, err)
		}
	}
	d := openDir(t, path, store.DirOptions{})
	body, etag, err := d.Get(t.Context(), casKey)
	if err != nil {
		t.Fatal(err)
	}
	if want := strconv.Itoa(procs * each); string(body) != want {
		t.Fatalf("counter = %q, want %s (lost updates)", body, want)
	}
	if v, ok := store.ParseDirETag(etag); !ok || v != procs*each {
		t.Fatalf("ETag %q: want version %d, one per increment", etag, procs*each)
	}
}

// TestDirCrash kills a writing process at random points, then checks that
// every object is a whole body that was written, that no acknowledged write
// is lost, and that versions keep advancing.
func TestDirCrash(t *testing.T) {
	if testing.Short() {
		t.Skip("starts processes")
	}
	t.Parallel()
	crashRounds(t, "crash")
}

// TestDirJournalCrash is TestDirCrash with a writer that keeps a journal
// (checkpointed every MiB): each round's OpenDir replays what it left.
func TestDirJournalCrash(t *testing.T) {
	if testing.Short() {
		t.Skip("starts processes")
	}
	t.Parallel()
	crashRounds(t, "jcrash")
}

func crashRounds(t *testing.T, mode string) {
	seed := rand.Uint64()
	t.Logf("seed %d", seed)
	r := rand.New(rand.NewPCG(seed, 0))
	path := t.TempDir()
	acked := map[string]uint64{} // key → highest acknowledged version
	const rounds = 10
	for round := range rounds {
		cmd := childCmd(t, fmt.Sprintf("%s %d", mode, r.Uint64()), path)
		stdout, err := cmd.StdoutPipe()
		if err != nil {
			t.Fatal(err)
		}
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		killAfter, killDelay := 1+r.IntN(40), r.IntN(20000)
		lines := bufio.NewScanner(stdout)
		n := 0
		for lines.Scan() {
			var key, etag string
			if _, err := fmt.Sscanf(lines.Text(), "ok %s %s", &key, &etag); err != nil {
				t.Fatalf("child said %q: %v", lines.Text(), err)
			}
			v, ok := store.ParseDirETag(etag)
			if !ok {
				t.Fatalf("bad ETag %q", etag)
			}
			if key != crashKeys[3] {
				if v <= acked[key] {
					t.Fatalf("round %d: %s acknowledged version %d after %d", round, key, v, acked[key])
				}
				acked[key] = v
			}
			if n++; n == killAfter {
				// Kill it somewhere in the next few writes.
				time.AfterFunc(time.Duration(killDelay)*time.Microsecond, func() { _ = cmd.Process.Kill() })
			}
		}
		err = cmd.Wait()
		if n < killAfter {
			t.Fatalf("round %d: child ended after %d writes: %v", round, n, err)
		}
		var exit *exec.ExitError
		if !errors.As(err, &exit) {
			t.Fatalf("round %d: child: %v, want killed", round, err)
		}

		d, err := store.OpenDir(path)
		if err != nil {
			t.Fatal(err)
		}
		keys, err := d.List(t.Context(), "")
		if err != nil {
			t.Fatal(err)
		}
		for _, k := range keys {
			if !strings.HasPrefix(k, "crash/") {
				t.Errorf("round %d: List shows %q", round, k)
			}
		}
		for _, key := range crashKeys {
			body, etag, err := d.Get(t.Context(), key)
			if errors.Is(err, store.ErrNotFound) && (key == crashKeys[3] || acked[key] == 0) {
				continue
			}
			if err != nil {
				t.Fatalf("round %d: Get(%s): %v", round, key, err)
			}
			if err := storetest.CheckBody(body); err != nil {
				t.Fatalf("round %d: %s: %v", round, key, err)
			}
			if key == crashKeys[3] {
				continue
			}
			v, _ := store.ParseDirETag(etag)
			if v < acked[key] {
				t.Fatalf("round %d: %s is at version %d, but %d was acknowledged", round, key, v, acked[key])
			}
			// A write that landed but was not acknowledged counts too:
			// the next round must go beyond it.
			acked[key] = v
		}
		if err := d.Close(); err != nil {
			t.Fatal(err)
		}
		temps := 0
		_ = filepath.WalkDir(path, func(p string, e fs.DirEntry, err error) error {
			if err == nil && strings.Contains(e.Name(), "@tmp-") {
				temps++
			}
			return nil
		})
		t.Logf("round %d: killed after %d acknowledged writes; %d temporary files left behind", round, n, temps)
	}
}

// TestDirFailedPutLeavesNoTemp makes the rename of a Put fail (a directory
// sits where its object file goes) and checks that the Put reports it and
// removes its temporary file.
func TestDirFailedPutLeavesNoTemp(t *testing.T) {
	path := t.TempDir()
	d := openDir(t, path, store.DirOptions{})
	blocker := d.ObjectFile("k")
	if err := os.MkdirAll(filepath.Join(blocker, "x"), 0o755); err != nil {
		t.Fatal(err)
	}
	if _, err := d.Put(t.Context(), "k", []byte("v"), store.Cond{}); err == nil {
		t.Fatal("Put over a directory succeeded")
	}
	entries, err := os.ReadDir(path)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		if strings.Contains(e.Name(), "@tmp-") {
			t.Errorf("temporary file %s left behind", e.Name())
		}
	}
}
