//go:build unix

package main

import (
	"bytes"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/wasmkeep/wasmkeep/internal/testenv"
	"github.com/wasmkeep/wasmkeep/internal/testhttp"
	"github.com/wasmkeep/wasmkeep/internal/testwasm"
)

// devRoomSource is a small Go room for the dev loop's test: its page says
// which version of the source answers, GET /text answers the same as plain
// text, and a counter shows whether the room kept its state.
func devRoomSource(version string) string { return devRoom(version, false) }

// devRoom is devRoomSource, with a state handoff if handoff: the version
// hands its counter to the next, and takes one over from the previous.
func devRoom(version string, handoff bool) string {
	upgrade := ""
	if handoff {
		upgrade = `
	wk.HandleUpgrade(func() []byte { return []byte(strconv.Itoa(hits)) })
	wk.HandleStartFrom(func(prev []byte, _ string) { hits, _ = strconv.Atoi(string(prev)) })`
	}
	return `package main

import (
	"strconv"

	wk "github.com/wasmkeep/wasmkeep/guest-sdk/go"
)

var hits int

func init() {
	wk.HandleRequest(func(r *wk.Request) *wk.Response {
		hits++
		if r.Path == "/text" {
			return wk.Text(200, "` + version + ` " + strconv.Itoa(hits))
		}
		return wk.HTML(200, "<!doctype html><title>dev</title><p id=v>` + version + ` " + strconv.Itoa(hits) + "</p>")
	})` + upgrade + `
}

func main() {}
`
}

