package node

import (
	"encoding/json"
	"errors"
	"net/http"
	"testing"

	"github.com/gobwas/ws"

	"github.com/wasmkeep/wasmkeep/host/server"
	"github.com/wasmkeep/wasmkeep/internal/wstest"
)

// originGuest is the guest that reports and refuses its sockets' Origin.
const originGuest = "./host/node/testdata/origin"

// originURL is the URL of a raw (or, with phoenix, a Phoenix) socket to
// a room of the origin guest.
func originURL(n *Node, room string, phoenix bool) string {
	url := n.URL() + "/actor/origin/" + room
	if phoenix {
		url += "/socket/websocket?vsn=2.0.0"
	}
	return url
}

// originHeader is a browser's Origin header ("" for none).
func originHeader(origin string) http.Header {
	if origin == "" {
		return nil
	}
	return http.Header{"Origin": {origin}}
}

// TestUpgradeOrigins: a WebSocket or Phoenix upgrade from a page of an
// origin that --allowed-origins does not list (by default: any but the
// node's own) is refused with 403 before its room is asked; the room
// sees the Origin of those it gets, and may refuse them by closing the
// socket in its open handler.
func TestUpgradeOrigins(t *testing.T) {
	t.Parallel()
	own := func(n *Node) string { return "http://" + n.Addr() }
	// The helpers dial with the subtest's t, whose node they belong to: its
	// sockets close before its node stops (a stop waits the close timeout,
	// 2 s, for a socket nobody reads any more).
	expectOrigin := func(t *testing.T, n *Node, room, origin string) {
		t.Helper()
		c := wstest.DialHeader(t, originURL(n, room, false), originHeader(origin))
		if got := c.ReadText(); got != "origin "+origin {
			t.Fatalf("raw socket with Origin %q: the room saw %q", origin, got)
		}
		p := &phx{t: t, c: wstest.DialHeader(t, originURL(n, room, true), originHeader(origin))}
		_, st, resp := p.join("room:x", map[string]any{})
		var got struct{ Origin string }
		if err := json.Unmarshal(resp, &got); st != "ok" || err != nil || got.Origin != origin {
			t.Fatalf("Phoenix join with Origin %q: %s %s, want the room to see it", origin, st, resp)
		}
	}
	expectRefused := func(t *testing.T, n *Node, room, origin string) {
		t.Helper()
		for _, phoenix := range []bool{false, true} {
			_, err := wstest.DialErr(originURL(n, room, phoenix), originHeader(origin))
			if !errors.Is(err, ws.StatusError(http.StatusForbidden)) {
				t.Fatalf("socket (Phoenix %v) with Origin %q: %v, want HTTP 403", phoenix, origin, err)
			}
		}
		if _, ok := roomRowOf(t, n, "origin", room); ok {
			t.Fatalf("the room %s was asked for a refused upgrade", room)
		}
	}

	t.Run("default", func(t *testing.T) {
		n := startNode(t, Config{})
		putClass(t, n, "origin", originGuest)
		expectRefused(t, n, "evil", "http://evil.example")
		expectRefused(t, n, "port", "http://127.0.0.1:1")
		expectRefused(t, n, "null", "null")
		expectOrigin(t, n, "none", "")
		expectOrigin(t, n, "own", own(n))
		if got := metric(t, n, "wasmkeep_http_origin_refused_total"); got != 6 {
			t.Errorf("wasmkeep_http_origin_refused_total %v, want 6", got)
		}
	})
	t.Run("listed", func(t *testing.T) {
		n := startNode(t, Config{Server: server.Config{AllowedOrigins: []string{"https://*.app.example", "http://refused.example"}}})
		putClass(t, n, "origin", originGuest)
		expectOrigin(t, n, "sub", "https://a.app.example")
		expectOrigin(t, n, "own", own(n))
		expectRefused(t, n, "scheme", "http://a.app.example")
		expectRefused(t, n, "parent", "https://app.example")
		// Allowed by the node, refused by the room: closed in its open
		// handler, for raw and Phoenix sockets alike.
		for _, phoenix := range []bool{false, true} {
			c := wstest.DialHeader(t, originURL(n, "picky", phoenix), originHeader("http://refused.example"))
			if e := c.ExpectClose(4003); e.Reason != "origin refused" {
				t.Fatalf("Phoenix %v: closed with %d %q", phoenix, e.Code, e.Reason)
			}
		}
	})
	t.Run("any", func(t *testing.T) {
		n := startNode(t, Config{Server: server.Config{AllowedOrigins: []string{server.AnyOrigin}}})
		putClass(t, n, "origin", originGuest)
		expectOrigin(t, n, "evil", "http://evil.example")
	})
}
