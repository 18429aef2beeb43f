package node

import (
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"net/http/httputil"
	"slices"
	"strings"
	"testing"
	"time"
)

// adminAttacks are the admin requests that a page of another site tries
// to make a browser send: every state-changing endpoint, the export,
// which checkpoints a running room (it was a GET before it became a POST,
// so the old route is tried too), and reads, whose answers must not reach
// the page (the node sends no CORS header).
var adminAttacks = []struct {
	Method string `json:"method"`
	Path   string `json:"path"`
	Body   string `json:"body"` // "", "bundle" or "wasm"
}{
	{"POST", "/admin/rooms/counter/awake/hibernate", ""},
	{"POST", "/admin/rooms/counter/awake/pin", ""},
	{"POST", "/admin/rooms/counter/asleep/pin", ""},
	{"POST", "/admin/rooms/counter/pinned/unpin", ""},
	{"POST", "/admin/rooms/counter/fresh/export", ""},
	{"GET", "/admin/rooms/counter/fresh/export", ""},
	{"POST", "/admin/rooms/import?class=imported&name=x", "bundle"},
	{"POST", "/admin/rooms/import?name=stolen", "bundle"},
	{"PUT", "/admin/classes/evil", "wasm"},
	{"DELETE", "/admin/classes/counter", ""},
	{"GET", "/admin/rooms", ""},
	{"GET", "/admin/overview", ""},
	{"GET", "/metrics", ""},
}

// attackPage is a page of another site that attacks the admin API at
// target ("" for its own origin) as soon as it loads: fetch() with every
// mode, content type and the admin header, HTML forms of every encoding
// into frames, and images. It fetches the bodies it sends (a room bundle,
// a module) from its own site.
func attackPage(target string) []byte {
	attacks, _ := json.Marshal(adminAttacks)
	return []byte(`<!doctype html><meta charset="utf-8"><title>another site</title><body><script>
const target = ` + fmt.Sprintf("%q", target) + `;
const attacks = ` + string(attacks) + `;
const tried = [];
async function main() {
  const bodies = {
    bundle: await (await fetch("/bundle")).arrayBuffer(),
    wasm: await (await fetch("/wasm")).arrayBuffer(),
  };
  for (const a of attacks) {
    for (const mode of ["no-cors", "cors"]) {
      for (const type of ["", "text/plain", "application/json"]) {
        for (const admin of [false, true]) {
          const headers = {};
          if (type) headers["Content-Type"] = type;
          if (admin) headers["X-Wasmkeep-Admin"] = "1";
          const init = { method: a.method, mode, headers, credentials: "include", cache: "no-store" };
          if (a.body) init.body = bodies[a.body];
          let saw;
          try {
            const r = await fetch(target + a.path, init);
            saw = r.type + " " + r.status;
          } catch (e) {
            saw = "error " + e.name;
          }
          tried.push({ how: "fetch", mode, type, admin, method: a.method, path: a.path, saw });
        }
      }
    }
  }
  const posts = attacks.filter((a) => a.method === "POST");
  await Promise.all(posts.flatMap((a) =>
    ["text/plain", "application/x-www-form-urlencoded", "multipart/form-data"].map((enc) => form(a, enc))));
  await Promise.all(attacks.filter((a) => a.method === "GET").map(image));
  window.attackDone = tried;
}
function form(a, enctype) {
  return new Promise((resolve) => {
    const frame = document.createElement("iframe");
    frame.name = "f" + tried.length + Math.random().toString(36).slice(2);
    document.body.append(frame); // its about:blank has loaded: the next load is the post's answer
    const f = document.createElement("form");
    f.method = "POST";
    f.action = target + a.path;
    f.enctype = enctype;
    f.target = frame.name;
    const input = document.createElement("input");
    input.name = "x";
    input.value = "1";
    f.append(input);
    document.body.append(f);
    let done = false;
    const finish = (saw) => {
      if (done) return;
      done = true;
      tried.push({ how: "form", type: enctype, method: "POST", path: a.path, saw });
      resolve();
    };
    frame.addEventListener("load", () => finish("loaded"));
    setTimeout(() => finish("no answer in 30 s"), 30000);
    f.submit();
  });
}
function image(a) {
  return new Promise((resolve) => {
    const img = new Image();
    const finish = (saw) => { tried.push({ how: "image", method: "GET", path: a.path, saw }); resolve(); };
    img.onload = () => finish("loaded");
    img.onerror = () => finish("error");
    img.src = target + a.path;
  });
}
main();
</script>
`)
}

