// Loads pages of other sites in headless Chromium and lets them attack a
// node's admin API. host/node's Go tests serve the pages and run:
//
//   node attack.mjs <proxy address or "-"> <page URL>...
//
// Each page attacks as soon as it loads (fetches, forms, images) and sets
// window.attackDone to the list of what it tried and what it saw. The
// script waits for it, prints one line "attack <URL> <JSON list>" per page
// and then "ok attack", and exits 0; or prints why it failed and exits 1.
// Whether the node did anything is for the Go test to check: a page sees
// no answer of a no-cors request or a form post.
//
// With a proxy address, Chromium sends every request for a name (not a
// loopback address) through that HTTP proxy: the Go test's proxy plays
// DNS, pointing an attacker's name at the node (DNS rebinding).
//
// Chromium is Debian's (/usr/bin/chromium, or $CHROMIUM), driven with
// playwright-core over the DevTools protocol; nothing is downloaded.
import { launch } from "./chromium.mjs";

const [proxy, ...pages] = process.argv.slice(2);
if (!proxy || pages.length === 0) {
  console.error("usage: node attack.mjs <proxy address or -> <page URL>...");
  process.exit(2);
}

const args = proxy !== "-" ? ["--proxy-server=http://" + proxy] : [];

let context, close;
try {
  ({ context, close } = await launch(args));
  for (const url of pages) {
    const page = await context.newPage();
    const errors = [];
    page.on("pageerror", (e) => errors.push(e.message));
    const resp = await page.goto(url, { waitUntil: "load", timeout: 30000 });
    if (!resp || resp.status() !== 200) throw new Error(`${url}: HTTP ${resp && resp.status()}`);
    await page.waitForFunction(() => window.attackDone, null, { timeout: 120000 });
    if (errors.length) throw new Error(`${url}: ${errors.join("; ")}`);
    const tried = await page.evaluate(() => window.attackDone);
    console.log("attack " + url + " " + JSON.stringify(tried));
    await page.close();
  }
  console.log("ok attack");
} catch (err) {
  console.error(err.stack || String(err));
  process.exitCode = 1;
} finally {
  if (close) await close();
}
