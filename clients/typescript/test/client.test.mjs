// The TypeScript client against a real `spool serve` (SPOOL_BIN, default target/debug/spool):
// the handshake, typed routes, refusals as SpoolError, and followChat() across a server that
// is killed and started again mid-answer.

import assert from "node:assert/strict";
import { spawn } from "node:child_process";
import { mkdtemp, readFile, rm } from "node:fs/promises";
import net from "node:net";
import { tmpdir } from "node:os";
import { join, resolve } from "node:path";
import { after, before, test } from "node:test";
import { Spool, SpoolError, ok } from "../dist/index.js";

const root = resolve(import.meta.dirname, "../../..");
const SPOOL = resolve(root, process.env.SPOOL_BIN ?? "target/debug/spool");

let dataDir;
let port;
let server;

function freePort() {
  return new Promise((done, fail) => {
    const srv = net.createServer();
    srv.on("error", fail);
    srv.listen(0, "127.0.0.1", () => {
      const { port } = srv.address();
      srv.close(() => done(port));
    });
  });
}

/** Starts `spool serve` on the fixed port and data directory; resolves once it listens. */
async function serve() {
  const child = spawn(SPOOL, ["serve", "--addr", `127.0.0.1:${port}`, "--data-dir", dataDir], {
    // A short turn lease: the turn the killed server ran is picked up again within seconds.
    env: { ...process.env, RUST_LOG: "warn", SPOOL_RATE_LIMITS: "off", SPOOL_TURN_LEASE_MS: "3000" },
    stdio: "ignore",
  });
  for (let i = 0; i < 300; i++) {
    const up = await new Promise((done) => {
      const socket = net.connect(port, "127.0.0.1", () => {
        socket.end();
        done(true);
      });
      socket.on("error", () => done(false));
    });
    if (up) return child;
    await new Promise((r) => setTimeout(r, 100));
  }
  throw new Error(`spool serve did not start (is ${SPOOL} built? cargo build -p spool-local)`);
}

before(async () => {
  dataDir = await mkdtemp(join(tmpdir(), "spool-client-"));
  port = await freePort();
  server = await serve();
});
after(async () => {
  server?.kill("SIGTERM");
  await rm(dataDir, { recursive: true, force: true });
});

const baseUrl = () => `http://127.0.0.1:${port}`;
const apiKey = async () => (await readFile(join(dataDir, "local-api-key"), "utf8")).trim();

async function newChat(spool) {
  const ws = ok(await spool.api.POST("/v1/workspaces", { body: { title: "Client" } }));
  return ok(await spool.api.POST("/v1/sessions", { body: { workspace_id: ws.id } }));
}

test("the handshake, typed routes, and refusals as SpoolError", async () => {
  const spool = await Spool.connect({ baseUrl: baseUrl(), apiKey: await apiKey() });
  assert.match(spool.token, /^ey/);
  const chat = await newChat(spool);
  const got = ok(await spool.api.GET("/v1/sessions/{id}", { params: { path: { id: chat.id } } }));
  assert.equal(got.id, chat.id);
  const missing = await spool.api.GET("/v1/sessions/{id}", { params: { path: { id: "ses_missing" } } });
  assert.throws(() => ok(missing), (e) => e instanceof SpoolError && e.status === 404 && e.code === "not_found");
  await assert.rejects(Spool.connect({ baseUrl: baseUrl(), apiKey: "spool_00_00" }), (e) => e instanceof SpoolError && e.status >= 400);
  // A 204 is a success with no data.
  const other = await newChat(spool);
  assert.equal(ok(await spool.api.DELETE("/v1/sessions/{id}", { params: { path: { id: other.id } } })), undefined);
  const anonymous = new Spool({ baseUrl: baseUrl() });
  await assert.rejects(anonymous.followChat(chat.id).next(), (e) => e instanceof SpoolError && e.status === 401);
});

test("followChat resumes from the last seq across a server killed mid-answer", async () => {
  const spool = await Spool.connect({ baseUrl: baseUrl(), apiKey: await apiKey() });
  const chat = await newChat(spool);
  const posted = ok(
    await spool.api.POST("/v1/sessions/{id}/messages", {
      params: { path: { id: chat.id } },
      body: { content: "tell me about streams", client_message_id: "client-test-1" },
    }),
  );
  const events = [];
  const reconnects = [];
  const stop = new AbortController();
  let killed = false;
  for await (const event of spool.followChat(chat.id, {
    signal: stop.signal,
    maxBackoffMs: 500,
    onReconnect: (_, at) => reconnects.push(at),
  })) {
    events.push(event);
    if (!killed && event.type === "message_update") {
      // Mid-answer: the server dies, and comes back on the same port and data.
      killed = true;
      server.kill("SIGKILL");
      await new Promise((r) => server.once("exit", r));
      server = await serve();
    }
    if (event.type === "agent_end" && event.turn_id === posted.turn_id) stop.abort();
  }
  assert.ok(reconnects.length >= 1, "the follower reconnected");
  const seqs = events.map((e) => e.seq);
  assert.deepEqual(seqs, Array.from({ length: seqs.length }, (_, i) => i + 1), "every event once, in order");
  const all = [];
  for (let at = 0; ; ) {
    const page = ok(await spool.api.GET("/v1/sessions/{id}/events", { params: { path: { id: chat.id }, query: { after: at } } }));
    all.push(...page.events);
    if (page.up_to_date || page.events.length === 0) break;
    at = page.last_seq;
  }
  assert.deepEqual(seqs, all.map((e) => e.seq).filter((s) => s <= seqs.at(-1)));
  // Each reply's pieces make its stored text (the one the kill cut short, and the one after).
  const ends = events.filter((e) => e.type === "message_end");
  assert.ok(ends.length >= 1);
  for (const end of ends) {
    const pieces = events.filter((e) => e.type === "message_update" && e.payload.message_id === end.payload.message_id);
    assert.equal(pieces.map((e) => e.payload.delta).join(""), end.payload.text);
  }
  assert.ok(ends.at(-1).payload.text.includes("You wrote: *tell me about streams*"));
});
