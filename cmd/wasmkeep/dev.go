package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net/http"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/wasmkeep/wasmkeep/host/classes"
	"github.com/wasmkeep/wasmkeep/host/engine"
	"github.com/wasmkeep/wasmkeep/host/node"
	"github.com/wasmkeep/wasmkeep/host/server"
	"github.com/wasmkeep/wasmkeep/internal/wasmbuild"
)

// `wasmkeep dev [DIR]`: the dev loop. It starts a node as serve would (its
// flags, its data directory), builds the room in DIR, uploads it as a
// class, and then watches DIR: every save rebuilds the room and uploads it
// as a new version, which the class's rooms run from then on. A build that
// fails changes nothing on the node: the last good version keeps serving
// requests and sockets, and the error is printed and shown on the rooms'
// pages (server.BuildErrors).
//
// Watching is polling: the files' sizes and modification times, every
// devPoll, with no dependency and the same behaviour on every system and
// file system (a notification API misses the saves of editors that write
// a new file and rename it over the old one, or of a directory shared
// with a container). A change is built once the files have been still for
// devSettle, so that a save of several files, or an editor's write in
// steps, is one build.

// Timing of the dev loop's watch.
const (
	devPoll   = 200 * time.Millisecond
	devSettle = 100 * time.Millisecond
)

// devRoomName is the room whose URL the dev loop prints.
const devRoomName = "dev"

// Room kinds the dev loop builds.
const (
	kindGo = "Go"
	kindAS = "AssemblyScript"
)

func devCommand() *cli.Command {
	return &cli.Command{
		Name:      "dev",
		Usage:     "serve the room in DIR (Go or AssemblyScript; default .) on a local node, and rebuild and upload it on every save",
		ArgsUsage: "[DIR]",
		Flags: append(serveFlags(),
			&cli.StringFlag{Name: "class", Usage: "the class name to upload the room as (default: DIR's name, lower case, other characters as -)", EnvVars: env("class")}),
		Action: func(c *cli.Context) error {
			if c.NArg() > 1 {
				return usage(c, "dev [flags] [DIR]")
			}
			dir := c.Args().First()
			if dir == "" {
				dir = "."
			}
			proj, err := detectRoom(dir)
			if err != nil {
				return cli.Exit("wasmkeep dev: "+err.Error(), 2)
			}
			class := c.String("class")
			if class == "" {
				class = classFromDir(proj.dir)
			}
			if !classes.NamePattern.MatchString(class) {
				return cli.Exit(fmt.Sprintf("wasmkeep dev: %q is no class name (1–63 of a-z, 0-9, '_' and '-'): give one with --class", class), 2)
			}
			cfg, err := nodeConfig(c)
			if err != nil {
				return err
			}
			if cfg.Cluster != nil {
				return cli.Exit("wasmkeep dev runs one node of its own; it takes no --node", 2)
			}
			errs := &server.BuildErrors{}
			cfg.Server.BuildErrors = errs
			// Stopped by the signals run stops the node on, and with a
			// go run that started it (stopWithParent): a build in
			// progress is not uploaded to a stopping node.
			ctx, stop := signal.NotifyContext(c.Context, os.Interrupt, syscall.SIGTERM)
			defer stop()
			ctx, stopParent := stopWithParent(ctx, cfg.Logger)
			defer stopParent()
			data, _ := filepath.Abs(cfg.DataDir)
			return run(ctx, cfg, func(n *node.Node) error {
				d := &devLoop{
					out: c.App.Writer, proj: proj, class: class, errs: errs, skip: []string{data},
					client: &adminClient{base: listenURL(n.AdminAddr()), token: cfg.Server.AdminToken, http: &http.Client{Timeout: 5 * time.Minute}},
					url:    listenURL(n.Addr()), admin: listenURL(n.AdminAddr()),
				}
				go d.run(ctx)
				return nil
			})
		},
	}
}

