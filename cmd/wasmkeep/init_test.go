package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestInitRefuses: wasmkeep init says what is wrong with its arguments,
// and writes nothing over a directory that holds files. (That a project
// it writes builds and runs outside the repository, in Go and in
// AssemblyScript, TestDocCommands shows with getting-started.md's
// commands.)
func TestInitRefuses(t *testing.T) {
	t.Parallel()
	full := t.TempDir()
	if err := os.WriteFile(filepath.Join(full, "main.go"), []byte("package main\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		args []string
		code int
		want string
	}{
		{[]string{"init", filepath.Join(t.TempDir(), "x")}, 2, "--lang is required: go or as"},
		{[]string{"init", "--lang", "ts", filepath.Join(t.TempDir(), "x")}, 2, "TypeScript rooms are not in this version yet"},
		{[]string{"init", "--lang", "rust", filepath.Join(t.TempDir(), "x")}, 2, `--lang "rust": want go or as`},
		{[]string{"init", "--lang", "go"}, 2, "usage: wasmkeep init --lang go|as DIR"},
		{[]string{"init", "--lang", "go", full}, 1, "is not empty"},
	} {
		r := wk(t, nil, c.args...)
		if r.code != c.code || !strings.Contains(r.stderr+r.stdout, c.want) {
			t.Errorf("wasmkeep %s: %v, want exit %d and %q", strings.Join(c.args, " "), r, c.code, c.want)
		}
	}
	if b, err := os.ReadFile(filepath.Join(full, "main.go")); err != nil || string(b) != "package main\n" {
		t.Fatalf("init wrote over a project: %q, %v", b, err)
	}
	entries, _ := os.ReadDir(full)
	if len(entries) != 1 {
		t.Fatalf("init left %d entries in a directory it refused", len(entries))
	}
}
