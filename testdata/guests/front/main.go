// Command front is the fronts tests' front: it serves HTTP under
// whatever prefixes it is uploaded with, reaches rooms of class caller
// (testdata/guests/caller) with calls, and hands WebSocket upgrades to
// them once it has checked a token. The command is the request path's
// last segment, whatever the prefix before it:
//
//	GET  .../call?to=<class>/<name>&payload=<p>  calls that room with p;
//	                                   answers 200 and the reply, or 502
//	                                   "<status>: <message>"
//	GET  .../fetch?url=<u>             fetches u; answers 200 "<HTTP
//	                                   status> <body>", or 502 "<status>:
//	                                   <message>"
//	GET  .../id                        this instance's id: 16 hex digits
//	                                   drawn when the instance started
//	GET  .../slow?room=<name>&ms=N     calls caller/<name> with "sleep:N"
//	                                   (the instance waits that long on
//	                                   the call), then answers its id
//	GET  .../big?kb=N                  N KiB of "x" (the Go SDK asks for
//	                                   an idle call once enough went out)
//	GET  .../crash                     panics
//	GET  .../spin                      loops until the event time limit
//	                                   ends it
//	GET  .../state                     what the host answers a front:
//	                                   "checkpoint <err>; broadcast <err>;
//	                                   room <class>/<name>"
//	GET  .../ws?room=<name>&token=<t>[&header=<Name>]  (an upgrade) no
//	                                   token: 401; a token other than
//	                                   "letmein": 403; else hands the
//	                                   socket to caller/<name> with the
//	                                   header Wasmkeep-Front-User: <t> (and
//	                                   <Name>: set-by-front if given)
//	anything else                      200 text/html "front page <path>"
package main

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"strconv"
	"strings"

	wk "github.com/wasmkeep/wasmkeep/guest-sdk/go"
)

var id = func() string {
	b := make([]byte, 8)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}()

func init() { wk.HandleRequest(serve) }

func serve(r *wk.Request) *wk.Response {
	cmd := r.Path[strings.LastIndexByte(r.Path, '/')+1:]
	switch {
	case r.IsUpgrade() && cmd == "ws":
		return upgrade(r)
	case cmd == "call":
		class, name, _ := strings.Cut(r.QueryValue("to"), "/")
		reply, err := wk.Call(class, name, []byte(r.QueryValue("payload")))
		if err != nil {
			return wk.Text(502, describe(err))
		}
		return wk.Data(200, "text/plain", reply)
	case cmd == "fetch":
		resp, err := wk.Fetch(wk.FetchRequest{URL: r.QueryValue("url")})
		if err != nil {
			return wk.Text(502, describe(err))
		}
		return wk.Text(200, strconv.Itoa(resp.Status)+" "+string(resp.Body))
	case cmd == "id":
		return wk.Text(200, id)
	case cmd == "slow":
		if _, err := wk.Call("caller", r.QueryValue("room"), []byte("sleep:"+r.QueryValue("ms"))); err != nil {
			return wk.Text(502, describe(err))
		}
		return wk.Text(200, id)
	case cmd == "big":
		kb, _ := strconv.Atoi(r.QueryValue("kb"))
		return wk.Text(200, strings.Repeat("x", kb<<10))
	case cmd == "crash":
		panic("asked to crash")
	case cmd == "spin":
		for {
		}
	case cmd == "state":
		_, berr := wk.Broadcast("to nobody", 0)
		room := wk.Room()
		return wk.Text(200, fmt.Sprintf("checkpoint %v; broadcast %v; room %s/%s", wk.Checkpoint(), berr, room.Class, room.Name))
	}
	return wk.HTML(200, "front page "+r.Path)
}

func upgrade(r *wk.Request) *wk.Response {
	token := r.QueryValue("token")
	switch token {
	case "":
		return wk.Text(401, "a token, please")
	case "letmein":
	default:
		return wk.Text(403, "not that token")
	}
	headers := []wk.Header{{Name: "Wasmkeep-Front-User", Value: token}}
	if h := r.QueryValue("header"); h != "" {
		headers = append(headers, wk.Header{Name: h, Value: "set-by-front"})
	}
	return wk.HandOver("caller", r.QueryValue("room"), headers...)
}

// describe is a call's error as "<status>: <message>".
func describe(err error) string {
	var ce *wk.CallError
	if errors.As(err, &ce) {
		return ce.Status.String() + ": " + ce.Message
	}
	var fe *wk.FetchError
	if errors.As(err, &fe) {
		return fe.Status.String() + ": " + fe.Message
	}
	return err.Error()
}

func main() {}
