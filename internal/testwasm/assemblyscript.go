package testwasm

import (
	"bytes"
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/wasmkeep/wasmkeep/internal/wasmbuild"
)

// ASDir is the AssemblyScript SDK's directory, relative to the module root.
const ASDir = "guest-sdk/assemblyscript"

// AssemblyScript returns the module the npm AssemblyScript compiler (asc,
// the version pinned in the SDK's package.json) builds from entry, a path
// relative to the SDK's directory such as "examples/chat/index.ts", with
// the SDK's asconfig.json and any extra asc arguments. Results are
// remembered for the life of the process.
//
// It skips tb when node is not installed. When the SDK's node_modules is
// missing it installs it from the lock file first (CI does that in
// .ci/run), into a fresh directory that is then renamed into place, so
// that test binaries running at once never share a half-done install.
func AssemblyScript(tb testing.TB, entry string, args ...string) []byte {
	tb.Helper()
	node, err := exec.LookPath("node")
	if err != nil {
		if os.Getenv("CI") != "" {
			tb.Fatal("node is not installed; .ci/run needs it")
		}
		tb.Skip("node is not installed; CI installs it")
	}
	root, err := wasmbuild.ModuleRoot()
	if err != nil {
		tb.Fatal(err)
	}
	dir := filepath.Join(root, ASDir)
	key := "asc\x00" + dir + "\x00" + entry + "\x00" + strings.Join(args, "\x00")
	mu.Lock()
	r := results[key]
	if r == nil {
		r = &result{}
		results[key] = r
	}
	mu.Unlock()
	r.once.Do(func() {
		if r.err = npmCI(dir); r.err == nil {
			r.wasm, r.err = asc(node, dir, entry, args)
		}
	})
	if r.err != nil {
		tb.Fatalf("testwasm: %v", r.err)
	}
	return bytes.Clone(r.wasm)
}

// npmCI installs the SDK's packages from its lock file if they are missing.
func npmCI(dir string) error {
	if _, err := os.Stat(filepath.Join(dir, "node_modules", "assemblyscript", "bin", "asc.js")); err == nil {
		return nil
	}
	npm, err := exec.LookPath("npm")
	if err != nil {
		return errors.New("npm is not installed, and " + dir + "/node_modules is missing")
	}
	tmp, err := os.MkdirTemp(dir, ".npm-ci-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(tmp)
	for _, f := range []string{"package.json", "package-lock.json"} {
		b, err := os.ReadFile(filepath.Join(dir, f))
		if err != nil {
			return err
		}
		if err := os.WriteFile(filepath.Join(tmp, f), b, 0o644); err != nil {
			return err
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, npm, "ci", "--no-audit", "--no-fund")
	cmd.Dir = tmp
	if out, err := cmd.CombinedOutput(); err != nil {
		return errors.New("npm ci in " + dir + ": " + err.Error() + "\n" + string(out))
	}
	// Another process may have won the race: its install is as good.
	if err := os.Rename(filepath.Join(tmp, "node_modules"), filepath.Join(dir, "node_modules")); err != nil {
		if _, serr := os.Stat(filepath.Join(dir, "node_modules", "assemblyscript")); serr != nil {
			return err
		}
	}
	return nil
}

// asc compiles entry in the SDK's directory.
func asc(node, dir, entry string, args []string) ([]byte, error) {
	tmp, err := os.MkdirTemp("", "wasmkeep-asc-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(tmp)
	out := filepath.Join(tmp, "out.wasm")
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	argv := append([]string{filepath.Join("node_modules", "assemblyscript", "bin", "asc.js"), entry,
		"--config", "asconfig.json", "--target", "release", "--outFile", out}, args...)
	cmd := exec.CommandContext(ctx, node, argv...)
	cmd.Dir = dir
	if b, err := cmd.CombinedOutput(); err != nil {
		return nil, errors.New("asc " + entry + ": " + err.Error() + "\n" + string(b))
	}
	return os.ReadFile(out)
}
