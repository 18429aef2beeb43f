//go:build unix

package main

// Helpers of the CLI tests: they build the wasmkeep binary once, run it as
// child processes (nodes and client commands) and wait on conditions, never
// on the clock.

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/wasmkeep/wasmkeep/internal/s3test"
	"github.com/wasmkeep/wasmkeep/internal/testenv"
	"github.com/wasmkeep/wasmkeep/internal/testhttp"
	"github.com/wasmkeep/wasmkeep/internal/testwasm"
)

const (
	// healthDeadline bounds a node's start; demoDeadline a demo's, which
	// builds the examples first (slow when Go's build cache is cold).
	healthDeadline = 60 * time.Second
	demoDeadline   = 3 * time.Minute
	// goRunDeadline bounds a demo started with go run, which first builds
	// the wasmkeep command (without -race: a build of its own).
	goRunDeadline = demoDeadline + commandDeadline
	// stopDeadline bounds a clean stop (the node's own bound is 30 s).
	stopDeadline = 40 * time.Second
	// commandDeadline bounds one client command (an upload compiles the
	// module, for seconds in a -race node).
	commandDeadline = 2 * time.Minute
)

var (
	tmpRoot   string // removed by TestMain
	buildOnce sync.Once
	binPath   string
	buildErr  error
)

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "wasmkeep-cli-test-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	tmpRoot = dir
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// moduleRoot is the nearest directory at or above the working directory
// with a go.mod.
func moduleRoot(t testing.TB) string {
	t.Helper()
	dir, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			t.Fatal("no go.mod at or above the working directory")
		}
		dir = parent
	}
}

// wasmkeepBin builds ./cmd/wasmkeep once per test process (with -race under
// -race) and returns the binary's path.
func wasmkeepBin(t testing.TB) string {
	t.Helper()
	root := moduleRoot(t)
	buildOnce.Do(func() {
		binPath = filepath.Join(tmpRoot, "wasmkeep")
		args := []string{"build", "-o", binPath}
		if raceEnabled {
			args = append(args, "-race")
		}
		cmd := exec.Command("go", append(args, "./cmd/wasmkeep")...)
		cmd.Dir = root
		if out, err := cmd.CombinedOutput(); err != nil {
			buildErr = fmt.Errorf("go build ./cmd/wasmkeep: %v\n%s", err, out)
		}
	})
	if buildErr != nil {
		t.Fatal(buildErr)
	}
	return binPath
}

// childEnv is this process's environment without WASMKEEP_ variables (so
// that the developer's settings do not leak into the tests), plus extra.
// A -race binary sleeps a second at exit unless told not to.
func childEnv(extra ...string) []string {
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "WASMKEEP_") && !strings.HasPrefix(kv, "GORACE=") {
			env = append(env, kv)
		}
	}
	if raceEnabled {
		env = append(env, "GORACE="+strings.TrimSpace(os.Getenv("GORACE")+" atexit_sleep_ms=0"))
	}
	return append(env, extra...)
}

// proc is a running wasmkeep process (serve or demo).
type proc struct {
	t      testing.TB
	cmd    *exec.Cmd
	stdout testenv.Buffer
	stderr testenv.Buffer
	exited chan struct{} // closed once the process is reaped
	url    string        // http://127.0.0.1:<port>
}

// spawn starts wasmkeep with args in dir ("" for the working directory).
// The process, and any child it started (the demo runs go build), is
// killed at the end of the test if it is still running.
func spawn(t testing.TB, dir string, env []string, args ...string) *proc {
	t.Helper()
	return spawnProgram(t, dir, env, wasmkeepBin(t), args...)
}

// spawnProgram is spawn for any program: `go run ./cmd/wasmkeep` too.
func spawnProgram(t testing.TB, dir string, env []string, program string, args ...string) *proc {
	t.Helper()
	p := &proc{t: t, exited: make(chan struct{})}
	p.cmd = exec.Command(program, args...)
	p.cmd.Dir = dir
	p.cmd.Env = childEnv(env...)
	p.cmd.Stdout = &p.stdout
	p.cmd.Stderr = &p.stderr
	p.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		_ = p.cmd.Wait()
		close(p.exited)
	}()
	t.Cleanup(func() {
		select {
		case <-p.exited:
		default:
			// Its own process group: the process and its children.
			_ = syscall.Kill(-p.cmd.Process.Pid, syscall.SIGKILL)
			<-p.exited
		}
		if strings.Contains(p.stderr.String(), "WARNING: DATA RACE") {
			t.Errorf("the race detector found a data race in wasmkeep %s", strings.Join(args, " "))
		}
		if t.Failed() {
			t.Logf("wasmkeep %s: stdout:\n%s\nstderr:\n%s", strings.Join(args, " "), p.stdout.String(), p.stderr.String())
		}
	})
	return p
}

