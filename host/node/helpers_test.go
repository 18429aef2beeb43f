package node

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/wasmkeep/wasmkeep/abi"
	"github.com/wasmkeep/wasmkeep/host/rooms"
	"github.com/wasmkeep/wasmkeep/host/server"
	"github.com/wasmkeep/wasmkeep/host/store"
	"github.com/wasmkeep/wasmkeep/host/store/s3"
	"github.com/wasmkeep/wasmkeep/internal/s3test"
	"github.com/wasmkeep/wasmkeep/internal/testhttp"
	"github.com/wasmkeep/wasmkeep/internal/testwasm"
	"github.com/wasmkeep/wasmkeep/internal/wstest"
)

// Tests that mostly wait (on deadlines, backoffs, a browser), and those
// whose checks hold whatever else runs (the KV model, upgrades,
// AssemblyScript rooms), call t.Parallel(), so that their waits overlap;
// the tests that read the process as a whole (RSS, Pss, goroutines), load
// it on purpose or bound how long something takes stay sequential, and Go
// runs those before any parallel one starts.
func TestMain(m *testing.M) {
	if urls := os.Getenv(envClientURLs); urls != "" {
		n, _ := strconv.Atoi(os.Getenv(envClientN))
		os.Exit(socketClients(strings.Fields(urls), n))
	}
	os.Exit(m.Run())
}

// testLogger keeps node logs out of passing tests' output unless -v.
func testLogger(testing.TB) *slog.Logger {
	if testing.Verbose() {
		return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	return quietLogger()
}

func quietLogger() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

// startNode starts a node on a fresh (or given) data directory and a free
// loopback port, stopping it at the end of the test if still running.
func startNode(t testing.TB, cfg Config) *Node {
	t.Helper()
	if cfg.DataDir == "" {
		cfg.DataDir = t.TempDir()
	}
	if cfg.Listen == "" {
		cfg.Listen = "127.0.0.1:0"
	}
	if cfg.Logger == nil {
		cfg.Logger = testLogger(t)
	}
	if cfg.Rooms.IdleTimeout == 0 {
		cfg.Rooms.IdleTimeout = time.Hour // tests hibernate rooms explicitly
	}
	if cfg.Engine.CacheDir == "" {
		// One compilation cache for every node of every test process:
		// each class is compiled once, not once per node or per package
		// (seconds a compile under -race).
		cfg.Engine.CacheDir = testwasm.CompileCacheDir(t)
	}
	if cfg.Bucket == nil {
		if b := testS3Bucket(t, cfg.DataDir); b != nil {
			cfg.Bucket, cfg.ProbeBucket = b, true
		}
	}
	n, err := Start(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if n.http != nil {
			_ = n.Stop(context.Background())
		}
	})
	return n
}

// testStoreEnv switches the node tests to an S3 store: with
// WASMKEEP_TEST_STORE=s3, a node the tests start keeps its bucket on a
// versitygw server (one per data directory, so that a node restarted on
// the directory finds its rooms) instead of in the directory. .ci/run runs
// the end-to-end tests both ways.
const testStoreEnv = "WASMKEEP_TEST_STORE"

// s3Servers are the versitygw servers of data directories, under
// WASMKEEP_TEST_STORE=s3.
var s3Servers sync.Map // data directory → *s3test.Server

