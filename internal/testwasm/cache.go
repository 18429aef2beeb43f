package testwasm

import (
	"bufio"
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"github.com/wasmkeep/wasmkeep/internal/wasmbuild"
)

// CompileCacheDir returns a wazero compilation cache directory
// (engine.Config.CacheDir) that every test process of this user shares,
// across packages and runs: os.UserCacheDir()/wasmkeep-test/wazero, or one
// under os.TempDir() where there is no user cache directory.
//
// Under -race, wazero compiles a Go guest for 4–5 s (its compiler is race-
// instrumented too), and the engine, node and CLI tests compile the same
// few guests hundreds of times; from the cache a compile takes a fraction
// of that. Sharing is safe: wazero keys an entry by the module's hash, its
// own version, the CPU's features and whether the code checks for
// interruption, and writes it to a temporary file renamed into place, so
// concurrent test processes never read half an entry. A test of the
// compile path itself, or of the cache, gives its engine a directory of
// its own.
func CompileCacheDir(tb testing.TB) string {
	tb.Helper()
	dir, err := compileCacheDir()
	if err != nil {
		tb.Fatalf("testwasm: compilation cache: %v", err)
	}
	return dir
}

func compileCacheDir() (string, error) {
	base, err := os.UserCacheDir()
	if err != nil {
		base = os.TempDir()
	}
	version, err := wazeroVersion()
	if err != nil {
		return "", err
	}
	dir := filepath.Join(base, "wasmkeep-test", "wazero-"+version)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", err
	}
	return dir, nil
}

// wazeroVersion is the version of wazero this module's go.mod requires.
func wazeroVersion() (string, error) {
	root, err := wasmbuild.ModuleRoot()
	if err != nil {
		return "", err
	}
	b, err := os.ReadFile(filepath.Join(root, "go.mod"))
	if err != nil {
		return "", err
	}
	for sc := bufio.NewScanner(bytes.NewReader(b)); sc.Scan(); {
		f := strings.Fields(strings.TrimPrefix(strings.TrimSpace(sc.Text()), "require "))
		if len(f) >= 2 && f[0] == "github.com/tetratelabs/wazero" {
			return f[1], nil
		}
	}
	return "", errors.New("go.mod requires no github.com/tetratelabs/wazero")
}

// LinkCompileCache makes dir (a node's <data>/cache) a directory whose
// compiled code is CompileCacheDir's: each subdirectory an engine keeps
// machine code in (wazero's, one per version, and the engine's own for
// code with interruption checks) is a symbolic link into the shared
// cache. Whatever else the node keeps there, such as its memory images,
// stays its own: nodes of different tests must not share those.
func LinkCompileCache(tb testing.TB, dir string) {
	tb.Helper()
	shared := CompileCacheDir(tb)
	version, err := wazeroVersion()
	if err != nil {
		tb.Fatal(err)
	}
	var subdirs []string
	for _, v := range []string{version, "dev"} {
		// wazero's own name for its cache directory (cache.go, v1.12).
		wz := "wazero-" + v + "-" + runtime.GOARCH + "-" + runtime.GOOS
		subdirs = append(subdirs, wz, filepath.Join("close-on-context-done", wz))
	}
	if err := os.MkdirAll(filepath.Join(dir, "close-on-context-done"), 0o755); err != nil {
		tb.Fatal(err)
	}
	for _, sub := range subdirs {
		target := filepath.Join(shared, sub)
		if err := os.MkdirAll(target, 0o700); err != nil {
			tb.Fatal(err)
		}
		if err := os.Symlink(target, filepath.Join(dir, sub)); err != nil {
			tb.Fatal(err)
		}
	}
}