// running reports whether the process has not exited yet.
func (p *proc) running() bool {
	select {
	case <-p.exited:
		return false
	default:
		return true
	}
}

// signal sends sig to the process (not to its group, as kill(1) would).
func (p *proc) signal(sig syscall.Signal) {
	p.t.Helper()
	if err := p.cmd.Process.Signal(sig); err != nil {
		p.t.Fatalf("signal %v: %v", sig, err)
	}
}

// wait waits for the process to exit and returns its exit code, failing
// the test if it takes longer than within.
func (p *proc) wait(within time.Duration) int {
	p.t.Helper()
	select {
	case <-p.exited:
		return p.cmd.ProcessState.ExitCode()
	case <-time.After(within):
		p.t.Fatalf("wasmkeep still running %v after it was asked to stop", within)
		return -1
	}
}

var errAddrInUse = errors.New("address already in use")

// waitUp polls GET /readyz until it answers "ok", the process exits
// (errAddrInUse if it lost its port to someone else) or the deadline
// passes. /readyz, not /healthz: a cluster node serves /healthz before it
// has joined, and a test that uses it then finds its requests waiting.
func (p *proc) waitUp(deadline time.Duration) error {
	client := &http.Client{Timeout: 2 * time.Second}
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	timeout := time.After(deadline)
	last := "no answer"
	for {
		resp, err := client.Get(p.url + "/readyz")
		if err == nil {
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK && string(body) == "ok\n" && p.running() {
				return nil
			}
			last = fmt.Sprintf("%d %s", resp.StatusCode, strings.TrimSpace(string(body)))
		}
		select {
		case <-p.exited:
			if strings.Contains(p.stderr.String(), "address already in use") {
				return errAddrInUse
			}
			return fmt.Errorf("wasmkeep exited with code %d before /readyz answered ok", p.cmd.ProcessState.ExitCode())
		case <-timeout:
			return fmt.Errorf("%s/readyz did not answer ok within %v (last: %s)", p.url, deadline, last)
		case <-tick.C:
		}
	}
}

// waitReady waits until the process has printed want on stdout, and says
// why not: errAddrInUse if it exited for lack of a port.
func (p *proc) waitReady(want string, deadline time.Duration) error {
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	timeout := time.After(deadline)
	for !strings.Contains(p.stdout.String(), want) {
		select {
		case <-p.exited:
			if strings.Contains(p.stderr.String(), errAddrInUse.Error()) {
				return errAddrInUse
			}
			return fmt.Errorf("exited with code %d before printing %q", p.cmd.ProcessState.ExitCode(), want)
		case <-timeout:
			return fmt.Errorf("did not print %q within %v", want, deadline)
		case <-tick.C:
		}
	}
	return nil
}

// waitOutput waits until the process has printed want, on stdout or stderr.
func (p *proc) waitOutput(want string, deadline time.Duration) {
	p.t.Helper()
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	timeout := time.After(deadline)
	for !strings.Contains(p.stdout.String(), want) && !strings.Contains(p.stderr.String(), want) {
		select {
		case <-p.exited:
			p.t.Fatalf("wasmkeep exited with code %d before printing %q", p.cmd.ProcessState.ExitCode(), want)
		case <-timeout:
			p.t.Fatalf("wasmkeep did not print %q within %v", want, deadline)
		case <-tick.C:
		}
	}
}

// freeAddr returns a loopback address with a port that was free a moment
// ago. Someone else may take it before the node does: startNode retries.
func freeAddr(t testing.TB) string {
	t.Helper()
	return testenv.FreeAddr(t)
}

// nodeOpts describes a node process to start.
type nodeOpts struct {
	command   string   // "serve" (default) or "demo"
	args      []string // after the command, without --listen
	env       []string
	dir       string // working directory
	host      string // IP address to listen on (default 127.0.0.1)
	listenEnv bool   // give the address as WASMKEEP_LISTEN rather than --listen
	goRun     bool   // start it with go run ./cmd/wasmkeep, in the module root
	deadline  time.Duration
	// ready, when set, is what the process prints once it is all up (a
	// demo cluster's banner: its other nodes listen on the next ports,
	// which someone else may have taken too).
	ready string
	// ports is how many consecutive ports from the listen address the
	// process binds (a demo cluster's nodes); 0 is one.
	ports int
}

