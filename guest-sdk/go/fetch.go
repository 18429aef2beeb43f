package wasmkeep

import (
	"errors"
	"strconv"

	"github.com/wasmkeep/wasmkeep/abi"
)

// Fetches: HTTP requests to other services (docs/abi.md, "Fetches").

// Errors a fetch fails with besides ErrInvalid, ErrTooLarge, ErrTooMany,
// ErrTimeout and ErrUnsupported: test with errors.Is on the *FetchError
// a fetch returns.
var (
	// ErrNotAllowed: the operator allows no fetch of that host
	// (--fetch-allow), or it resolved to an address of the node's
	// machine or of a private network.
	ErrNotAllowed = errors.New("wasmkeep: " + abi.StatusNotAllowed.String())
	// ErrFailed: DNS, the connection, TLS or the protocol failed; the
	// request may have reached the server.
	ErrFailed = errors.New("wasmkeep: " + abi.StatusFailed.String())
)

// FetchRequest is an HTTP request to another service.
type FetchRequest struct {
	// Method is GET if empty; GET, HEAD, POST, PUT, PATCH, DELETE and
	// OPTIONS are sent.
	Method string
	// URL is an http or https URL.
	URL     string
	Headers []Header
	Body    []byte
}

// FetchResponse is a service's answer, whatever its status.
type FetchResponse struct {
	Status  int
	Headers []Header
	Body    []byte
}

// Header returns the value of the first header named name
// (case-insensitive), or "".
func (r *FetchResponse) Header(name string) string {
	v, _ := LookupHeader(r.Headers, name)
	return v
}

// FetchError is a fetch's failure: its URL, the status the host answered
// and the host's message, which says why (a host not allowed, an address
// refused, a limit).
type FetchError struct {
	URL     string
	Status  abi.Status
	Message string
}

// Error describes e.
func (e *FetchError) Error() string {
	msg := "wasmkeep: fetch " + e.URL + ": " + e.Status.String() + " (" + strconv.Itoa(int(e.Status)) + ")"
	if e.Message != "" {
		msg += ": " + e.Message
	}
	return msg
}

// Unwrap returns the sentinel error for e.Status, such as ErrNotAllowed.
func (e *FetchError) Unwrap() error { return statusError(e.Status) }

// PendingFetch is a fetch under way (StartFetch).
type PendingFetch struct {
	url    string
	handle int32
	err    error
	done   bool
	resp   *FetchResponse
}

// StartFetch sends req and returns it under way: the room's code goes on,
// and Wait collects the answer, so that several fetches run at once. A
// fetch the event does not wait for still runs; its answer is dropped.
// The request leaves mid-event, before the event's state is durable:
// make it safe to repeat. An error here is the fetch's (StartFetch never
// fails itself): Wait returns it.
func StartFetch(req FetchRequest) *PendingFetch {
	p := &PendingFetch{url: req.URL}
	fetchBuf = abi.AppendFetch(fetchBuf[:0], &abi.Fetch{Method: req.Method, URL: req.URL, Headers: req.Headers, Body: req.Body})
	st := hostFetchStart(bytesPtr(fetchBuf), uint32(len(fetchBuf)))
	if st < 0 {
		p.err, p.done = &FetchError{URL: req.URL, Status: abi.Status(st)}, true
		return p
	}
	p.handle = st
	return p
}

// fetchBuf holds the encoding of the fetch being started.
var fetchBuf []byte

// Wait waits for the fetch's answer. The time the room waits does not
// count toward its event time limit; the node's fetch timeout bounds it.
func (p *PendingFetch) Wait() (*FetchResponse, error) {
	if p.done {
		return p.resp, p.err
	}
	p.done = true
	st := hostFetchWait(p.handle)
	out, rst := hostResult(p.handle, hostFetchResult)
	switch {
	case rst < 0:
		p.err = &FetchError{URL: p.url, Status: abi.Status(rst)}
	case st < 0:
		p.err = &FetchError{URL: p.url, Status: abi.Status(st), Message: string(out)}
	default:
		r, err := abi.DecodeResponse(out)
		if err != nil {
			p.err = &FetchError{URL: p.url, Status: abi.StatusInvalid, Message: "a malformed answer from the host"}
			break
		}
		p.resp = &FetchResponse{Status: r.Status, Headers: r.Headers, Body: r.Body}
	}
	return p.resp, p.err
}

// Fetch sends req and waits for the answer: StartFetch then Wait.
func Fetch(req FetchRequest) (*FetchResponse, error) {
	return StartFetch(req).Wait()
}
