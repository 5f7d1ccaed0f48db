// A real `spool serve` for the front-end tests: the embedded store in a temporary directory,
// the scripted demo agent, a free loopback port. `startSpool()` resolves once it serves, with
// a token from the handshake and a small JSON client for the chat API.

import { spawn } from "node:child_process";
import { mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join, resolve } from "node:path";

const root = resolve(import.meta.dirname, "../..");
// SPOOL_BIN may be relative to the repository's root (as the Makefile passes it).
const SPOOL = resolve(root, process.env.SPOOL_BIN ?? "target/debug/spool");

export async function startSpool() {
  const dataDir = await mkdtemp(join(tmpdir(), "spool-frontends-"));
  const child = spawn(SPOOL, ["serve", "--addr", "127.0.0.1:0", "--data-dir", dataDir], {
    env: { ...process.env, RUST_LOG: "warn", SPOOL_RATE_LIMITS: "off" },
    stdio: ["ignore", "pipe", "pipe"],
  });
  let output = "";
  const link = await new Promise((ok, fail) => {
    const timer = setTimeout(() => fail(new Error(`spool serve did not start in 30 s:\n${output}`)), 30_000);
    const read = (chunk) => {
      output += chunk;
      const m = /Open the web UI, signed in: (http:\/\/\S+)/.exec(output);
      if (m) {
        clearTimeout(timer);
        ok(m[1]);
      }
    };
    child.stdout.on("data", read);
    child.stderr.on("data", read);
    child.on("error", (e) => fail(new Error(`cannot start ${SPOOL} (build it with cargo build -p spool-local): ${e.message}`)));
    child.on("exit", (code) => fail(new Error(`spool serve exited with ${code}:\n${output}`)));
  });
  const url = new URL(link);
  const origin = url.origin;
  const apiKey = new URLSearchParams(url.hash.slice(1)).get("key");
  const call = async (method, path, body, token) => {
    const response = await fetch(origin + path, {
      method,
      headers: { "content-type": "application/json", ...(token ? { authorization: `Bearer ${token}` } : {}) },
      body: body === undefined ? undefined : JSON.stringify(body),
    });
    const text = await response.text();
    if (!response.ok) throw new Error(`${method} ${path}: ${response.status} ${text}`);
    return text ? JSON.parse(text) : null;
  };
  const { jwt: token } = await call("POST", "/v1/handshake", { version: "1", api_key: apiKey });
  return {
    origin,
    token,
    /** A JSON request to the chat API with this server's token. */
    api: (method, path, body) => call(method, path, body, token),
    /** A second organization's token. */
    async otherToken() {
      const { execFile } = await import("node:child_process");
      const run = (...args) =>
        new Promise((ok, fail) =>
          execFile(SPOOL, ["admin", ...args, "--data-dir", dataDir], (e, stdout, stderr) =>
            e ? fail(new Error(`spool admin ${args.join(" ")}: ${stderr}`)) : ok(JSON.parse(stdout)),
          ),
        );
      await run("create-org", "Other", "--id", "other");
      const key = await run("create-api-key", "other");
      return (await call("POST", "/v1/handshake", { version: "1", api_key: key.api_key })).jwt;
    },
    /** A chat's events: its active branch's, or with `branch: "all"` every one. */
    async events(session, { branch = "active" } = {}) {
      const out = [];
      let after = 0;
      for (let i = 0; i < 1000; i++) {
        const page = await call("GET", `/v1/sessions/${session}/events?after=${after}&branch=${branch}`, undefined, token);
        out.push(...page.events);
        if (page.up_to_date || page.last_seq === after) return out;
        after = page.last_seq;
      }
      throw new Error(`${session}'s events did not end`);
    },
    async stop() {
      child.kill("SIGTERM");
      await new Promise((r) => (child.exitCode !== null ? r() : child.once("exit", r)));
      await rm(dataDir, { recursive: true, force: true });
    },
  };
}
