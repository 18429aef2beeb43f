// Command clock checks the guest's clocks, timers and randomness, in
// particular across hibernation (a restored room must see its monotonic
// clock continue, never jump back) and with real host sleeps.
//
//	GET  /elapsed       nanoseconds since the room initialized (monotonic), decimal
//	POST /timer?ms=N    starts a goroutine that sleeps N ms, then increments a counter;
//	                    yields so that it starts (and arms its timer) at once; answers "ok"
//	GET  /fired         yields to other goroutines (so a due timer goroutine can run),
//	                    then answers the counter
//	POST /sleep?ms=N    sleeps N ms inside the handler, answers the nanoseconds it
//	                    took (monotonic)
//	GET  /wall          time.Now().UnixMilli()
//	GET  /rand          "<16 hex digits from crypto/rand> <math/rand/v2 Uint64>"
//
// Goroutines and timers run only while one of the room's events is being
// handled: a timer that fell due while the room was idle fires during the
// next event that yields (as /fired and /sleep do).
package main

import (
	crand "crypto/rand"
	"encoding/hex"
	"math/rand/v2"
	"runtime"
	"strconv"
	"sync/atomic"
	"time"

	wk "github.com/wasmkeep/wasmkeep/guest-sdk/go"
)

var (
	start = time.Now()
	fired atomic.Int64
)

func init() {
	wk.HandleRequest(serve)
}

func serve(r *wk.Request) *wk.Response {
	switch {
	case r.Method == "GET" && r.Path == "/elapsed":
		return wk.Text(200, strconv.FormatInt(time.Since(start).Nanoseconds(), 10))
	case r.Method == "POST" && r.Path == "/timer":
		d, ok := millis(r)
		if !ok {
			return wk.Text(400, "want ?ms=N")
		}
		go func() {
			time.Sleep(d)
			fired.Add(1)
		}()
		// A new goroutine does not run before something yields: let it
		// start now, so that its timer is armed at request time.
		runtime.Gosched()
		return wk.Text(200, "ok")
	case r.Method == "GET" && r.Path == "/fired":
		for range 3 {
			runtime.Gosched()
		}
		return wk.Text(200, strconv.FormatInt(fired.Load(), 10))
	case r.Method == "POST" && r.Path == "/sleep":
		d, ok := millis(r)
		if !ok {
			return wk.Text(400, "want ?ms=N")
		}
		t := time.Now()
		time.Sleep(d)
		return wk.Text(200, strconv.FormatInt(time.Since(t).Nanoseconds(), 10))
	case r.Method == "GET" && r.Path == "/wall":
		return wk.Text(200, strconv.FormatInt(time.Now().UnixMilli(), 10))
	case r.Method == "GET" && r.Path == "/rand":
		var b [8]byte
		crand.Read(b[:])
		return wk.Text(200, hex.EncodeToString(b[:])+" "+strconv.FormatUint(rand.Uint64(), 10))
	}
	return wk.Text(404, "not found")
}

func millis(r *wk.Request) (time.Duration, bool) {
	n, err := strconv.Atoi(r.QueryValue("ms"))
	if err != nil || n < 0 {
		return 0, false
	}
	return time.Duration(n) * time.Millisecond, true
}

func main() {}
