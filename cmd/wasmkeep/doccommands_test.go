//go:build unix

package main

// The docs' commands, run as a reader would run them, so that the docs
// cannot rot. TestDocCommands runs every ```sh block of the docs in
// runDocs, in order per doc, in a fresh directory of symbolic links to the
// repository's top-level files (commands that build run as shown, but what
// they write stays out of the tree), with this test's wasmkeep first on
// PATH, GOFLAGS=-trimpath, and each node's compilation cache linked to the
// tests' shared one (so that a run builds and compiles only what changed
// since the last). The conventions (also written out for readers at the end of
// docs/getting-started.md):
//
//   - A command that starts a node (wasmkeep serve, demo or dev, however
//     wasmkeep is invoked) runs in the background, as in its own terminal;
//     the test waits until it answers /readyz (demo and dev: until they
//     say they are up, since they upload their classes after they start
//     serving). A comment line "# Wait until the node prints: TEXT" waits
//     until the running node has printed TEXT, as a reader watches its
//     terminal (dev's rebuild after a save, say). A
//     comment line starting with "# Ctrl-C" sends it SIGINT, as Ctrl-C in
//     its terminal would; otherwise the next node command or the end of the
//     doc does. Either way it must exit with code 0.
//   - Each doc gets a free port: WASMKEEP_LISTEN and WASMKEEP_SERVER point
//     at it, and 127.0.0.1:8080 in commands and outputs is replaced by it.
//     Docs use the node's default address, and tests run side by side.
//   - A ```text block right after a ```sh block is what the block's
//     commands print on stdout, together (node commands aside);
//     "..." matches any text within a line.
//   - A command right after "# not run by the doc test: <why>" is skipped
//     and counted (the whole test suite, say, which would run this test).
//   - A fenced block right after "<!-- file: PATH -->" must equal that
//     file (TestDocExampleFiles).

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/wasmkeep/wasmkeep/host/node"
	"github.com/wasmkeep/wasmkeep/internal/testenv"
	"github.com/wasmkeep/wasmkeep/internal/testwasm"
)

// runDocs are the docs whose commands TestDocCommands runs, relative to
// the module root.
var runDocs = []string{"README.md", "docs/getting-started.md", "docs/operations.md"}

const (
	// docAddr is the address the docs show, the node's default.
	docAddr = "127.0.0.1:8080"
	// notRunMark, at the start of a comment line, skips the next command.
	notRunMark = "# not run by the doc test:"
	// stopMark, at the start of a comment line, stops the running node.
	stopMark = "# Ctrl-C"
	// fileMark introduces a fenced block that must equal a file.
	fileMark = "<!-- file: "
	// waitMark, at the start of a comment line, waits until the running
	// node has printed the rest of the line.
	waitMark = "# Wait until the node prints:"
)

// waitDeadline bounds a waitMark: a dev loop's rebuild takes seconds.
const waitDeadline = 2 * time.Minute

// nodeCommand matches a command that starts a node.
var nodeCommand = regexp.MustCompile(`(^|[\s/])wasmkeep\s+(serve|demo|dev)(\s|$)`)

// docStep is one thing a doc asks for, in order.
type docStep struct {
	line    int    // in the doc, 1-based
	command string // the shell command, continuation lines joined
	skip    string // why it is not run (a notRunMark comment), or ""
	stop    bool   // a stopMark comment: stop the running node
	wait    string // a waitMark comment: what the running node must print
	node    bool   // the command starts a node
	block   int    // index of its ```sh block in the doc
}

// docOutput is a ```text block showing what a ```sh block printed.
type docOutput struct {
	line  int
	block int
	text  string
}

// docScript is a doc's steps and the outputs it shows.
type docScript struct {
	name    string
	steps   []docStep
	outputs map[int]docOutput // by block
}

