// Command site is the front of the example app: uploaded as a front under
// /app (wasmkeep class put --front /app site site.wasm), it serves the
// app's page and its JSON API on every node, keeps no state of its own,
// and reaches the lobby (examples/lobby) and the tables (examples/table)
// with calls.
//
//	GET  /app                        the page
//	GET  /app/api/tables             every table's state (the lobby asks
//	                                 them): a JSON array
//	POST /app/api/tables             creates a table; the body is its
//	                                 title; answers {"name": …}
//	GET  /app/api/lobby              the player counts the tables told the
//	                                 lobby: a JSON array
//	POST /app/api/tables/<t>/announce  sends the body to every player of
//	                                 table <t>; answers {"sent": n}
//	WebSocket /app/ws/<t>?player=<p> checks the player's name and hands
//	                                 the socket to table <t>, which learns
//	                                 the name from Wasmkeep-Front-Player
//
// A call that fails is answered 502 with what the host said; a refused
// one (the room's node draining, say) 503 with Retry-After, since trying
// again is safe.
package main

import (
	_ "embed"
	"encoding/json"
	"errors"
	"strings"

	wk "github.com/wasmkeep/wasmkeep/guest-sdk/go"
)

//go:embed site.html
var page string

const prefix = "/app"

func init() { wk.HandleRequest(serve) }

func serve(r *wk.Request) *wk.Response {
	path := strings.TrimPrefix(r.Path, prefix)
	switch {
	case path == "" || path == "/":
		if r.Method != "GET" {
			return wk.Text(405, "GET only")
		}
		return wk.HTML(200, page)
	case path == "/api/tables" && r.Method == "GET":
		return callJSON("lobby", "main", "list")
	case path == "/api/lobby" && r.Method == "GET":
		return callJSON("lobby", "main", "counts")
	case path == "/api/tables" && r.Method == "POST":
		name, err := wk.Call("lobby", "main", []byte("create:"+string(r.Body)))
		if err != nil {
			return failed(err)
		}
		if msg, bad := strings.CutPrefix(string(name), "error: "); bad {
			return wk.Text(400, msg)
		}
		return jsonOf(201, map[string]string{"name": string(name)})
	case strings.HasPrefix(path, "/api/tables/") && strings.HasSuffix(path, "/announce") && r.Method == "POST":
		table := strings.TrimSuffix(strings.TrimPrefix(path, "/api/tables/"), "/announce")
		if !validTable(table) {
			return wk.Text(404, "no such table")
		}
		sent, err := wk.Call("table", table, []byte("announce:"+string(r.Body)))
		if err != nil {
			return failed(err)
		}
		return jsonBytes(200, []byte(`{"sent":`+string(sent)+`}`))
	case strings.HasPrefix(path, "/ws/"):
		table := strings.TrimPrefix(path, "/ws/")
		player := strings.TrimSpace(r.QueryValue("player"))
		switch {
		case !r.IsUpgrade():
			return wk.Text(400, "a WebSocket only")
		case !validTable(table):
			return wk.Text(404, "no such table")
		case !validPlayer(player):
			return wk.Text(403, "a player's name is 1 to 24 letters, digits, spaces, - or _")
		}
		return wk.HandOver("table", table, wk.Header{Name: "Wasmkeep-Front-Player", Value: player})
	}
	return wk.Text(404, "not found")
}

// callJSON answers what the room answers a call, as JSON.
func callJSON(class, name, cmd string) *wk.Response {
	b, err := wk.Call(class, name, []byte(cmd))
	if err != nil {
		return failed(err)
	}
	return jsonBytes(200, b)
}

func failed(err error) *wk.Response {
	if errors.Is(err, wk.ErrRefused) {
		return wk.Text(503, err.Error()).SetHeader("Retry-After", "1")
	}
	return wk.Text(502, err.Error())
}

func jsonOf(status int, v any) *wk.Response {
	b, _ := json.Marshal(v)
	return jsonBytes(status, b)
}

// jsonBytes answers JSON, ended by a newline as a terminal likes it.
func jsonBytes(status int, b []byte) *wk.Response {
	return wk.Data(status, "application/json", append(b, '\n'))
}

// validTable: the lobby names tables t1, t2, …
func validTable(s string) bool {
	if len(s) < 2 || len(s) > 8 || s[0] != 't' {
		return false
	}
	for _, c := range s[1:] {
		if c < '0' || c > '9' {
			return false
		}
	}
	return true
}

func validPlayer(s string) bool {
	if s == "" || len(s) > 24 {
		return false
	}
	for _, c := range s {
		ok := c == ' ' || c == '-' || c == '_' || ('a' <= c && c <= 'z') || ('A' <= c && c <= 'Z') || ('0' <= c && c <= '9')
		if !ok {
			return false
		}
	}
	return true
}

func main() {}
