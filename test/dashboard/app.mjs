// Drives the example app (examples/site, its front; examples/lobby and
// examples/table, its rooms) in headless Chromium, as two players would:
// host/node's Go test serves it and runs
//
//   node app.mjs <app URL> <screenshot directory>
//
// Player one creates a table on the page and sits down at it; player two,
// in a page of its own, sees the table in the list, sits down too, and
// says something, which both pages show. The script prints "ok app" and
// exits 0, or prints why it failed and exits 1.
//
// Chromium is Debian's (/usr/bin/chromium, or $CHROMIUM), driven with
// playwright-core over the DevTools protocol; nothing is downloaded.
import { join } from "node:path";
import { launch } from "./chromium.mjs";

const [app, shots] = process.argv.slice(2);
if (!app || !shots) {
  console.error("usage: node app.mjs <app URL> <screenshot directory>");
  process.exit(2);
}

let context, close;
try {
  ({ context, close } = await launch());
  const open = async (player) => {
    const page = await context.newPage();
    const errors = [];
    page.on("pageerror", (e) => errors.push(e.message));
    page.on("dialog", (d) => d.accept(player));
    const resp = await page.goto(app, { waitUntil: "load", timeout: 30000 });
    if (!resp || resp.status() !== 200) throw new Error(`${app}: HTTP ${resp && resp.status()}`);
    return { page, errors };
  };
  const one = await open("ada");
  await one.page.fill("#title", "Friday night");
  await one.page.click("#create button");
  const row = one.page.locator("#tables tr", { hasText: "Friday night" });
  await row.waitFor({ timeout: 10000 });
  await row.locator("button").click();
  await one.page.locator("#log div", { hasText: "ada joined" }).waitFor({ timeout: 10000 });

  const two = await open("bob");
  const row2 = two.page.locator("#tables tr", { hasText: "Friday night" });
  await row2.waitFor({ timeout: 10000 });
  await row2.locator("button").click();
  await two.page.locator("#log div", { hasText: "bob joined" }).waitFor({ timeout: 10000 });
  await one.page.locator("#log div", { hasText: "bob joined" }).waitFor({ timeout: 10000 });

  await two.page.fill("#text", "hello from bob");
  await two.page.click("#say button");
  for (const p of [one, two]) {
    await p.page.locator("#log div", { hasText: "bob: hello from bob" }).waitFor({ timeout: 10000 });
  }
  // The list shows both players once the lobby asks the table again.
  await one.page.locator("#tables tr", { hasText: "Friday night" }).filter({ hasText: "2" }).waitFor({ timeout: 10000 });
  for (const [name, p] of [["ada", one], ["bob", two]]) {
    const file = join(shots, `app-${name}.png`);
    await p.page.screenshot({ path: file, fullPage: true });
    console.log("screenshot " + file);
    if (p.errors.length) throw new Error(`${name}'s page: ${p.errors.join("; ")}`);
  }
  console.log("ok app");
} catch (err) {
  console.error(err.stack || String(err));
  process.exitCode = 1;
} finally {
  if (close) await close();
}
