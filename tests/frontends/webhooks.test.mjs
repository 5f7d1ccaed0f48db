// A workspace's chat webhooks, received by a plain Node server and verified with the Standard
// Webhooks reference library (`standardwebhooks`), against a real `spool serve` whose scripted
// agent answers, asks and fails: every delivery verifies with the endpoint's secret (and a
// changed body does not); a 500 is retried with the same `webhook-id`; each event is delivered
// once (one 2xx per id); a turned-off endpoint receives nothing.

import assert from "node:assert/strict";
import { createServer } from "node:http";
import { after, before, test } from "node:test";
import { Webhook } from "standardwebhooks";
import { startSpool } from "./spool.mjs";

const SCRIPT = {
  word_delay_ms: 0,
  rules: [
    {
      match: ["color"],
      rounds: [
        { say: "One question.", tools: [{ name: "ask_user", arguments: { question: "Which color?" } }] },
        { say: "You chose {result}." },
      ],
    },
    { match: ["break"], rounds: [{ fail: "the model is down" }] },
  ],
  default: [{ say: "Hello." }],
};

/** A receiver on loopback answering the scripted statuses (then 200); what it got. */
async function receiver(statuses = []) {
  const got = [];
  const waiters = [];
  const server = createServer((req, res) => {
    const chunks = [];
    req.on("data", (c) => chunks.push(c));
    req.on("end", () => {
      const status = statuses.length ? statuses.shift() : 200;
      got.push({ headers: req.headers, body: Buffer.concat(chunks).toString("utf8"), status });
      res.writeHead(status, { "content-type": "application/json" });
      res.end("{}");
      for (const w of waiters.splice(0)) w();
    });
  });
  await new Promise((ok) => server.listen(0, "127.0.0.1", ok));
  return {
    url: `http://127.0.0.1:${server.address().port}/hook`,
    got,
    /** Waits (at most 20 s) until `n` requests came. */
    async count(n) {
      const deadline = Date.now() + 20_000;
      while (got.length < n) {
        assert.ok(Date.now() < deadline, `only ${got.length} of ${n} webhook requests came`);
        await new Promise((ok) => {
          waiters.push(ok);
          setTimeout(ok, 200);
        });
      }
      return got;
    },
    close: () => new Promise((ok) => server.close(ok)),
  };
}

let spool;
before(async () => {
  spool = await startSpool();
});
after(async () => {
  await spool?.stop();
});

async function workspaceWithScript() {
  const ws = await spool.api("POST", "/v1/workspaces", { title: "Webhooks" });
  const { agents } = await spool.api("GET", `/v1/workspaces/${ws.id}/agents`);
  await spool.api("PATCH", `/v1/agents/${agents[0].id}`, { instruction: JSON.stringify(SCRIPT), runtime: "scripted" });
  const chat = await spool.api("POST", "/v1/sessions", { workspace_id: ws.id });
  return { ws: ws.id, chat: chat.id };
}

async function until(chat, type) {
  const deadline = Date.now() + 20_000;
  for (;;) {
    const events = await spool.events(chat);
    if (events.some((e) => e.type === type && e.seq > (until.seen[chat] ?? 0))) {
      until.seen[chat] = events.at(-1).seq;
      return events;
    }
    assert.ok(Date.now() < deadline, `no ${type} in ${chat}`);
    await new Promise((ok) => setTimeout(ok, 100));
  }
}
until.seen = {};

test("chat webhooks verify with the Standard Webhooks library, are retried, once each, never to a turned-off endpoint", async () => {
  const { ws, chat } = await workspaceWithScript();
  const on = await receiver([500]);
  const off = await receiver();
  try {
    const hook = await spool.api("POST", `/v1/workspaces/${ws}/webhooks`, { url: on.url, description: "all" });
    const quiet = await spool.api("POST", `/v1/workspaces/${ws}/webhooks`, { url: off.url, enabled: false });
    assert.match(hook.secret, /^whsec_/);

    // A turn that completes (its first delivery answered 500, then retried), a question, the
    // turn its answer finishes, a failed turn, a task made by hand.
    await spool.api("POST", `/v1/sessions/${chat}/messages`, { content: "hi" });
    await until(chat, "agent_end");
    await on.count(2);
    await spool.api("POST", `/v1/sessions/${chat}/messages`, { content: "pick a color" });
    const events = await until(chat, "ask_question");
    const question = events.findLast((e) => e.type === "ask_question");
    await spool.api("POST", `/v1/sessions/${chat}/question`, { question_id: question.payload.question_id, answer: "blue" });
    await until(chat, "agent_end");
    await spool.api("POST", `/v1/sessions/${chat}/messages`, { content: "break it" });
    await until(chat, "agent_end");
    await spool.api("POST", `/v1/workspaces/${ws}/tasks`, { title: "Paint the shed" });
    const got = await on.count(6);

    // Every request verifies with the reference library and the endpoint's secret.
    const wh = new Webhook(hook.secret);
    const payloads = got.map(({ headers, body }) => wh.verify(body, headers));
    assert.throws(() => wh.verify(got[0].body.replace("complete", "error"), got[0].headers));
    assert.throws(() => new Webhook(`whsec_${Buffer.alloc(32, 7).toString("base64")}`).verify(got[0].body, got[0].headers));

    // The 500 was retried with the same id and body; each event was answered 2xx once.
    assert.equal(got[0].status, 500);
    assert.equal(got[1].headers["webhook-id"], got[0].headers["webhook-id"]);
    assert.equal(got[1].body, got[0].body);
    const delivered = got.filter((r) => r.status === 200).map((r) => r.headers["webhook-id"]);
    assert.equal(new Set(delivered).size, delivered.length, `a webhook-id delivered twice: ${delivered}`);
    assert.deepEqual(
      payloads.slice(1).map((p) => p.type),
      ["turn.completed", "input.required", "turn.completed", "turn.failed", "task.created"],
    );
    assert.equal(payloads[2].data.summary, "Which color?");
    assert.equal(payloads[4].data.reason, "error");
    assert.equal(payloads[5].data.summary, "Paint the shed");

    // The attempts are visible; the turned-off endpoint got nothing.
    const { deliveries } = await spool.api("GET", `/v1/webhooks/${hook.id}/deliveries`);
    assert.equal(deliveries.length, 5);
    assert.deepEqual(deliveries.at(-1).attempts.map((a) => a.status), [500, 200]);
    assert.ok(deliveries.every((d) => d.state === "delivered"));
    assert.equal(off.got.length, 0);
    assert.deepEqual((await spool.api("GET", `/v1/webhooks/${quiet.id}/deliveries`)).deliveries, []);
  } finally {
    await on.close();
    await off.close();
  }
});
