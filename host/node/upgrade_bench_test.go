package node

import (
	"encoding/json"
	"fmt"
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/wasmkeep/wasmkeep/internal/wstest"
)

// TestUpgradeNowAtScale moves every room of a chat class, each with
// history and an open socket, to a new version with upgrade=now, and
// reports how long the job took and its rate. Every room must be moved,
// its socket still open and answered by the new version. The count is
// WASMKEEP_UPGRADE_ROOMS (default 40, so that the default run stays
// short; docs/PERFORMANCE.md has the figures at 400):
//
//	WASMKEEP_UPGRADE_ROOMS=400 go test -run TestUpgradeNowAtScale -count 1 -v ./host/node/
func TestUpgradeNowAtScale(t *testing.T) {
	t.Parallel()
	rooms := 40
	if v := os.Getenv("WASMKEEP_UPGRADE_ROOMS"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 {
			t.Fatalf("WASMKEEP_UPGRADE_ROOMS=%q: want a count", v)
		}
		rooms = n
	}
	n := startNode(t, Config{})
	uploadVersion(t, n, "chat", "./examples/chat", "")
	socks := make([]*wstest.Client, rooms)
	for i := range socks {
		url := fmt.Sprintf("%s/actor/chat/r%d", n.URL(), i)
		socks[i] = wstest.Dial(t, url)
		socks[i].Send("hello")
		if got := socks[i].ReadText(); got != "hello" {
			t.Fatalf("room %d: %q", i, got)
		}
		if i%2 == 0 {
			hibernate(t, n, "chat", fmt.Sprintf("r%d", i)) // half asleep, half resident
		}
	}
	start := time.Now()
	v2 := uploadVersion(t, n, "chat", "./testdata/guests/chatv2", "upgrade=now")
	var job struct {
		Total, Done, Failed int
		Finished            *time.Time
	}
	waitWithin(t, 10*time.Minute, "the upgrade job", func() bool {
		if err := json.Unmarshal([]byte(expect(t, 200, "GET", n.AdminURL()+"/admin/classes/chat/upgrade", nil)), &job); err != nil {
			t.Fatal(err)
		}
		return job.Finished != nil
	})
	took := time.Since(start)
	if job.Total != rooms || job.Done != rooms || job.Failed != 0 {
		t.Fatalf("job: %+v, want all %d rooms moved", job, rooms)
	}
	for i, s := range socks {
		s.Send("again")
		if got := s.ReadText(); got != "v2: again" {
			t.Fatalf("room %d after the upgrade: %q", i, got)
		}
		if row := upgradeRowOf(t, n, "chat", fmt.Sprintf("r%d", i)); row.Version != v2 {
			t.Fatalf("room %d runs %s", i, row.Version)
		}
	}
	t.Logf("upgrade now: %d rooms (half resident, half hibernated, a socket each) moved in %v (upload included): %.0f rooms/s",
		rooms, took.Round(time.Millisecond), float64(rooms)/took.Seconds())
}
