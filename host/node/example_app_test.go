package node

import (
	"encoding/json"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/wasmkeep/wasmkeep/abi"
	"github.com/wasmkeep/wasmkeep/internal/wstest"
)

// TestExampleApp runs the example app (examples/site, lobby, table) as
// the demo loads it: the front's page and API, tables created by the
// lobby and asked for their state, players' sockets handed to tables,
// an announcement through the API, and the tables' player counts told
// back to the lobby.
func TestExampleApp(t *testing.T) {
	n := startNode(t, Config{})
	putClass(t, n, "lobby", "./examples/lobby")
	putClass(t, n, "table", "./examples/table")
	expect(t, http.StatusCreated, "PUT", n.AdminURL()+"/admin/classes/site?front=/app", buildGuest(t, "./examples/site"))
	app := n.URL() + "/app"
	if page := expect(t, 200, "GET", app, nil); !strings.Contains(page, "<title>Tables</title>") {
		t.Fatalf("the page: %.200q", page)
	}
	for i, title := range []string{"Friday night", "Chess club"} {
		want := `{"name":"t` + string(rune('1'+i)) + `"}` + "\n"
		if got := expect(t, http.StatusCreated, "POST", app+"/api/tables", []byte(title)); got != want {
			t.Fatalf("creating %q: %s, want %s", title, got, want)
		}
	}
	if got := do(t, "POST", app+"/api/tables", []byte("  ")); got.Status != 400 {
		t.Fatalf("an empty title: %d %q, want 400", got.Status, got.Body)
	}

	ws := "ws" + strings.TrimPrefix(app, "http") + "/ws/t1?player="
	ada := wstest.Dial(t, ws+"ada")
	expectEvent(t, ada, map[string]string{"type": "joined", "player": "ada"})
	bob := wstest.Dial(t, ws+"bob")
	for _, c := range []*wstest.Client{ada, bob} {
		expectEvent(t, c, map[string]string{"type": "joined", "player": "bob"})
	}
	ada.Send("hello")
	for _, c := range []*wstest.Client{ada, bob} {
		expectEvent(t, c, map[string]string{"type": "say", "player": "ada", "text": "hello"})
	}
	if got := expect(t, 200, "POST", app+"/api/tables/t1/announce", []byte("welcome")); got != `{"sent":2}`+"\n" {
		t.Fatalf("the announcement: %s", got)
	}
	for _, c := range []*wstest.Client{ada, bob} {
		expectEvent(t, c, map[string]string{"type": "announce", "text": "welcome"})
	}

	// The lobby asks each table for its state.
	var tables []struct {
		Name, Title string
		Players     []string
		Messages    int
	}
	if err := json.Unmarshal([]byte(expect(t, 200, "GET", app+"/api/tables", nil)), &tables); err != nil {
		t.Fatal(err)
	}
	if len(tables) != 2 || tables[0].Title != "Friday night" || len(tables[0].Players) != 2 || tables[0].Messages != 1 || tables[1].Name != "t2" {
		t.Fatalf("the tables: %+v", tables)
	}
	// The tables told the lobby their players, without waiting.
	waitFor(t, "the lobby hears t1 has two players", func() bool {
		return strings.Contains(expect(t, 200, "GET", app+"/api/lobby", nil), `{"name":"t1","title":"Friday night","players":2}`)
	})

	// What the front refuses: a bad name, a table that cannot be, a
	// request that is no upgrade; and a table's socket without the front.
	for _, c := range []struct {
		url    string
		status int
	}{{ws + "a%3Cb%3E", 403}, {"ws" + strings.TrimPrefix(app, "http") + "/ws/x9?player=ada", 404}} {
		if _, err := wstest.DialErr(c.url, nil); err == nil || !strings.Contains(err.Error(), strconv.Itoa(c.status)) {
			t.Errorf("dial %s: %v, want %d", c.url, err, c.status)
		}
	}
	if got := do(t, "GET", app+"/ws/t1?player=ada", nil); got.Status != 400 {
		t.Errorf("a plain GET of a table's socket: %d, want 400", got.Status)
	}
	direct := wstest.Dial(t, "ws"+strings.TrimPrefix(n.URL(), "http")+"/actor/table/t1")
	direct.ExpectClose(abi.CloseCode(4001))
}

// expectEvent reads a table's next event and checks it is want.
func expectEvent(t *testing.T, c *wstest.Client, want map[string]string) {
	t.Helper()
	var got map[string]string
	if err := json.Unmarshal([]byte(c.ReadText()), &got); err != nil {
		t.Fatal(err)
	}
	for k, v := range want {
		if got[k] != v || len(got) != len(want) {
			t.Fatalf("event %v, want %v", got, want)
		}
	}
}

// TestExampleAppInBrowser: two players use the example app's page in
// headless Chromium (test/dashboard/app.mjs): one creates a table and
// sits down, the other sees it, sits down and speaks, and both pages show
// it.
func TestExampleAppInBrowser(t *testing.T) {
	driver := findChromiumDriver(t)
	n := startNode(t, Config{})
	putClass(t, n, "lobby", "./examples/lobby")
	putClass(t, n, "table", "./examples/table")
	expect(t, http.StatusCreated, "PUT", n.AdminURL()+"/admin/classes/site?front=/app", buildGuest(t, "./examples/site"))
	logScreenshots(t, driver.run(t, 3*time.Minute, "app", "app.mjs", n.URL()+"/app", driver.artifacts(t, "example-app")))
}
