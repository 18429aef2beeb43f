package testwasm

import (
	"bytes"
	"context"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tetratelabs/wazero"
	"github.com/tetratelabs/wazero/api"

	"github.com/wasmkeep/wasmkeep/abi"
)

// compile parses wasm with wazero's interpreter (compiling is not the point).
func compile(t *testing.T, wasm []byte) wazero.CompiledModule {
	t.Helper()
	ctx := context.Background()
	r := wazero.NewRuntimeWithConfig(ctx, wazero.NewRuntimeConfigInterpreter())
	t.Cleanup(func() { r.Close(ctx) })
	cm, err := r.CompileModule(ctx, wasm)
	if err != nil {
		t.Fatalf("compile: %v", err)
	}
	return cm
}

func sig(params, results []api.ValueType) string {
	var b strings.Builder
	b.WriteByte('(')
	for i, p := range params {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString(api.ValueTypeName(p))
	}
	b.WriteString(")->(")
	for i, p := range results {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString(api.ValueTypeName(p))
	}
	b.WriteByte(')')
	return b.String()
}

// The v1 signatures, as abi.go documents them.
var (
	wantExports = map[string]string{
		abi.VersionExport:         "()->()",
		abi.ExportAlloc:           "(i32)->(i32)",
		abi.ExportOnRequest:       "(i32,i32)->()",
		abi.ExportOnSocketOpen:    "(i32,i32,i32)->()",
		abi.ExportOnSocketMessage: "(i32,i32,i32,i32)->()",
		abi.ExportOnSocketClose:   "(i32,i32,i32,i32)->()",
		abi.ExportOnUpgrade:       "()->()",
		abi.ExportOnStartFrom:     "(i32,i32)->()",
		abi.ExportOnIdle:          "()->()",
		abi.ExportOnCall:          "(i32,i32)->()",
		abi.ExportOnAlarm:         "(i32,i32)->()",
		abi.ExportInitialize:      "()->()",
	}
	wantImports = map[string]string{
		abi.ImportHTTPRespond:   "(i32,i32)->(i32)",
		abi.ImportHTTPHandOver:  "(i32,i32)->(i32)",
		abi.ImportSocketSend:    "(i32,i32,i32,i32)->(i32)",
		abi.ImportSocketClose:   "(i32,i32,i32,i32)->(i32)",
		abi.ImportSocketList:    "(i32,i32)->(i32)",
		abi.ImportBroadcast:     "(i32,i32,i32,i32)->(i32)",
		abi.ImportRoomInfo:      "(i32,i32)->(i32)",
		abi.ImportLog:           "(i32,i32,i32)->(i32)",
		abi.ImportCheckpoint:    "()->(i32)",
		abi.ImportStateDelete:   "()->(i32)",
		abi.ImportUpgradeState:  "(i32,i32)->(i32)",
		abi.ImportUpgradeAccept: "()->(i32)",
		abi.ImportIdleCall:      "()->(i32)",
		abi.ImportAlarmSet:      "(i64)->(i32)",
		abi.ImportAlarmClear:    "()->(i32)",
		abi.ImportAlarmGet:      "(i32)->(i32)",
		abi.ImportCallStart:     "(i32,i32)->(i32)",
		abi.ImportCallWait:      "(i32)->(i32)",
		abi.ImportCallResult:    "(i32,i32,i32)->(i32)",
		abi.ImportCallReply:     "(i32,i32)->(i32)",
		abi.ImportSecretGet:     "(i32,i32,i32,i32)->(i32)",
		abi.ImportFetchStart:    "(i32,i32)->(i32)",
		abi.ImportFetchWait:     "(i32)->(i32)",
		abi.ImportFetchResult:   "(i32,i32,i32)->(i32)",

		abi.ImportChannelReply:     "(i32,i32,i32)->(i32)",
		abi.ImportChannelPush:      "(i32,i32,i32)->(i32)",
		abi.ImportChannelBroadcast: "(i32,i32,i32)->(i32)",
		abi.ImportChannelClose:     "(i32,i32,i32)->(i32)",
		abi.ImportPresenceTrack:    "(i32,i32,i32)->(i32)",
		abi.ImportPresenceUntrack:  "(i32,i32,i32)->(i32)",
	}
)

