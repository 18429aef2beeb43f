package wasmbuild

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestBuildTo(t *testing.T) {
	dir := t.TempDir()
	out := filepath.Join(dir, "counter.wasm")
	if err := BuildTo("./examples/counter", out); err != nil {
		t.Fatal(err)
	}
	got, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	want, err := Build("./examples/counter")
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		t.Error("BuildTo and Build differ")
	}
	err = BuildTo("./examples/nonexistent", filepath.Join(dir, "x.wasm"))
	if err == nil || !strings.Contains(err.Error(), "nonexistent") {
		t.Errorf("building a missing package: %v", err)
	}
	entries, _ := os.ReadDir(dir)
	if len(entries) != 1 {
		t.Errorf("left behind: %v", entries)
	}
}

func TestFilterFlags(t *testing.T) {
	for in, want := range map[string]string{
		"":      "-buildvcs=false",
		"-race": "-buildvcs=false",
		"-mod=mod -race -tags=x --cover -buildvcs=true": "-buildvcs=false -mod=mod -tags=x",
		"-covermode=atomic -coverpkg=./... -asan":       "-buildvcs=false",
	} {
		if got := filterFlags(in); got != want {
			t.Errorf("filterFlags(%q) = %q, want %q", in, got, want)
		}
	}
}

// TestBuildIn: a package built from its directory is the one built by
// path from the module root, and a directory with no package fails.
func TestBuildIn(t *testing.T) {
	root, err := ModuleRoot()
	if err != nil {
		t.Fatal(err)
	}
	got, err := BuildIn(filepath.Join(root, "examples", "counter"))
	if err != nil {
		t.Fatal(err)
	}
	want, err := Build("./examples/counter")
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		t.Error("BuildIn and Build differ")
	}
	if _, err := BuildIn(t.TempDir()); err == nil || !strings.Contains(err.Error(), "go build .") {
		t.Errorf("building an empty directory: %v", err)
	}
}
