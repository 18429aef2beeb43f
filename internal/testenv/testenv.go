// Package testenv gives tests what they need of the machine besides Go:
// node and npm, npm packages installed from this repository's lock files,
// and chromium.
//
// Without one of them a test skips, saying what is missing, except under
// CI (the CI environment variable set, as .ci/run does): CI installs all
// of them, so there a missing one is a broken CI setup, and fails the
// test instead of silently testing less.
package testenv

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/wasmkeep/wasmkeep/internal/wasmbuild"
)

// CI reports whether the tests run under CI, which installs every tool
// they need.
func CI() bool { return os.Getenv("CI") != "" }

// Missing ends tb because a tool is not there: a skip that says why, or
// under CI a failure.
func Missing(tb testing.TB, why string) {
	tb.Helper()
	if CI() {
		tb.Fatal(why + "; .ci/run installs it, so under CI=1 this fails")
	}
	tb.Skip(why + "; CI installs it (.ci/run), and fails without it")
}

// Tool returns the path of the executable name on PATH, or calls Missing.
func Tool(tb testing.TB, name string) string {
	tb.Helper()
	path, err := exec.LookPath(name)
	if err != nil {
		Missing(tb, name+" is not installed (not on PATH)")
	}
	return path
}

// Chromium returns the browser's path: $CHROMIUM, or Debian's
// /usr/bin/chromium. Without it, it calls Missing.
func Chromium(tb testing.TB) string {
	tb.Helper()
	browser := os.Getenv("CHROMIUM")
	if browser == "" {
		browser = "/usr/bin/chromium"
	}
	if _, err := os.Stat(browser); err != nil {
		Missing(tb, "chromium is not installed at "+browser+" (apt-get install chromium, or set CHROMIUM)")
	}
	return browser
}

type install struct {
	once sync.Once
	err  error
}

var (
	installsMu sync.Mutex
	installs   = map[string]*install{} // by absolute directory
)

// NPMPackages returns the absolute path of dir, a directory of this
// repository with a package-lock.json (such as "test/phoenix"), once its
// packages are installed: probe, a path under its node_modules ("phoenix"),
// must exist. Under CI a missing install fails tb (.ci/run runs npm ci
// there); elsewhere it is done now from the lock file, with npm ci in a
// fresh directory renamed into place, so that test processes running at
// once never share a half-done install. Without npm it calls Missing.
func NPMPackages(tb testing.TB, dir, probe string) string {
	tb.Helper()
	root, err := wasmbuild.ModuleRoot()
	if err != nil {
		tb.Fatal(err)
	}
	abs := filepath.Join(root, dir)
	want := filepath.Join(abs, "node_modules", probe)
	if _, err := os.Stat(want); err == nil {
		return abs
	}
	if CI() {
		tb.Fatalf("%s is missing: .ci/run installs it (npm ci in %s), so under CI=1 this fails", filepath.Join(dir, "node_modules", probe), dir)
	}
	npm := Tool(tb, "npm")
	installsMu.Lock()
	in := installs[abs]
	if in == nil {
		in = &install{}
		installs[abs] = in
	}
	installsMu.Unlock()
	in.once.Do(func() { in.err = npmCI(npm, abs, want) })
	if in.err != nil {
		tb.Fatalf("testenv: %v", in.err)
	}
	return abs
}

// npmCI installs dir's packages from its lock file, unless another
// process has meanwhile (want exists).
func npmCI(npm, dir, want string) error {
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
	cmd.Env = append(os.Environ(), "npm_config_update_notifier=false")
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("npm ci in %s: %w\n%s", dir, err, out)
	}
	// Another process may have won the race: its install is as good.
	if err := os.Rename(filepath.Join(tmp, "node_modules"), filepath.Join(dir, "node_modules")); err != nil {
		if _, serr := os.Stat(want); serr != nil {
			return errors.Join(err, serr)
		}
	}
	return nil
}