// fetchesPerAttack is how many fetch() calls an attack page makes of each
// attack: two modes, three content types, with and without the header.
const fetchesPerAttack = 2 * 3 * 2

// attackTry is one request an attack page tried, and what it saw.
type attackTry struct {
	How, Mode, Type string
	Admin           bool
	Method, Path    string
	Saw             string
}

// attackSite serves an attack page at /evil with the bodies it sends.
func attackSite(target string, bundle, wasm []byte) http.Handler {
	page := attackPage(target)
	files := map[string][]byte{"/evil": page, "/bundle": bundle, "/wasm": wasm}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, ok := files[r.URL.Path]
		if !ok {
			http.NotFound(w, r)
			return
		}
		if r.URL.Path == "/evil" {
			w.Header().Set("Content-Type", "text/html; charset=utf-8")
		}
		_, _ = w.Write(body)
	})
}

// serveOn serves h on a fresh port of ip until the end of the test and
// returns the address.
func serveOn(t *testing.T, ip string, h http.Handler) string {
	t.Helper()
	l, err := net.Listen("tcp", ip+":0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = srv.Serve(l) }()
	t.Cleanup(func() { srv.Close() })
	return l.Addr().String()
}

// TestAdminRefusesOtherSites opens pages of other sites in headless
// Chromium and lets them attack a loopback node with no token, the way
// the admin API was open to:
//
//   - a page of another origin (127.0.0.2, another address of this
//     machine): fetch() in no-cors and cors mode, with no content type,
//     text/plain and JSON, with and without the admin header; form posts
//     of every encoding; images;
//   - DNS rebinding: a page of rebind.example, a name the attacker then
//     points at the node's address, so that its requests are the page's
//     own origin's and may carry any header and body. A proxy in
//     Chromium plays that DNS: it serves the page, and sends every other
//     request for rebind.example to the node as a browser would, without
//     a forwarding header.
//
// Nothing may change: no room hibernated, woken, pinned, unpinned or
// checkpointed, no class created or removed, nothing imported. And the
// pages' requests did reach the node (the attack was real): its 4xx count
// grows by at least the number of requests that could not fail in the
// browser before they were sent.
func TestAdminRefusesOtherSites(t *testing.T) {
	t.Parallel()
	driver := findChromiumDriver(t)
	n := startNode(t, Config{})
	putClass(t, n, "counter", "./examples/counter")
	for _, name := range []string{"awake", "asleep", "pinned", "fresh", "source"} {
		expect(t, 200, "POST", n.URL()+"/actor/counter/"+name, nil)
	}
	hibernate(t, n, "counter", "asleep")
	expect(t, 200, "POST", n.URL()+"/admin/rooms/counter/pinned/pin", nil)
	bundle := []byte(expect(t, 200, "POST", n.URL()+"/admin/rooms/counter/source/export", nil))
	wasm := buildGuest(t, "./examples/counter")
	before := adminState(t, n)
	refusedBefore := metric(t, n, `wasmkeep_http_requests_total{code="4xx"}`)

	other := serveOn(t, "127.0.0.2", attackSite(n.URL(), bundle, wasm))
	_, port, _ := net.SplitHostPort(n.Addr())
	rebound := "rebind.example:" + port
	site := attackSite("", bundle, wasm)
	toNode := &httputil.ReverseProxy{Rewrite: func(pr *httputil.ProxyRequest) {
		pr.Out.URL.Scheme, pr.Out.URL.Host = "http", n.Addr()
		pr.Out.Host = pr.In.Host
	}}
	proxy := serveOn(t, "127.0.0.1", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch {
		case r.URL.Host != rebound:
			http.Error(w, "this proxy knows "+rebound+" only", http.StatusBadGateway)
		case r.URL.Path == "/evil" || r.URL.Path == "/bundle" || r.URL.Path == "/wasm":
			site.ServeHTTP(w, r) // the attacker's server, before the rebinding
		default:
			toNode.ServeHTTP(w, r) // rebind.example now resolves to the node
		}
	}))

	out := driver.run(t, 5*time.Minute, "attack", "attack.mjs", proxy, "http://"+other+"/evil", "http://"+rebound+"/evil")
	var reached float64
	pages := 0
	for _, line := range strings.Split(out, "\n") {
		rest, ok := strings.CutPrefix(line, "attack ")
		if !ok {
			continue
		}
		url, list, _ := strings.Cut(rest, " ")
		var tried []attackTry
		if err := json.Unmarshal([]byte(list), &tried); err != nil {
			t.Fatalf("%s: %v", url, err)
		}
		pages++
		reached += checkAttackTries(t, url, strings.Contains(url, "rebind.example"), tried)
	}
	if pages != 2 {
		t.Fatalf("attack.mjs reported %d pages, want 2:\n%s", pages, out)
	}

	if after := adminState(t, n); !slices.Equal(after, before) {
		t.Errorf("the attacks changed the node:\nbefore %v\nafter  %v", before, after)
	}
	if got := metric(t, n, `wasmkeep_http_requests_total{code="4xx"}`) - refusedBefore; got < reached {
		t.Errorf("the node refused %v requests, want at least the %v that left the browser", got, reached)
	}
}

