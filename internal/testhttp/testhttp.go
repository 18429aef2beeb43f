// Package testhttp sends the HTTP requests of tests that drive a node as
// the CLI would, and reads their answers whole.
package testhttp

import (
	"bytes"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/wasmkeep/wasmkeep/host/server"
)

// Timeout bounds one exchange: an upload compiles its module, which takes
// many seconds under the race detector.
const Timeout = 3 * time.Minute

// Result is a finished HTTP exchange.
type Result struct {
	Status int
	Body   string
	Header http.Header
}

// Do sends a request as the CLI would: to the admin API (a URL with
// /admin/) with the header that tells the node no browser was made to
// send it. It fails the test if the exchange does not finish.
func Do(t testing.TB, method, url string, body []byte) Result {
	t.Helper()
	req, err := http.NewRequest(method, url, bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(url, "/admin/") {
		req.Header.Set(server.AdminHeader, "1")
	}
	return DoRequest(t, req)
}

// DoRequest sends req as it is.
func DoRequest(t testing.TB, req *http.Request) Result {
	t.Helper()
	resp, err := (&http.Client{Timeout: Timeout}).Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", req.Method, req.URL, err)
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return Result{Status: resp.StatusCode, Body: string(data), Header: resp.Header}
}
