// Loads a node's dashboard in headless Chromium and checks what it shows.
// host/node's Go tests start a node with rooms in several states and run:
//
//   node check.mjs <dashboard URL> <artifact dir> <expectations JSON>
//
// The expectations are {"rooms": [{"key": "class/name", "state": ...,
// "awake": ..., "sockets": N}], "classes": [...]}; for a node of a
// cluster also "cluster": true, each room's "where" ("held a", "parked
// c", "free") and "elsewhere" (another node runs it), and "cards"
// ({"resident": N, "hibernated": N}), and optionally "fronts"
// ([{"class": ..., "prefixes": [...], "instances": N}]: each front in the
// Fronts panel with its prefixes and at least N instances, and tagged as a
// front in the classes list). The script checks the rooms table
// (states, why awake, sockets, where they run), that the room cards count
// what the table lists, the classes (their names whole), sorting and
// filtering, that the charts get new points without a reload, that the
// page loads nothing from elsewhere and logs no error, and that the
// node's landing page (/) lists the classes, renders under its own
// policy and links to the dashboard; it saves a
// screenshot per viewport into the artifact dir, prints "ok dashboard" and
// exits 0, or prints why it failed and exits 1. Every wait has a deadline.
//
// Chromium is Debian's (/usr/bin/chromium, or $CHROMIUM), driven with
// playwright-core over the DevTools protocol; nothing is downloaded.
import { join } from "node:path";
import { launch } from "./chromium.mjs";

const [url, outDir, expectJSON] = process.argv.slice(2);
if (!url || !outDir || !expectJSON) {
  console.error("usage: node check.mjs <dashboard URL> <artifact dir> <expectations JSON>");
  process.exit(2);
}
const want = JSON.parse(expectJSON);
const origin = new URL(url).origin;

function check(cond, what) {
  if (!cond) throw new Error("check failed: " + what);
}

const views = [
  { name: "1440x900", width: 1440, height: 900, scheme: "light", full: true },
  { name: "1280x800", width: 1280, height: 800, scheme: "light" },
  { name: "1440x900-dark", width: 1440, height: 900, scheme: "dark" },
];

let context, close;
try {
  ({ context, close } = await launch([], { viewport: { width: 1440, height: 900 } }));
  for (const view of views) {
    await checkView(view);
  }
  await checkLanding();
  console.log("ok dashboard");
} catch (err) {
  console.error(err.stack || String(err));
  process.exitCode = 1;
} finally {
  if (close) await close();
}

