package main

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"strings"

	"github.com/urfave/cli/v2"

	"github.com/wasmkeep/wasmkeep"
)

// sdkDir is where a project keeps the SDK init wrote into it.
const sdkDir = "wasmkeep-sdk"

func initCommand() *cli.Command {
	return &cli.Command{
		Name:      "init",
		Usage:     "write a new room project in DIR (Go or AssemblyScript) that `wasmkeep dev DIR` runs, the SDK included",
		ArgsUsage: "DIR",
		Flags: []cli.Flag{
			&cli.StringFlag{Name: "lang", Usage: "the room's language: go (needs Go) or as (AssemblyScript: needs Node and npm); required", EnvVars: env("lang")},
		},
		Action: func(c *cli.Context) error {
			if c.NArg() != 1 {
				return usage(c, "init --lang go|as DIR")
			}
			if c.String("lang") == "" {
				return cli.Exit("wasmkeep init: --lang is required: go or as", 2)
			}
			dir := c.Args().First()
			files, err := projectFiles(c.String("lang"), filepath.Base(dir))
			if err != nil {
				return cli.Exit("wasmkeep init: "+err.Error(), 2)
			}
			if err := writeProject(dir, files); err != nil {
				return cli.Exit("wasmkeep init: "+err.Error(), 1)
			}
			next := "wasmkeep dev " + dir
			if c.String("lang") == "as" {
				next = "(cd " + dir + " && npm install) && " + next
			}
			fmt.Fprintf(c.App.Writer, "%s room in %s; run it with\n\n  %s\n\nand open the room's URL it prints. %s/README.md says more.\n",
				langName[c.String("lang")], dir, next, dir)
			return nil
		},
	}
}

var langName = map[string]string{"go": "a Go", "as": "an AssemblyScript"}

// projectFiles are the files of a new project in lang, by path; name is
// its directory's name.
func projectFiles(lang, name string) (map[string][]byte, error) {
	files := map[string][]byte{}
	copyDir := func(from, to string, keep func(string) bool) error {
		entries, err := fs.ReadDir(wasmkeep.SDKs, from)
		if err != nil {
			return err
		}
		for _, e := range entries {
			if e.IsDir() || !keep(e.Name()) {
				continue
			}
			b, err := fs.ReadFile(wasmkeep.SDKs, path.Join(from, e.Name()))
			if err != nil {
				return err
			}
			files[path.Join(to, e.Name())] = b
		}
		return nil
	}
	notTest := func(n string) bool { return !strings.HasSuffix(n, "_test.go") }
	switch lang {
	case "go":
		mod, err := fs.ReadFile(wasmkeep.SDKs, "go.mod")
		if err != nil {
			return nil, err
		}
		// A module's go line may not be older than its dependencies'.
		goLine := string(regexp.MustCompile(`(?m)^go \S+$`).Find(mod))
		files["go.mod"] = []byte("module " + modulePath(name) + "\n\n" + goLine + "\n\nrequire github.com/wasmkeep/wasmkeep v0.0.0\n\n" +
			"// The SDK travels with the project: wasmkeep init wrote it here.\nreplace github.com/wasmkeep/wasmkeep => ./" + sdkDir + "\n")
		files[sdkDir+"/go.mod"] = []byte("module github.com/wasmkeep/wasmkeep\n\n" + goLine + "\n")
		if err := copyDir("abi", sdkDir+"/abi", notTest); err != nil {
			return nil, err
		}
		if err := copyDir("guest-sdk/go", sdkDir+"/guest-sdk/go", notTest); err != nil {
			return nil, err
		}
		files["main.go"] = []byte(goRoomSource)
		files["README.md"] = []byte(strings.ReplaceAll(goReadme, "NAME", name))
	case "as":
		if err := copyDir("guest-sdk/assemblyscript", sdkDir, func(string) bool { return true }); err != nil {
			return nil, err
		}
		for _, d := range []string{"assembly", "lib"} {
			if err := copyDir("guest-sdk/assemblyscript/"+d, sdkDir+"/"+d, func(string) bool { return true }); err != nil {
				return nil, err
			}
		}
		files["package.json"] = []byte(`{
  "name": "` + modulePath(name) + `",
  "private": true,
  "type": "module",
  "dependencies": {
    "assemblyscript": "0.28.20",
    "wasmkeep-assemblyscript": "file:` + sdkDir + `"
  }
}
`)
		files["assembly/index.ts"] = []byte(asRoomSource)
		files["README.md"] = []byte(strings.ReplaceAll(asReadme, "NAME", name))
	case "ts":
		return nil, errors.New("TypeScript rooms are not in this version yet: use --lang go or --lang as")
	default:
		return nil, fmt.Errorf("--lang %q: want go or as", lang)
	}
	return files, nil
}