// parseDoc reads the ```sh and ```text blocks of a markdown doc.
func parseDoc(name, doc string) (docScript, error) {
	s := docScript{name: name, outputs: map[int]docOutput{}}
	lines := strings.Split(doc, "\n")
	block := -1         // index of the latest ```sh block
	lastClosedSh := -10 // line index at which the latest ```sh block closed
	for i := 0; i < len(lines); i++ {
		info, ok := strings.CutPrefix(lines[i], "```")
		if !ok {
			continue
		}
		start := i
		var body []string
		for i++; i < len(lines) && !strings.HasPrefix(lines[i], "```"); i++ {
			body = append(body, lines[i])
		}
		if i == len(lines) {
			return s, fmt.Errorf("%s:%d: unclosed ``` block", name, start+1)
		}
		switch strings.TrimSpace(info) {
		case "sh":
			block++
			if err := s.addCommands(start+2, block, body); err != nil {
				return s, err
			}
			lastClosedSh = i
		case "text":
			if onlyBlank(lines[lastClosedSh+1 : start]) {
				s.outputs[block] = docOutput{line: start + 1, block: block, text: strings.Join(body, "\n")}
			}
		}
	}
	return s, nil
}

func onlyBlank(lines []string) bool {
	for _, l := range lines {
		if strings.TrimSpace(l) != "" {
			return false
		}
	}
	return true
}

