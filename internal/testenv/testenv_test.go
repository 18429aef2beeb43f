package testenv_test

import (
	"fmt"
	"runtime"
	"strings"
	"testing"

	"github.com/wasmkeep/wasmkeep/internal/testenv"
)

// recorder is a testing.TB that notes a failure or a skip and ends the
// goroutine, as testing's do, without ending the test.
type recorder struct {
	testing.TB
	failed, skipped string
}

func (r *recorder) Helper()                           {}
func (r *recorder) Fatal(args ...any)                 { r.failed = fmt.Sprint(args...); runtime.Goexit() }
func (r *recorder) Fatalf(format string, args ...any) { r.Fatal(fmt.Sprintf(format, args...)) }
func (r *recorder) Skip(args ...any)                  { r.skipped = fmt.Sprint(args...); runtime.Goexit() }

// record runs call with a recorder.
func record(t *testing.T, call func(testing.TB)) *recorder {
	r := &recorder{TB: t}
	done := make(chan struct{})
	go func() {
		defer close(done)
		call(r)
	}()
	<-done
	return r
}

// TestMissingFailsUnderCI: a missing tool or package skips, saying what
// is missing, except under CI, where it fails.
func TestMissingFailsUnderCI(t *testing.T) {
	for _, ci := range []string{"", "1"} {
		t.Setenv("CI", ci)
		cases := map[string]func(testing.TB){
			"Missing": func(tb testing.TB) { testenv.Missing(tb, "frob is not installed") },
			"Tool":    func(tb testing.TB) { testenv.Tool(tb, "wasmkeep-no-such-tool") },
		}
		if ci != "" { // elsewhere it would install test/phoenix's packages
			cases["NPMPackages"] = func(tb testing.TB) { testenv.NPMPackages(tb, "test/phoenix", "wasmkeep-no-such-package") }
		}
		for what, call := range cases {
			r := record(t, call)
			want, got, other := "skip", r.skipped, r.failed
			if ci != "" {
				want, got, other = "failure", r.failed, r.skipped
			}
			if got == "" || other != "" || !strings.Contains(got, ".ci/run") {
				t.Errorf("CI=%q, %s: failed %q, skipped %q; want a %s saying .ci/run installs it", ci, what, r.failed, r.skipped, want)
			}
		}
	}
}
