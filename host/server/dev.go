package server

import (
	"bytes"
	"html"
	"net/http"
	"sync"

	"github.com/wasmkeep/wasmkeep/abi"
)

// The dev loop's build errors (`wasmkeep dev`). The command that builds a
// room's code writes its last build error into BuildErrors, and the rooms
// of that class show it to a browser while the last good version goes on
// serving them:
//
//   - A text/html answer of the room gets a banner with the error,
//     appended after the page (browsers put what follows </html> into the
//     body, and the page's own markup stays as the room wrote it). The
//     page keeps working under it, sockets included: the developer sees
//     both what is broken and what still runs, as with a bundler's error
//     overlay. A page whose Content-Security-Policy forbids inline styles
//     shows the banner unstyled, at the end of the page.
//   - A class that has no good version yet (the first build failed) has
//     nothing to serve: its rooms answer 503 with a page of the error
//     instead of "unknown class".
//
// Other answers (JSON, text, WebSockets) are left as they are: a client
// that parses them must not find a banner in them, and the terminal of
// `wasmkeep dev` shows the error anyway. A node without BuildErrors (every
// node but a dev one) does none of this.

// BuildErrors holds the last build error of each class a dev loop builds.
// The zero value is ready to use; it is safe for concurrent use.
type BuildErrors struct {
	mu   sync.RWMutex
	errs map[string]string
}

// Set records class's last build error; "" clears it (a good build).
func (b *BuildErrors) Set(class, msg string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if msg == "" {
		delete(b.errs, class)
		return
	}
	if b.errs == nil {
		b.errs = map[string]string{}
	}
	b.errs[class] = msg
}

// Get returns class's last build error, "" if its last build went well.
// A nil BuildErrors has none.
func (b *BuildErrors) Get(class string) string {
	if b == nil {
		return ""
	}
	b.mu.RLock()
	defer b.mu.RUnlock()
	return b.errs[class]
}

// buildErrorBanner is the banner appended to a room's HTML page; %s is the
// escaped error. Inline styles only: a room's page may load nothing else.
const buildErrorBanner = `<div id="wasmkeep-build-error" role="alert" style="position:fixed;left:0;right:0;bottom:0;max-height:50vh;overflow:auto;z-index:2147483647;margin:0;padding:12px 16px;background:#2b0b0e;color:#ffd7d7;border-top:3px solid #e5484d;font:13px/1.4 ui-monospace,Menlo,Consolas,monospace">` +
	`<strong>wasmkeep dev: the last build failed.</strong> This page is served by the last good version; save a fix and reload.` +
	`<pre style="margin:8px 0 0;white-space:pre-wrap">%s</pre></div>`

// withBuildError returns resp with the banner of msg appended if it is an
// HTML page; other answers are returned as they are.
func withBuildError(resp *abi.Response, msg string) *abi.Response {
	if !isHTML(resp) {
		return resp
	}
	banner := bytes.Replace([]byte(buildErrorBanner), []byte("%s"), []byte(html.EscapeString(msg)), 1)
	out := *resp
	out.Body = append(append(make([]byte, 0, len(resp.Body)+len(banner)), resp.Body...), banner...)
	return &out
}

func isHTML(resp *abi.Response) bool {
	for _, h := range resp.Headers {
		if http.CanonicalHeaderKey(h.Name) == "Content-Type" {
			return bytes.HasPrefix(bytes.ToLower(bytes.TrimSpace([]byte(h.Value))), []byte("text/html"))
		}
	}
	return false
}

// buildErrorPage answers for a class whose code has never built: there is
// no version to serve, only the error.
func buildErrorPage(w http.ResponseWriter, class, msg string) {
	h := w.Header()
	h.Set("Content-Type", "text/html; charset=utf-8")
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("Retry-After", "1")
	w.WriteHeader(http.StatusServiceUnavailable)
	_, _ = w.Write([]byte("<!doctype html>\n<meta charset=utf-8>\n<title>wasmkeep dev: " + html.EscapeString(class) +
		" does not build</title>\n<h1>The class " + html.EscapeString(class) + " has not built yet</h1>\n" +
		"<p>wasmkeep dev has no good version of it to serve. Save a fix and reload.</p>\n<pre>" + html.EscapeString(msg) + "</pre>\n"))
}
