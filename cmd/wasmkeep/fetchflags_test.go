package main

import (
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/wasmkeep/wasmkeep/host/fetch"
)

// TestFetchFlags: nothing is allowed by default and the limits are
// fetch's defaults; --fetch-allow takes entries repeated and
// comma-separated; a malformed entry is refused before anything starts.
func TestFetchFlags(t *testing.T) {
	got := parseServe(t).Fetch
	want := fetch.Config{Timeout: fetch.DefaultTimeout, MaxRequest: fetch.DefaultMaxRequest, MaxResponse: fetch.DefaultMaxResponse,
		PerRoom: fetch.DefaultPerRoom, PerNode: fetch.DefaultPerNode}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("defaults:\n got %+v\nwant %+v", got, want)
	}
	got = parseServe(t, "--fetch-allow", "127.0.0.1,api.example.com:443", "--fetch-allow", "*.svc.test", "--fetch-timeout", "3s",
		"--fetch-max-request", "10", "--fetch-max-response", "20", "--fetch-per-room", "1", "--fetch-per-node", "2").Fetch
	want = fetch.Config{Allow: []string{"127.0.0.1", "api.example.com:443", "*.svc.test"}, Timeout: 3 * time.Second,
		MaxRequest: 10, MaxResponse: 20, PerRoom: 1, PerNode: 2}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("set:\n got %+v\nwant %+v", got, want)
	}
	for _, args := range [][]string{{"--fetch-allow", "http://api.example.com"}, {"--fetch-per-room", "0"}, {"--fetch-timeout", "0s"}} {
		app := &cli.App{Flags: serveFlags(), Action: func(c *cli.Context) error { _, err := nodeConfig(c); return err }}
		app.ExitErrHandler = func(*cli.Context, error) {}
		err := app.Run(append([]string{"wasmkeep"}, args...))
		if err == nil || !strings.Contains(err.Error(), args[0]) {
			t.Errorf("%v: %v, want an error naming %s", args, err, args[0])
		}
	}
}
