package node

import (
	"context"
	"net/http"
	"testing"

	"github.com/wasmkeep/wasmkeep/host/rooms"
	"github.com/wasmkeep/wasmkeep/internal/wstest"
)

// routedPlacement is a single node's placement that says some rooms run
// elsewhere and some nowhere yet.
type routedPlacement struct {
	*rooms.Local
	routes map[string]rooms.Route // by room name
}

func (p routedPlacement) Route(_ context.Context, key rooms.Key) (rooms.Route, error) {
	if r, ok := p.routes[key.Name]; ok {
		return r, nil
	}
	return rooms.Route{Kind: rooms.RouteHere}, nil
}

// TestRouteBeforeAdmitting: the server asks where a room runs before
// anything else. A room on another node, or one nobody may run yet, gets
// 503 without the class being looked up (an unknown class still answers
// 503, not 404) and without the socket hub admitting an upgrade.
func TestRouteBeforeAdmitting(t *testing.T) {
	place := routedPlacement{Local: rooms.NewLocal(1), routes: map[string]rooms.Route{
		"away":    {Kind: rooms.RouteElsewhere, Node: "n2", Address: "10.0.0.2:8080"},
		"waiting": {Kind: rooms.RouteWait},
	}}
	n := startNode(t, Config{Placement: place})
	putClass(t, n, "echo", "./testdata/guests/echo")
	r := do(t, "GET", n.URL()+"/actor/nosuchclass/away", nil)
	if r.Status != http.StatusServiceUnavailable || r.Header.Get("X-Wasmkeep-Node") != "n2" {
		t.Fatalf("a room on another node, of a class unknown here: %d %q, X-Wasmkeep-Node %q", r.Status, r.Body, r.Header.Get("X-Wasmkeep-Node"))
	}
	if r := do(t, "GET", n.URL()+"/actor/echo/waiting", nil); r.Status != http.StatusServiceUnavailable || r.Header.Get("Retry-After") == "" {
		t.Fatalf("a room nobody may run yet: %d %q", r.Status, r.Body)
	}
	if _, err := wstest.DialErr(n.URL()+"/actor/echo/away", nil); err == nil {
		t.Fatal("an upgrade to a room on another node was accepted")
	}
	if got := n.Hub.Count(); got != 0 {
		t.Fatalf("the hub admitted %d sockets for rooms elsewhere", got)
	}
	expect(t, 200, "GET", n.URL()+"/actor/echo/here", nil)
}
