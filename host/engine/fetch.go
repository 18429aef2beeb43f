package engine

import (
	"context"
	"maps"
	"net/http"
	"slices"

	"github.com/tetratelabs/wazero/api"

	"github.com/wasmkeep/wasmkeep/abi"
	"github.com/wasmkeep/wasmkeep/host/fetch"
)

// Fetcher makes the HTTP requests guests send to other services
// (host/fetch: *fetch.Fetcher). Start checks the request, counts it
// against room's fetches in flight, copies its body, and returns it
// under way; ctx's end cancels it.
type Fetcher interface {
	Start(ctx context.Context, room string, req fetch.Request) *fetch.Pending
}

// fetchSlot is one of an event's fetches, by handle.
type fetchSlot struct {
	p      *fetch.Pending
	status abi.Status
	out    []byte // the Response record, or the error's message, once waited
	waited bool
}

// fetchStatus is the status a guest is given for each fetch.Outcome.
var fetchStatus = map[string]abi.Status{
	fetch.OutcomeOK:             abi.Success,
	fetch.OutcomeNotAllowed:     abi.StatusNotAllowed,
	fetch.OutcomeAddressRefused: abi.StatusNotAllowed,
	fetch.OutcomeTooLarge:       abi.StatusTooLarge,
	fetch.OutcomeTooMany:        abi.StatusTooMany,
	fetch.OutcomeBadRequest:     abi.StatusInvalid,
	fetch.OutcomeTimeout:        abi.StatusTimeout,
	fetch.OutcomeCanceled:       abi.StatusFailed,
	fetch.OutcomeFailed:         abi.StatusFailed,
}

// fetchRoom is the key the fetches in flight of inst's room count under:
// a front's ("class/") holds one for all its instances.
func fetchRoom(inst *Instance) string {
	info := inst.host.RoomInfo()
	return info.Class + "/" + info.Name
}

// fetchStart starts a fetch (see abi.ImportFetchStart).
func (e *Engine) fetchStart(ctx context.Context, mod api.Module, stack []uint64) {
	inst := eventInstance(ctx, stack)
	if inst == nil {
		return
	}
	if e.cfg.Fetcher == nil {
		ret(stack, abi.StatusUnsupported)
		return
	}
	b, ok := guestBytes(mod, stack[0], stack[1])
	if !ok {
		ret(stack, abi.StatusInvalid)
		return
	}
	rec, err := abi.DecodeFetch(b)
	if err != nil {
		ret(stack, abi.StatusInvalid)
		return
	}
	if len(inst.fetches.byHandle) >= abi.MaxFetchHandles {
		ret(stack, abi.StatusTooMany)
		return
	}
	// The record's strings are copies; its body aliases the guest's
	// memory, which the fetcher copies once it has bounded it (the guest
	// may use it again when this returns).
	req := fetch.Request{Method: rec.Method, URL: rec.URL, Body: rec.Body}
	if len(rec.Headers) > 0 {
		req.Header = make(http.Header, len(rec.Headers))
		for _, h := range rec.Headers {
			req.Header[h.Name] = append(req.Header[h.Name], h.Value)
		}
	}
	// The instance's context: a fetch the event abandoned ends with the
	// instance at the latest.
	p := e.cfg.Fetcher.Start(inst.ctx, fetchRoom(inst), req)
	ret(stack, inst.fetches.add(&fetchSlot{p: p}))
}

// fetchWait waits for a fetch's answer (see abi.ImportFetchWait), out of
// the event's time limit as callWait waits.
func fetchWait(ctx context.Context, _ api.Module, stack []uint64) {
	slot := await(ctx, stack, fetchTable, func(s *fetchSlot) <-chan struct{} { return s.p.Done() })
	if slot == nil {
		return
	}
	if !slot.waited {
		resp, err := slot.p.Result()
		slot.status, slot.waited = fetchStatus[fetch.Outcome(err)], true
		if err != nil {
			slot.out = []byte(err.Error())
		} else {
			slot.out = abi.AppendResponse(nil, &abi.Response{Status: resp.Status, Headers: abiHeaders(resp.Header), Body: resp.Body})
		}
	}
	ret(stack, slot.status)
}

// abiHeaders lists h's lines as a record carries them, by name, so that
// a guest sees them in the same order every time.
func abiHeaders(h http.Header) []abi.Header {
	var hs []abi.Header
	for _, k := range slices.Sorted(maps.Keys(h)) {
		for _, v := range h[k] {
			hs = append(hs, abi.Header{Name: k, Value: v})
		}
	}
	return hs
}

// fetchResult copies a fetch's answer or error message out (see
// abi.ImportFetchResult).
func fetchResult(ctx context.Context, mod api.Module, stack []uint64) {
	answer(ctx, mod, stack, fetchTable, func(s *fetchSlot) ([]byte, bool) { return s.out, s.waited })
}

func fetchTable(i *Instance) *handles[fetchSlot] { return &i.fetches }
