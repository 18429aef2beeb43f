// launch starts Debian's Chromium (/usr/bin/chromium, or $CHROMIUM)
// headless with a fresh profile, driven with playwright-core over the
// DevTools protocol (nothing is downloaded), for the scripts of this
// directory. It returns the browser context and a close that ends it and
// removes the profile. extraArgs are added to Chromium's command line,
// options to playwright's launch options.
import { chromium } from "playwright-core";
import { mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";

export async function launch(extraArgs = [], options = {}) {
  const profile = await mkdtemp(join(tmpdir(), "wasmkeep-chromium-"));
  let context;
  const close = async () => {
    if (context) await context.close().catch(() => {});
    await rm(profile, { recursive: true, force: true }).catch(() => {});
  };
  try {
    context = await chromium.launchPersistentContext(profile, {
      executablePath: process.env.CHROMIUM || "/usr/bin/chromium",
      headless: true,
      args: [
        "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
        "--disable-background-networking", "--disable-component-update", "--disable-sync",
        ...extraArgs,
      ],
      timeout: 60000,
      ...options,
    });
  } catch (err) {
    await close();
    throw err;
  }
  return { context, close };
}