// devProject is a room's source directory.
type devProject struct {
	dir   string // absolute
	kind  string // kindGo or kindAS
	entry string // AssemblyScript: the entry file, relative to dir
}

// detectRoom finds what kind of room dir holds: a Go room if it has a
// go.mod or .go files (the go command then finds its module from there),
// else an AssemblyScript room if it has a package.json, assembly/*.ts or
// .ts files.
func detectRoom(dir string) (devProject, error) {
	abs, err := filepath.Abs(dir)
	if err != nil {
		return devProject{}, err
	}
	if fi, err := os.Stat(abs); err != nil {
		return devProject{}, err
	} else if !fi.IsDir() {
		return devProject{}, fmt.Errorf("%s is not a directory", dir)
	}
	p := devProject{dir: abs}
	has := func(name string) bool {
		fi, err := os.Stat(filepath.Join(abs, name))
		return err == nil && !fi.IsDir()
	}
	glob := func(pattern string) []string {
		m, _ := filepath.Glob(filepath.Join(abs, pattern))
		return slices.DeleteFunc(m, func(s string) bool { return strings.HasSuffix(s, ".d.ts") })
	}
	switch {
	case has("go.mod") || len(glob("*.go")) > 0:
		p.kind = kindGo
	case has("package.json") || len(glob("assembly/*.ts")) > 0 || len(glob("*.ts")) > 0:
		p.kind = kindAS
		if p.entry, err = asEntry(abs, glob); err != nil {
			return p, err
		}
	default:
		return p, fmt.Errorf("%s holds no room: a Go room has a go.mod or .go files, an AssemblyScript room a package.json, assembly/*.ts or a .ts file", dir)
	}
	return p, nil
}

// asEntry picks the entry file of an AssemblyScript room:
// assembly/index.ts, index.ts or room.ts, else the one .ts file at the
// top, else the one in assembly/.
func asEntry(dir string, glob func(string) []string) (string, error) {
	for _, name := range []string{"assembly/index.ts", "index.ts", "room.ts"} {
		if fi, err := os.Stat(filepath.Join(dir, name)); err == nil && !fi.IsDir() {
			return filepath.FromSlash(name), nil
		}
	}
	for _, pattern := range []string{"*.ts", "assembly/*.ts"} {
		if m := glob(pattern); len(m) == 1 {
			return filepath.Rel(dir, m[0])
		}
	}
	return "", errors.New("cannot tell the AssemblyScript room's entry file: name it assembly/index.ts (or index.ts, room.ts)")
}

// classFromDir makes a class name of a directory's name: lower case, and
// a dash for each run of characters a class name cannot hold.
func classFromDir(dir string) string {
	name := strings.ToLower(filepath.Base(dir))
	name = regexp.MustCompile(`[^a-z0-9_-]+`).ReplaceAllString(name, "-")
	name = strings.TrimLeft(name, "-_")
	if len(name) > 63 {
		name = name[:63]
	}
	return name
}

