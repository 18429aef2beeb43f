// Package testwasm gives tests the WebAssembly modules of this module's Go
// packages (examples, test guests), built once per test process with
// internal/wasmbuild.
package testwasm

import (
	"bytes"
	"sync"
	"testing"

	"github.com/wasmkeep/wasmkeep/internal/wasmbuild"
)

// Build returns the wasm module built from pkg (as in BuildTo), failing tb
// if the build fails. Results are remembered for the life of the process;
// each call returns its own copy of the bytes.
func Build(tb testing.TB, pkg string) []byte {
	tb.Helper()
	b, err := build(pkg)
	if err != nil {
		tb.Fatalf("testwasm: %v", err)
	}
	return bytes.Clone(b)
}

type result struct {
	once sync.Once
	wasm []byte
	err  error
}

var (
	mu      sync.Mutex
	results = map[string]*result{} // by module root + "\x00" + pkg
)

func build(pkg string) ([]byte, error) {
	root, err := wasmbuild.ModuleRoot()
	if err != nil {
		return nil, err
	}
	mu.Lock()
	r := results[root+"\x00"+pkg]
	if r == nil {
		r = &result{}
		results[root+"\x00"+pkg] = r
	}
	mu.Unlock()
	r.once.Do(func() { r.wasm, r.err = wasmbuild.Build(pkg) })
	return r.wasm, r.err
}
