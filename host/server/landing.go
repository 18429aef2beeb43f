package server

import (
	"bytes"
	"crypto/sha256"
	"encoding/base64"
	"html/template"
	"net"
	"net/http"
	"net/url"
	"strings"
)

// The landing page: GET / of a node reached on loopback, from loopback,
// shows the node's classes, a few of its rooms and links to the dashboard
// and the docs, so that a developer who opens http://127.0.0.1:8080/ after
// `wasmkeep serve`, `demo` or `dev` finds their way.
//
// Anywhere else / stays the bare 404 it always was. The class list and
// the room names are the operator's business: on a public listener they
// would tell anyone what the node runs and which rooms exist (room names
// are often secrets of a sort: an invitation link, a user id). So the
// page needs what the admin API needs of a client without a token, and a
// loopback listener besides: the request must reach the node on a
// loopback address (a node on every address reached through its public
// one keeps the 404), come from loopback without a forwarding header (a
// proxy on the node's host forwards the world), name the node in Host
// (DNS rebinding: a page of another site must not read it) and not come
// from a page of another origin. Nothing of the admin token is on the
// page; the dashboard link makes the browser ask for it if it is needed.

// landingRooms caps the rooms the page lists: it is a way in, the
// dashboard lists them all.
const landingRooms = 10

// docsURL is where the landing page sends a reader for the docs.
const docsURL = "https://github.com/wasmkeep/wasmkeep/blob/main/docs/getting-started.md"

// landingStyle is the page's one style element.
const landingStyle = `
body{font:15px/1.5 system-ui,sans-serif;max-width:46rem;margin:2rem auto;padding:0 1rem;color:#1c2024}
code,td.hash{font-family:ui-monospace,Menlo,Consolas,monospace;font-size:13px}
table{border-collapse:collapse}td,th{padding:2px 12px 2px 0;text-align:left}
.muted{color:#60646c}
`

// landingCSP lets the page use its own style and nothing else: no script,
// nothing loaded, no framing.
var landingCSP = func() string {
	sum := sha256.Sum256([]byte(landingStyle))
	return "default-src 'none'; style-src 'sha256-" + base64.StdEncoding.EncodeToString(sum[:]) +
		"'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'"
}()

// landingPage is the page; html/template escapes every name on it.
var landingPage = template.Must(template.New("landing").Parse(`<!doctype html>
<html lang="en">
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>wasmkeep node</title>
<style>` + landingStyle + `</style>
<h1>wasmkeep node</h1>
<p>Rooms live at <code>/actor/&lt;class&gt;/&lt;room&gt;</code>: any name after a class is a room of its own.
{{if .Dashboard}}<a href="/admin/">The dashboard</a>{{else}}The dashboard (on this node's <code>--admin-listen</code> address, at <code>/admin/</code>){{end}}
shows every room, socket and class; <a href="{{.Docs}}">the docs</a> start with getting started.</p>
<h2>Classes</h2>
{{if .Classes}}<table>
<tr><th>class</th><th>version</th><th>size</th><th>uploaded</th><th>front at</th></tr>
{{range .Classes}}<tr><td>{{.Name}}</td><td class="hash">{{.Hash}}</td><td>{{.Size}} B</td><td>{{.Uploaded}}</td><td>{{range .Front}}<a href="{{.}}">{{.}}</a> {{end}}</td></tr>
{{end}}</table>
{{else}}<p class="muted">No classes yet: <code>wasmkeep class put NAME FILE.wasm</code>, or <code>wasmkeep dev DIR</code> for a room you are writing.</p>
{{end}}<h2>Rooms</h2>
{{if .Rooms}}<ul>
{{range .Rooms}}<li><a href="{{.URL}}">{{.Class}}/{{.Name}}</a> <span class="muted">{{.State}}{{if .Sockets}}, {{.Sockets}} sockets{{end}}</span></li>
{{end}}</ul>{{if .More}}<p class="muted">and {{.More}} more{{if .Dashboard}} (<a href="/admin/">dashboard</a>){{end}}.</p>{{end}}
{{else}}<p class="muted">No rooms yet: a room exists once something talks to it.</p>
{{end}}</html>
`))

type landingClass struct {
	Name, Hash, Uploaded string
	Size                 int
	// Front are a front's prefixes.
	Front []string
}

type landingRoom struct {
	Class, Name, State, URL string
	Sockets                 int
}

// landing serves GET /: the page on loopback, the 404 elsewhere.
func (s *Server) landing(w http.ResponseWriter, r *http.Request) {
	if !s.landingAllowed(r) {
		notFound(w, r)
		return
	}
	recs, ok := s.classRecords(w, r)
	if !ok {
		return
	}
	data := struct {
		Dashboard bool
		Docs      string
		Classes   []landingClass
		Rooms     []landingRoom
		More      int
	}{Dashboard: s.adminMux == nil, Docs: docsURL}
	for _, c := range s.classListings(r.Context(), recs) {
		data.Classes = append(data.Classes, landingClass{Name: c.Name, Hash: shortHash(c.Hash), Size: c.Size,
			Uploaded: c.Uploaded.UTC().Format("2006-01-02 15:04:05 UTC"), Front: c.Front})
	}
	list, err := s.rooms.List(r.Context())
	if err != nil {
		s.unavailable(w, "listing rooms", err)
		return
	}
	for i, info := range list {
		if i == landingRooms {
			data.More = len(list) - i
			break
		}
		data.Rooms = append(data.Rooms, landingRoom{Class: info.Class, Name: info.Name, State: string(info.State), Sockets: info.Sockets,
			URL: "/actor/" + url.PathEscape(info.Class) + "/" + url.PathEscape(info.Name)})
	}
	var page bytes.Buffer
	if err := landingPage.Execute(&page, data); err != nil {
		s.log.Error("landing page", "err", err)
		textError(w, http.StatusInternalServerError, "the landing page failed: "+err.Error())
		return
	}
	h := w.Header()
	h.Set("Content-Type", "text/html; charset=utf-8")
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("Referrer-Policy", "no-referrer")
	h.Set("Cache-Control", "no-store")
	h.Set("Content-Security-Policy", landingCSP)
	_, _ = w.Write(page.Bytes())
}

// landingAllowed reports whether r may see the landing page (see the top
// of this file): it reached a loopback address of the node, from
// loopback, for the node's own name, and not for a page of another
// origin.
func (s *Server) landingAllowed(r *http.Request) bool {
	local, ok := r.Context().Value(http.LocalAddrContextKey).(net.Addr)
	if !ok || !isLoopback(local.String()) || !fromLoopback(r) {
		return false
	}
	return s.guardian.refusal(r, true) == ""
}

// notFound is the node's answer for a path that is nothing.
func notFound(w http.ResponseWriter, _ *http.Request) {
	textError(w, http.StatusNotFound, "not found: rooms live at /actor/<class>/<name>")
}

// shortHash is a module hash as the page shows it: its first 12 hex
// digits, like the CLI's class list.
func shortHash(h string) string {
	h = strings.TrimPrefix(h, "sha256:")
	if len(h) > 12 {
		return h[:12]
	}
	return h
}