// modulePath makes a module or package name of a directory's name.
func modulePath(name string) string {
	s := strings.Trim(regexp.MustCompile(`[^a-z0-9._-]+`).ReplaceAllString(strings.ToLower(name), "-"), "-.")
	if s == "" {
		return "room"
	}
	return s
}

// writeProject writes files into dir, which must not exist or be empty.
func writeProject(dir string, files map[string][]byte) error {
	if entries, err := os.ReadDir(dir); err == nil && len(entries) > 0 {
		return fmt.Errorf("%s is not empty: init writes a new project into an empty or new directory", dir)
	} else if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	for name, body := range files {
		p := filepath.Join(dir, filepath.FromSlash(name))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			return err
		}
		if err := os.WriteFile(p, body, 0o644); err != nil {
			return err
		}
	}
	return nil
}

const goRoomSource = `// A room: each room (/actor/CLASS/NAME) runs this code with state of its
// own, kept across hibernation. HTTP: GET reads the count, POST adds one.
// WebSocket: every text message goes to everyone in the room.
package main

import (
	"strconv"

	wk "github.com/wasmkeep/wasmkeep/guest-sdk/go"
)

var count int // plain Go state: it survives hibernation

func init() {
	wk.HandleRequest(func(r *wk.Request) *wk.Response {
		if r.Method == "POST" {
			count++
		}
		return wk.Text(200, wk.Room().Name+": "+strconv.Itoa(count))
	})
	wk.HandleSocketMessage(func(s wk.Socket, m wk.Message) {
		if m.IsText() {
			wk.Broadcast(m.Text(), 0)
		}
	})
}

func main() {} // required by the compiler; never runs
`

const asRoomSource = `// A room: each room (/actor/CLASS/NAME) runs this code with state of its
// own, kept across hibernation. HTTP: GET reads the count, POST adds one.
// WebSocket: every text message goes to everyone in the room.
import * as wk from "wasmkeep-assemblyscript";
export * from "wasmkeep-assemblyscript/exports";

let count = 0;

wk.handleRequest((r: wk.Request): wk.Response | null => {
  if (r.method == "POST") count++;
  return wk.text(200, wk.room().name + ": " + count.toString());
});

wk.handleSocketMessage((s: wk.Socket, m: wk.Message): void => {
  if (m.isText()) wk.broadcast(m.text(), null);
});
`

const goReadme = "# NAME\n\nA wasmkeep room in Go. Run it on a local node that rebuilds and uploads it on every save:\n\n" +
	"```sh\nwasmkeep dev .\n```\n\nand open the room's URL it prints (`GET` reads the count, `POST` adds one; a WebSocket to the same URL is a chat).\n\n" +
	"Build it yourself, and upload it to a node:\n\n```sh\nGOOS=wasip1 GOARCH=wasm go build -buildmode=c-shared -o room.wasm .\nwasmkeep class put NAME room.wasm\n```\n\n" +
	"`" + sdkDir + "/` is the Go SDK (`github.com/wasmkeep/wasmkeep/guest-sdk/go`), written by `wasmkeep init`; `go.mod` points at it. Its documentation is its doc comments (`go doc ./" + sdkDir + "/guest-sdk/go`).\n"

const asReadme = "# NAME\n\nA wasmkeep room in AssemblyScript. Install the compiler once, then run it on a local node that rebuilds and uploads it on every save:\n\n" +
	"```sh\nnpm install\nwasmkeep dev .\n```\n\nand open the room's URL it prints (`GET` reads the count, `POST` adds one; a WebSocket to the same URL is a chat).\n\n" +
	"`" + sdkDir + "/` is the AssemblyScript SDK, written by `wasmkeep init`; `package.json` installs it from there. Its README says what it offers.\n"
