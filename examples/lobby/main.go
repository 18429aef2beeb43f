// Command lobby is the lobby of the example app (examples/site is its
// front, examples/table its tables): it creates tables and knows them.
// The front reaches it with calls; one room, lobby/main, serves the app.
//
// Calls it answers (the payload is a command):
//
//	create:<title>    creates a table named t<n>, tells it its title (a
//	                  call), and answers its name
//	list              every table's state as a JSON array, asked of the
//	                  tables themselves: one call to each, all at once
//	players:<t>:<n>   a table telling how many players sit at it (the
//	                  tables call back); answers "ok"
//	counts            the player counts the tables told, as JSON
//
// The lobby keeps its tables' names and titles in memory: they survive
// hibernation with the rest of the room.
package main

import (
	"encoding/json"
	"strconv"
	"strings"

	wk "github.com/wasmkeep/wasmkeep/guest-sdk/go"
)

type table struct {
	Name    string `json:"name"`
	Title   string `json:"title"`
	Players int    `json:"players"`
}

var tables []*table

// maxTables bounds the lobby's list; maxTitle a table's title.
const (
	maxTables = 200
	maxTitle  = 80
)

func init() { wk.HandleCall(answer) }

func answer(_ wk.Caller, payload []byte) []byte {
	cmd, arg, _ := strings.Cut(string(payload), ":")
	switch cmd {
	case "create":
		return create(arg)
	case "list":
		return list()
	case "players":
		name, n, _ := strings.Cut(arg, ":")
		for _, t := range tables {
			if t.Name == name {
				t.Players, _ = strconv.Atoi(n)
			}
		}
		return []byte("ok")
	case "counts":
		b, _ := json.Marshal(tables)
		return b
	}
	return []byte("unknown command")
}

func create(title string) []byte {
	title = strings.TrimSpace(title)
	if title == "" || len(title) > maxTitle {
		return []byte("error: a title is 1 to 80 bytes")
	}
	if len(tables) == maxTables {
		return []byte("error: the lobby is full")
	}
	t := &table{Name: "t" + strconv.Itoa(len(tables)+1), Title: title}
	if _, err := wk.Call("table", t.Name, []byte("init:"+title)); err != nil {
		return []byte("error: " + err.Error())
	}
	tables = append(tables, t)
	return []byte(t.Name)
}

// list asks every table for its state at once: the calls run side by
// side, at most 16 at a time from one room.
func list() []byte {
	states := make([]json.RawMessage, 0, len(tables))
	for start := 0; start < len(tables); start += 16 {
		var asked []*wk.PendingCall
		for _, t := range tables[start:min(start+16, len(tables))] {
			asked = append(asked, wk.StartCall("table", t.Name, []byte("state")))
		}
		for _, p := range asked {
			state, err := p.Wait()
			if err != nil {
				wk.Warn("a table did not answer: " + err.Error())
				continue
			}
			states = append(states, state)
		}
	}
	b, _ := json.Marshal(states)
	return b
}

func main() {}
