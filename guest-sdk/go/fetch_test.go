//go:build !wasip1

package wasmkeep

import (
	"bytes"
	"errors"
	"strings"
	"testing"

	"github.com/wasmkeep/wasmkeep/abi"
)

// TestFetchSendsTheRequestAndDecodesTheAnswer: the record the host gets
// is the request, the answer comes back decoded (past the first result
// buffer), and a refusal is a *FetchError that unwraps to its sentinel
// and carries the host's message.
func TestFetchSendsTheRequestAndDecodesTheAnswer(t *testing.T) {
	h := setup(t)
	big := bytes.Repeat([]byte("b"), 1000)
	h.fetchAnswer = func(f abi.Fetch) (int32, []byte) {
		if f.URL != "https://api.example.com/x" {
			return int32(abi.StatusNotAllowed), []byte("fetch: host not allowed (--fetch-allow): " + f.URL)
		}
		v, _ := LookupHeader(f.Headers, "X-Key")
		return 0, abi.AppendResponse(nil, &abi.Response{Status: 201, Headers: []Header{{Name: "Echo", Value: f.Method + " " + v + " " + string(f.Body)}}, Body: big})
	}
	resp, err := Fetch(FetchRequest{Method: "POST", URL: "https://api.example.com/x", Headers: []Header{{Name: "X-Key", Value: "k"}}, Body: []byte("hi")})
	if err != nil || resp.Status != 201 || resp.Header("echo") != "POST k hi" || !bytes.Equal(resp.Body, big) {
		t.Fatalf("Fetch = %+v, %v", resp, err)
	}
	_, err = Fetch(FetchRequest{URL: "http://127.0.0.1/"})
	var fe *FetchError
	if !errors.Is(err, ErrNotAllowed) || !errors.As(err, &fe) || fe.URL != "http://127.0.0.1/" || !strings.Contains(err.Error(), "--fetch-allow") {
		t.Fatalf("a fetch not allowed = %v; want ErrNotAllowed with the host's message", err)
	}
	for st, want := range map[abi.Status]error{
		abi.StatusFailed: ErrFailed, abi.StatusTimeout: ErrTimeout, abi.StatusTooMany: ErrTooMany,
		abi.StatusTooLarge: ErrTooLarge, abi.StatusInvalid: ErrInvalid,
	} {
		h.fetchAnswer = func(abi.Fetch) (int32, []byte) { return int32(st), []byte("because") }
		p := StartFetch(FetchRequest{URL: "https://api.example.com/x"})
		if _, err := p.Wait(); !errors.Is(err, want) {
			t.Errorf("status %s: Wait = %v, want %v", st, err, want)
		}
		if _, err := p.Wait(); !errors.Is(err, want) {
			t.Errorf("status %s: a second Wait = %v, want the same error", st, err)
		}
	}
}