// startNode starts a node on a free loopback port and waits until it
// is up (/readyz: a cluster node has joined), retrying on another port if
// its port was taken.
func startNode(t testing.TB, o nodeOpts) *proc {
	t.Helper()
	if o.command == "" {
		o.command = "serve"
	}
	if o.deadline == 0 {
		o.deadline = healthDeadline
	}
	if o.host == "" {
		o.host = "127.0.0.1"
	}
	shareCompileCache(t, o)
	for attempt := 1; ; attempt++ {
		addr := testenv.FreeAddrOn(t, o.host)
		if o.ports > 1 {
			addr = testenv.FreePortsOn(t, o.host, o.ports)
		}
		args := append([]string{o.command}, o.args...)
		env := append([]string(nil), o.env...)
		if o.listenEnv {
			env = append(env, "WASMKEEP_LISTEN="+addr)
		} else {
			args = append(args, "--listen", addr)
		}
		var p *proc
		if o.goRun {
			p = spawnProgram(t, moduleRoot(t), env, "go", append([]string{"run", "./cmd/wasmkeep"}, args...)...)
		} else {
			p = spawn(t, o.dir, env, args...)
		}
		p.url = "http://" + addr
		err := p.waitUp(o.deadline)
		if err == nil && o.ready != "" {
			err = p.waitReady(o.ready, o.deadline)
		}
		if err == nil {
			return p
		}
		if errors.Is(err, errAddrInUse) && attempt < 5 {
			t.Logf("port of %s taken, retrying on another", addr)
			continue
		}
		t.Fatalf("starting wasmkeep %s: %v", strings.Join(args, " "), err)
	}
}

// shareCompileCache points the compiled code of o's data directory
// (<data>/cache, unless it exists already) at the cache all test processes
// share (testwasm.LinkCompileCache): a -race node takes seconds to compile
// a Go guest, and the tests start hundreds of nodes on fresh data
// directories. The node still compiles through <data>/cache as it would
// in production, and keeps its memory images there, its own; a node
// started again on the directory finds the links and its images, as it
// would find its own.
func shareCompileCache(t testing.TB, o nodeOpts) {
	t.Helper()
	data := ""
	for i, a := range o.args {
		if v, ok := strings.CutPrefix(a, "--data="); ok {
			data = v
		} else if a == "--data" && i+1 < len(o.args) {
			data = o.args[i+1]
		}
	}
	if data == "" {
		return
	}
	if !filepath.IsAbs(data) {
		data = filepath.Join(o.dir, data)
	}
	cache := filepath.Join(data, "cache")
	if _, err := os.Lstat(cache); err == nil {
		return
	}
	testwasm.LinkCompileCache(t, cache)
}

// serveNode starts `wasmkeep serve --data data` with rooms that hibernate
// only when told to.
//
// With WASMKEEP_TEST_STORE=s3 its store is a bucket on a versitygw server
// of its own for each data directory (so that a node started again on data
// finds its rooms) instead of the directory's: .ci/run runs the end-to-end
// tests both ways.
func serveNode(t *testing.T, data string, args ...string) *proc {
	t.Helper()
	o := nodeOpts{args: append([]string{"--data", data, "--idle-timeout", "1h"}, args...)}
	switch os.Getenv("WASMKEEP_TEST_STORE") {
	case "", "dir":
	case "s3":
		v, ok := s3Servers.Load(data)
		if !ok {
			v, _ = s3Servers.LoadOrStore(data, s3test.Start(t))
		}
		srv := v.(*s3test.Server)
		o.args = append(o.args, "--store", "s3://"+srv.Bucket+"/wk", "--s3-endpoint", srv.Endpoint)
		o.env = s3Env(srv.AccessKeyID, srv.SecretAccessKey)
		p := startNode(t, o)
		p.waitOutput("store=s3://"+srv.Bucket+"/wk/", healthDeadline) // the switch took
		return p
	default:
		t.Fatalf("WASMKEEP_TEST_STORE=%s: want s3 or dir", os.Getenv("WASMKEEP_TEST_STORE"))
	}
	return startNode(t, o)
}

// s3Servers are the versitygw servers of data directories, under
// WASMKEEP_TEST_STORE=s3.
var s3Servers sync.Map // data directory → *s3test.Server

// result is a finished client command.
type result struct {
	stdout, stderr string
	code           int
}

func (r result) String() string {
	return fmt.Sprintf("exit code %d\nstdout:\n%s\nstderr:\n%s", r.code, r.stdout, r.stderr)
}