// build builds the room and returns its module.
func (p devProject) build() ([]byte, error) {
	if p.kind == kindGo {
		return wasmbuild.BuildIn(p.dir)
	}
	tmp, err := os.MkdirTemp("", "wasmkeep-dev-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(tmp)
	out := filepath.Join(tmp, "room.wasm")
	argv, err := p.ascCommand(out)
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Dir = p.dir
	var output bytes.Buffer
	cmd.Stdout, cmd.Stderr = &output, &output
	if err := cmd.Run(); err != nil {
		return nil, fmt.Errorf("asc %s: %v\n%s", p.entry, err, strings.TrimSpace(output.String()))
	}
	return os.ReadFile(out)
}

// ascCommand is the command that compiles an AssemblyScript room to out:
// node running the compiler of the nearest node_modules at or above the
// room (its project's own), else of the SDK of the wasmkeep source tree
// the room is in; with the room's asconfig.json, else the SDK's.
func (p devProject) ascCommand(out string) ([]string, error) {
	nodeCmd, err := exec.LookPath("node")
	if err != nil {
		return nil, errors.New("the AssemblyScript compiler runs on Node.js: node is not on PATH")
	}
	asc := findUp(p.dir, "node_modules/assemblyscript/bin/asc.js", "guest-sdk/assemblyscript/node_modules/assemblyscript/bin/asc.js")
	if asc == "" {
		return nil, errors.New("no AssemblyScript compiler in a node_modules at or above the room: run `npm install assemblyscript@0.28.20 /path/to/wasmkeep/guest-sdk/assemblyscript` there (guest-sdk/assemblyscript/README.md)")
	}
	config := filepath.Join(p.dir, "asconfig.json")
	if _, err := os.Stat(config); err != nil {
		config = findUp(p.dir, "node_modules/wasmkeep-assemblyscript/asconfig.json", "guest-sdk/assemblyscript/asconfig.json")
		if config == "" {
			return nil, errors.New("no asconfig.json in the room, and no wasmkeep SDK installed above it to take it from (guest-sdk/assemblyscript/README.md)")
		}
	}
	// Relative to the room, where asc runs: asc 0.28 resolves the lib
	// directory of a config given by an absolute path wrongly, and finds
	// none of the SDK's abort, trace and seed functions.
	if rel, err := filepath.Rel(p.dir, config); err == nil {
		config = rel
	}
	return []string{nodeCmd, asc, p.entry, "--config", config, "--target", "release", "--outFile", out}, nil
}

// findUp returns the first of names found in dir or a directory above it,
// nearest first, or "".
func findUp(dir string, names ...string) string {
	for _, name := range names {
		for d := dir; ; {
			path := filepath.Join(d, filepath.FromSlash(name))
			if fi, err := os.Stat(path); err == nil && !fi.IsDir() {
				return path
			}
			parent := filepath.Dir(d)
			if parent == d {
				break
			}
			d = parent
		}
	}
	return ""
}

// devLoop builds, uploads and watches one room's source.
type devLoop struct {
	out    io.Writer // the terminal
	proj   devProject
	class  string
	errs   *server.BuildErrors
	client *adminClient // the node's admin API
	skip   []string     // absolute directories not watched (the data directory)
	url    string       // the node's rooms
	admin  string       // the node's admin API

	builds  int
	current string // the hash of the class's current version, "" if it has none
}

// fileStamp is what the watch compares of a file.
type fileStamp struct {
	size  int64
	mtime time.Time
}

// run builds and uploads the room, says the node is up, then rebuilds on
// every change until ctx ends.
func (d *devLoop) run(ctx context.Context) {
	files := d.scan()
	d.printf("wasmkeep dev: the %s room in %s, as the class %s\n", d.proj.kind, d.shown(), d.class)
	// A class the node has already (a dev loop run before on this data
	// directory): the same module again changes nothing, and its rooms
	// keep their state.
	var rec classRecord
	if err := d.client.do(http.MethodGet, "/admin/classes/"+d.class, nil, &rec); err == nil {
		d.current = rec.Hash
	}
	d.rebuild(ctx, nil)
	d.printf("wasmkeep dev is up:\n"+
		"  room:       %[1]s/actor/%[2]s/%[3]s (any name after /actor/%[2]s/ is a room of its own)\n"+
		"  dashboard:  %[4]s/admin/\n"+
		"Watching %[5]s: each save builds the room again and uploads it as a new version; Ctrl-C stops the node.\n",
		d.url, d.class, devRoomName, d.admin, d.shown())
	tick := time.NewTicker(devPoll)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		now := d.scan()
		if sameFiles(files, now) {
			continue
		}
		// Settle: build once the files have stopped changing.
		for {
			select {
			case <-ctx.Done():
				return
			case <-time.After(devSettle):
			}
			again := d.scan()
			if sameFiles(now, again) {
				break
			}
			now = again
		}
		changed := changedFiles(files, now)
		files = now
		d.rebuild(ctx, changed)
	}
}

