// Command kv is the model tests' key-value room: a map of keys to values
// and a version that counts the room's writes, kept in plain Go maps and
// slices (each write allocates, so the heap churns and the garbage
// collector runs between snapshots).
//
//	PUT    /k/<key>   stores the body as the key's value; answers the new
//	                  version, decimal
//	DELETE /k/<key>   removes the key (a write even if it was absent);
//	                  answers the new version
//	GET    /k/<key>   the key's value, or 404 "no such key"
//	GET    /state     the whole room, canonical: "v=<version>\n" and then
//	                  one line "<key>=<value>\n" per key in byte order
//	                  (values are written verbatim: tests use values
//	                  without newlines)
//	GET    /version   the version, decimal
//	POST   /trap      panics (the room crashes and rolls back)
//
// Keys are the rest of the path after /k/, as the host delivers it (still
// escaped); an empty key is refused with 400. Any other request is 404,
// and another method on a known path 405.
package main

import (
	"sort"
	"strconv"
	"strings"

	wk "github.com/wasmkeep/wasmkeep/guest-sdk/go"
)

var (
	version uint64
	values  = map[string][]byte{}
	// journal keeps the last writes (key and a copy of the value), a
	// slice that grows, is trimmed and reallocated: more heap churn.
	journal []write
)

type write struct {
	key   string
	value []byte // nil for a delete
}

const journalMax = 64

func init() {
	wk.HandleRequest(serve)
}

func serve(r *wk.Request) *wk.Response {
	if key, ok := strings.CutPrefix(r.Path, "/k/"); ok {
		if key == "" {
			return wk.Text(400, "empty key")
		}
		switch r.Method {
		case "GET":
			v, ok := values[key]
			if !ok {
				return wk.Text(404, "no such key")
			}
			return wk.Data(200, "application/octet-stream", v)
		case "PUT":
			v := append([]byte(nil), r.Body...) // a fresh block per write
			values[key] = v
			record(key, v)
			return versionText()
		case "DELETE":
			delete(values, key)
			record(key, nil)
			return versionText()
		}
		return wk.Text(405, "method not allowed").SetHeader("Allow", "GET, PUT, DELETE")
	}
	switch r.Path {
	case "/state":
		if r.Method != "GET" {
			return wk.Text(405, "method not allowed").SetHeader("Allow", "GET")
		}
		return wk.Text(200, dump())
	case "/version":
		if r.Method != "GET" {
			return wk.Text(405, "method not allowed").SetHeader("Allow", "GET")
		}
		return versionText()
	case "/trap":
		if r.Method != "POST" {
			return wk.Text(405, "method not allowed").SetHeader("Allow", "POST")
		}
		panic("kv: trap requested")
	}
	return wk.Text(404, "not found")
}

func record(key string, v []byte) {
	version++
	journal = append(journal, write{key: key, value: v})
	if len(journal) > journalMax {
		// Copy the newest half into a new array, dropping the old one.
		journal = append([]write(nil), journal[len(journal)-journalMax/2:]...)
	}
}

func versionText() *wk.Response {
	return wk.Text(200, strconv.FormatUint(version, 10))
}

func dump() string {
	keys := make([]string, 0, len(values))
	for k := range values {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var b strings.Builder
	b.WriteString("v=" + strconv.FormatUint(version, 10) + "\n")
	for _, k := range keys {
		b.WriteString(k)
		b.WriteByte('=')
		b.Write(values[k])
		b.WriteByte('\n')
	}
	return b.String()
}

func main() {}
