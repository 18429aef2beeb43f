// Command caller is the calls tests' room: it calls other rooms when
// asked over HTTP, and answers calls with small commands.
//
// Requests:
//
//	POST /call?to=<class>/<name>  calls that room with the body as the
//	                              payload; answers 200 and the reply, or
//	                              502 "<status>: <message>" (the status
//	                              as abi.Status names it)
//	POST /fan?to=<class>&n=N      calls rooms <class>/0 … <class>/N-1 with
//	                              "count" at once (StartCall, then Wait
//	                              for each, at most 16 under way); answers
//	                              the replies' sum, or 502 with the first
//	                              error
//	POST /seq?to=<class>/<name>&n=N  calls that room N times, one after
//	                              the other, with the body; answers the
//	                              last reply, or 502 as /call does
//	POST /time?to=<class>/<name>&n=N  makes N calls to that room, one
//	                              after the other, with the body, timing
//	                              each by the room's clock; answers
//	                              "<p50> <p99>" in microseconds, or 502 as
//	                              /call does
//	POST /order?to=<class>/<name>&n=N  starts N "count" calls to that
//	                              room at once, then waits for each;
//	                              answers the replies in the order the
//	                              calls were started, space-separated
//	POST /burst?to=<class>&n=N    starts N calls with the body to rooms
//	                              <class>/0 … <class>/N-1 at once, then
//	                              waits for each; answers each call's
//	                              outcome ("ok" or its status), space-
//	                              separated
//	GET  /count                   how many "count" calls the room took
//
// Calls (the payload is a command; the reply is what it says):
//
//	echo:<x>                      <x>
//	count                         adds one to the room's count; the count
//	call:<class>/<name>:<payload> calls that room with payload; its reply,
//	                              or "error:<status>"
//	broadcast:<x>                 sends <x> to every socket of the room;
//	                              "sent <n>"
//	crash                         panics
//	spin                          loops until the event time limit ends it
//	sleep:<ms>                    sleeps that long, then "slept"
//	big:<n>                       replies n bytes ("x" each)
//
// Socket messages are broadcast to every socket of the room. A socket
// opened with the header Wasmkeep-Front-User (which only a front's
// hand-over can set) is sent "hello <Wasmkeep-Front-User> from
// <Wasmkeep-Front>" first.
package main

import (
	"errors"
	"slices"
	"strconv"
	"strings"
	"time"

	wk "github.com/wasmkeep/wasmkeep/guest-sdk/go"
)

var count int

func init() {
	wk.HandleRequest(serve)
	wk.HandleCall(answer)
	wk.HandleSocketMessage(func(_ wk.Socket, m wk.Message) { _, _ = wk.Broadcast(m.Text(), 0) })
	wk.HandleSocketOpen(func(s wk.Socket, o *wk.SocketOpen) {
		if user := o.Header("Wasmkeep-Front-User"); user != "" {
			_ = s.Send("hello " + user + " from " + o.Header("Wasmkeep-Front"))
		}
	})
}