// shown is the room's directory as the terminal shows it: relative to the
// working directory when it is below it.
func (d *devLoop) shown() string {
	if wd, err := os.Getwd(); err == nil {
		if rel, err := filepath.Rel(wd, d.proj.dir); err == nil && rel == "." {
			return "."
		} else if err == nil && !strings.HasPrefix(rel, "..") {
			return "./" + filepath.ToSlash(rel)
		}
	}
	return d.proj.dir
}

func (d *devLoop) printf(format string, args ...any) {
	fmt.Fprintf(d.out, format, args...)
}

// rebuild builds the room, and uploads it if it built and differs from
// the version the node has. Its report is one line (the build's number
// first, for a reader and for the docs' test to wait on), and the
// compiler's output after a failed build.
func (d *devLoop) rebuild(ctx context.Context, changed []string) {
	d.builds++
	n := d.builds
	if len(changed) > 0 {
		d.printf("build %d: %s changed\n", n, strings.Join(changed, ", "))
	}
	start := time.Now()
	wasm, err := d.proj.build()
	took := time.Since(start)
	if ctx.Err() != nil {
		return
	}
	if err != nil {
		d.errs.Set(d.class, fmt.Sprintf("build %d failed; %s:\n%s", n, d.keeps(), err))
		d.printf("build %d: failed after %s; %s\n%s\n", n, secs(took), d.keeps(), indent(err.Error()))
		return
	}
	d.errs.Set(d.class, "")
	start = time.Now()
	up, err := d.upload(ctx, wasm)
	if ctx.Err() != nil {
		return
	}
	if err != nil {
		d.errs.Set(d.class, fmt.Sprintf("build %d built, but the node refused it: %v", n, err))
		d.printf("build %d: built in %s, but the upload failed; %s\n%s\n", n, secs(took), d.keeps(), indent(err.Error()))
		return
	}
	if up.Unchanged {
		d.printf("build %d: built in %s; the same module as the version running, %s: nothing uploaded\n", n, secs(took), shortHash(up.Hash))
		return
	}
	d.current = up.Hash
	line := fmt.Sprintf("build %d: built in %s, uploaded in %s: version %s (%s)", n, secs(took), secs(time.Since(start)), shortHash(up.Hash), size(uint64(up.Size)))
	for _, p := range []struct {
		n    int
		what string
	}{
		{up.Upgraded, "upgraded with their state"},
		{up.Reset, "reset, their code offers no state handoff"},
		{up.Failed, "failed to upgrade and stay on their version with their state (tried again at a later wake)"},
		{up.Stayed, "left on their version"},
	} {
		if p.n > 0 {
			line += fmt.Sprintf("; %s %s", plural(p.n, "room", "rooms"), p.what)
		}
	}
	d.printf("%s\n", line)
}

// keeps says what serves after a failed build.
func (d *devLoop) keeps() string {
	if d.current == "" {
		return "the class has no good version yet"
	}
	return "the last good version, " + shortHash(d.current) + ", keeps serving"
}

// devUpload is what one upload did.
type devUpload struct {
	Hash      string
	Size      int
	Unchanged bool // the module is the class's current version already: nothing done
	// What became of the class's rooms (counts of the node's upgrade job):
	// upgraded with their state by handoff, reset (their code offers no
	// handoff), failed to move (they stay on their version, with their
	// state, and are tried again at a later wake), or left where they are
	// for another reason.
	Upgraded, Reset, Failed, Stayed int
}

// devUploadQuery is the policy of the dev loop's uploads: every room
// moves to the new version at once, with its state where its code offers
// a handoff, else reset.
const devUploadQuery = "?upgrade=" + classes.UpgradeNow + "&reset_without_handoff=true"

// devJobWait bounds the wait for the upgrade of a class's rooms: a few
// rooms move in milliseconds each.
const devJobWait = time.Minute

// devJobPoll is how often the dev loop asks how the upgrade goes.
const devJobPoll = 20 * time.Millisecond