// addCommands adds the steps of one ```sh block whose first line is line.
func (s *docScript) addCommands(line, block int, body []string) error {
	skip := ""
	for j := 0; j < len(body); j++ {
		l := strings.TrimSpace(body[j])
		switch {
		case l == "":
			continue
		case strings.HasPrefix(l, notRunMark):
			skip = strings.TrimSpace(strings.TrimPrefix(l, notRunMark))
			if skip == "" {
				return fmt.Errorf("%s:%d: say why the command is not run", s.name, line+j)
			}
			continue
		case strings.HasPrefix(l, stopMark):
			s.steps = append(s.steps, docStep{line: line + j, stop: true, block: block})
			continue
		case strings.HasPrefix(l, waitMark):
			want := strings.TrimSpace(strings.TrimPrefix(l, waitMark))
			if want == "" {
				return fmt.Errorf("%s:%d: say what to wait for after %q", s.name, line+j, waitMark)
			}
			s.steps = append(s.steps, docStep{line: line + j, wait: want, block: block})
			continue
		case strings.HasPrefix(l, "#"):
			continue // a comment for the reader
		}
		first := j
		cmd := strings.TrimSpace(body[j])
		for strings.HasSuffix(cmd, `\`) && j+1 < len(body) {
			j++
			cmd = strings.TrimSuffix(cmd, `\`) + " " + strings.TrimSpace(body[j])
		}
		if strings.HasSuffix(cmd, "&") && !strings.HasSuffix(cmd, "&&") {
			return fmt.Errorf("%s:%d: a command ending in & is not run in the background; a node command is (see the conventions)", s.name, line+first)
		}
		s.steps = append(s.steps, docStep{line: line + first, command: cmd, skip: skip, node: nodeCommand.MatchString(cmd), block: block})
		skip = ""
	}
	if skip != "" {
		return fmt.Errorf("%s: a %q line at the end of a block skips nothing", s.name, notRunMark)
	}
	return nil
}

// docRunner runs one doc's steps.
type docRunner struct {
	t       *testing.T
	script  docScript
	dir     string   // the working directory
	env     []string // added to childEnv
	addr    string   // the node's address, for docAddr
	node    *proc    // the running node, if any
	skipped int
	ran     int
}

// errDocAddrInUse: a node of the doc lost its port to another process
// between freeAddr and its listen; the doc is run again on another port.
var errDocAddrInUse = errors.New("the doc's port was taken")

// run runs every step and, for each block with a ```text block after it,
// compares what its commands printed.
func (r *docRunner) run() error {
	printed := map[int]*strings.Builder{}
	for _, st := range r.script.steps {
		where := fmt.Sprintf("%s:%d", r.script.name, st.line)
		switch {
		case st.stop:
			if r.node == nil {
				return fmt.Errorf("%s: %q but no node is running", where, stopMark)
			}
			if err := r.stopNode(); err != nil {
				return fmt.Errorf("%s: %v", where, err)
			}
			continue
		case st.wait != "":
			if r.node == nil {
				return fmt.Errorf("%s: %q but no node is running", where, waitMark)
			}
			if err := waitFor(r.node, st.wait, waitDeadline); err != nil {
				return fmt.Errorf("%s: the node %v", where, err)
			}
			continue
		case st.skip != "":
			r.skipped++
			r.t.Logf("%s: not run (%s): %s", where, st.skip, st.command)
			continue
		}
		cmd := strings.ReplaceAll(st.command, docAddr, r.addr)
		r.ran++
		if st.node {
			if r.node != nil {
				if err := r.stopNode(); err != nil {
					return fmt.Errorf("%s: before starting the next node: %v", where, err)
				}
			}
			if err := r.startNode(cmd); err != nil {
				if errors.Is(err, errDocAddrInUse) {
					return err
				}
				return fmt.Errorf("%s: %s: %v", where, st.command, err)
			}
			continue
		}
		out, errOut, err := r.shell(cmd)
		if err != nil {
			return fmt.Errorf("%s: %s: %v\nstdout:\n%s\nstderr:\n%s", where, st.command, err, out, errOut)
		}
		if printed[st.block] == nil {
			printed[st.block] = &strings.Builder{}
		}
		printed[st.block].WriteString(out)
	}
	if r.node != nil {
		if err := r.stopNode(); err != nil {
			return fmt.Errorf("%s: at the end: %v", r.script.name, err)
		}
	}
	for _, o := range sortedOutputs(r.script.outputs) {
		got := ""
		if printed[o.block] != nil {
			got = printed[o.block].String()
		}
		want := strings.ReplaceAll(o.text, docAddr, r.addr)
		if !outputMatches(want, got) {
			return fmt.Errorf("%s:%d: the commands above printed\n%s\nbut the doc shows\n%s", r.script.name, o.line, got, o.text)
		}
	}
	return nil
}

func sortedOutputs(m map[int]docOutput) []docOutput {
	out := make([]docOutput, 0, len(m))
	for _, o := range m {
		out = append(out, o)
	}
	slices.SortFunc(out, func(a, b docOutput) int { return a.line - b.line })
	return out
}

// outputMatches compares output with a doc's text block line by line,
// ignoring trailing spaces and blank lines at either end; "..." in want
// matches any text within a line.
func outputMatches(want, got string) bool {
	norm := func(s string) []string {
		var ls []string
		for _, l := range strings.Split(strings.TrimSpace(s), "\n") {
			ls = append(ls, strings.TrimRight(l, " \t\r"))
		}
		return ls
	}
	w, g := norm(want), norm(got)
	if len(w) != len(g) {
		return false
	}
	for i := range w {
		parts := strings.Split(w[i], "...")
		for j := range parts {
			parts[j] = regexp.QuoteMeta(parts[j])
		}
		if !regexp.MustCompile("^" + strings.Join(parts, ".*") + "$").MatchString(g[i]) {
			return false
		}
	}
	return true
}

// shell runs one command to its end and returns what it printed on
// stdout, and on stderr. Docs show stdout only: a terminal does not show
// curl's progress meter, which curl writes to stderr when its output is
// not a terminal.
func (r *docRunner) shell(command string) (stdout, stderr string, err error) {
	ctx, cancel := context.WithTimeout(context.Background(), commandDeadline)
	defer cancel()
	cmd := exec.CommandContext(ctx, "sh", "-c", command)
	cmd.Dir = r.dir
	cmd.Env = childEnv(r.env...)
	// Its own process group, so that a timeout kills what it started too.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	var out, errOut testenv.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	err = cmd.Run()
	if ctx.Err() != nil {
		err = fmt.Errorf("still running after %v", commandDeadline)
	}
	if strings.Contains(errOut.String(), "WARNING: DATA RACE") {
		err = errors.Join(err, errors.New("the race detector found a data race"))
	}
	return out.String(), errOut.String(), err
}

// startNode starts a node command in the background and waits until it
// serves.
func (r *docRunner) startNode(command string) error {
	r.shareCompileCache(command)
	p := &proc{t: r.t, exited: make(chan struct{}), url: "http://" + r.addr}
	// exec: the shell becomes the command, so that Ctrl-C's SIGINT ends
	// the command, not a shell that waits for it (dash dies of it).
	p.cmd = exec.Command("sh", "-c", "exec "+command)
	p.cmd.Dir = r.dir
	p.cmd.Env = childEnv(r.env...)
	p.cmd.Stdout, p.cmd.Stderr = &p.stdout, &p.stderr
	// Its own process group, as a terminal gives a command: Ctrl-C reaches
	// go run and the node it started alike.
	p.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := p.cmd.Start(); err != nil {
		return err
	}
	go func() {
		_ = p.cmd.Wait()
		close(p.exited)
	}()
	r.t.Cleanup(func() {
		select {
		case <-p.exited:
		default:
			_ = syscall.Kill(-p.cmd.Process.Pid, syscall.SIGKILL)
			<-p.exited
		}
		if r.t.Failed() {
			r.t.Logf("%s: node %s: stdout:\n%s\nstderr:\n%s", r.script.name, command, p.stdout.String(), p.stderr.String())
		}
	})
	r.node = p
	deadline := healthDeadline
	up := ""
	if m := nodeCommand.FindStringSubmatch(command); m != nil && m[2] != "serve" {
		up = "wasmkeep " + m[2] + " is up"
	}
	if up != "" {
		deadline = demoDeadline // it builds first
	}
	if err := p.waitUp(deadline); err != nil {
		if errors.Is(err, errAddrInUse) {
			return errDocAddrInUse
		}
		return err
	}
	if up != "" {
		// The demo and dev serve before they have uploaded their classes;
		// they say so when they are in.
		return waitFor(p, up, deadline)
	}
	return nil
}

// waitFor waits until the node has printed want.
func waitFor(p *proc, want string, deadline time.Duration) error {
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	timeout := time.After(deadline)
	for !strings.Contains(p.stdout.String()+p.stderr.String(), want) {
		select {
		case <-p.exited:
			return fmt.Errorf("exited with code %d before printing %q", p.cmd.ProcessState.ExitCode(), want)
		case <-timeout:
			return fmt.Errorf("did not print %q within %v", want, deadline)
		case <-tick.C:
		}
	}
	return nil
}

// shareCompileCache links the compilation cache of the data directory a
// node command is about to use (its --data, or the default) to the one all
// test processes share, as shareCompileCache does for the other tests'
// nodes. With the builds' -trimpath (see runDoc), the modules a doc
// builds and uploads are the same bytes in every run, so a -race node
// finds them compiled instead of compiling each for seconds.
func (r *docRunner) shareCompileCache(command string) {
	o := nodeOpts{dir: r.dir, args: strings.Fields(command)}
	if !slices.ContainsFunc(o.args, func(a string) bool { return a == "--data" || strings.HasPrefix(a, "--data=") }) {
		o.args = append(o.args, "--data", node.DefaultDataDir)
	}
	shareCompileCache(r.t, o)
}

// stopNode stops the running node as Ctrl-C in its terminal would, and
// checks that it exits cleanly.
func (r *docRunner) stopNode() error {
	p := r.node
	r.node = nil
	if !p.running() {
		return fmt.Errorf("the node exited by itself, with code %d", p.cmd.ProcessState.ExitCode())
	}
	if err := syscall.Kill(-p.cmd.Process.Pid, syscall.SIGINT); err != nil {
		return err
	}
	select {
	case <-p.exited:
	case <-time.After(stopDeadline):
		return fmt.Errorf("the node did not stop within %v of Ctrl-C", stopDeadline)
	}
	// The node's own word that it stopped cleanly: `go run` exits with 1
	// after a Ctrl-C whatever the program did, so the exit code alone
	// cannot tell.
	if !strings.Contains(p.stderr.String(), "wasmkeep node stopped") {
		return errors.New("the node did not stop cleanly after Ctrl-C")
	}
	if code := p.cmd.ProcessState.ExitCode(); code != 0 && !strings.HasPrefix(p.cmd.Args[2], "exec go run ") {
		return fmt.Errorf("the node exited with code %d after Ctrl-C", code)
	}
	if strings.Contains(p.stderr.String(), "WARNING: DATA RACE") {
		return errors.New("the race detector found a data race in the node")
	}
	return nil
}

// embedded are the top-level directories whose files the module's root
// package embeds (sdks.go): go:embed takes no file through a symbolic
// link, so docDir copies them.
var embedded = map[string]bool{"abi": true, "guest-sdk": true, "go.mod": true}

// mirror copies the tree (or file) src to dst, but for node_modules
// directories, which it links.
func mirror(t *testing.T, src, dst string) {
	t.Helper()
	err := filepath.WalkDir(src, func(p string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(src, p)
		to := filepath.Join(dst, rel)
		switch {
		case d.IsDir() && d.Name() == "node_modules":
			if err := os.Symlink(p, to); err != nil {
				return err
			}
			return filepath.SkipDir
		case d.IsDir():
			return os.MkdirAll(to, 0o755)
		case d.Type().IsRegular():
			b, err := os.ReadFile(p)
			if err != nil {
				return err
			}
			return os.WriteFile(to, b, 0o644)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// docDir makes a directory that looks like the repository to the docs'
// commands: a symbolic link to each top-level entry, except what git
// ignores there (the docs' own outputs, like ./wasmkeep and
// ./wasmkeep-data, must land here, not in the tree) and .git. It also
// makes bin/, first on PATH, with a copy of this test's wasmkeep (a copy,
// not a link: a doc's `go install` replaces it, and must not write through
// a link into the binary other tests run).
func docDir(t *testing.T, root string) (dir, bin string) {
	t.Helper()
	dir = t.TempDir()
	entries, err := os.ReadDir(root)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		name := e.Name()
		switch {
		case name == ".git", name == "wasmkeep", name == "wasmkeep-data", name == ".build",
			strings.HasSuffix(name, ".test"), strings.HasSuffix(name, ".prof"):
			continue // see .gitignore
		}
		if embedded[name] {
			mirror(t, filepath.Join(root, name), filepath.Join(dir, name))
			continue
		}
		if err := os.Symlink(filepath.Join(root, name), filepath.Join(dir, name)); err != nil {
			t.Fatal(err)
		}
	}
	bin = filepath.Join(dir, "bin")
	if err := os.Mkdir(bin, 0o755); err != nil {
		t.Fatal(err)
	}
	src, err := os.Open(wasmkeepBin(t))
	if err != nil {
		t.Fatal(err)
	}
	defer src.Close()
	dst, err := os.OpenFile(filepath.Join(bin, "wasmkeep"), os.O_CREATE|os.O_WRONLY, 0o755)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := io.Copy(dst, src); err != nil {
		t.Fatal(err)
	}
	if err := dst.Close(); err != nil {
		t.Fatal(err)
	}
	return dir, bin
}

// runDoc runs one doc's script in a fresh directory on a free port.
func runDoc(t *testing.T, root string, script docScript) (*docRunner, error) {
	dir, bin := docDir(t, root)
	addr := freeAddr(t)
	r := &docRunner{t: t, script: script, dir: dir, addr: addr, env: []string{
		"PATH=" + bin + string(os.PathListSeparator) + os.Getenv("PATH"),
		"GOBIN=" + bin, // a doc's `go install` lands first on PATH, not in your GOBIN
		// The doc's directory is new every run: without -trimpath its path
		// would be in every binary and module the doc builds, which would
		// then never be found in Go's build cache or the compilation cache.
		"GOFLAGS=" + strings.TrimSpace(os.Getenv("GOFLAGS")+" -trimpath"),
		"WASMKEEP_LISTEN=" + addr,
		"WASMKEEP_SERVER=http://" + addr,
	}}
	return r, r.run()
}

// needsNode tells whether a doc's commands run node or npm.
func needsNode(s docScript) bool {
	for _, st := range s.steps {
		if st.skip == "" && regexp.MustCompile(`^(npx|npm|node)\s`).MatchString(st.command) {
			return true
		}
	}
	return false
}

// TestDocCommands runs the commands of README.md, docs/getting-started.md
// and docs/operations.md as a reader would, in order per doc (the docs
// side by side), and checks that they succeed and print what the docs
// show. See the conventions at the top of this file.
func TestDocCommands(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the docs' commands, builds included; not in -short")
	}
	root := moduleRoot(t)
	wasmkeepBin(t) // once, before the docs run side by side
	warmDocBuilds(t, root)
	for _, name := range runDocs {
		t.Run(strings.TrimSuffix(filepath.Base(name), ".md"), func(t *testing.T) {
			t.Parallel()
			data, err := os.ReadFile(filepath.Join(root, name))
			if err != nil {
				t.Fatal(err)
			}
			script, err := parseDoc(name, string(data))
			if err != nil {
				t.Fatal(err)
			}
			if len(script.steps) == 0 {
				t.Fatalf("%s has no commands in ```sh blocks", name)
			}
			if needsNode(script) {
				testenv.Tool(t, "npx")
				// The doc's `npm ci` is not run (it would replace the
				// packages under other tests): install them the tests' way
				// if they are missing.
				testenv.NPMPackages(t, testwasm.ASDir, "assemblyscript/bin/asc.js")
			}
			start := time.Now()
			for attempt := 1; ; attempt++ {
				r, err := runDoc(t, root, script)
				if errors.Is(err, errDocAddrInUse) && attempt < 3 {
					t.Logf("%s: its port was taken; running it again on another", name)
					continue
				}
				if err != nil {
					t.Fatal(err)
				}
				t.Logf("%s: ran %d commands, %d not run (marked), in %v", name, r.ran, r.skipped, time.Since(start).Round(time.Millisecond))
				return
			}
		})
	}
}

// warmDocBuilds builds the CLI as the docs' `go install` and `go run`
// do (with -trimpath, runDoc's GOFLAGS), once and before the docs run side
// by side, so that their builds find every package in Go's build cache.
// On a machine whose cache held none of it, two docs compiled the whole
// module at once beside the other test binaries and ran out of their
// commands' two minutes.
func warmDocBuilds(t *testing.T, root string) {
	t.Helper()
	cmd := exec.Command("go", "build", "-o", os.DevNull, "./cmd/wasmkeep")
	cmd.Dir = root
	cmd.Env = childEnv("GOFLAGS=" + strings.TrimSpace(os.Getenv("GOFLAGS")+" -trimpath"))
	start := time.Now()
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build -trimpath ./cmd/wasmkeep: %v\n%s", err, out)
	}
	t.Logf("the docs' build of the CLI, done ahead: %v", time.Since(start).Round(time.Millisecond))
}

// TestDocCommandsCanFail: the runner fails on a command that fails, on
// output that differs from the doc's, and on a misused mark; it accepts
// "..." and a skipped command.
func TestDocCommandsCanFail(t *testing.T) {
	root := moduleRoot(t)
	cases := []struct {
		name, doc string
		fails     bool
	}{
		{"ok", "```sh\necho hello\necho class x: sha256:abc\n```\n\n```text\nhello\nclass x: sha256:...\n```\n", false},
		{"failing command", "```sh\nfalse\n```\n", true},
		{"edited output", "```sh\necho hello\n```\n\n```text\nhello world\n```\n", true},
		{"missing output line", "```sh\necho hello\necho again\n```\n\n```text\nhello\n```\n", true},
		{"skipped", "```sh\n" + notRunMark + " it fails\nfalse\necho ran\n```\n```text\nran\n```\n", false},
		{"continuation", "```sh\necho one \\\n  two\n```\n```text\none two\n```\n", false},
		{"address", "```sh\necho http://" + docAddr + "/x\n```\n```text\nhttp://" + docAddr + "/x\n```\n", false},
		{"stop without node", "```sh\n" + stopMark + "\n```\n", true},
		{"wait without node", "```sh\n" + waitMark + " up\n```\n", true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			script, err := parseDoc(c.name+".md", c.doc)
			if err == nil {
				_, err = runDoc(t, root, script)
			}
			if (err != nil) != c.fails {
				t.Errorf("error %v; want an error: %v", err, c.fails)
			}
		})
	}
	for _, bad := range []string{
		"```sh\n" + notRunMark + "\nfalse\n```\n",      // no reason
		"```sh\necho x\n" + notRunMark + " why\n```\n", // skips nothing
		"```sh\nsleep 1 &\n```\n",                      // & is no convention here
		"```sh\n" + waitMark + "\n```\n",               // waits for nothing
		"```sh\necho x\n",                              // unclosed
	} {
		if _, err := parseDoc("bad.md", bad); err == nil {
			t.Errorf("parseDoc accepted %q", bad)
		}
	}
}

// TestDocExampleFiles: a fenced block right after <!-- file: PATH -->
// shows that file of the repository as it is, so the code a doc shows is
// the code the doc's commands build.
func TestDocExampleFiles(t *testing.T) {
	root := moduleRoot(t)
	docs, err := filepath.Glob(filepath.Join(root, "docs", "*.md"))
	if err != nil {
		t.Fatal(err)
	}
	docs = append(docs, filepath.Join(root, "README.md"))
	marks := 0
	for _, doc := range docs {
		data, err := os.ReadFile(doc)
		if err != nil {
			t.Fatal(err)
		}
		rel, _ := filepath.Rel(root, doc)
		lines := strings.Split(string(data), "\n")
		for i, l := range lines {
			path, ok := strings.CutPrefix(l, fileMark)
			if !ok {
				continue
			}
			marks++
			path = strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(path), "-->"))
			want, err := os.ReadFile(filepath.Join(root, filepath.FromSlash(path)))
			if err != nil {
				t.Errorf("%s:%d: %v", rel, i+1, err)
				continue
			}
			if i+1 >= len(lines) || !strings.HasPrefix(lines[i+1], "```") {
				t.Errorf("%s:%d: a fenced block must follow the file mark", rel, i+1)
				continue
			}
			var body strings.Builder
			j := i + 2
			for ; j < len(lines) && !strings.HasPrefix(lines[j], "```"); j++ {
				body.WriteString(lines[j] + "\n")
			}
			if body.String() != string(want) {
				t.Errorf("%s:%d: the block differs from %s; paste the file into the doc again", rel, i+2, path)
			}
		}
	}
	if marks < 3 {
		t.Errorf("found %d file marks; README.md and docs/getting-started.md show the example rooms", marks)
	}
}

// TestReadmeDocList: README.md's Documentation list links every page of
// docs/, and every link on it leads to a file.
func TestReadmeDocList(t *testing.T) {
	root := moduleRoot(t)
	data, err := os.ReadFile(filepath.Join(root, "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	_, list, ok := strings.Cut(string(data), "\n## Documentation\n")
	if !ok {
		t.Fatal("README.md has no Documentation section")
	}
	list, _, _ = strings.Cut(list, "\n## ")
	linked := map[string]bool{}
	sc := bufio.NewScanner(strings.NewReader(list))
	link := regexp.MustCompile(`\]\(([^)#]+)`)
	for sc.Scan() {
		for _, m := range link.FindAllStringSubmatch(sc.Text(), -1) {
			linked[m[1]] = true
			if _, err := os.Stat(filepath.Join(root, filepath.FromSlash(m[1]))); err != nil {
				t.Errorf("README.md's Documentation list links %s: %v", m[1], err)
			}
		}
	}
	pages, err := filepath.Glob(filepath.Join(root, "docs", "*.md"))
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range pages {
		rel := "docs/" + filepath.Base(p)
		if !linked[rel] {
			t.Errorf("README.md's Documentation list does not link %s", rel)
		}
	}
}

// TestTestCommandIsCIs: the test command the README and the
// getting-started guide give is the one .ci/run runs, -timeout included,
// and the one `just test` runs. Besides the whole suite, .ci/run may run
// chosen tests again (a -run filter: the stop race without the race
// detector, whose timing differs).
func TestTestCommandIsCIs(t *testing.T) {
	ci, err := os.ReadFile("../../.ci/run")
	if err != nil {
		t.Fatal(err)
	}
	var ciTests []string
	for _, line := range strings.Split(string(ci), "\n") {
		if cmd := strings.TrimSpace(line); strings.HasPrefix(cmd, "go test ") && !strings.Contains(cmd, " -run ") {
			ciTests = append(ciTests, cmd)
		}
	}
	if len(ciTests) != 1 || !strings.Contains(ciTests[0], " -timeout ") {
		t.Fatalf(".ci/run runs %q; want one go test command of the whole suite, with its -timeout", ciTests)
	}
	if got := justRecipe(t, "test"); len(got) != 1 || got[0] != ciTests[0] {
		t.Errorf("just test runs %q; .ci/run runs %q", got, ciTests[0])
	}
	for _, name := range []string{"README.md", "docs/getting-started.md"} {
		data, err := os.ReadFile(filepath.Join("../..", name))
		if err != nil {
			t.Fatal(err)
		}
		script, err := parseDoc(name, string(data))
		if err != nil {
			t.Fatal(err)
		}
		var given []string
		for _, st := range script.steps {
			if strings.HasPrefix(st.command, "go test ") {
				given = append(given, st.command)
			}
		}
		if len(given) != 1 || given[0] != ciTests[0] {
			t.Errorf("%s gives %q as the test command; .ci/run runs %q", name, given, ciTests[0])
		}
	}
}