func serve(r *wk.Request) *wk.Response {
	switch {
	case r.Method == "POST" && r.Path == "/call":
		class, name, _ := strings.Cut(r.QueryValue("to"), "/")
		reply, err := wk.Call(class, name, r.Body)
		if err != nil {
			return wk.Text(502, describe(err))
		}
		return wk.Data(200, "application/octet-stream", reply)
	case r.Method == "POST" && r.Path == "/fan":
		return fan(r.QueryValue("to"), r.QueryValue("n"))
	case r.Method == "POST" && r.Path == "/seq":
		class, name, _ := strings.Cut(r.QueryValue("to"), "/")
		n, _ := strconv.Atoi(r.QueryValue("n"))
		var reply []byte
		for range n {
			var err error
			if reply, err = wk.Call(class, name, r.Body); err != nil {
				return wk.Text(502, describe(err))
			}
		}
		return wk.Data(200, "application/octet-stream", reply)
	case r.Method == "POST" && r.Path == "/time":
		class, name, _ := strings.Cut(r.QueryValue("to"), "/")
		n, _ := strconv.Atoi(r.QueryValue("n"))
		if n < 1 {
			return wk.Text(400, "bad n")
		}
		took := make([]time.Duration, n)
		for i := range took {
			began := time.Now()
			if _, err := wk.Call(class, name, r.Body); err != nil {
				return wk.Text(502, describe(err))
			}
			took[i] = time.Since(began)
		}
		slices.Sort(took)
		return wk.Text(200, strconv.FormatInt(took[n/2].Microseconds(), 10)+" "+strconv.FormatInt(took[n*99/100].Microseconds(), 10))
	case r.Method == "POST" && r.Path == "/order":
		class, name, _ := strings.Cut(r.QueryValue("to"), "/")
		n, _ := strconv.Atoi(r.QueryValue("n"))
		var under []*wk.PendingCall
		for range n {
			under = append(under, wk.StartCall(class, name, []byte("count")))
		}
		var out []string
		for _, p := range under {
			reply, err := p.Wait()
			if err != nil {
				return wk.Text(502, describe(err))
			}
			out = append(out, string(reply))
		}
		return wk.Text(200, strings.Join(out, " "))
	case r.Method == "POST" && r.Path == "/burst":
		n, _ := strconv.Atoi(r.QueryValue("n"))
		var under []*wk.PendingCall
		for i := range n {
			under = append(under, wk.StartCall(r.QueryValue("to"), strconv.Itoa(i), r.Body))
		}
		var out []string
		for _, p := range under {
			if _, err := p.Wait(); err != nil {
				var ce *wk.CallError
				errors.As(err, &ce)
				out = append(out, ce.Status.String())
				continue
			}
			out = append(out, "ok")
		}
		return wk.Text(200, strings.Join(out, " "))
	case r.Method == "GET" && r.Path == "/count":
		return wk.Text(200, strconv.Itoa(count))
	}
	return wk.Text(404, "no such path")
}

func fan(class, nstr string) *wk.Response {
	n, err := strconv.Atoi(nstr)
	if err != nil || n < 0 {
		return wk.Text(400, "bad n")
	}
	sum := 0
	for start := 0; start < n; start += 16 {
		var under []*wk.PendingCall
		for i := start; i < min(start+16, n); i++ {
			under = append(under, wk.StartCall(class, strconv.Itoa(i), []byte("count")))
		}
		for _, p := range under {
			reply, err := p.Wait()
			if err != nil {
				return wk.Text(502, describe(err))
			}
			v, _ := strconv.Atoi(string(reply))
			sum += v
		}
	}
	return wk.Text(200, strconv.Itoa(sum))
}

func answer(_ wk.Caller, payload []byte) []byte {
	cmd, arg, _ := strings.Cut(string(payload), ":")
	switch cmd {
	case "echo":
		return []byte(arg)
	case "count":
		count++
		return []byte(strconv.Itoa(count))
	case "call":
		to, p, _ := strings.Cut(arg, ":")
		class, name, _ := strings.Cut(to, "/")
		reply, err := wk.Call(class, name, []byte(p))
		if err != nil {
			return []byte("error:" + describe(err))
		}
		return reply
	case "broadcast":
		n, _ := wk.Broadcast(arg, 0)
		return []byte("sent " + strconv.Itoa(n))
	case "crash":
		panic("asked to crash")
	case "spin":
		for {
		}
	case "big":
		n, _ := strconv.Atoi(arg)
		return []byte(strings.Repeat("x", n))
	case "sleep":
		ms, _ := strconv.Atoi(arg)
		time.Sleep(time.Duration(ms) * time.Millisecond)
		return []byte("slept")
	}
	return []byte("unknown command " + cmd)
}

// describe is a call's error as "<status>: <message>".
func describe(err error) string {
	var ce *wk.CallError
	if errors.As(err, &ce) {
		return ce.Status.String() + ": " + ce.Message
	}
	return err.Error()
}

func main() {}
