//go:build unix

package main

import (
	"fmt"
	"net/url"
	"strings"
	"testing"

	"github.com/wasmkeep/wasmkeep/cluster"
	"github.com/wasmkeep/wasmkeep/internal/wstest"
)

// TestFrontCallsWakeTheRoomAtHome: three `wasmkeep serve` processes on
// versitygw. A chat room (testdata/guests/caller) with a socket on a
// hibernates and stays parked there; a front (testdata/guests/front, under
// /f) on b and on c calls it, in turn, six times. Each call wakes the room
// on a at the next generation, the socket stays open and gets what each
// call broadcast, the room never runs on b or c, and the owner sweep
// closes no socket anywhere.
func TestFrontCallsWakeTheRoomAtHome(t *testing.T) {
	t.Parallel()
	c := newTestCluster(t, e2eTTL, true)
	c.args = []string{"--idle-timeout", parkIdle.String(), "--owner-sweep-interval", parkSweep.String()}
	for _, name := range []string{"a", "b", "c"} {
		c.add(name)
	}
	a, b, cc := c.node("a"), c.node("b"), c.node("c")
	c.putClass(a, "caller", "./testdata/guests/caller", true)
	if r := wk(t, nil, "class", "put", "--server", a.url, "--front", "/f", "front", guestFile(t, "./testdata/guests/front")); r.code != 0 {
		t.Fatalf("class put --front: %v", r)
	}
	acquired := map[string]float64{}
	for _, n := range []*clusterProc{b, cc} {
		acquired[n.name] = sumOf(mustMetrics(t, n), "wasmkeep_cluster_acquisitions_total", `outcome="acquired"`)
	}

	room := cluster.Room{Class: "caller", Name: "chat"}
	ws := wstest.Dial(t, "ws"+strings.TrimPrefix(a.url, "http")+"/actor/caller/chat")
	// The room's open event runs after the handshake: its echo of a first
	// message says the room ran, and so took its record.
	ws.Send("here")
	if got := ws.ReadText(); got != "here" {
		t.Fatalf("the room's echo of the first message: %q", got)
	}
	rec, _ := c.recordVersion("caller", "chat")
	if rec.Free || rec.Node != "a" {
		t.Fatalf("after the socket's open the record is %+v, want a's", rec)
	}
	gen := rec.Generation
	c.waitParkedRoom(a, room, gen)

	const calls = 6
	for i := 1; i <= calls; i++ {
		through := []*clusterProc{b, cc}[i%2]
		msg := fmt.Sprintf("call %d from the front on %s", i, through.name)
		target := through.url + "/f/call?to=caller/chat&payload=" + url.QueryEscape("broadcast:"+msg)
		status, body, _, err := askBy(warmClient, "GET", target)
		if err != nil || status != 200 || body != "sent 1" {
			t.Fatalf("%s: %d %q (%v), want 200 \"sent 1\" (one socket, on a)", msg, status, body, err)
		}
		if got := ws.ReadText(); got != msg {
			t.Fatalf("%s: the socket on a got %q", msg, got)
		}
		rec, _ := c.recordVersion("caller", "chat")
		if rec.Free || rec.Node != "a" || rec.Generation != gen+uint64(i) {
			t.Fatalf("after %s the record is %+v, want a's at generation %d", msg, rec, gen+uint64(i))
		}
		c.waitParkedRoom(a, room, gen+uint64(i))
	}
	ws.Send("still here")
	if got := ws.ReadText(); got != "still here" {
		t.Fatalf("after the calls the socket got %q", got)
	}
	for _, n := range []*clusterProc{b, cc} {
		if got := sumOf(mustMetrics(t, n), "wasmkeep_cluster_acquisitions_total", `outcome="acquired"`); got != acquired[n.name] {
			t.Fatalf("%s acquired %v rooms during the calls: the room ran there", n.name, got-acquired[n.name])
		}
	}
	for _, n := range c.nodes {
		m := mustMetrics(t, n)
		const sweepCloses = `wasmkeep_websocket_owner_closes_total{reason="sweep"}`
		if v, ok := m[sweepCloses]; !ok || v != 0 {
			t.Fatalf("%s: %s = %v (present %v), want 0", n.name, sweepCloses, v, ok)
		}
	}
	if got := mustMetrics(t, a)["wasmkeep_parked_wakes_total"]; got != calls+1 {
		t.Fatalf("a's wasmkeep_parked_wakes_total = %v after %d calls and a message, want %d", got, calls, calls+1)
	}
}
