// What the browser tests share: a real `spool serve` (embedded store in a temporary directory,
// the scripted demo agent) on a free loopback port, and Debian's headless Chromium driven by
// playwright-core. Every test saves a screenshot under target/web-screenshots/.
//
// The page and the server work in their own time, so no test reads the page (or the API) once and
// asserts on that snapshot: it waits for the condition (`locator.waitFor`, `page.waitForFunction`)
// or retries the assertion with `eventually`. A loaded machine then makes a test slower, not red.

import { spawn } from "node:child_process";
import { mkdir, mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { dirname, join, resolve } from "node:path";
import { fileURLToPath } from "node:url";
import { after, before } from "node:test";
import { chromium } from "playwright-core";

const here = dirname(fileURLToPath(import.meta.url));
const root = resolve(here, "../..");
// SPOOL_BIN may be relative to the repository's root (as the Makefile passes it).
const SPOOL = resolve(root, process.env.SPOOL_BIN ?? "target/debug/spool");
const CHROMIUM = process.env.CHROMIUM ?? "/usr/bin/chromium";
export const SCREENSHOTS = join(root, "target/web-screenshots");

/**
 * Runs `check` (an async function that throws, typically an `assert`, while its condition does not
 * hold) until it returns, every `interval` ms, for at most `timeout` ms; then throws its last
 * error. Resolves with what `check` returned.
 */
export async function eventually(check, { timeout = 15_000, interval = 50 } = {}) {
  const deadline = Date.now() + timeout;
  for (;;) {
    try {
      return await check();
    } catch (e) {
      if (Date.now() >= deadline) throw e;
    }
    await new Promise((r) => setTimeout(r, interval));
  }
}

/** Starts `spool serve`; resolves once it prints its sign-in link. */
export async function startSpool(env = {}) {
  const dataDir = await mkdtemp(join(tmpdir(), "spool-web-"));
  const child = spawn(SPOOL, ["serve", "--addr", "127.0.0.1:0", "--data-dir", dataDir], {
    // Every test signs in afresh, so more handshakes a minute than one person makes.
    env: { ...process.env, SPOOL_WEB_DIR: join(root, "web/dist"), RUST_LOG: "warn", SPOOL_RATE_HANDSHAKES_PER_MIN: "600", ...env },
    stdio: ["ignore", "pipe", "pipe"],
  });
  let output = "";
  const link = await new Promise((resolveLink, reject) => {
    const timer = setTimeout(() => reject(new Error(`spool serve did not start in 30 s:\n${output}`)), 30_000);
    const read = (chunk) => {
      output += chunk;
      const m = /Open the web UI, signed in: (http:\/\/\S+)/.exec(output);
      if (m) {
        clearTimeout(timer);
        resolveLink(m[1]);
      }
    };
    child.stdout.on("data", read);
    child.stderr.on("data", read);
    child.on("error", (e) => reject(new Error(`cannot start ${SPOOL} (build it with cargo build -p spool-local): ${e.message}`)));
    child.on("exit", (code) => reject(new Error(`spool serve exited with ${code}:\n${output}`)));
  });
  const url = new URL(link);
  return {
    /** The sign-in link (`http://127.0.0.1:port/#key=…`). */
    link,
    /** Runs `spool admin …` on this server's data directory; its JSON output. */
    async admin(...args) {
      const { execFile } = await import("node:child_process");
      const out = await new Promise((ok, fail) =>
        execFile(SPOOL, ["admin", ...args, "--data-dir", dataDir], (e, stdout, stderr) =>
          e ? fail(new Error(`spool admin ${args.join(" ")}: ${stderr}`)) : ok(stdout),
        ),
      );
      return JSON.parse(out);
    },
    origin: url.origin,
    apiKey: new URLSearchParams(url.hash.slice(1)).get("key"),
    async stop() {
      child.kill("SIGTERM");
      await new Promise((r) => (child.exitCode !== null ? r() : child.once("exit", r)));
      await rm(dataDir, { recursive: true, force: true });
    },
  };
}

/** Headless Chromium with the flags this machine's closed network needs. */
export async function startBrowser() {
  return chromium.launch({
    executablePath: CHROMIUM,
    args: [
      "--no-sandbox",
      "--disable-gpu",
      "--disable-quic",
      "--no-first-run",
      "--disable-background-networking",
      "--disable-component-update",
      "--disable-sync",
    ],
  });
}

/**
 * A page signed in through the printed link, failing the test on any uncaught script error or
 * console error (but for the 404 of the optional config.json). `options` are the browser
 * context's others (`isMobile`, `hasTouch` for a phone).
 */
export async function signedInPage(browser, spool, viewport = { width: 1200, height: 850 }, options = {}) {
  const context = await browser.newContext({ viewport, ...options });
  const page = await context.newPage();
  page.errors = [];
  page.on("pageerror", (e) => page.errors.push(String(e)));
  page.on("console", (m) => {
    const where = m.location()?.url ?? "";
    // A companion that is not there fails its requests, on another origin: that is offline
    // mode, not an error of the page.
    const elsewhere = where.startsWith("http") && !where.startsWith(spool.origin);
    if (m.type() === "error" && !elsewhere && !/config\.json|404/.test(m.text() + where)) page.errors.push(m.text());
  });
  await page.goto(spool.link);
  await page.getByRole("button", { name: "Sign out" }).waitFor();
  return page;
}

export async function screenshot(page, name) {
  await mkdir(SCREENSHOTS, { recursive: true });
  await page.screenshot({ path: join(SCREENSHOTS, `${name}.png`) });
}

/** Calls the API directly with the local key's token (to set up what a test does not click). */
export async function api(spool) {
  const handshake = await fetch(`${spool.origin}/v1/handshake`, {
    method: "POST",
    headers: { "content-type": "application/json" },
    body: JSON.stringify({ version: "1", user_agent: "web-tests", api_key: spool.apiKey }),
  }).then((r) => r.json());
  return async (method, path, body) => {
    const r = await fetch(`${spool.origin}${path}`, {
      method,
      headers: { authorization: `Bearer ${handshake.jwt}`, ...(body ? { "content-type": "application/json" } : {}) },
      body: body ? JSON.stringify(body) : undefined,
    });
    if (!r.ok) throw new Error(`${method} ${path}: ${r.status} ${await r.text()}`);
    return r.status === 204 ? null : r.json();
  };
}

/**
 * Starts `spool companion` over `library` for `spool` on a free loopback port (with
 * `extraArgs`, e.g. `--mcp-config FILE`); its URL and a `stop()`.
 */
export async function startCompanion(spool, library, extraArgs = []) {
  const saltDir = await mkdtemp(join(tmpdir(), "spool-companion-"));
  const child = spawn(
    SPOOL,
    ["companion", "--library", library, "--spool-url", spool.origin, "--addr", "127.0.0.1:0", "--salt-file", join(saltDir, "salt"), ...extraArgs],
    { env: { ...process.env, SPOOL_API_KEY: spool.apiKey, RUST_LOG: "warn" }, stdio: ["ignore", "ignore", "pipe"] },
  );
  let output = "";
  const url = await new Promise((resolveUrl, reject) => {
    const timer = setTimeout(() => reject(new Error(`spool companion did not start in 30 s:\n${output}`)), 30_000);
    child.stderr.on("data", (chunk) => {
      output += chunk;
      const m = /Companion listening on (http:\/\/\S+)\s/.exec(output);
      if (m) {
        clearTimeout(timer);
        resolveUrl(m[1]);
      }
    });
    child.on("exit", (code) => reject(new Error(`spool companion exited with ${code}:\n${output}`)));
  });
  return {
    url,
    async stop() {
      child.kill("SIGTERM");
      await new Promise((r) => (child.exitCode !== null ? r() : child.once("exit", r)));
      await rm(saltDir, { recursive: true, force: true });
    },
  };
}

/**
 * A `spool serve` (with `env`) and a browser for one file's tests: started before them and
 * stopped after. Its fields (`spool`, `browser`, and `call`, the API as the server's key) are
 * set once the tests run.
 */
export function served(env = {}) {
  const it = { spool: undefined, browser: undefined, call: undefined };
  before(async () => {
    it.spool = await startSpool(env);
    it.browser = await startBrowser();
    it.call = await api(it.spool);
  });
  after(async () => {
    await it.browser?.close();
    await it.spool?.stop();
  });
  return it;
}