async function checkView(view) {
  const page = await context.newPage();
  const problems = [];
  page.on("console", (m) => { if (m.type() === "error" || m.type() === "warning") problems.push(m.type() + ": " + m.text()); });
  page.on("pageerror", (e) => problems.push("page error: " + e.message));
  const foreign = [];
  page.on("request", (r) => { if (!r.url().startsWith(origin + "/")) foreign.push(r.url()); });
  try {
    await page.setViewportSize({ width: view.width, height: view.height });
    await page.emulateMedia({ colorScheme: view.scheme });
    const resp = await page.goto(url, { waitUntil: "load", timeout: 30000 });
    check(resp && resp.status() === 200, "the dashboard answers 200, not " + (resp && resp.status()));
    await page.waitForSelector("body[data-ready=true]", { timeout: 30000 });
    await page.evaluate(() => { window.__loadedOnce = true; });

    // The header and key figures.
    const facts = await page.evaluate(() => Object.fromEntries(
      ["f-host", "f-version", "f-uptime", "f-idle", "k-resident", "k-hibernated", "k-sockets", "k-wakes", "k-memory"]
        .map((id) => [id, document.getElementById(id).textContent.trim()])));
    check(facts["f-host"] === new URL(url).host, "the header shows the node's address, not " + JSON.stringify(facts["f-host"]));
    for (const id of ["f-version", "f-uptime", "f-idle", "k-memory"]) check(facts[id] && facts[id] !== "—", id + " is shown");
    for (const id of ["k-resident", "k-hibernated", "k-sockets", "k-wakes"]) check(/^[0-9,]+$/.test(facts[id]), id + " is a number, not " + JSON.stringify(facts[id]));
    const sockets = want.rooms.reduce((a, r) => a + r.sockets, 0);
    check(Number(facts["k-sockets"].replace(/,/g, "")) >= sockets, `sockets open (${facts["k-sockets"]}) counts the ${sockets} sockets of the rooms`);

    // The rooms table: every expected room, with its state, why it is
    // awake and its sockets.
    await page.waitForFunction((n) => document.querySelectorAll("#rooms tbody tr[data-key]").length >= n, want.rooms.length, { timeout: 10000 });
    // In a cluster, the rooms show parked on another node once the
    // Cluster panel has the nodes' statuses: it draws them again then.
    if (want.cluster) await page.waitForSelector("#cluster tbody tr[data-node]", { timeout: 10000 });
    const rows = await page.evaluate(() => Object.fromEntries([...document.querySelectorAll("#rooms tbody tr[data-key]")].map((tr) => [tr.dataset.key, {
      state: tr.dataset.state, awake: tr.dataset.awake, sockets: Number(tr.dataset.sockets),
      where: ((tr.dataset.where || "") + " " + (tr.dataset.node || "")).trim(), elsewhere: tr.dataset.elsewhere === "true",
      cells: [...tr.cells].filter((td) => td.offsetParent !== null).map((td) => td.textContent.trim()),
      // The cells by their column's key (name, state, where, ..., snapshot).
      col: Object.fromEntries([...tr.cells].map((td, i) => [document.querySelector("#rooms thead tr").cells[i].dataset.key, td.textContent.trim()])),
    }])));
    for (const r of want.rooms) {
      const row = rows[r.key];
      check(row, "the rooms table lists " + r.key);
      check(row.state === r.state, `${r.key} is ${r.state}, the table says ${row.state}`);
      check(row.awake === (r.awake || ""), `${r.key} is awake for ${JSON.stringify(r.awake || "")}, the table says ${JSON.stringify(row.awake)}`);
      check(row.sockets === r.sockets, `${r.key} has ${r.sockets} sockets, the table says ${row.sockets}`);
      check(/(B|KiB|MiB|GiB)$/.test(row.col.memory), `${r.key} shows its memory, not ${JSON.stringify(row.col.memory)}`);
      if (r.snapshot) check(/(B|KiB|MiB)$/.test(row.col.snapshot), `${r.key} shows its snapshot size, not ${JSON.stringify(row.col.snapshot)}`);
      if (r.label) check(row.cells.some((c) => c.includes(r.label)), `${r.key} shows "${r.label}" (cells ${JSON.stringify(row.cells)})`);
      if (want.cluster) {
        check(row.where === r.where, `${r.key} runs ${JSON.stringify(r.where)}, the table says ${JSON.stringify(row.where)}`);
        check(row.elsewhere === !!r.elsewhere && (row.col.state === "elsewhere") === !!r.elsewhere,
          `${r.key} ${r.elsewhere ? "runs" : "does not run"} on another node; the table says ${row.elsewhere}, its state ${JSON.stringify(row.col.state)}`);
      }
    }
    const whereShown = await page.evaluate(() => document.querySelector('#rooms th[data-key="where"]').offsetParent !== null);
    check(whereShown === !!want.cluster, `the Where column is ${want.cluster ? "shown in a cluster" : "hidden outside a cluster"}`);

    // The room cards count what the table lists (every room, unfiltered):
    // resident here, and asleep (hibernated here, and not run by another
    // node). Read at once: both are drawn from one listing.
    const cards = await page.evaluate(() => {
      const trs = [...document.querySelectorAll("#rooms tbody tr[data-key]")];
      const num = (id) => Number(document.getElementById(id).textContent.replace(/,/g, ""));
      return {
        more: document.querySelector("#rooms tbody tr.more") !== null,
        resident: num("k-resident"), hibernated: num("k-hibernated"),
        listedResident: trs.filter((tr) => tr.dataset.state === "resident").length,
        listedAsleep: trs.filter((tr) => tr.dataset.state !== "resident" && tr.dataset.elsewhere !== "true").length,
      };
    });
    if (!cards.more) {
      check(cards.resident === cards.listedResident && cards.hibernated === cards.listedAsleep,
        `the cards count the table: resident ${cards.resident} (listed ${cards.listedResident}), hibernated ${cards.hibernated} (listed ${cards.listedAsleep})`);
    }
    if (want.cards) {
      check(cards.resident === want.cards.resident && cards.hibernated === want.cards.hibernated,
        `the cards show ${cards.resident} resident and ${cards.hibernated} hibernated rooms, want ${want.cards.resident} and ${want.cards.hibernated}`);
    }

    // Classes, with their rooms, each name whole: its tags wrap rather
    // than cut it.
    for (const c of want.classes) {
      const shown = await page.locator(`#classes [data-class="${c}"]`).count();
      check(shown === 1, "the classes list shows " + c);
      const name = await page.evaluate((cls) => {
        const e = document.querySelector(`#classes [data-class="${cls}"] .class-name`);
        return { text: e.textContent, cut: e.scrollWidth > e.clientWidth };
      }, c);
      check(name.text === c && !name.cut, `class ${c}'s name is shown whole (${JSON.stringify(name)})`);
      // What the class's rooms take in the store: the sum of the listed
      // rooms' snapshots, shown per class.
      const stored = await page.getAttribute(`#classes [data-class="${c}"] .class-stored`, "data-stored");
      const sum = await page.evaluate(async (cls) => (await (await fetch("/admin/rooms")).json())
        .filter((r) => r.class === cls).reduce((a, r) => a + (r.snapshot_bytes || 0), 0), c);
      check(stored !== null && (Number(stored) > 0) === (sum > 0), `class ${c} shows its stored bytes (${stored}; its rooms' snapshots take ${sum})`);
      // Its versions: as many as the node keeps, and its rooms per version.
      const versions = await page.getAttribute(`#classes [data-class="${c}"] .class-versions`, "data-versions");
      const kept = await page.evaluate(async (cls) => ((await (await fetch("/admin/classes/" + cls)).json()).versions || []).length, c);
      check(Number(versions) === kept, `class ${c} shows ${versions} versions, the node keeps ${kept}`);
      const line = await page.textContent(`#classes [data-class="${c}"] .class-versions`);
      check(/rooms per version: \w{8} ×\d+ \(current\)/.test(line), `class ${c} shows its rooms per version: ${JSON.stringify(line)}`);
    }

    // Fronts: in their panel with their prefixes and instances, and
    // tagged in the classes list; no panel without them.
    const fronts = want.fronts || [];
    if (fronts.length) await page.waitForSelector("#fronts tbody tr[data-front]", { timeout: 10000 });
    const panel = await page.evaluate(() => ({
      hidden: document.getElementById("fronts-panel").hidden,
      rows: Object.fromEntries([...document.querySelectorAll("#fronts tbody tr[data-front]")].map((tr) => [tr.dataset.front, {
        instances: Number(tr.dataset.instances), prefixes: tr.cells[1].textContent, shown: tr.cells[2].textContent.trim(),
      }])),
    }));
    check(panel.hidden === (fronts.length === 0), `the Fronts panel is ${fronts.length ? "shown" : "hidden without fronts"}`);
    for (const f of fronts) {
      const row = panel.rows[f.class];
      check(row, "the Fronts panel lists " + f.class);
      check(f.prefixes.every((p) => row.prefixes.includes(p)), `front ${f.class} shows its prefixes ${f.prefixes}: ${JSON.stringify(row.prefixes)}`);
      check(row.instances >= f.instances && /^\d+ \/ \d+$/.test(row.shown), `front ${f.class} shows its instances (${JSON.stringify(row.shown)}), at least ${f.instances}`);
      const tag = await page.textContent(`#classes [data-class="${f.class}"] .front-tag`);
      check(f.prefixes.every((p) => tag.includes(p)), `class ${f.class} is tagged a front with its prefixes: ${JSON.stringify(tag)}`);
    }

    if (view.full) {
      // Filtering by text, by state, by class; sorting.
      const keys = () => page.evaluate(() => [...document.querySelectorAll("#rooms tbody tr[data-key]")].map((tr) => tr.dataset.key));
      const cls = want.rooms[0].key.split("/")[0];
      await page.fill("#search", cls + "/");
      let got = await keys();
      check(got.length > 0 && got.every((k) => k.startsWith(cls + "/")), `filtering by "${cls}/" shows only its rooms: ${got}`);
      await page.fill("#search", "");
      await page.click('#state-filter button[data-state="held"]');
      got = await keys();
      const held = want.rooms.filter((r) => r.state === "hibernated" && r.sockets > 0).map((r) => r.key);
      check(held.every((k) => got.includes(k)) && got.every((k) => !want.rooms.some((r) => r.key === k && !(r.state === "hibernated" && r.sockets > 0))),
        `"Sockets held" shows the hibernated rooms with sockets (${held}), got ${got}`);
      await page.click('#state-filter button[data-state=""]');
      await page.click(`#classes [data-class="${cls}"]`);
      got = await keys();
      check(got.length > 0 && got.every((k) => k.startsWith(cls + "/")), `clicking class ${cls} shows only its rooms: ${got}`);
      await page.click("#class-chip-clear");
      await page.click('#rooms th[data-key="sockets"] button');
      const sort = await page.getAttribute('#rooms th[data-key="sockets"]', "aria-sort");
      check(sort === "descending", "clicking Sockets sorts by it, most first (aria-sort " + sort + ")");
      const counts = await page.evaluate(() => [...document.querySelectorAll("#rooms tbody tr[data-key]")].map((tr) => Number(tr.dataset.sockets)));
      check(counts.every((n, i) => i === 0 || counts[i - 1] >= n), "rooms sorted by sockets, most first: " + counts);
      await page.click('#rooms th[data-key="state"] button');
      // The last minute, second by second.
      await page.click('#window button[data-min="1"]');
      const label = await page.textContent("#window-label");
      check(label.startsWith("last minute"), "the window control shows the last minute: " + label);
    }

    // The charts get a new point without a reload.
    const before = await page.evaluate(() => Object.fromEntries([...document.querySelectorAll("svg[data-series]")]
      .map((s) => [s.dataset.series, { points: Number(s.dataset.points), last: s.dataset.last }])));
    for (const id of ["wakes", "hibernations", "events", "sockets"]) check(before[id], "a chart of " + id);
    await page.waitForFunction((last) => {
      const s = document.querySelector('svg[data-series="events"]');
      return s.dataset.last && s.dataset.last !== last && s.querySelectorAll("path").length > 0;
    }, before.events.last, { timeout: 15000 });
    const still = await page.evaluate(() => window.__loadedOnce === true && performance.getEntriesByType("navigation").length === 1);
    check(still, "the charts updated without a reload");

    await page.waitForTimeout(300); // let the last redraw settle for the screenshot
    const file = join(outDir, `dashboard-${view.name}.png`);
    await page.screenshot({ path: file });
    console.log("screenshot " + file);

    check(foreign.length === 0, "the page loads nothing from elsewhere: " + foreign.join(", "));
    check(problems.length === 0, "no console errors or warnings: " + problems.join("; "));
  } finally {
    await page.close();
  }
}

