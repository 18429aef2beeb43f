// Command alarm is the host tests' guest for alarms: it sets, reads and
// clears its room's alarm over HTTP and records every run of its alarm
// handler.
//
//	POST /set?in=MS[&fail=N][&again=MS]  sets the alarm MS milliseconds from now
//	                                     (negative: in the past); the handler
//	                                     panics while the run's retry count is
//	                                     below N (until a run succeeds), and,
//	                                     once, sets the alarm
//	                                     again MS after its run; answers "ok"
//	                                     or the error
//	POST /set?at=UNIXMS                  sets it at that time exactly
//	POST /clear                          clears it; answers "ok" or the error
//	GET  /alarm                          the alarm's Unix ms, or "none"
//	GET  /runs                           "runs R retries A,B,... late L", L the
//	                                     last run's lateness in ms
//	anything else                        404
package main

import (
	"strconv"
	"strings"
	"time"

	wk "github.com/wasmkeep/wasmkeep/guest-sdk/go"
)

var (
	runs    int
	retries []string
	late    int64
	fail    int
	again   int
)

func init() {
	wk.HandleRequest(serve)
	wk.HandleAlarm(func(a wk.Alarm) {
		if a.Retry < fail {
			panic("failing on purpose, retry " + strconv.Itoa(a.Retry))
		}
		runs++
		fail = 0 // the next alarm runs at once
		retries = append(retries, strconv.Itoa(a.Retry))
		late = time.Since(a.At).Milliseconds()
		if again != 0 {
			in := again
			again = 0
			if err := wk.SetAlarm(time.Now().Add(time.Duration(in) * time.Millisecond)); err != nil {
				wk.Error("setting the alarm again: " + err.Error())
			}
		}
	})
}

func serve(r *wk.Request) *wk.Response {
	switch {
	case r.Method == "POST" && r.Path == "/set":
		fail, _ = strconv.Atoi(r.QueryValue("fail"))
		again, _ = strconv.Atoi(r.QueryValue("again"))
		at := time.Now()
		if v := r.QueryValue("at"); v != "" {
			ms, _ := strconv.ParseInt(v, 10, 64)
			at = time.UnixMilli(ms)
		} else {
			in, _ := strconv.Atoi(r.QueryValue("in"))
			at = at.Add(time.Duration(in) * time.Millisecond)
		}
		return result(wk.SetAlarm(at))
	case r.Method == "POST" && r.Path == "/clear":
		return result(wk.ClearAlarm())
	case r.Method == "GET" && r.Path == "/alarm":
		if at, ok := wk.GetAlarm(); ok {
			return wk.Text(200, strconv.FormatInt(at.UnixMilli(), 10))
		}
		return wk.Text(200, "none")
	case r.Method == "GET" && r.Path == "/runs":
		return wk.Text(200, "runs "+strconv.Itoa(runs)+" retries "+strings.Join(retries, ",")+" late "+strconv.FormatInt(late, 10))
	}
	return wk.Text(404, "no such route")
}

func result(err error) *wk.Response {
	if err != nil {
		return wk.Text(500, err.Error())
	}
	return wk.Text(200, "ok")
}

func main() {}