// wk runs a wasmkeep command to its end, with env added to the (cleaned)
// environment.
func wk(t testing.TB, env []string, args ...string) result {
	t.Helper()
	return wkIn(t, env, "", args...)
}

// wkIn is wk with stdin on the command's standard input.
func wkIn(t testing.TB, env []string, stdin string, args ...string) result {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), commandDeadline)
	defer cancel()
	cmd := exec.CommandContext(ctx, wasmkeepBin(t), args...)
	cmd.Env = childEnv(env...)
	cmd.Stdin = strings.NewReader(stdin)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	var exit *exec.ExitError
	if err != nil && !errors.As(err, &exit) {
		t.Fatalf("wasmkeep %s: %v", strings.Join(args, " "), err)
	}
	if ctx.Err() != nil {
		t.Fatalf("wasmkeep %s: still running after %v", strings.Join(args, " "), commandDeadline)
	}
	return result{stdout: stdout.String(), stderr: stderr.String(), code: cmd.ProcessState.ExitCode()}
}

// ok runs a client command against the node and fails unless it succeeds
// quietly; it returns the command's output.
func (p *proc) ok(args ...string) string {
	p.t.Helper()
	r := p.client(args...)
	if r.code != 0 || r.stderr != "" {
		p.t.Fatalf("wasmkeep %s: %v", strings.Join(args, " "), r)
	}
	return r.stdout
}

// fails runs a client command against the node and fails the test unless
// it exits with code 1, nothing on stdout, and an error mentioning want.
func (p *proc) fails(want string, args ...string) result {
	p.t.Helper()
	r := p.client(args...)
	if r.code != 1 || r.stdout != "" || !strings.Contains(r.stderr, want) {
		p.t.Fatalf("wasmkeep %s: want exit code 1 and %q on stderr; got %v", strings.Join(args, " "), want, r)
	}
	return r
}

// client runs `wasmkeep <args> --server <node>`, the flag going right after
// the subcommand's words (flags precede arguments).
func (p *proc) client(args ...string) result {
	p.t.Helper()
	return p.clientIn("", args...)
}

// clientIn is client with stdin on the command's standard input.
func (p *proc) clientIn(stdin string, args ...string) result {
	p.t.Helper()
	words := 0
	for words < len(args) && isCommandWord(args[:words+1]) {
		words++
	}
	full := append(append(append([]string(nil), args[:words]...), "--server", p.url), args[words:]...)
	return wkIn(p.t, nil, stdin, full...)
}

// isCommandWord tells whether the last of words is still a (sub)command
// name: class put|list|rm|versions|rollback, rooms, rooms hibernate, room inspect|export|import.
func isCommandWord(words []string) bool {
	switch strings.Join(words, " ") {
	case "class", "class put", "class list", "class rm", "class versions", "class rollback", "rooms", "rooms hibernate",
		"room", "room inspect", "room export", "room import",
		"secret", "secret put", "secret list", "secret rm", "secret rotate":
		return true
	}
	return false
}

// httpDo sends a request to the node and returns the status and body.
func httpDo(t *testing.T, method, url string) (int, string, http.Header) {
	t.Helper()
	req, err := http.NewRequest(method, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := (&http.Client{Timeout: testhttp.Timeout}).Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, url, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, string(body), resp.Header
}

// expectHTTP sends a request and fails unless the answer has status want;
// it returns the body.
func expectHTTP(t *testing.T, want int, method, url string) string {
	t.Helper()
	status, body, _ := httpDo(t, method, url)
	if status != want {
		t.Fatalf("%s %s: status %d, want %d; body: %s", method, url, status, want, body)
	}
	return body
}

// table parses the output of a list command into rows of fields, checking
// the header.
func table(t *testing.T, out string, header ...string) [][]string {
	t.Helper()
	lines := strings.Split(strings.TrimSuffix(out, "\n"), "\n")
	if i := slices.Index(lines, ""); i > 0 {
		lines = lines[:i] // a table ends at a blank line (another may follow)
	}
	if got := strings.Fields(lines[0]); strings.Join(got, " ") != strings.Join(header, " ") {
		t.Fatalf("table header %q, want %q; output:\n%s", got, header, out)
	}
	var rows [][]string
	for _, l := range lines[1:] {
		f := strings.Fields(l)
		if len(f) != len(header) {
			t.Fatalf("table row %q has %d fields, want %d; output:\n%s", l, len(f), len(header), out)
		}
		rows = append(rows, f)
	}
	return rows
}
