package main

import (
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/wasmkeep/wasmkeep/alarms"
)

// TestAlarmWakesHibernatedRoomOnAnotherNode: three nodes on versitygw. A
// room sets an alarm through n1 and hibernates there; n1 is killed
// before the alarm is due. Another node's scan of the alarm index finds
// it, wakes the room from the bucket and runs its handler, once, within
// a scan interval and the grace of its time.
func TestAlarmWakesHibernatedRoomOnAnotherNode(t *testing.T) {
	t.Parallel()
	c := newTestCluster(t, e2eTTL, true)
	for i := 1; i <= 3; i++ {
		c.add("n" + strconv.Itoa(i))
	}
	c.putClass(c.nodes[0], "alarm", "./testdata/guests/alarm", false)
	n1 := c.node("n1")
	at := time.Now().Add(6 * time.Second) // room for a slow machine to kill n1 first
	expectHTTP(t, 200, "POST", n1.url+"/actor/alarm/a/set?at="+strconv.FormatInt(at.UnixMilli(), 10))
	if owner := c.owner("alarm", "a"); owner != n1 {
		t.Fatalf("the room runs on %s, want n1", owner.name)
	}
	n1.ok("rooms", "hibernate", "alarm", "a")
	n1.signal(syscall.SIGKILL)
	n1.wait(stopDeadline)
	if time.Now().After(at) {
		t.Fatal("the node was killed after the alarm was due: the machine is too slow for this test")
	}
	fired := func() (total float64, on string) {
		for _, n := range c.others("n1") {
			if v := mustMetrics(t, n)["wasmkeep_alarms_fired_total"]; v > 0 {
				total, on = total+v, n.name
			}
		}
		return total, on
	}
	bound := alarms.DefaultScanInterval + alarms.DefaultGrace + failoverBound(c.ttl) + failoverSlack
	deadline := at.Add(bound + 10*time.Second)
	for {
		if total, _ := fired(); total > 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the alarm did not fire within %v of its time", time.Since(at))
		}
		time.Sleep(50 * time.Millisecond)
	}
	late := time.Since(at)
	total, on := fired()
	if total != 1 {
		t.Fatalf("the alarm fired %v times, want once", total)
	}
	runs := expectHTTP(t, 200, "GET", c.node(on).url+"/actor/alarm/a/runs")
	t.Logf("the alarm fired on %s %v after its time (bound %v): %s", on, late.Round(10*time.Millisecond), bound, runs)
	if !strings.HasPrefix(runs, "runs 1 ") {
		t.Fatalf("runs: %q", runs)
	}
	if late > bound {
		t.Fatalf("the alarm fired %v late, over %v", late, bound)
	}
	if got := expectHTTP(t, 200, "GET", c.node(on).url+"/actor/alarm/a/alarm"); got != "none" {
		t.Fatalf("the alarm after it ran: %q", got)
	}
}