// checkAttackTries checks what an attack page saw of its requests, and
// returns how many of them must have reached the node. Every request a
// browser sends to another origin is answered without a CORS header, so
// a cors fetch fails and a no-cors one sees nothing (an opaque answer);
// no-cors refuses PUT and DELETE before sending. A page of the node's own
// origin (rebinding) sees the node's refusal: 403.
func checkAttackTries(t *testing.T, url string, sameOrigin bool, tried []attackTry) float64 {
	t.Helper()
	fetches, forms, images := 0, 0, 0
	var reached float64
	for _, x := range tried {
		unsendable := x.How == "fetch" && x.Mode == "no-cors" && (x.Method == "PUT" || x.Method == "DELETE")
		var ok bool
		switch {
		case x.How == "fetch":
			fetches++
			switch {
			case unsendable:
				ok = x.Saw == "error TypeError"
			case sameOrigin:
				// 404 for the export's old GET, which is no route now.
				ok, reached = x.Saw == "basic 403" || (x.Method == "GET" && x.Saw == "basic 404"), reached+1
			case x.Mode == "no-cors":
				ok, reached = x.Saw == "opaque 0", reached+1
			default:
				ok = x.Saw == "error TypeError" // no CORS header: the answer is not the page's to read
			}
		case x.How == "form":
			forms++
			ok, reached = x.Saw == "loaded", reached+1
		case x.How == "image":
			images++
			ok, reached = x.Saw == "error", reached+1
		}
		if !ok {
			t.Errorf("%s: %+v", url, x)
		}
	}
	posts, gets := 0, 0
	for _, a := range adminAttacks {
		switch a.Method {
		case "POST":
			posts++
		case "GET":
			gets++
		}
	}
	if fetches != len(adminAttacks)*fetchesPerAttack || forms != posts*3 || images != gets {
		t.Errorf("%s tried %d fetches, %d forms, %d images; want %d, %d, %d", url, fetches, forms, images, len(adminAttacks)*fetchesPerAttack, posts*3, gets)
	}
	return reached
}

// adminState is what an attack could change: every class, and every
// room's state, pin and snapshot.
func adminState(t *testing.T, n *Node) []string {
	t.Helper()
	var classes []struct{ Name, Hash string }
	if err := json.Unmarshal([]byte(expect(t, 200, "GET", n.URL()+"/admin/classes", nil)), &classes); err != nil {
		t.Fatal(err)
	}
	var state []string
	for _, c := range classes {
		state = append(state, "class "+c.Name+" "+c.Hash)
	}
	for key, r := range dashRooms(t, n) {
		state = append(state, fmt.Sprintf("room %s %s pinned=%v snapshot=%d", key, r.State, r.Pinned, r.SnapshotBytes))
	}
	slices.Sort(state)
	return state
}
