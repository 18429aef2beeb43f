// Package archtest holds the test that keeps the architecture's layering
// rules (docs/architecture.md): which package may import what.
package archtest

import (
	"encoding/json"
	"io"
	"os/exec"
	"strings"
	"testing"
)

const module = "github.com/wasmkeep/wasmkeep"

type pkg struct {
	ImportPath string
	Imports    []string
}

// listPackages runs go list over the module (non-test imports only) for
// the host platform and for wasip1, where the guest SDK's imports live.
func listPackages(t *testing.T) map[string][]string {
	t.Helper()
	out := map[string][]string{}
	for _, env := range [][]string{nil, {"GOOS=wasip1", "GOARCH=wasm"}} {
		cmd := exec.Command("go", "list", "-json=ImportPath,Imports", module+"/...")
		cmd.Env = append(cmd.Environ(), env...)
		stdout, err := cmd.StdoutPipe()
		if err != nil {
			t.Fatal(err)
		}
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		dec := json.NewDecoder(stdout)
		for {
			var p pkg
			if err := dec.Decode(&p); err == io.EOF {
				break
			} else if err != nil {
				t.Fatal(err)
			}
			out[p.ImportPath] = append(out[p.ImportPath], p.Imports...)
		}
		if err := cmd.Wait(); err != nil {
			t.Fatalf("go list: %v", err)
		}
	}
	return out
}

func within(path, root string) bool {
	return path == module+"/"+root || strings.HasPrefix(path, module+"/"+root+"/")
}

func isStd(path string) bool { return !strings.Contains(strings.Split(path, "/")[0], ".") }

// rule says whether package p may import imp; "" means yes.
func rule(p, imp string) string {
	switch {
	case strings.HasPrefix(imp, "github.com/tetratelabs/wazero") && !within(p, "host/engine"):
		return "only host/engine imports wazero"
	case strings.HasPrefix(imp, "github.com/gobwas/") && !within(p, "host/socket") && !within(p, "internal/wstest") && !within(p, "internal/loadgen"):
		return "only host/socket imports gobwas/ws (internal/wstest is the tests' client, internal/loadgen the load generator and its plain reference servers)"
	case strings.HasPrefix(imp, "github.com/aws/") && !within(p, "host/store/s3") && !within(p, "internal/s3test"):
		return "only the S3 backend imports the AWS SDK (and internal/s3test, the tests' S3 server, to create their buckets)"
	case within(p, "abi") && !isStd(imp):
		return "abi imports the standard library only"
	case within(p, "host/phoenix") && !isStd(imp):
		return "the Phoenix protocol core is pure: standard library only"
	case within(p, "guest-sdk") && !isStd(imp) && !within(imp, "abi"):
		return "the guest SDK imports abi and the standard library only"
	case within(p, "host") && within(imp, "cluster"):
		return "host does not import cluster (cmd/wasmkeep wires them)"
	case within(p, "cluster") && within(imp, "host") && !within(imp, "host/store"):
		return "cluster imports only host/store of host"
	case within(p, "internal/limits") && !isStd(imp):
		return "internal/limits is a leaf every Config imports: standard library only"
	case within(p, "host/store") && strings.HasPrefix(imp, module+"/") && !within(imp, "host/store"):
		return "the store is a leaf: it imports no other package of the module"
	case (within(imp, "internal/testwasm") || within(imp, "internal/wstest") || within(imp, "internal/memtest") || within(imp, "internal/testenv") || within(imp, "internal/s3test") || within(imp, "internal/testhttp")) && !within(p, "internal"):
		return "test helpers are for tests only"
	}
	return ""
}

func TestLayering(t *testing.T) {
	pkgs := listPackages(t)
	if len(pkgs) < 10 {
		t.Fatalf("go list found only %d packages", len(pkgs))
	}
	for p, imports := range pkgs {
		for _, imp := range imports {
			if why := rule(p, imp); why != "" {
				t.Errorf("%s imports %s: %s", p, imp, why)
			}
		}
	}
}

// TestRulesCatchViolations makes sure the rules are not vacuous.
func TestRulesCatchViolations(t *testing.T) {
	bad := [][2]string{
		{module + "/host/rooms", "github.com/tetratelabs/wazero"},
		{module + "/host/server", "github.com/gobwas/ws"},
		{module + "/abi", "github.com/klauspost/compress/zstd"},
		{module + "/host/phoenix", "github.com/gobwas/ws"},
		{module + "/guest-sdk/go", module + "/host/engine"},
		{module + "/host/rooms", module + "/cluster"},
		{module + "/cluster", module + "/host/rooms"},
		{module + "/host/store", module + "/host/engine"},
		{module + "/host/node", module + "/internal/testwasm"},
		{module + "/internal/limits", module + "/host/store"},
		{module + "/host/store", "github.com/aws/aws-sdk-go-v2/service/s3"},
		{module + "/host/store/s3", module + "/internal/s3test"},
	}
	for _, b := range bad {
		if rule(b[0], b[1]) == "" {
			t.Errorf("%s importing %s was allowed", b[0], b[1])
		}
	}
	if why := rule(module+"/internal/loadgen", "github.com/gobwas/ws"); why != "" {
		t.Errorf("the load generator importing gobwas/ws refused: %s", why)
	}
	if why := rule(module+"/host/store", module+"/host/store/storetest"); why != "" {
		t.Errorf("store importing its own subpackage refused: %s", why)
	}
}
