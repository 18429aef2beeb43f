//go:build unix

package main

import (
	"bytes"
	"crypto/rand"
	"encoding/base64"
	"encoding/hex"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/wasmkeep/wasmkeep/internal/s3test"
)

// TestSecretNeverStoredInPlainText: `secret put` seals a secret under the
// node's key, `secret list` shows the node opens it, `secret rotate`
// seals it anew under a new key (the old one given as previous), after
// which a node with the new key alone opens it; and no byte of the data
// directory, nor of the S3 server's files under WASMKEEP_TEST_STORE=s3,
// holds the secret's value or either key.
func TestSecretNeverStoredInPlainText(t *testing.T) {
	data := t.TempDir()
	keyFile := func(name string) (string, string) {
		raw := make([]byte, 32)
		if _, err := rand.Read(raw); err != nil {
			t.Fatal(err)
		}
		k := base64.StdEncoding.EncodeToString(raw)
		path := filepath.Join(t.TempDir(), name)
		if err := os.WriteFile(path, []byte(k+"\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		return k, path
	}
	oldKey, oldFile := keyFile("old")
	newKey, newFile := keyFile("new")
	value := "wk-secret-" + hex.EncodeToString([]byte(time.Now().String()))

	n := serveNode(t, data, "--secrets-key-file", oldFile)
	if r := n.clientIn(value+"\n", "secret", "put", "API_TOKEN"); r.code != 0 || !strings.Contains(r.stdout, "secret API_TOKEN set ("+strconv.Itoa(len(value))+" bytes)") {
		t.Fatalf("secret put: %v", r)
	}
	if out := n.ok("secret", "list"); !strings.Contains(out, "API_TOKEN") || !strings.Contains(out, "true") {
		t.Fatalf("secret list: %q", out)
	}
	if r := n.clientIn("x", "secret", "put", "1BAD"); r.code != 2 || !strings.Contains(r.stderr, "a name is") {
		t.Fatalf("secret put of a bad name: %v", r)
	}
	stopProc(t, n)

	// The new key, the old one as previous: rotate.
	n = serveNode(t, data, "--secrets-key-file", newFile, "--secrets-key-previous", oldKey)
	if out := n.ok("secret", "rotate"); !strings.Contains(out, "1 secrets sealed anew") {
		t.Fatalf("secret rotate: %q", out)
	}
	stopProc(t, n)
	n = serveNode(t, data, "--secrets-key-file", newFile)
	if out := n.ok("secret", "list"); !strings.Contains(out, "API_TOKEN") || !strings.Contains(out, "true") {
		t.Fatalf("secret list with the new key alone: %q", out)
	}
	stopProc(t, n)

	dirs := []string{data}
	if v, ok := s3Servers.Load(data); ok {
		dirs = append(dirs, v.(*s3test.Server).Dir)
	}
	newRaw, _ := base64.StdEncoding.DecodeString(newKey)
	oldRaw, _ := base64.StdEncoding.DecodeString(oldKey)
	files := 0
	for _, dir := range dirs {
		err := filepath.WalkDir(dir, func(path string, e fs.DirEntry, err error) error {
			if err != nil || !e.Type().IsRegular() {
				return err
			}
			b, err := os.ReadFile(path)
			if err != nil {
				return err
			}
			files++
			for what, needle := range map[string][]byte{"the secret's value": []byte(value), "the key": []byte(newKey),
				"the old key": []byte(oldKey), "the key's bytes": newRaw, "the old key's bytes": oldRaw} {
				if bytes.Contains(b, needle) {
					t.Errorf("%s holds %s", path, what)
				}
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	if files < 3 {
		t.Fatalf("read %d files in %v: is the store somewhere else?", files, dirs)
	}
}

// stopProc stops a node cleanly (SIGTERM) and waits for it.
func stopProc(t *testing.T, p *proc) {
	t.Helper()
	p.signal(syscall.SIGTERM)
	if code := p.wait(stopDeadline); code != 0 {
		t.Fatalf("the node exited with code %d", code)
	}
}
