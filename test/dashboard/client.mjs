// Drives the client library (clients/js) in headless Chromium against
// real nodes: a Go test serves them and a control endpoint, and runs
//
//   node client.mjs <node URL> <control URL> <clients/js/index.js> <step>...
//
// The page (served as the node URL's own origin, so that the node takes
// its socket as same-origin) connects to the echo room, sends, fetches the
// room's HTTP; then for each step (restart, drain, kill) it POSTs
// <control URL>/<step>, which does it to the node that runs the room: the
// socket closes, the library reconnects (backing off while no node can
// take the room), and a message sent while it is closed is queued and
// echoed once the socket is open again. Prints "ok client" and exits 0,
// or why it failed and exits 1.
import { readFile } from "node:fs/promises";
import { launch } from "./chromium.mjs";

const [node, control, lib, ...steps] = process.argv.slice(2);
if (!node || !control || !lib || steps.length === 0) {
  console.error("usage: node client.mjs <node URL> <control URL> <clients/js/index.js> <step>...");
  process.exit(2);
}

const page_ = `<!doctype html><meta charset="utf-8"><title>client</title>
<script type="module">
import { connect, roomURL } from "./index.js";
window.log = [];
window.closes = 0;
const room = connect(roomURL(location.origin, "echo", "r"));
room.addEventListener("open", (e) => log.push("open " + e.reconnected));
room.addEventListener("message", (e) => log.push("msg " + e.data));
room.addEventListener("close", (e) => { closes++; log.push("close " + e.code + " " + (e.retryIn >= 0 ? "retry" : "stop")); });
window.room = room;
</script>`;

let close;
try {
  const code = await readFile(lib, "utf8");
  let context;
  // The page is fulfilled by the script, not fetched: Chromium files it
  // under no address space and blocks its socket to the loopback node
  // (Local Network Access) unless told not to.
  ({ context, close } = await launch(["--disable-features=LocalNetworkAccessChecks"]));
  const page = await context.newPage();
  const errors = [];
  page.on("pageerror", (e) => errors.push(e.message));
  page.on("websocket", (ws) => ws.on("socketerror", (e) => console.log("socket error:", e)));
  await page.route(node + "/__client/**", (route) => {
    const url = route.request().url();
    if (url.endsWith("/index.js")) return route.fulfill({ status: 200, contentType: "text/javascript", body: code });
    return route.fulfill({ status: 200, contentType: "text/html", body: page_ });
  });
  await page.goto(node + "/__client/test.html", { waitUntil: "load", timeout: 30000 });
  const waitLog = async (want, timeout = 20000) => {
    try {
      await page.waitForFunction((w) => window.log && window.log.includes(w), want, { timeout });
    } catch {
      throw new Error(`no "${want}" in the page's log: ${JSON.stringify(await page.evaluate(() => window.log))}`);
    }
  };
  await waitLog("open false");
  await page.evaluate(() => room.send("one"));
  await waitLog("msg one");
  const http = await page.evaluate(async () => (await room.fetch("/room")).text());
  if (http !== "echo/r") throw new Error(`room.fetch("/room"): ${JSON.stringify(http)}`);

  for (const step of steps) {
    // The step is under way while the page sees its socket close; what
    // the page sends from then on waits in the library's queue.
    const opens = await page.evaluate(() => log.filter((l) => l === "open true").length);
    const closes = await page.evaluate(() => window.closes);
    const doing = fetch(control + "/" + step, { method: "POST" });
    await page.waitForFunction((n) => window.closes > n, closes, { timeout: 60000 });
    const msg = "after " + step;
    await page.evaluate((m) => room.send(m), msg);
    const resp = await doing;
    if (resp.status !== 200) throw new Error(`${step}: ${resp.status} ${await resp.text()}`);
    await page.waitForFunction((n) => log.filter((l) => l === "open true").length > n, opens, { timeout: 90000 })
      .catch(async () => { throw new Error(`no reconnect after ${step}: ${JSON.stringify(await page.evaluate(() => window.log))}`); });
    await waitLog("msg " + msg, 30000);
    console.log(step + ":", JSON.stringify(await page.evaluate(() => window.log.slice(-6))));
  }
  if (errors.length) throw new Error(`page errors: ${errors.join("; ")}`);
  console.log("log:", JSON.stringify(await page.evaluate(() => window.log)));
  console.log("ok client");
} catch (err) {
  console.log("FAIL", err && err.stack ? err.stack : err);
  process.exitCode = 1;
} finally {
  if (close) await close();
}
