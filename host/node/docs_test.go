package node

import (
	"bytes"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/wasmkeep/wasmkeep/host/store"
)

// TestMetricsDocumented checks that docs/metrics.md names every wasmkeep_*
// metric a node exports, and nothing it does not.
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
	// A cluster member exports the cluster's metrics besides: a room
	// acquired, forwarded to, and released.
	cn := startNode(t, Config{Bucket: store.NewMem(), Cluster: testCluster("n1")})
	putClass(t, cn, "counter", "./examples/counter")
	expect(t, 200, "POST", cn.URL()+"/actor/counter/c", nil)
	hibernate(t, cn, "counter", "c")
	var buf bytes.Buffer
	n.Metrics.WritePrometheus(&buf)
	cn.Metrics.WritePrometheus(&buf)
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
	doc, err := os.ReadFile(filepath.Join("..", "..", "docs", "metrics.md"))
	if err != nil {
		t.Fatal(err)
	}
	documented := map[string]bool{}
	// "`wasmkeep_x_in_total` / `_out_total`" documents two names.
	re := regexp.MustCompile("`(wasmkeep_[a-z_]+)(?:\\{[a-z,]+\\})?`(?: / `(_[a-z_]+)`)?")
	for _, m := range re.FindAllStringSubmatch(string(doc), -1) {
		documented[m[1]] = true
		if m[2] != "" {
			stem := m[1][:strings.LastIndex(strings.TrimSuffix(m[1], "_total"), "_")]
			documented[stem+m[2]] = true
		}
	}
	if len(exported) < 20 {
		t.Fatalf("only %d wasmkeep_ metrics exported", len(exported))
	}
	for name := range exported {
		if !documented[name] {
			t.Errorf("metric %s is not in docs/metrics.md", name)
		}
	}
	for name := range documented {
		if !exported[name] {
			t.Errorf("docs/metrics.md lists %s, which the node does not export", name)
		}
	}
}
