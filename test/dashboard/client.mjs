// Drives the client library (clients/js) in headless Chromium against a
// real node across a clean restart: host/node's Go test serves the node
// and a control endpoint, and runs
//
//   node client.mjs <node URL> <control URL> <path of clients/js/index.js>
//
// The page (served as the node's own origin, so that the node takes its
// socket as same-origin) connects to the echo room, sends, fetches the
// room's HTTP, then asks the control endpoint to restart the node cleanly:
// the socket closes with 1012, the library reconnects (backing off while
// the node is down), and a message sent meanwhile is queued and echoed
// once the socket is open again. Prints "ok client" and exits 0, or why it
// failed and exits 1.
import { readFile } from "node:fs/promises";
import { launch } from "./chromium.mjs";

const [node, control, lib] = process.argv.slice(2);
if (!node || !control || !lib) {
  console.error("usage: node client.mjs <node URL> <control URL> <clients/js/index.js>");
  process.exit(2);
}

const page_ = `<!doctype html><meta charset="utf-8"><title>client</title>
<script type="module">
import { connect, roomURL } from "./index.js";
window.log = [];
const room = connect(roomURL(location.origin, "echo", "r"));
room.addEventListener("open", (e) => log.push("open " + e.reconnected));
room.addEventListener("message", (e) => log.push("msg " + e.data));
room.addEventListener("close", (e) => log.push("close " + e.code + " " + (e.retryIn >= 0 ? "retry" : "stop")));
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

  // A clean restart of the node: 1012, then the library reconnects.
  const restarting = fetch(control + "/restart", { method: "POST" });
  await waitLog("close 1012 retry");
  await page.evaluate(() => room.send("queued"));
  const resp = await restarting;
  if (resp.status !== 200) throw new Error(`restart: ${resp.status} ${await resp.text()}`);
  await waitLog("open true", 30000);
  await waitLog("msg queued");
  const log = await page.evaluate(() => window.log);
  const i = log.indexOf("close 1012 retry"), j = log.indexOf("open true"), k = log.indexOf("msg queued");
  if (!(i < j && j < k)) throw new Error(`out of order: ${JSON.stringify(log)}`);
  if (errors.length) throw new Error(`page errors: ${errors.join("; ")}`);
  console.log("log:", JSON.stringify(log));
  console.log("ok client");
} catch (err) {
  console.log("FAIL", err && err.stack ? err.stack : err);
  process.exitCode = 1;
} finally {
  if (close) await close();
}