// devRoomDir writes the room in a module of its own in a temporary
// directory, as a user's project outside this repository: its go.mod
// requires wasmkeep and replaces it with this tree, through a link beside
// the room. The build records the replacement's path in the module: as
// ../wasmkeep it is the same whatever directory the tree is in, so that a
// checkout elsewhere (CI's) finds the versions the test builds in the
// compilation cache all test processes share, where with the tree's own
// path it compiled every one of them afresh (a minute of CPU under -race).
func devRoomDir(t testing.TB) string {
	t.Helper()
	tmp := t.TempDir()
	dir := filepath.Join(tmp, "My Room")
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	root := moduleRoot(t)
	if err := os.Symlink(root, filepath.Join(tmp, "wasmkeep")); err != nil {
		t.Fatal(err)
	}
	ours, err := os.ReadFile(filepath.Join(root, "go.mod"))
	if err != nil {
		t.Fatal(err)
	}
	// The go line of ours: a module's may not be older than its
	// dependencies'.
	goLine := regexp.MustCompile(`(?m)^go \S+$`).Find(ours)
	gomod := "module example.com/myroom\n\n" + string(goLine) + "\n\nrequire github.com/wasmkeep/wasmkeep v0.0.0\n\nreplace github.com/wasmkeep/wasmkeep => ../wasmkeep\n"
	for name, body := range map[string]string{"go.mod": gomod, "main.go": devRoomSource("v1")} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

// devDeadline bounds the wait for a save's new version: seconds are
// expected, a minute is a failure even on a loaded machine.
const devDeadline = time.Minute

// devAnswer polls GET url until its body contains want, and returns the
// time it took and the body; it fails the test past deadline.
func devAnswer(t testing.TB, url, want string, deadline time.Duration) (time.Duration, string) {
	t.Helper()
	start := time.Now()
	client := &http.Client{Timeout: testhttp.Timeout}
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	timeout := time.After(deadline)
	for {
		body := ""
		if resp, err := client.Get(url); err == nil {
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			body = string(b)
		}
		if strings.Contains(body, want) {
			return time.Since(start), body
		}
		select {
		case <-timeout:
			t.Fatalf("GET %s did not answer %q within %v; the last answer: %q", url, want, deadline, body)
		case <-tick.C:
		}
	}
}

// TestDevLoop: `wasmkeep dev` on a Go room of a module of its own builds
// it, uploads it as the class named after the directory and prints its
// URL; every save answers with the new code (the test measures how soon),
// resetting the room while its code offers no handoff; a build error is
// printed, shown on the room's page, and leaves the last good version
// serving; the fix is served again without the banner; a room whose code
// offers a handoff keeps its state across the next save.
func TestDevLoop(t *testing.T) {
	t.Parallel()
	dir := devRoomDir(t)
	n := startNode(t, nodeOpts{command: "dev", args: []string{"--data", t.TempDir(), dir}, listenEnv: true, deadline: demoDeadline})
	n.waitOutput("wasmkeep dev is up", demoDeadline)
	out := n.stdout.String()
	for _, want := range []string{"the Go room in " + dir + ", as the class my-room", "build 1: built in ",
		"room:       " + n.url + "/actor/my-room/dev", "dashboard:  " + n.url + "/admin/"} {
		if !strings.Contains(out, want) {
			t.Fatalf("the dev loop's output lacks %q:\n%s", want, out)
		}
	}
	room := n.url + "/actor/my-room/dev"
	devAnswer(t, room, "v1 1", 10*time.Second)
	devAnswer(t, room, "v1 2", 10*time.Second)

	// Saves, each answered by its own version. A room's state does not
	// survive an upload until rooms offer a handoff: each version starts
	// the room afresh, which the dev loop says.
	var took []string
	for i := 2; i <= 4; i++ {
		version := fmt.Sprintf("v%d", i)
		if err := os.WriteFile(filepath.Join(dir, "main.go"), []byte(devRoomSource(version)), 0o644); err != nil {
			t.Fatal(err)
		}
		d, _ := devAnswer(t, room, version+" 1", devDeadline)
		took = append(took, fmt.Sprintf("%.2fs", d.Seconds()))
		n.waitOutput(fmt.Sprintf("build %d: built in ", i), 10*time.Second)
	}
	t.Logf("from a save to the new version's answer: %s", strings.Join(took, ", "))
	if !strings.Contains(n.stdout.String(), "1 room reset, their code offers no state handoff") {
		t.Errorf("the dev loop did not say it reset the room:\n%s", n.stdout.String())
	}

	// A build error: printed, shown on the page, and v4 goes on serving.
	if err := os.WriteFile(filepath.Join(dir, "main.go"), []byte(devRoomSource("v5")+"\nfunc broken() {\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	n.waitOutput("build 5: failed after ", demoDeadline)
	if out := n.stdout.String(); !strings.Contains(out, "the last good version") || !strings.Contains(out, "./main.go:") || !strings.Contains(out, "syntax error") {
		t.Errorf("the terminal does not show the build error:\n%s", out)
	}
	status, page, h := httpDo(t, "GET", room)
	if status != 200 || !strings.HasPrefix(h.Get("Content-Type"), "text/html") || !strings.Contains(page, "<p id=v>v4 ") ||
		!strings.Contains(page, `id="wasmkeep-build-error"`) || !strings.Contains(page, "syntax error") {
		t.Errorf("the room's page after a failed build: %d %q\n%s", status, h.Get("Content-Type"), page)
	}
	if _, text, _ := httpDo(t, "GET", room+"/text"); !strings.HasPrefix(text, "v4 ") || strings.Contains(text, "build") {
		t.Errorf("a plain text answer after a failed build: %q", text)
	}

	// The fix, which offers a handoff from now on: served (v4 offered
	// none, so the room is reset once more), and the banner is gone.
	if err := os.WriteFile(filepath.Join(dir, "main.go"), []byte(devRoom("v6", true)), 0o644); err != nil {
		t.Fatal(err)
	}
	_, page = devAnswer(t, room, "v6 1", devDeadline)
	if strings.Contains(page, "wasmkeep-build-error") {
		t.Errorf("the banner outlived the fix:\n%s", page)
	}
	devAnswer(t, room, "v6 2", devDeadline)
	// The next save is upgraded with its state: the count goes on.
	if err := os.WriteFile(filepath.Join(dir, "main.go"), []byte(devRoom("v7", true)), 0o644); err != nil {
		t.Fatal(err)
	}
	_, page = devAnswer(t, room, "v7 ", devDeadline)
	if m := regexp.MustCompile(`v7 (\d+)`).FindStringSubmatch(page); m == nil || m[1] == "1" {
		t.Errorf("the room did not keep its count across an upgrade with a handoff:\n%s", page)
	}
	n.waitOutput("build 7: built in ", 10*time.Second)
	if out := n.stdout.String(); !strings.Contains(out[strings.Index(out, "build 7: built"):], "1 room upgraded with their state") {
		t.Errorf("the dev loop did not say it upgraded the room:\n%s", out)
	}

	n.signal(syscall.SIGINT)
	if code := n.wait(stopDeadline); code != 0 {
		t.Fatalf("after SIGINT: exit code %d, want 0", code)
	}
}

// TestDevFirstBuildFails: a room that does not build at the start has no
// version: its page is the error, until a save that builds.
func TestDevFirstBuildFails(t *testing.T) {
	t.Parallel()
	dir := devRoomDir(t)
	if err := os.WriteFile(filepath.Join(dir, "main.go"), []byte("package main\n\nfunc main() { undefinedName() }\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	n := startNode(t, nodeOpts{command: "dev", args: []string{"--data", t.TempDir(), "--class", "first", dir}, listenEnv: true, deadline: demoDeadline})
	n.waitOutput("wasmkeep dev is up", demoDeadline)
	if out := n.stdout.String(); !strings.Contains(out, "build 1: failed after ") || !strings.Contains(out, "the class has no good version yet") || !strings.Contains(out, "undefined: undefinedName") {
		t.Fatalf("the dev loop's output:\n%s", out)
	}
	status, page, _ := httpDo(t, "GET", n.url+"/actor/first/x")
	if status != 503 || !strings.Contains(page, "undefined: undefinedName") {
		t.Fatalf("the room of a class that never built: %d\n%s", status, page)
	}
	if err := os.WriteFile(filepath.Join(dir, "main.go"), []byte(devRoomSource("v1")), 0o644); err != nil {
		t.Fatal(err)
	}
	devAnswer(t, n.url+"/actor/first/x", "v1 1", devDeadline)
	n.signal(syscall.SIGINT)
	if code := n.wait(stopDeadline); code != 0 {
		t.Fatalf("after SIGINT: exit code %d, want 0", code)
	}
}

// TestDevDetect: what kind of room a directory holds, and its
// AssemblyScript entry file.
func TestDevDetect(t *testing.T) {
	cases := []struct {
		name  string
		files []string
		kind  string
		entry string // "" for Go; "!" for an error
	}{
		{"go module", []string{"go.mod", "main.go"}, kindGo, ""},
		{"go files of an outer module", []string{"main.go", "page.html"}, kindGo, ""},
		{"go beats a page's package.json", []string{"go.mod", "main.go", "package.json"}, kindGo, ""},
		{"as project", []string{"package.json", "assembly/index.ts", "assembly/util.ts", "asconfig.json"}, kindAS, "assembly/index.ts"},
		{"as project, one file in assembly", []string{"package.json", "assembly/chat.ts"}, kindAS, "assembly/chat.ts"},
		{"one ts file", []string{"room.ts"}, kindAS, "room.ts"},
		{"one ts file and its types", []string{"hits.ts", "env.d.ts"}, kindAS, "hits.ts"},
		{"index.ts", []string{"index.ts", "other.ts"}, kindAS, "index.ts"},
		{"two ts files", []string{"a.ts", "b.ts"}, kindAS, "!"},
		{"nothing", []string{"README.md"}, "", "!"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			dir := t.TempDir()
			for _, f := range c.files {
				path := filepath.Join(dir, filepath.FromSlash(f))
				if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
					t.Fatal(err)
				}
				if err := os.WriteFile(path, nil, 0o644); err != nil {
					t.Fatal(err)
				}
			}
			p, err := detectRoom(dir)
			if c.entry == "!" {
				if err == nil {
					t.Fatalf("detected %+v, want an error", p)
				}
				return
			}
			if err != nil || p.kind != c.kind || p.entry != filepath.FromSlash(c.entry) || p.dir != dir {
				t.Fatalf("detected %+v, %v; want %s %q", p, err, c.kind, c.entry)
			}
		})
	}
	if _, err := detectRoom(filepath.Join(t.TempDir(), "missing")); err == nil {
		t.Error("a missing directory was detected as a room")
	}
	for in, want := range map[string]string{"/x/My Room": "my-room", "/x/first-go": "first-go", "/x/_chat.v2": "chat-v2", "/x/Ünï": "n-"} {
		if got := classFromDir(in); got != want {
			t.Errorf("classFromDir(%q) = %q, want %q", in, got, want)
		}
	}
}

// TestDevAssemblyScript: the AssemblyScript room of the getting-started
// guide is detected, compiled with the SDK's compiler and settings of the
// source tree it is in, and gives a module; a project of its own is
// compiled with its own compiler and asconfig.json.
func TestDevAssemblyScript(t *testing.T) {
	root := moduleRoot(t)
	testenv.Tool(t, "node")
	sdk := testenv.NPMPackages(t, testwasm.ASDir, "assemblyscript/bin/asc.js")
	p, err := detectRoom(filepath.Join(root, "docs", "examples", "first-as"))
	if err != nil || p.kind != kindAS || p.entry != "room.ts" {
		t.Fatalf("docs/examples/first-as: %+v, %v", p, err)
	}
	argv, err := p.ascCommand("/out/room.wasm")
	if err != nil {
		t.Fatal(err)
	}
	want := []string{filepath.Join(sdk, "node_modules", "assemblyscript", "bin", "asc.js"), "room.ts",
		"--config", filepath.Join("..", "..", "..", testwasm.ASDir, "asconfig.json"), "--target", "release", "--outFile", "/out/room.wasm"}
	if filepath.Base(argv[0]) != "node" || !slices.Equal(argv[1:], want) {
		t.Fatalf("the compile command: %q\nwant node %q", argv, want)
	}
	wasm, err := p.build()
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.HasPrefix(wasm, []byte("\x00asm")) {
		t.Fatalf("the build gave %d bytes that are no wasm module", len(wasm))
	}

	// A project's own compiler and settings win over the SDK's; without a
	// compiler the error says how to install one.
	own := filepath.Join(t.TempDir(), "proj")
	for _, f := range []string{"package.json", "asconfig.json", "assembly/index.ts", "node_modules/assemblyscript/bin/asc.js"} {
		path := filepath.Join(own, filepath.FromSlash(f))
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, nil, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if p, err = detectRoom(own); err != nil {
		t.Fatal(err)
	}
	argv, err = p.ascCommand("x.wasm")
	want = []string{filepath.Join(own, "node_modules", "assemblyscript", "bin", "asc.js"), filepath.FromSlash("assembly/index.ts"),
		"--config", "asconfig.json", "--target", "release", "--outFile", "x.wasm"}
	if err != nil || !slices.Equal(argv[1:], want) {
		t.Fatalf("a project's compile command: %q, %v\nwant node %q", argv, err, want)
	}
	if err := os.RemoveAll(filepath.Join(own, "node_modules")); err != nil {
		t.Fatal(err)
	}
	if _, err := p.ascCommand("x.wasm"); err == nil || !strings.Contains(err.Error(), "npm install") {
		t.Fatalf("a project without a compiler: %v", err)
	}
}

// BenchmarkDevSave measures the dev loop from a save to the new code's
// answer (docs/PERFORMANCE.md, "The dev loop"): for the test's tiny room
// (a change of main.go) and for examples/chat (a change of its page,
// which the room embeds), on a node with the compiler and with the
// interpreter. Each op is one save; the time includes the
// poll and settle delays, the build, the upload (the node compiles the
// new version) and the first request's wake. Every save is new code (a
// nonce of the run in it): the node's compilation cache must not have
// seen it, which it would have with -count 2.
func BenchmarkDevSave(b *testing.B) {
	b.Run("tiny", func(b *testing.B) {
		nonce := time.Now().UnixNano()
		dir := devRoomDir(b)
		n := startNode(b, nodeOpts{command: "dev", args: []string{"--data", b.TempDir(), dir}, listenEnv: true, deadline: demoDeadline})
		n.waitOutput("wasmkeep dev is up", demoDeadline)
		room := n.url + "/actor/my-room/dev"
		devAnswer(b, room, "v1 1", devDeadline)
		b.ResetTimer()
		for i := range b.N {
			version := fmt.Sprintf("v%d-%d", i+2, nonce)
			if err := os.WriteFile(filepath.Join(dir, "main.go"), []byte(devRoomSource(version)), 0o644); err != nil {
				b.Fatal(err)
			}
			devAnswer(b, room, version+" 1", devDeadline)
		}
	})
	chat := func(b *testing.B, args ...string) {
		nonce := time.Now().UnixNano()
		dir := devRoomDir(b)
		src := filepath.Join(moduleRoot(b), "examples", "chat")
		for _, f := range []string{"main.go", "chat.html"} {
			data, err := os.ReadFile(filepath.Join(src, f))
			if err != nil {
				b.Fatal(err)
			}
			if err := os.WriteFile(filepath.Join(dir, f), data, 0o644); err != nil {
				b.Fatal(err)
			}
		}
		args = append(append([]string{"--data", b.TempDir(), "--class", "chat"}, args...), dir)
		n := startNode(b, nodeOpts{command: "dev", args: args, listenEnv: true, deadline: demoDeadline})
		n.waitOutput("wasmkeep dev is up", demoDeadline)
		room := n.url + "/actor/chat/lobby"
		devAnswer(b, room, "WebSocket", devDeadline)
		page, err := os.OpenFile(filepath.Join(dir, "chat.html"), os.O_APPEND|os.O_WRONLY, 0)
		if err != nil {
			b.Fatal(err)
		}
		defer page.Close()
		b.ResetTimer()
		for i := range b.N {
			marker := fmt.Sprintf("<!-- save %d of %d -->", i, nonce)
			if _, err := page.WriteString(marker + "\n"); err != nil {
				b.Fatal(err)
			}
			devAnswer(b, room, marker, devDeadline)
		}
	}
	b.Run("chat", func(b *testing.B) { chat(b) })
	// The interpreter compiles a module several times faster, and runs
	// events slower: a choice for a dev node.
	b.Run("chat-interpreter", func(b *testing.B) { chat(b, "--interpreter") })
}
