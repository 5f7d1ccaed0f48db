// A Spool chat as an AG-UI agent: the real `@ag-ui/client` HttpAgent (which verifies the
// event order: RUN_STARTED first, nothing after RUN_FINISHED, no message left open) against
// a real `spool serve` and its scripted demo agent, and every event checked against
// `@ag-ui/core`'s own schemas.

import assert from "node:assert/strict";
import { after, before, test } from "node:test";
import { HttpAgent } from "@ag-ui/client";
import { EventSchema } from "@ag-ui/core/schemas";
import { startSpool } from "./spool.mjs";

let spool;
before(async () => {
  spool = await startSpool();
});
after(async () => {
  await spool?.stop();
});

async function newChat() {
  const ws = await spool.api("POST", "/v1/workspaces", { title: "AG-UI" });
  return (await spool.api("POST", "/v1/sessions", { workspace_id: ws.id })).id;
}

function agentFor(session) {
  return new HttpAgent({
    url: `${spool.origin}/v1/ag-ui/chat`,
    headers: { Authorization: `Bearer ${spool.token}` },
    threadId: session,
  });
}

/** Runs `agent`, checking every event against the protocol's schema; the events. */
async function run(agent, parameters = {}) {
  const events = [];
  await agent.runAgent(parameters, {
    onEvent: ({ event }) => {
      const checked = EventSchema.safeParse(event);
      assert.ok(checked.success, `${JSON.stringify(event)}: ${checked.error}`);
      events.push(event);
    },
  });
  return events;
}

/** The agent's replies in a turn, as Spool stored them. */
async function storedAnswer(session, turnId) {
  const events = await spool.events(session);
  return events
    .filter((e) => e.turn_id === turnId && e.type === "message_end")
    .map((e) => e.payload.text)
    .join("");
}

/** The SSE `data:` JSON of a response, until it ends or `stop(events)` holds. */
async function readEvents(response, stop = () => false) {
  const reader = response.body.getReader();
  const decoder = new TextDecoder();
  let buffer = "";
  const events = [];
  for (;;) {
    const { value, done } = await reader.read();
    if (done) return events;
    buffer += decoder.decode(value, { stream: true });
    let at;
    while ((at = buffer.indexOf("\n\n")) >= 0) {
      const block = buffer.slice(0, at);
      buffer = buffer.slice(at + 2);
      for (const line of block.split("\n")) {
        if (!line.startsWith("data: ")) continue;
        const event = JSON.parse(line.slice(6));
        assert.ok(EventSchema.safeParse(event).success, JSON.stringify(event));
        events.push(event);
        if (stop(events)) {
          await reader.cancel();
          return events;
        }
      }
    }
  }
}

const content = (events) =>
  events
    .filter((e) => e.type === "TEXT_MESSAGE_CONTENT")
    .map((e) => e.delta)
    .join("");

test("a run streams the agent's answer as AG-UI events", async () => {
  const session = await newChat();
  const agent = agentFor(session);
  agent.addMessage({ id: "u-1", role: "user", content: "hello there" });
  const events = await run(agent, { runId: "run-1" });
  assert.equal(events[0].type, "RUN_STARTED");
  assert.equal(events[0].threadId, session);
  assert.equal(events[0].runId, "run-1");
  const finished = events.at(-1);
  assert.equal(finished.type, "RUN_FINISHED");
  assert.deepEqual(finished.outcome, { type: "success" });
  const turnId = events[0].metadata.spool.turn_id;
  const stored = await storedAnswer(session, turnId);
  assert.ok(stored.includes("You wrote: *hello there*"), stored);
  assert.equal(content(events), stored);
  // The agent's own state holds the answer as one assistant message.
  const replies = agent.messages.filter((m) => m.role === "assistant");
  assert.equal(replies.length, 1);
  assert.equal(replies[0].content, stored);
  // Every event says where it is in the chat.
  const seqs = events.slice(1).map((e) => e.metadata.spool.seq);
  assert.deepEqual(seqs, [...seqs].sort((a, b) => a - b));
});

test("an approval interrupts the run, and the next run's resume answers it", async () => {
  const session = await newChat();
  const agent = agentFor(session);
  agent.addMessage({ id: "u-2", role: "user", content: "please add a new agent helper" });
  const first = await run(agent);
  const outcome = first.at(-1).outcome;
  assert.equal(outcome.type, "interrupt");
  const [interrupt] = outcome.interrupts;
  assert.equal(interrupt.reason, "tool_approval");
  assert.deepEqual(agent.pendingInterrupts.map((i) => i.id), [interrupt.id]);
  assert.ok(first.some((e) => e.type === "TOOL_CALL_START" && e.toolCallId === interrupt.toolCallId && e.toolCallName === "create_agent"));
  // An approval is explicit: a payload that does not say yes or no is refused, and runs nothing.
  const vague = await fetch(`${spool.origin}/v1/ag-ui/chat`, {
    method: "POST",
    headers: { authorization: `Bearer ${spool.token}`, "content-type": "application/json" },
    body: JSON.stringify({ threadId: session, runId: "vague", messages: [], resume: [{ interruptId: interrupt.id, status: "resolved", payload: { decision: "decline" } }] }),
  });
  assert.equal(vague.status, 400);
  assert.deepEqual(interrupt.responseSchema.required, ["approved"]);
  const second = await run(agent, { resume: [{ interruptId: interrupt.id, status: "resolved", payload: { approved: true } }] });
  assert.deepEqual(second.at(-1).outcome, { type: "success" });
  const result = second.find((e) => e.type === "TOOL_CALL_RESULT" && e.toolCallId === interrupt.toolCallId);
  assert.ok(result && !JSON.parse(result.content).error, JSON.stringify(result));
  const events = await spool.events(session);
  const decided = events.find((e) => e.type === "approval_submitted");
  assert.deepEqual(decided.payload, { decision: "approve", tool_call_id: interrupt.toolCallId });
  assert.equal(events.at(-1).type, "agent_end");
});

