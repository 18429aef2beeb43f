package engine

import (
	"strings"
	"testing"

	"github.com/wasmkeep/wasmkeep/abi"
	"github.com/wasmkeep/wasmkeep/host/fetch"
)

// TestFetchImports: without a Fetcher a fetch is unsupported; with one
// that allows nothing each is refused with its message, and an event
// holds at most abi.MaxFetchHandles fetches not yet freed: the next is
// refused at fetch_start.
func TestFetchImports(t *testing.T) {
	fetchN := func(n string) []byte {
		return abi.AppendRequest(nil, &abi.Request{Method: "POST", Path: "/fetch", Query: "n=" + n, Body: []byte("http://127.0.0.1:1/")})
	}
	none := startRoom(t, compile(t, newEngine(t, Config{}), "./testdata/guests/echo"))
	if got := request(t, none, fetchN("1")); !strings.HasPrefix(got, "-4 ") {
		t.Fatalf("no Fetcher: %q, want -4 (unsupported)", got)
	}

	f, err := fetch.New(fetch.Config{})
	if err != nil {
		t.Fatal(err)
	}
	inst := startRoom(t, compile(t, newEngine(t, Config{Fetcher: f}), "./testdata/guests/echo"))
	lines := strings.Split(request(t, inst, fetchN("17")), "\n")
	if len(lines) != abi.MaxFetchHandles+1 {
		t.Fatalf("%d answers to 17 fetches: %q", len(lines), lines)
	}
	for i, l := range lines[:abi.MaxFetchHandles] {
		if l != "-14 fetch: host not allowed (--fetch-allow): 127.0.0.1" {
			t.Fatalf("fetch %d: %q", i+1, l)
		}
	}
	if l := lines[abi.MaxFetchHandles]; l != "-13 " {
		t.Fatalf("fetch %d, past abi.MaxFetchHandles: %q, want -13 (too many) at once", abi.MaxFetchHandles+1, l)
	}
	// The handles were the event's: the next event has them all again.
	if got := request(t, inst, fetchN("16")); strings.Contains(got, "-13") {
		t.Fatalf("the next event's 16 fetches: %q", got)
	}
}