// upload makes wasm the class's current version and moves the class's
// rooms onto it (devUploadQuery), waiting until they have moved. It is
// the dev loop's one call that changes the node.
func (d *devLoop) upload(ctx context.Context, wasm []byte) (devUpload, error) {
	up := devUpload{Hash: engine.Hash(wasm), Size: len(wasm)}
	if up.Hash == d.current {
		up.Unchanged = true
		return up, nil
	}
	var ans uploadAnswer
	if err := d.client.do(http.MethodPut, "/admin/classes/"+d.class+devUploadQuery, wasm, &ans); err != nil {
		return up, err
	}
	up.Hash, up.Size = ans.Hash, ans.Size
	if ans.Job == nil {
		return up, nil // the class's first version, or a node that could not start the job: rooms move at their next wake
	}
	job := *ans.Job
	deadline := time.After(devJobWait)
	for job.Running() {
		select {
		case <-ctx.Done():
			return up, ctx.Err()
		case <-deadline:
			return up, fmt.Errorf("uploaded, but the upgrade of the rooms still runs after %v (wasmkeep class versions %s)", devJobWait, d.class)
		case <-time.After(devJobPoll):
		}
		if err := d.client.do(http.MethodGet, "/admin/classes/"+d.class+"/upgrade", nil, &job); err != nil {
			return up, fmt.Errorf("uploaded, but following the upgrade of the rooms failed: %w", err)
		}
	}
	up.Upgraded, up.Reset, up.Failed, up.Stayed = job.Done, job.Reset, job.Failed, job.NoHandoff+job.Elsewhere
	return up, nil
}

// scan stamps every file of the room's directory that can be its source:
// not in hidden directories, node_modules or the data directory, and not
// hidden files, editors' backups and swap files, or built modules.
func (d *devLoop) scan() map[string]fileStamp {
	files := map[string]fileStamp{}
	_ = filepath.WalkDir(d.proj.dir, func(path string, e fs.DirEntry, err error) error {
		if err != nil {
			return nil // gone meanwhile, or unreadable: not a source
		}
		name := e.Name()
		if e.IsDir() {
			if path != d.proj.dir && (strings.HasPrefix(name, ".") || name == "node_modules" || slices.Contains(d.skip, path)) {
				return filepath.SkipDir
			}
			return nil
		}
		if strings.HasPrefix(name, ".") || strings.HasSuffix(name, "~") || strings.HasSuffix(name, ".swp") ||
			strings.HasSuffix(name, ".swx") || strings.HasSuffix(name, ".wasm") || name == "4913" {
			return nil
		}
		fi, err := e.Info()
		if err != nil || !fi.Mode().IsRegular() {
			return nil
		}
		rel, _ := filepath.Rel(d.proj.dir, path)
		files[filepath.ToSlash(rel)] = fileStamp{fi.Size(), fi.ModTime()}
		return nil
	})
	return files
}

func sameFiles(a, b map[string]fileStamp) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if w, ok := b[k]; !ok || w.size != v.size || !w.mtime.Equal(v.mtime) {
			return false
		}
	}
	return true
}

// changedFiles names the files added, changed or removed, sorted.
func changedFiles(before, after map[string]fileStamp) []string {
	var out []string
	for k, v := range after {
		if w, ok := before[k]; !ok || w.size != v.size || !w.mtime.Equal(v.mtime) {
			out = append(out, k)
		}
	}
	for k := range before {
		if _, ok := after[k]; !ok {
			out = append(out, k+" (removed)")
		}
	}
	slices.Sort(out)
	return out
}

// secs writes a duration as the dev loop reports it: seconds, to the
// hundredth.
func secs(d time.Duration) string {
	return fmt.Sprintf("%.2fs", d.Seconds())
}

func indent(s string) string {
	return "    " + strings.ReplaceAll(strings.TrimRight(s, "\n"), "\n", "\n    ")
}
