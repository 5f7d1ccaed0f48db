// A real `spool serve` for the MCP tests: the embedded store in a temporary directory, a free
// loopback port, as tests/frontends/spool.mjs starts it; plus API keys made with `spool admin`
// (one with the `agent` capability, which Spool's MCP server needs).

import { execFile, spawn } from "node:child_process";
import { mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join, resolve } from "node:path";

const root = resolve(import.meta.dirname, "../..");
// SPOOL_BIN may be relative to the repository's root (as the Makefile passes it).
export const SPOOL = resolve(root, process.env.SPOOL_BIN ?? "target/debug/spool");

export async function startSpool() {
  const dataDir = await mkdtemp(join(tmpdir(), "spool-mcp-"));
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
  const origin = new URL(link).origin;
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
  const admin = (...args) =>
    new Promise((ok, fail) =>
      execFile(SPOOL, ["admin", ...args, "--data-dir", dataDir], (e, stdout, stderr) =>
        e ? fail(new Error(`spool admin ${args.join(" ")}: ${stderr}`)) : ok(JSON.parse(stdout)),
      ),
    );
  /** A new API key of the local organization with `capabilities`. */
  const key = async (...capabilities) =>
    (await admin("create-api-key", "local", ...capabilities.flatMap((c) => ["--capability", c]))).api_key;
  /** The token of `apiKey`. */
  const token = async (apiKey) => (await call("POST", "/v1/handshake", { version: "1", api_key: apiKey })).jwt;
  // The person's token: a key without `agent`.
  const person = await token(await key());
  return {
    origin,
    key,
    token,
    /** A JSON request to the chat API as the person. */
    api: (method, path, body) => call(method, path, body, person),
    async stop() {
      child.kill("SIGTERM");
      await new Promise((r) => (child.exitCode !== null ? r() : child.once("exit", r)));
      await rm(dataDir, { recursive: true, force: true });
    },
  };
}
