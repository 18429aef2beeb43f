package node

import (
	"crypto/rand"
	"encoding/base64"
	"net/http"
	"strings"
	"testing"

	"github.com/wasmkeep/wasmkeep/host/secrets"
	"github.com/wasmkeep/wasmkeep/host/store"
)

func testSecretKey(t *testing.T) *secrets.Key {
	t.Helper()
	raw := make([]byte, secrets.KeySize)
	if _, err := rand.Read(raw); err != nil {
		t.Fatal(err)
	}
	k, err := secrets.ParseKey(base64.StdEncoding.EncodeToString(raw))
	if err != nil {
		t.Fatal(err)
	}
	return k
}

// TestRoomsReadSecrets: Go and AssemblyScript rooms read the app's
// secrets by name, a long one whole; a missing one is not found.
func TestRoomsReadSecrets(t *testing.T) {
	t.Parallel()
	n := startNode(t, Config{Secrets: secrets.Keys{Current: testSecretKey(t)}})
	long := strings.Repeat("0123456789", 100) // past the SDKs' first buffer
	for name, v := range map[string]string{"API_TOKEN": "tok-123", "LONG": long} {
		if err := n.Secrets.Put(t.Context(), name, []byte(v)); err != nil {
			t.Fatal(err)
		}
	}
	putClass(t, n, "echo", "./testdata/guests/echo")
	putAS(t, n, "asguest", asGuest)
	for _, class := range []string{"echo", "asguest"} {
		base := n.URL() + "/actor/" + class + "/r/secret/"
		if got := expect(t, 200, "GET", base+"API_TOKEN", nil); got != "tok-123" {
			t.Errorf("%s: API_TOKEN = %q", class, got)
		}
		if got := expect(t, 200, "GET", base+"LONG", nil); got != long {
			t.Errorf("%s: LONG = %d bytes, want %d", class, len(got), len(long))
		}
		expect(t, 404, "GET", base+"MISSING", nil)
	}
}

// TestNodeWithoutTheKeyRunsNoRoom: once the app has secrets, a node
// without the key that sealed them (none, or another) answers rooms 503
// with the reason, and /readyz too; with the key it serves.
func TestNodeWithoutTheKeyRunsNoRoom(t *testing.T) {
	t.Parallel()
	bucket := store.NewMem()
	key := testSecretKey(t)
	n := startNode(t, Config{Bucket: bucket, Secrets: secrets.Keys{Current: key}})
	putClass(t, n, "echo", "./testdata/guests/echo")
	expect(t, 200, "GET", n.URL()+"/actor/echo/r/room", nil)
	if err := n.Secrets.Put(t.Context(), "API_TOKEN", []byte("tok")); err != nil {
		t.Fatal(err)
	}
	stop(t, n)

	for what, keys := range map[string]secrets.Keys{"no key": {}, "another key": {Current: testSecretKey(t)}} {
		n := startNode(t, Config{Bucket: bucket, Secrets: keys})
		r := do(t, "GET", n.URL()+"/actor/echo/r/room", nil)
		if r.Status != http.StatusServiceUnavailable || !strings.Contains(r.Body, "secrets") {
			t.Errorf("%s: a room answered %d %q, want 503 naming the secrets", what, r.Status, r.Body)
		}
		r = do(t, "GET", n.URL()+"/readyz", nil)
		if r.Status != http.StatusServiceUnavailable || !strings.Contains(r.Body, "key") {
			t.Errorf("%s: /readyz answered %d %q", what, r.Status, r.Body)
		}
		stop(t, n)
	}

	n = startNode(t, Config{Bucket: bucket, Secrets: secrets.Keys{Current: testSecretKey(t), Previous: key}})
	expect(t, 200, "GET", n.URL()+"/actor/echo/r/room", nil)
	expect(t, 200, "GET", n.URL()+"/readyz", nil)
}

// TestClusterNodeWithoutTheKeyDrains: in a cluster, a member that cannot
// open the app's secrets drains (its rooms go to members that can), and
// says so on /readyz; one with the key serves the rooms.
func TestClusterNodeWithoutTheKeyDrains(t *testing.T) {
	t.Parallel()
	bucket := store.NewMem()
	key := testSecretKey(t)
	a := startNode(t, Config{Bucket: bucket, Cluster: testCluster("a"), Secrets: secrets.Keys{Current: key}})
	if err := a.Secrets.Put(t.Context(), "API_TOKEN", []byte("tok")); err != nil {
		t.Fatal(err)
	}
	putClass(t, a, "echo", "./testdata/guests/echo")
	b := startNode(t, Config{Bucket: bucket, Cluster: testCluster("b")})
	waitFor(t, "b draining", func() bool { return b.Member().Status().Draining })
	if r := do(t, "GET", b.URL()+"/readyz", nil); r.Status != http.StatusServiceUnavailable || !strings.Contains(r.Body, "secrets") {
		t.Fatalf("b's /readyz: %d %q", r.Status, r.Body)
	}
	// A room reached through b runs on a, which opens the secret.
	if got := expect(t, 200, "GET", b.URL()+"/actor/echo/r/secret/API_TOKEN", nil); got != "tok" {
		t.Fatalf("a room through the node without the key: %q", got)
	}
	if a.Member().Status().Draining {
		t.Fatal("the node with the key drains")
	}
}
