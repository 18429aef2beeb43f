package testwasm

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
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
// remembered for the life of the process, and on disk across processes
// and runs (see ascCached).
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
	r.once.Do(func() { r.wasm, r.err = ascCached(node, dir, entry, args) })
	if r.err != nil {
		tb.Fatalf("testwasm: %v", r.err)
	}
	return bytes.Clone(r.wasm)
}

// ascCached is asc through a cache on disk, next to CompileCacheDir's:
// node starting the compiler takes seconds (more under a loaded -race
// run), and every test process of host/node, host/engine and clusternode
// compiled the same few entries again. An entry is keyed by the hash of
// every file of the SDK's directory outside node_modules (its sources,
// asconfig.json and the lock file, which pins the compiler's version),
// the entry and the arguments, so a change to any of them compiles
// afresh; entries are written to a temporary file renamed into place.
// An entry outside the SDK's directory is not cached.
func ascCached(node, dir, entry string, args []string) ([]byte, error) {
	if !filepath.IsLocal(entry) {
		return asc(node, dir, entry, args)
	}
	key, err := ascKey(dir, entry, args)
	if err != nil {
		return nil, err
	}
	cacheDir, err := compileCacheDir()
	if err != nil {
		return nil, err
	}
	path := filepath.Join(filepath.Dir(cacheDir), "asc", key+".wasm")
	if b, err := os.ReadFile(path); err == nil {
		return b, nil
	}
	b, err := asc(node, dir, entry, args)
	if err != nil {
		return nil, err
	}
	if err := writeFileAtomic(path, b); err != nil {
		return nil, err
	}
	return b, nil
}

// ascKey hashes what an asc compile of entry in dir reads.
func ascKey(dir, entry string, args []string) (string, error) {
	h := sha256.New()
	fmt.Fprintf(h, "asc-cache-1\x00%s\x00%s\x00", entry, strings.Join(args, "\x00"))
	err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if path != dir && (d.Name() == "node_modules" || strings.HasPrefix(d.Name(), ".")) {
				return filepath.SkipDir
			}
			return nil
		}
		rel, err := filepath.Rel(dir, path)
		if err != nil {
			return err
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		fmt.Fprintf(h, "%s\x00%d\x00", rel, len(b))
		h.Write(b)
		return nil
	})
	if err != nil {
		return "", err
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}

// writeFileAtomic writes b to path through a temporary file in its
// directory, so that a reader never sees part of it.
func writeFileAtomic(path string, b []byte) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	f, err := os.CreateTemp(filepath.Dir(path), ".tmp-")
	if err != nil {
		return err
	}
	defer os.Remove(f.Name())
	if _, err := f.Write(b); err != nil {
		f.Close()
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	return os.Rename(f.Name(), path)
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
