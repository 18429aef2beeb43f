// Command echo is the host tests' well-behaved guest: it reflects what it
// receives so that tests can check the host's encoding of requests and
// socket events, and it exposes the SDK's room calls over HTTP.
//
// Requests (checked in this order):
//
//	GET  /sockets            the room's open socket ids, comma-separated ("" if none)
//	POST /broadcast          broadcasts the body as a text message; answers the count
//	POST /close?id=N&code=C  closes socket N with code C (reason "closed by echo");
//	                         answers "ok" or the error
//	GET  /room               "class/name"
//	GET  /secret/NAME        the app's secret NAME, or 404 and the error
//	POST /fetch?n=N          fetches the URL in the body N times at once (1
//	                         if no n), one line each: "<HTTP status> <body>"
//	                         or "<wasmkeep status> <the host's message>"; a
//	                         single fetch that fails answers 502
//	POST /log?level=L        logs the body at level L (0–3); answers "ok"
//	POST /checkpoint         answers "ok" or the error Checkpoint returned
//	POST /alarm              answers "ok" or the error SetAlarm returned
//	POST /garbage?kb=N       allocates N KiB that nothing keeps; answers "ok"
//	GET  /collections        the collections the SDK has run (Collections)
//	anything else            200 with the echo body below
//
// The echo body is four lines "key value\n" and then the raw body:
//
//	method GET
//	path /some/path
//	query a=1&b=2
//	x-test <value of the first X-Test header, "" if none>
//	body <the request body, verbatim, to the end>
//
// The echo response carries the header "X-Echo: 1". A query parameter
// status=N on an echoed request makes the answer's status N.
//
// Sockets: on open the socket is sent "open <path>?<query>"; every message
// is sent back to its socket with the same kind (text or binary), as it came
// (SendText, not Send(m.Text())); closes are ignored.
package main

import (
	"errors"
	"strconv"
	"strings"
	"time"

	wk "github.com/wasmkeep/wasmkeep/guest-sdk/go"
)

func init() {
	wk.HandleRequest(serve)
	wk.HandleSocketOpen(func(s wk.Socket, o *wk.SocketOpen) {
		s.Send("open " + o.Path + "?" + o.Query)
	})
	wk.HandleSocketMessage(func(s wk.Socket, m wk.Message) {
		if m.IsText() {
			s.SendText(m.Data) // valid UTF-8 already: no copy into a string
		} else {
			s.SendBinary(m.Data)
		}
	})
}

func serve(r *wk.Request) *wk.Response {
	switch {
	case r.Method == "GET" && r.Path == "/sockets":
		ids := wk.Sockets()
		parts := make([]string, len(ids))
		for i, id := range ids {
			parts[i] = strconv.FormatUint(uint64(id), 10)
		}
		return wk.Text(200, strings.Join(parts, ","))
	case r.Method == "POST" && r.Path == "/broadcast":
		n, err := wk.Broadcast(string(r.Body), 0)
		if err != nil {
			return wk.Text(500, err.Error())
		}
		return wk.Text(200, strconv.Itoa(n))
	case r.Method == "POST" && r.Path == "/close":
		id, err1 := strconv.ParseUint(r.QueryValue("id"), 10, 32)
		code, err2 := strconv.Atoi(r.QueryValue("code"))
		if err1 != nil || err2 != nil {
			return wk.Text(400, "want ?id=N&code=C")
		}
		return result(wk.Socket(id).Close(code, "closed by echo"))
	case r.Method == "GET" && r.Path == "/room":
		info := wk.Room()
		return wk.Text(200, info.Class+"/"+info.Name)
	case r.Method == "GET" && strings.HasPrefix(r.Path, "/secret/"):
		v, err := wk.Secret(strings.TrimPrefix(r.Path, "/secret/"))
		if err != nil {
			return wk.Text(404, err.Error())
		}
		return wk.Text(200, v)
	case r.Method == "POST" && r.Path == "/fetch":
		return fetchAll(string(r.Body), r.QueryValue("n"))
	case r.Method == "POST" && r.Path == "/log":
		level, _ := strconv.Atoi(r.QueryValue("level"))
		wk.Log(wk.Level(level), string(r.Body))
		return wk.Text(200, "ok")
	case r.Method == "POST" && r.Path == "/checkpoint":
		return result(wk.Checkpoint())
	case r.Method == "POST" && r.Path == "/alarm":
		return result(wk.SetAlarm(time.Now().Add(time.Minute)))
	case r.Method == "POST" && r.Path == "/garbage":
		kb, _ := strconv.Atoi(r.QueryValue("kb"))
		garbage = make([]byte, kb<<10)
		return wk.Text(200, "ok")
	case r.Method == "GET" && r.Path == "/collections":
		return wk.Text(200, strconv.FormatUint(wk.Collections(), 10))
	}
	var b strings.Builder
	b.WriteString("method " + r.Method + "\n")
	b.WriteString("path " + r.Path + "\n")
	b.WriteString("query " + r.Query + "\n")
	b.WriteString("x-test " + r.Header("X-Test") + "\n")
	b.WriteString("body ")
	b.Write(r.Body)
	status := 200
	if s, err := strconv.Atoi(r.QueryValue("status")); err == nil {
		status = s
	}
	return wk.Text(status, b.String()).SetHeader("X-Echo", "1")
}

// fetchAll starts n fetches of url, then waits for each (see POST /fetch).
func fetchAll(url, n string) *wk.Response {
	count, _ := strconv.Atoi(n)
	ps := make([]*wk.PendingFetch, max(count, 1))
	for i := range ps {
		ps[i] = wk.StartFetch(wk.FetchRequest{URL: url})
	}
	lines := make([]string, len(ps))
	status := 200
	for i, p := range ps {
		resp, err := p.Wait()
		var fe *wk.FetchError
		switch {
		case errors.As(err, &fe):
			lines[i] = strconv.Itoa(int(fe.Status)) + " " + fe.Message
			status = 502
		case err != nil:
			lines[i] = err.Error()
			status = 502
		default:
			lines[i] = strconv.Itoa(resp.Status) + " " + string(resp.Body)
		}
	}
	if len(ps) > 1 {
		status = 200
	}
	return wk.Text(status, strings.Join(lines, "\n"))
}

// garbage holds the last allocation of POST /garbage, which the next one
// makes garbage.
var garbage []byte

func result(err error) *wk.Response {
	if err != nil {
		return wk.Text(200, err.Error())
	}
	return wk.Text(200, "ok")
}

func main() {}