test("a question interrupts the run, and its answer is the resume's payload", async () => {
  const session = await newChat();
  const agent = agentFor(session);
  agent.addMessage({ id: "u-3", role: "user", content: "ask me a question" });
  const first = await run(agent);
  const [interrupt] = first.at(-1).outcome.interrupts;
  assert.equal(interrupt.reason, "question");
  assert.equal(interrupt.message, "What should I call you?");
  const second = await run(agent, { resume: [{ interruptId: interrupt.id, status: "resolved", payload: { answer: "Ada" } }] });
  assert.deepEqual(second.at(-1).outcome, { type: "success" });
  assert.ok(content(second).includes("Ada"), content(second));
  const answered = (await spool.events(session)).find((e) => e.type === "question_answered");
  assert.deepEqual(answered.payload, { question_id: interrupt.id, answer: "Ada" });
});

test("a dropped run resumes after the last seq the client has, with nothing lost or repeated", async () => {
  const session = await newChat();
  const headers = { authorization: `Bearer ${spool.token}`, "content-type": "application/json" };
  const input = {
    threadId: session,
    runId: "run-drop",
    messages: [{ id: "u-4", role: "user", content: "tell me about streams" }],
    tools: [],
    context: [],
  };
  const response = await fetch(`${spool.origin}/v1/ag-ui/chat`, { method: "POST", headers, body: JSON.stringify(input) });
  assert.equal(response.status, 200);
  // Dropped after three pieces of the answer.
  const seen = await readEvents(response, (events) => events.filter((e) => e.type === "TEXT_MESSAGE_CONTENT").length === 3);
  const turnId = seen[0].metadata.spool.turn_id;
  const last = seen.at(-1).metadata.spool.seq;
  const resumed = await fetch(`${spool.origin}/v1/ag-ui/chat/${session}/stream?after=${last}`, { headers });
  assert.equal(resumed.status, 200);
  const rest = await readEvents(resumed);
  assert.equal(rest[0].type, "RUN_STARTED");
  assert.equal(rest[1].type, "TEXT_MESSAGE_START", "the open message is opened again");
  assert.equal(rest[1].metadata.spool.reopened, true);
  assert.ok(rest.slice(2).every((e) => e.metadata.spool.seq > last));
  assert.equal(rest.at(-1).type, "RUN_FINISHED");
  const stored = await storedAnswer(session, turnId);
  assert.equal(content(seen) + content(rest), stored);
  // Nothing runs now.
  const idle = await fetch(`${spool.origin}/v1/ag-ui/chat/${session}/stream`, { headers });
  assert.equal(idle.status, 204);
  // A position past the chat's end is a clear 400.
  const past = await fetch(`${spool.origin}/v1/ag-ui/chat/${session}/stream?after=99999`, { headers });
  assert.equal(past.status, 400);
});

test("a message resent under its id with new text is a new version; the same text is a retry", async () => {
  const session = await newChat();
  const agent = agentFor(session);
  agent.addMessage({ id: "u-edit", role: "user", content: "hello there" });
  const first = await run(agent, { runId: "run-a" });
  const firstTurn = first[0].metadata.spool.turn_id;
  // The person edits their message: the front end sends it again under its id
  agent.setMessages([{ id: "u-edit", role: "user", content: "good evening" }]);
  const edited = await run(agent, { runId: "run-b" });
  const editedTurn = edited[0].metadata.spool.turn_id;
  assert.notEqual(editedTurn, firstTurn);
  assert.ok(content(edited).includes("good evening"), content(edited));
  // The chat's active branch holds the new version only; every event is kept
  const said = (events) => events.filter((e) => e.type === "user_message_submitted").map((e) => e.payload.content);
  assert.deepEqual(said(await spool.events(session)), ["good evening"]);
  assert.deepEqual(said(await spool.events(session, { branch: "all" })), ["hello there", "good evening"]);
  // Sent again as it is now: the same run again, no third version
  agent.setMessages([{ id: "u-edit", role: "user", content: "good evening" }]);
  const again = await run(agent, { runId: "run-c" });
  assert.equal(again[0].metadata.spool.turn_id, editedTurn);
  assert.equal(said(await spool.events(session, { branch: "all" })).length, 2);
});

test("another organization cannot run or resume a chat", async () => {
  const session = await newChat();
  const other = await spool.otherToken();
  const headers = { authorization: `Bearer ${other}`, "content-type": "application/json" };
  const input = { threadId: session, runId: "r", messages: [{ id: "x", role: "user", content: "hi" }] };
  const post = await fetch(`${spool.origin}/v1/ag-ui/chat`, { method: "POST", headers, body: JSON.stringify(input) });
  assert.equal(post.status, 404);
  const resume = await fetch(`${spool.origin}/v1/ag-ui/chat/${session}/stream`, { headers });
  assert.equal(resume.status, 404);
  assert.deepEqual(await spool.events(session), []);
});