// checkLanding loads the node's landing page, /: it lists every class,
// its style passes its Content-Security-Policy (a blocked style is a
// console error), it loads nothing from elsewhere, and its dashboard link
// leads to the dashboard.
async function checkLanding() {
  const page = await context.newPage();
  const problems = [];
  page.on("console", (m) => { if (m.type() === "error" || m.type() === "warning") problems.push(m.type() + ": " + m.text()); });
  page.on("pageerror", (e) => problems.push("page error: " + e.message));
  const foreign = [];
  page.on("request", (r) => { if (!r.url().startsWith(origin + "/")) foreign.push(r.url()); });
  try {
    const resp = await page.goto(origin + "/", { waitUntil: "load", timeout: 30000 });
    check(resp && resp.status() === 200, "the landing page answers 200, not " + (resp && resp.status()));
    const shown = await page.evaluate(() => [...document.querySelectorAll("table tr td:first-child")].map((td) => td.textContent.trim()));
    for (const c of want.classes) check(shown.includes(c), "the landing page lists the class " + c + " (it lists " + JSON.stringify(shown) + ")");
    const styled = await page.evaluate(() => getComputedStyle(document.body).maxWidth);
    check(styled !== "none", "the landing page's style applies (body max-width is " + styled + ")");
    await Promise.all([page.waitForURL(origin + "/admin/", { timeout: 10000 }), page.click('a[href="/admin/"]')]);
    await page.waitForSelector("body[data-ready=true]", { timeout: 30000 });
    check(problems.length === 0, "the landing page logs no error or warning: " + problems.join("; "));
    check(foreign.length === 0, "the landing page loads nothing from elsewhere: " + foreign.join(", "));
  } finally {
    await page.close();
  }
}
