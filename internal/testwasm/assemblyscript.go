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

	"github.com/wasmkeep/wasmkeep/internal/testenv"
)

// ASDir is the AssemblyScript SDK's directory, relative to the module root.
const ASDir = "guest-sdk/assemblyscript"

// AssemblyScript returns the module the npm AssemblyScript compiler (asc,
// the version pinned in the SDK's package.json) builds from entry, a path
// relative to the SDK's directory such as "examples/chat/index.ts", with
// the SDK's asconfig.json and any extra asc arguments. Results are
// remembered for the life of the process.
//
// Without node it skips tb (fails it under CI); the SDK's packages come
// from its lock file (testenv.NPMPackages).
func AssemblyScript(tb testing.TB, entry string, args ...string) []byte {
	tb.Helper()
	node := testenv.Tool(tb, "node")
	dir := testenv.NPMPackages(tb, ASDir, "assemblyscript/bin/asc.js")
	key := "asc\x00" + dir + "\x00" + entry + "\x00" + strings.Join(args, "\x00")
	mu.Lock()
	r := results[key]
	if r == nil {
		r = &result{}
		results[key] = r
	}
	mu.Unlock()
	r.once.Do(func() { r.wasm, r.err = asc(node, dir, entry, args) })
	if r.err != nil {
		tb.Fatalf("testwasm: %v", r.err)
	}
	return bytes.Clone(r.wasm)
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
