package testwasm

import (
	"os"
	"path/filepath"
	"testing"
)

// TestASCKey: the key of a cached asc compile changes with every file of
// the SDK's directory and with the arguments, and not with node_modules.
func TestASCKey(t *testing.T) {
	dir := t.TempDir()
	write := func(rel, body string) {
		t.Helper()
		path := filepath.Join(dir, rel)
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	key := func(entry string, args ...string) string {
		t.Helper()
		k, err := ascKey(dir, entry, args)
		if err != nil {
			t.Fatal(err)
		}
		return k
	}
	write("index.ts", "export let a = 1;")
	write("lib/x.ts", "export let x = 1;")
	write("package-lock.json", `{"v":1}`)
	base := key("index.ts")
	if key("index.ts") != base {
		t.Fatal("the same directory hashed twice gave two keys")
	}
	write("node_modules/assemblyscript/std.ts", "anything")
	write(".npm-ci-123/package.json", "{}")
	if key("index.ts") != base {
		t.Error("node_modules or a dot directory changed the key")
	}
	for _, c := range []struct {
		what string
		k    string
	}{
		{"another entry", key("lib/x.ts")},
		{"an argument", key("index.ts", "--runtime", "incremental")},
	} {
		if c.k == base {
			t.Errorf("%s kept the key", c.what)
		}
	}
	for _, change := range []struct{ rel, body string }{
		{"lib/x.ts", "export let x = 2;"},
		{"package-lock.json", `{"v":2}`},
		{"lib/new.ts", ""},
	} {
		write(change.rel, change.body)
		if k := key("index.ts"); k == base {
			t.Errorf("writing %s kept the key", change.rel)
		} else {
			base = k
		}
	}
}