// testS3Bucket returns the S3 bucket of dataDir's node under
// WASMKEEP_TEST_STORE=s3, or nil.
func testS3Bucket(t testing.TB, dataDir string) store.Bucket {
	t.Helper()
	switch os.Getenv(testStoreEnv) {
	case "", "dir":
		return nil
	case "s3":
	default:
		t.Fatalf("%s=%s: want s3 or dir", testStoreEnv, os.Getenv(testStoreEnv))
	}
	v, ok := s3Servers.Load(dataDir)
	if !ok {
		v, _ = s3Servers.LoadOrStore(dataDir, s3test.Start(t))
	}
	srv := v.(*s3test.Server)
	b, err := s3.New(context.Background(), s3.Config{
		Bucket: srv.Bucket, Prefix: "node", Endpoint: srv.Endpoint, Region: s3test.Region,
		AccessKeyID: srv.AccessKeyID, SecretAccessKey: srv.SecretAccessKey,
	})
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// stop stops a node and marks it stopped for the cleanup.
func stop(t *testing.T, n *Node) {
	t.Helper()
	if err := n.Stop(context.Background()); err != nil {
		t.Fatalf("stop: %v", err)
	}
	n.http = nil
}

// hibernateEach hibernates the rooms of class named name(0) to
// name(count-1), several at a time: each hibernation waits for its
// snapshot's write to reach the disk (some 20 ms each here), and one after
// the other hundreds of them took seconds of a test's setup.
func hibernateEach(t *testing.T, n *Node, class string, count int, name func(int) string) {
	t.Helper()
	errs := make(chan error, count)
	next := make(chan int)
	var wg sync.WaitGroup
	for range 16 {
		wg.Go(func() {
			for i := range next {
				errs <- n.Rooms.Hibernate(context.Background(), rooms.Key{Class: class, Name: name(i)})
			}
		})
	}
	for i := range count {
		next <- i
	}
	close(next)
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
}

// answerClose reads c on a goroutine, as a client that goes on reading
// does, until the server closes it; it answers the close frame (as
// wstest.Client.Read does) and then closes the connection. The returned
// wait fails the test unless the close came, with code. Before a stop
// with sockets open, it keeps the stop from waiting out the close timeout
// (2 s) for a client that would read only once the stop has returned (and
// a relaying node from waiting as long for the client to close).
func answerClose(t *testing.T, c *wstest.Client, code abi.CloseCode) (wait func()) {
	closed := make(chan error, 1)
	go func() {
		for {
			if _, _, err := c.Read(); err != nil {
				c.Conn().Close()
				closed <- err
				return
			}
		}
	}()
	return func() {
		t.Helper()
		var ce *wstest.CloseError
		if err := <-closed; !errors.As(err, &ce) || ce.Code != code {
			t.Fatalf("waiting for close %d: %v", code, err)
		}
	}
}

// httpResult is a finished HTTP exchange.
type httpResult = testhttp.Result

// do sends a request as the CLI would (testhttp.Do).
func do(t *testing.T, method, url string, body []byte) httpResult {
	t.Helper()
	return testhttp.Do(t, method, url, body)
}

// doRequest sends req as it is.
func doRequest(t *testing.T, req *http.Request) httpResult {
	t.Helper()
	return testhttp.DoRequest(t, req)
}

// expect does a request and fails unless the status matches; it returns
// the body.
func expect(t *testing.T, status int, method, url string, body []byte) string {
	t.Helper()
	r := do(t, method, url, body)
	if r.Status != status {
		t.Fatalf("%s %s: status %d, want %d; body: %s", method, url, r.Status, status, r.Body)
	}
	return r.Body
}

// putClass uploads a guest package (built from source) through the admin API.
func putClass(t *testing.T, n *Node, name, pkg string) {
	t.Helper()
	expect(t, http.StatusCreated, http.MethodPut, n.AdminURL()+"/admin/classes/"+name, testwasm.Build(t, pkg))
}

// putHibernateClass is putClass for a class durable at hibernation only,
// for tests of what that mode keeps and loses: a crash rolls such a room
// back to its last hibernation.
func putHibernateClass(t *testing.T, n *Node, name, pkg string) {
	t.Helper()
	expect(t, http.StatusCreated, http.MethodPut, n.AdminURL()+"/admin/classes/"+name+"?durability=hibernate", testwasm.Build(t, pkg))
}

type roomRow struct {
	Class, Name, State, Awake string
	Sockets                   int
}

func listRooms(t *testing.T, n *Node) []roomRow {
	t.Helper()
	var rows []roomRow
	if err := json.Unmarshal([]byte(expect(t, 200, "GET", n.AdminURL()+"/admin/rooms", nil)), &rows); err != nil {
		t.Fatal(err)
	}
	return rows
}

func roomRowOf(t *testing.T, n *Node, class, name string) (roomRow, bool) {
	t.Helper()
	for _, r := range listRooms(t, n) {
		if r.Class == class && r.Name == name {
			return r, true
		}
	}
	return roomRow{}, false
}

func hibernate(t *testing.T, n *Node, class, name string) {
	t.Helper()
	expect(t, 200, "POST", n.AdminURL()+"/admin/rooms/"+class+"/"+name+"/hibernate", nil)
	row, ok := roomRowOf(t, n, class, name)
	if !ok || row.State != "hibernated" {
		t.Fatalf("after hibernate: %+v (listed %v)", row, ok)
	}
}

// waitFor polls cond until it holds, failing after a generous deadline.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	waitWithin(t, 30*time.Second, what, cond)
}

// waitWithin fails t unless cond holds within d, polling it.
func waitWithin(t *testing.T, d time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// metric reads one sample of the node's metrics by its full name (with
// labels), or -1 if absent.
func metric(t *testing.T, n *Node, name string) float64 {
	t.Helper()
	var buf bytes.Buffer
	n.Metrics.WritePrometheus(&buf)
	for _, line := range strings.Split(buf.String(), "\n") {
		if v, ok := strings.CutPrefix(line, name+" "); ok {
			var f float64
			if err := json.Unmarshal([]byte(v), &f); err != nil {
				t.Fatalf("metric %s: %q", name, v)
			}
			return f
		}
	}
	return -1
}

func serverConfig(maxBody int64) server.Config { return server.Config{MaxRequestBody: maxBody} }

func buildGuest(t testing.TB, pkg string) []byte { return testwasm.Build(t, pkg) }

func atoi(t *testing.T, s string) int64 {
	t.Helper()
	v, err := strconv.ParseInt(strings.TrimSpace(s), 10, 64)
	if err != nil {
		t.Fatalf("not a number: %q", s)
	}
	return v
}

func readAll(t *testing.T, resp *http.Response) string {
	t.Helper()
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}
