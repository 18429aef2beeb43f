package node

import (
	"bytes"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// TestMetricsDocumented checks that docs/metrics.md names every wasmkeep_*
// metric a node exports, and nothing it does not. Its Cluster section is
// a cluster member's: TestForwardMetricsDocumented checks it.
func TestMetricsDocumented(t *testing.T) {
	n := startNode(t, Config{})
	// Histograms appear once they have a sample: wake and hibernate a room.
	putClass(t, n, "counter", "./examples/counter")
	expect(t, 200, "POST", n.URL()+"/actor/counter/c", nil)
	hibernate(t, n, "counter", "c")
	expect(t, 200, "POST", n.URL()+"/actor/counter/c", nil)
	putClass(t, n, "echo", "./testdata/guests/echo")
	if got := expect(t, 200, "POST", n.URL()+"/actor/echo/e/checkpoint", nil); got != "ok" {
		t.Fatalf("checkpoint: %q", got)
	}
	// An alarm's delivery.
	putClass(t, n, "alarm", "./testdata/guests/alarm")
	expect(t, 200, "POST", n.URL()+"/actor/alarm/a/set?in=-1", nil)
	waitFor(t, "the alarm to fire", func() bool { return metric(t, n, "wasmkeep_alarms_fired_total") == 1 })
	// A fetch, refused (nothing is allowed), which times one.
	if got := expect(t, 200, "POST", n.URL()+"/actor/echo/e/fetch?n=2", []byte("http://127.0.0.1:1/")); !strings.Contains(got, "--fetch-allow") {
		t.Fatalf("fetch: %q", got)
	}
	// And a front's request.
	putFront(t, n, "web", frontGuest, "/app")
	expect(t, 200, "GET", n.URL()+"/app", nil)
	exported := exportedMetrics(n)
	if len(exported) < 20 {
		t.Fatalf("only %d wasmkeep_ metrics exported", len(exported))
	}
	checkDocumented(t, exported, documentedMetrics(t), func(section string) bool { return section != clusterSection })
}

// clusterSection is the heading of docs/metrics.md's section of the
// metrics only a cluster member exports.
const clusterSection = "Cluster"

// exportedMetrics are the names of the wasmkeep_* metrics n exports.
func exportedMetrics(n *Node) map[string]bool {
	var buf bytes.Buffer
	n.Metrics.WritePrometheus(&buf)
	exported := map[string]bool{}
	for _, line := range strings.Split(buf.String(), "\n") {
		name, _, _ := strings.Cut(line, " ")
		name, _, _ = strings.Cut(name, "{")
		if !strings.HasPrefix(name, "wasmkeep_") {
			continue
		}
		// Histograms appear as _bucket/_sum/_count samples.
		for _, suffix := range []string{"_bucket", "_sum", "_count"} {
			if base, ok := strings.CutSuffix(name, suffix); ok && strings.HasSuffix(base, "_seconds") {
				name = base
			}
		}
		exported[name] = true
	}
	return exported
}

// documentedMetrics are the metric names docs/metrics.md lists, each with
// the heading of its section.
func documentedMetrics(t *testing.T) map[string]string {
	t.Helper()
	doc, err := os.ReadFile(filepath.Join("..", "..", "docs", "metrics.md"))
	if err != nil {
		t.Fatal(err)
	}
	documented := map[string]string{}
	// "`wasmkeep_x_in_total` / `_out_total`" documents two names.
	re := regexp.MustCompile("`(wasmkeep_[a-z_]+)(?:\\{[a-z,]+\\})?`(?: / `(_[a-z_]+)`)?")
	section := ""
	for _, line := range strings.Split(string(doc), "\n") {
		if h, ok := strings.CutPrefix(line, "## "); ok {
			section = strings.TrimSpace(h)
		}
		for _, m := range re.FindAllStringSubmatch(line, -1) {
			documented[m[1]] = section
			if m[2] != "" {
				stem := m[1][:strings.LastIndex(strings.TrimSuffix(m[1], "_total"), "_")]
				documented[stem+m[2]] = section
			}
		}
	}
	return documented
}

// checkDocumented fails t unless exported and the documented names of
// the sections in scope are the same.
func checkDocumented(t *testing.T, exported map[string]bool, documented map[string]string, inScope func(section string) bool) {
	t.Helper()
	for name := range exported {
		if _, ok := documented[name]; !ok {
			t.Errorf("metric %s is not in docs/metrics.md", name)
		}
	}
	for name, section := range documented {
		if inScope(section) && !exported[name] {
			t.Errorf("docs/metrics.md lists %s (section %s), which the node does not export", name, section)
		}
	}
}