func TestBuildCounter(t *testing.T) {
	wasm := Build(t, "./examples/counter")
	if !bytes.HasPrefix(wasm, []byte("\x00asm\x01\x00\x00\x00")) {
		t.Fatalf("not a wasm v1 binary: % x", wasm[:min(8, len(wasm))])
	}
	exports := compile(t, wasm).ExportedFunctions()
	if _, ok := exports[abi.VersionExport]; !ok {
		t.Fatalf("no %s export", abi.VersionExport)
	}
	for name, want := range wantExports {
		f, ok := exports[name]
		if !ok {
			t.Errorf("export %s missing", name)
			continue
		}
		if got := sig(f.ParamTypes(), f.ResultTypes()); got != want {
			t.Errorf("export %s is %s, want %s", name, got, want)
		}
	}
}

func TestImportPathAndMemo(t *testing.T) {
	a := Build(t, "./examples/counter")
	start := time.Now()
	b := Build(t, "./examples/counter")
	if d := time.Since(start); d > time.Second {
		t.Errorf("second Build took %v; results should be remembered", d)
	}
	c := Build(t, "github.com/wasmkeep/wasmkeep/examples/counter")
	if !bytes.Equal(a, b) || !bytes.Equal(a, c) {
		t.Error("builds of the same package differ")
	}
	a[0] = 'X'
	if Build(t, "./examples/counter")[0] != 0 {
		t.Error("Build returned shared bytes")
	}
}

// TestSDKImports checks every host function the SDK (and the hostile
// fixture's raw declarations) import against abi.go's signatures.
func TestSDKImports(t *testing.T) {
	var mu sync.Mutex
	seen := map[string]bool{}
	// Each fixture's compile (seconds under -race) runs beside the others.
	t.Run("fixtures", func(t *testing.T) {
		for _, pkg := range []string{"./testdata/guests/echo", "./testdata/guests/hostile", "./examples/chat", "./examples/counter", "./testdata/guests/channels", "./testdata/guests/caller", "./testdata/guests/alarm"} {
			t.Run(strings.TrimPrefix(pkg, "./"), func(t *testing.T) {
				t.Parallel()
				for _, f := range compile(t, Build(t, pkg)).ImportedFunctions() {
					mod, name, _ := f.Import()
					if mod != abi.ImportModule {
						continue
					}
					want, ok := wantImports[name]
					if !ok {
						t.Errorf("%s imports unknown %s.%s", pkg, mod, name)
						continue
					}
					if got := sig(f.ParamTypes(), f.ResultTypes()); got != want {
						t.Errorf("%s imports %s as %s, want %s", pkg, name, got, want)
					}
					mu.Lock()
					seen[name] = true
					mu.Unlock()
				}
			})
		}
	})
	for name := range wantImports {
		if !seen[name] {
			t.Errorf("no fixture imports %s", name)
		}
	}
}

func TestFixtures(t *testing.T) {
	for _, c := range []struct {
		pkg     string
		marker  string // the version marker export, "" for none
		imports string // an import that must be present, "" for none
	}{
		{"./examples/counter", abi.VersionExport, ""},
		{"./examples/chat", abi.VersionExport, ""},
		{"./testdata/guests/echo", abi.VersionExport, ""},
		{"./testdata/guests/hostile", abi.VersionExport, ""},
		{"./testdata/guests/clock", abi.VersionExport, ""},
		{"./testdata/guests/badimport", abi.VersionExport, "env.nonexistent"},
		{"./testdata/guests/abiv2", abi.VersionExportPrefix + "2", ""},
		{"./testdata/guests/noabi", "", ""},
	} {
		t.Run(filepath.Base(c.pkg), func(t *testing.T) {
			t.Parallel()
			cm := compile(t, Build(t, c.pkg))
			var markers []string
			for name := range cm.ExportedFunctions() {
				if strings.HasPrefix(name, abi.VersionExportPrefix) {
					markers = append(markers, name)
				}
			}
			if c.marker == "" && len(markers) != 0 || c.marker != "" && !slices.Equal(markers, []string{c.marker}) {
				t.Errorf("version markers %v, want %q", markers, c.marker)
			}
			if c.imports != "" {
				found := false
				for _, f := range cm.ImportedFunctions() {
					mod, name, _ := f.Import()
					found = found || mod+"."+name == c.imports
				}
				if !found {
					t.Errorf("no import %s", c.imports)
				}
			}
		})
	}
}

func TestCompileCacheDirNamesWazerosVersion(t *testing.T) {
	v, err := wazeroVersion()
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(v, "v") {
		t.Fatalf("wazero version %q", v)
	}
	dir := CompileCacheDir(t)
	if filepath.Base(dir) != "wazero-"+v {
		t.Fatalf("cache directory %s does not name wazero %s", dir, v)
	}
}
