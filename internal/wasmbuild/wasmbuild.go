// Package wasmbuild builds Go packages of this module into WebAssembly
// modules (GOOS=wasip1 GOARCH=wasm, -buildmode=c-shared) with the local Go
// toolchain: the demo builds the examples with it, and tests build their
// fixtures through internal/testwasm.
//
// Every build runs the go command. Go's build cache makes that cheap once
// the standard library has been compiled for wasip1 (a rebuild of an
// unchanged guest takes 0.2–0.4 s, nearly all of it the link), so there is
// no cache of our own to keep correct, and every build writes to a fresh
// private path, so parallel builds never share an output file.
package wasmbuild

import (
	"bytes"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
)

// BuildTo builds pkg as a wasip1 reactor module and writes it to outPath,
// atomically (through a temporary file in outPath's directory). pkg is an
// import path ("github.com/wasmkeep/wasmkeep/examples/counter"), a path
// relative to the module root ("./examples/counter"), or an absolute
// directory; the module root is the nearest directory at or above the
// current one that holds a go.mod.
func BuildTo(pkg, outPath string) error {
	root, err := ModuleRoot()
	if err != nil {
		return err
	}
	tmp, err := os.MkdirTemp(filepath.Dir(outPath), ".wasmkeep-build-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(tmp)
	out := filepath.Join(tmp, "out.wasm")
	if err := goBuild(root, pkg, out); err != nil {
		return err
	}
	return os.Rename(out, outPath)
}

// Build returns the module built from pkg (as in BuildTo).
func Build(pkg string) ([]byte, error) {
	root, err := ModuleRoot()
	if err != nil {
		return nil, err
	}
	tmp, err := os.MkdirTemp("", "wasmkeep-build-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(tmp)
	out := filepath.Join(tmp, "out.wasm")
	if err := goBuild(root, pkg, out); err != nil {
		return nil, err
	}
	return os.ReadFile(out)
}

// BuildIn returns the module built from the Go package in the directory
// dir, in whichever module dir belongs to (its own go.mod, or one above
// it), as the go command finds it from there: `wasmkeep dev` builds a
// room of the user's own module with it. Errors carry the compiler's
// output, with file names relative to dir.
func BuildIn(dir string) ([]byte, error) {
	tmp, err := os.MkdirTemp("", "wasmkeep-build-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(tmp)
	out := filepath.Join(tmp, "out.wasm")
	if err := goBuild(dir, ".", out); err != nil {
		return nil, err
	}
	return os.ReadFile(out)
}

// ModuleRoot returns the nearest directory at or above the current
// directory that contains a go.mod file.
func ModuleRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for d := dir; ; {
		if fi, err := os.Stat(filepath.Join(d, "go.mod")); err == nil && !fi.IsDir() {
			return d, nil
		}
		parent := filepath.Dir(d)
		if parent == d {
			return "", errors.New("wasmbuild: no go.mod at or above " + dir)
		}
		d = parent
	}
}

// goBuild runs go build for pkg in the module at root, writing out.
func goBuild(root, pkg, out string) error {
	goCmd, err := exec.LookPath("go")
	if err != nil {
		return err
	}
	env, err := buildEnv(goCmd, root)
	if err != nil {
		return err
	}
	target := pkg
	if pkg == "." || pkg == ".." || strings.HasPrefix(pkg, "./") || strings.HasPrefix(pkg, "../") {
		target = "./" + filepath.ToSlash(filepath.Clean(pkg))
		if filepath.Clean(pkg) == "." {
			target = "."
		}
	}
	cmd := exec.Command(goCmd, "build", "-buildmode=c-shared", "-trimpath", "-buildvcs=false", "-o", out, target)
	cmd.Dir = root
	cmd.Env = env
	var stderr bytes.Buffer
	cmd.Stdout = &stderr
	cmd.Stderr = &stderr
	if err := cmd.Run(); err != nil {
		return errors.New("go build " + pkg + ": " + err.Error() + "\n" + strings.TrimSpace(stderr.String()))
	}
	return nil
}

var (
	goflagsOnce sync.Once
	goflags     string
	goflagsErr  error
)

// buildEnv is the current environment set for a wasip1 build: GOOS, GOARCH,
// CGO_ENABLED=0, and GOFLAGS (from the environment or the go env file)
// without the flags that make no sense for wasm, such as -race.
func buildEnv(goCmd, root string) ([]string, error) {
	goflagsOnce.Do(func() {
		cmd := exec.Command(goCmd, "env", "GOFLAGS")
		cmd.Dir = root
		out, err := cmd.Output()
		if err != nil {
			goflagsErr = errors.New("go env GOFLAGS: " + err.Error())
			return
		}
		goflags = filterFlags(strings.TrimSpace(string(out)))
	})
	if goflagsErr != nil {
		return nil, goflagsErr
	}
	env := make([]string, 0, len(os.Environ())+4)
	for _, kv := range os.Environ() {
		switch k, _, _ := strings.Cut(kv, "="); k {
		case "GOOS", "GOARCH", "CGO_ENABLED", "GOFLAGS":
		default:
			env = append(env, kv)
		}
	}
	return append(env, "GOOS=wasip1", "GOARCH=wasm", "CGO_ENABLED=0", "GOFLAGS="+goflags), nil
}

// filterFlags drops the GOFLAGS entries a wasip1 c-shared build cannot use,
// and always yields a non-empty value, so that it overrides GOFLAGS set in
// the go env file.
func filterFlags(flags string) string {
	keep := []string{"-buildvcs=false"}
	for _, f := range strings.Fields(flags) {
		name, _, _ := strings.Cut(strings.TrimLeft(f, "-"), "=")
		switch name {
		case "race", "msan", "asan", "cover", "covermode", "coverpkg", "buildmode", "linkshared", "buildvcs":
			continue
		}
		keep = append(keep, f)
	}
	return strings.Join(keep, " ")
}
