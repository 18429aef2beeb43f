package node

import (
	"encoding/json"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/wasmkeep/wasmkeep/alarms"
)

// alarmRuns reads the alarm guest's record of its handler's runs.
func alarmRuns(t *testing.T, n *Node, room string) string {
	t.Helper()
	return expect(t, 200, "GET", n.URL()+"/actor/alarm/"+room+"/runs", nil)
}

// indexEntries lists the alarm index.
func indexEntries(t *testing.T, n *Node) []string {
	t.Helper()
	keys, err := n.Bucket.List(t.Context(), alarms.Prefix)
	if err != nil {
		t.Fatal(err)
	}
	return keys
}

// TestAlarmWakesHibernatedRoom: an alarm set by a room that then
// hibernates wakes it at its time and runs its handler once; the alarm is
// then cleared and its index entry deleted. A class durable at
// hibernation only makes its alarm durable all the same.
func TestAlarmWakesHibernatedRoom(t *testing.T) {
	t.Parallel()
	n := startNode(t, Config{})
	putHibernateClass(t, n, "alarm", "./testdata/guests/alarm")
	at := time.Now().Add(700 * time.Millisecond).UnixMilli()
	expect(t, 200, "POST", n.URL()+"/actor/alarm/r/set?at="+strconv.FormatInt(at, 10), nil)
	if got := expect(t, 200, "GET", n.URL()+"/actor/alarm/r/alarm", nil); got != strconv.FormatInt(at, 10) {
		t.Fatalf("alarm = %q, want %d", got, at)
	}
	if keys := indexEntries(t, n); len(keys) != 1 || !strings.HasPrefix(keys[0], alarms.Prefix+strconv.FormatInt(at, 10)+"/alarm/r/") {
		t.Fatalf("index after set: %q", keys)
	}
	hibernate(t, n, "alarm", "r")
	// The listing and the room's details show it, from its stored state.
	var rows []struct {
		Class, Name string
		Alarm       *time.Time
	}
	if err := json.Unmarshal([]byte(expect(t, 200, "GET", n.AdminURL()+"/admin/rooms", nil)), &rows); err != nil {
		t.Fatal(err)
	}
	var detail struct{ Alarm *time.Time }
	if err := json.Unmarshal([]byte(expect(t, 200, "GET", n.AdminURL()+"/admin/rooms/alarm/r", nil)), &detail); err != nil {
		t.Fatal(err)
	}
	if len(rows) != 1 || rows[0].Alarm == nil || rows[0].Alarm.UnixMilli() != at || detail.Alarm == nil || detail.Alarm.UnixMilli() != at {
		t.Fatalf("listed %+v, detail %+v; want the alarm at %d", rows, detail, at)
	}
	waitFor(t, "the alarm to fire", func() bool { return metric(t, n, "wasmkeep_alarms_fired_total") == 1 })
	if fired := time.Now().UnixMilli(); fired < at {
		t.Fatalf("fired %d ms early", at-fired)
	}
	if got := alarmRuns(t, n, "r"); !strings.HasPrefix(got, "runs 1 retries 0 late ") {
		t.Fatalf("runs: %q", got)
	}
	if got := expect(t, 200, "GET", n.URL()+"/actor/alarm/r/alarm", nil); got != "none" {
		t.Fatalf("alarm after it ran: %q", got)
	}
	waitFor(t, "the index entry to go", func() bool { return len(indexEntries(t, n)) == 0 })
}

// TestAlarmSurvivesRestart: an alarm set before a clean stop fires after
// the node starts again on the same data, found by the new process's
// scan of the index; a cleared one does not.
func TestAlarmSurvivesRestart(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	n := startNode(t, Config{DataDir: dir})
	putClass(t, n, "alarm", "./testdata/guests/alarm")
	expect(t, 200, "POST", n.URL()+"/actor/alarm/kept/set?in=1500", nil)
	expect(t, 200, "POST", n.URL()+"/actor/alarm/cleared/set?in=1500", nil)
	expect(t, 200, "POST", n.URL()+"/actor/alarm/cleared/clear", nil)
	stop(t, n)
	n = startNode(t, Config{DataDir: dir})
	waitFor(t, "the alarm to fire", func() bool { return metric(t, n, "wasmkeep_alarms_fired_total") == 1 })
	if got := alarmRuns(t, n, "kept"); !strings.HasPrefix(got, "runs 1 ") {
		t.Fatalf("kept: %q", got)
	}
	if got := alarmRuns(t, n, "cleared"); !strings.HasPrefix(got, "runs 0 ") {
		t.Fatalf("cleared: %q", got)
	}
}

// TestAlarmRetriedAfterCrash: a handler that panics is run again after
// alarms.FirstRetry, and sees its retry count; an alarm set during its
// own handler is kept and fires in turn.
func TestAlarmRetriedAfterCrash(t *testing.T) {
	t.Parallel()
	n := startNode(t, Config{})
	putClass(t, n, "alarm", "./testdata/guests/alarm")
	start := time.Now()
	expect(t, 200, "POST", n.URL()+"/actor/alarm/r/set?in=0&fail=1&again=300", nil)
	waitFor(t, "the retry and the alarm set again to fire", func() bool { return metric(t, n, "wasmkeep_alarms_fired_total") == 2 })
	if took := time.Since(start); took < alarms.FirstRetry {
		t.Fatalf("the retry ran after %v, before %v", took, alarms.FirstRetry)
	}
	if got := alarmRuns(t, n, "r"); !strings.HasPrefix(got, "runs 2 retries 1,0 ") {
		t.Fatalf("runs: %q", got)
	}
	if got := metric(t, n, "wasmkeep_alarms_retried_total"); got != 1 {
		t.Fatalf("retried = %v, want 1", got)
	}
}

// TestAlarmRemovedWithItsRoom: deleting a room deletes its alarm's index
// entry, and an entry whose room is gone starts no room.
func TestAlarmRemovedWithItsRoom(t *testing.T) {
	t.Parallel()
	n := startNode(t, Config{})
	putClass(t, n, "alarm", "./testdata/guests/alarm")
	expect(t, 200, "POST", n.URL()+"/actor/alarm/r/set?in=60000", nil)
	if keys := indexEntries(t, n); len(keys) != 1 {
		t.Fatalf("index: %q", keys)
	}
	expect(t, 204, "DELETE", n.AdminURL()+"/admin/rooms/alarm/r", nil)
	waitFor(t, "the index entry to go", func() bool { return len(indexEntries(t, n)) == 0 })
	if n.Alarms().Pending() != 0 {
		t.Fatalf("%d alarms still pending", n.Alarms().Pending())
	}
}
