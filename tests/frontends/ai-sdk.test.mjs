// A Spool chat through the AI SDK's own client: the `ai` package's `AbstractChat` (what
// `useChat` runs) over `DefaultChatTransport` with nothing but `api` and the Authorization
// header, against a real `spool serve` and its scripted demo agent. The transport checks
// every chunk against the SDK's own schema, so a chunk Spool gets wrong fails the test.

import assert from "node:assert/strict";
import { after, before, test } from "node:test";
import {
  AbstractChat,
  DefaultChatTransport,
  lastAssistantMessageIsCompleteWithApprovalResponses,
  lastAssistantMessageIsCompleteWithToolCalls,
} from "ai";
import { startSpool } from "./spool.mjs";

/** The chat state `useChat` keeps in React, kept in plain fields. */
class State {
  status = "ready";
  error = undefined;
  messages = [];
  pushMessage = (m) => {
    this.messages = [...this.messages, m];
  };
  popMessage = () => {
    this.messages = this.messages.slice(0, -1);
  };
  replaceMessage = (i, m) => {
    this.messages = [...this.messages.slice(0, i), m, ...this.messages.slice(i + 1)];
  };
  snapshot = (thing) => structuredClone(thing);
}

class Chat extends AbstractChat {
  constructor({ messages = [], ...init }) {
    const state = new State();
    state.messages = messages;
    super({ ...init, state });
  }
}

let spool;
before(async () => {
  spool = await startSpool();
});
after(async () => {
  await spool?.stop();
});

const transport = (token = spool.token) =>
  new DefaultChatTransport({ api: `${spool.origin}/v1/ai-sdk/chat`, headers: { Authorization: `Bearer ${token}` } });

async function newChat() {
  const ws = await spool.api("POST", "/v1/workspaces", { title: "AI SDK" });
  return (await spool.api("POST", "/v1/sessions", { workspace_id: ws.id })).id;
}

const text = (message) =>
  message.parts
    .filter((p) => p.type === "text")
    .map((p) => p.text)
    .join("");

/** The agent's whole answer in a turn, as Spool stored it. */
async function storedAnswer(session, turnId) {
  const events = await spool.events(session);
  return events
    .filter((e) => e.turn_id === turnId && e.type === "message_end")
    .map((e) => e.payload.text)
    .join("");
}

/** Waits (bounded) until `done()` holds. */
async function until(what, done) {
  for (let i = 0; i < 400; i++) {
    if (done()) return;
    await new Promise((r) => setTimeout(r, 25));
  }
  assert.fail(`timed out waiting for ${what}`);
}

test("a turn streams into the AI SDK's chat", async () => {
  const session = await newChat();
  const errors = [];
  const chat = new Chat({ id: session, transport: transport(), onError: (e) => errors.push(e) });
  await chat.sendMessage({ text: "hello there" });
  assert.deepEqual(errors, []);
  assert.equal(chat.status, "ready");
  assert.equal(chat.messages.length, 2);
  const answer = chat.messages[1];
  assert.equal(answer.role, "assistant");
  // The assistant message is the turn, and holds exactly what Spool stored.
  assert.equal(answer.metadata.spool.turn_id, answer.id);
  const stored = await storedAnswer(session, answer.id);
  assert.ok(stored.includes("You wrote: *hello there*"), stored);
  assert.equal(text(answer), stored);
  // Nothing runs now: resuming finds nothing (204) and adds nothing.
  await chat.resumeStream();
  assert.equal(chat.messages.length, 2);
});

test("a dropped connection resumes with exactly the full answer", async () => {
  const session = await newChat();
  const user = { id: "u-drop", role: "user", parts: [{ type: "text", text: "tell me about streams" }] };
  // The first page: the answer starts streaming, then the connection is killed.
  const abort = new AbortController();
  const stream = await transport().sendMessages({
    chatId: session,
    messages: [user],
    trigger: "submit-message",
    messageId: undefined,
    abortSignal: abort.signal,
  });
  const reader = stream.getReader();
  let deltas = 0;
  let turnId;
  while (deltas < 3) {
    const { value, done } = await reader.read();
    assert.ok(!done, "the stream ended before the answer streamed");
    if (value.type === "start") turnId = value.messageId;
    if (value.type === "text-delta") deltas++;
  }
  abort.abort();
  await reader.cancel().catch(() => {});
  // The reloaded page: it kept the person's message, and resumes the running answer.
  const chat = new Chat({ id: session, transport: transport(), messages: [user] });
  await chat.resumeStream();
  assert.equal(chat.messages.length, 2, "the resumed answer is one message");
  const answer = chat.messages[1];
  assert.equal(answer.id, turnId);
  const stored = await storedAnswer(session, turnId);
  assert.ok(stored.length > 50, stored);
  // Nothing lost, nothing repeated.
  assert.equal(text(answer), stored);
  assert.equal(answer.parts.filter((p) => p.type === "text").length, 1);
  // The same message posted again (the transport's retry) is the same turn.
  const events = await spool.events(session);
  assert.equal(events.filter((e) => e.type === "user_message_submitted").length, 1);
});

test("an approval round-trip: the request, the person's yes, the tool's output", async () => {
  const session = await newChat();
  const chat = new Chat({
    id: session,
    transport: transport(),
    sendAutomaticallyWhen: lastAssistantMessageIsCompleteWithApprovalResponses,
  });
  await chat.sendMessage({ text: "please add a new agent helper" });
  const asking = chat.messages.at(-1);
  const part = asking.parts.find((p) => p.type === "dynamic-tool" && p.state === "approval-requested");
  assert.ok(part, JSON.stringify(asking.parts));
  assert.equal(part.toolName, "create_agent");
  assert.equal(part.providerExecuted, true);
  await chat.addToolApprovalResponse({ id: part.approval.id, approved: true });
  await until("the approved call's output", () => {
    const p = chat.messages.at(-1).parts.find((q) => q.toolCallId === part.toolCallId);
    return chat.status === "ready" && p?.state === "output-available";
  });
  assert.equal(chat.messages.length, 2, "the answer continues the same message");
  const events = await spool.events(session);
  const decided = events.find((e) => e.type === "approval_submitted");
  assert.deepEqual(decided.payload, { decision: "approve", tool_call_id: part.toolCallId });
  const ran = events.find((e) => e.type === "tool_end" && e.payload.tool_call_id === part.toolCallId);
  assert.ok(ran && !ran.payload.error, JSON.stringify(ran));
  assert.equal(events.at(-1).type, "agent_end");
  // The continuation's text is what the turn said after the approval.
  assert.equal(text(chat.messages.at(-1)), await storedAnswer(session, chat.messages.at(-1).id));
});

test("an approval of a turn aborted meanwhile is refused once, not re-sent forever", async () => {
  const session = await newChat();
  let posts = 0;
  const counting = new DefaultChatTransport({
    api: `${spool.origin}/v1/ai-sdk/chat`,
    headers: { Authorization: `Bearer ${spool.token}` },
    fetch: (url, init) => {
      if (init?.method === "POST") posts++;
      return fetch(url, init);
    },
  });
  const errors = [];
  const chat = new Chat({
    id: session,
    transport: counting,
    onError: (e) => errors.push(e),
    sendAutomaticallyWhen: lastAssistantMessageIsCompleteWithApprovalResponses,
  });
  await chat.sendMessage({ text: "please add a new agent helper" });
  const part = chat.messages.at(-1).parts.find((p) => p.state === "approval-requested");
  assert.ok(part);
  // Someone else aborts the waiting turn.
  await spool.api("POST", `/v1/sessions/${session}/control`, { action: "abort" });
  for (let i = 0; i < 200; i++) {
    const events = await spool.events(session);
    if (events.at(-1)?.type === "agent_end") break;
    await new Promise((r) => setTimeout(r, 25));
  }
  posts = 0;
  await chat.addToolApprovalResponse({ id: part.approval.id, approved: true });
  await until("the refusal", () => chat.status === "error" || errors.length > 0);
  await new Promise((r) => setTimeout(r, 300));
  assert.equal(posts, 1, "the approval was posted once");
  assert.match(String(errors[0] ?? chat.error), /409|no open/);
  const events = await spool.events(session);
  assert.ok(!events.some((e) => e.type === "approval_submitted"));
  // Resuming the aborted turn's chat finds nothing running.
  const resumed = await fetch(`${spool.origin}/v1/ai-sdk/chat/${session}/stream`, { headers: { authorization: `Bearer ${spool.token}` } });
  assert.equal(resumed.status, 204);
});

test("a turn waiting on a person is resumed even after a later, enqueued turn ran", async () => {
  const session = await newChat();
  const chat = new Chat({ id: session, transport: transport() });
  await chat.sendMessage({ text: "please add a new agent helper" });
  const waiting = chat.messages.at(-1);
  assert.ok(waiting.parts.some((p) => p.state === "approval-requested"));
  // Another message queued behind it runs (the waiting turn holds no worker) and ends.
  const queued = await spool.api("POST", `/v1/sessions/${session}/messages`, { content: "hello there", on_busy: "enqueue" });
  for (let i = 0; i < 400; i++) {
    const events = await spool.events(session);
    if (events.some((e) => e.type === "agent_end" && e.turn_id === queued.turn_id)) break;
    await new Promise((r) => setTimeout(r, 25));
  }
  // A reload: the waiting turn comes back, with its approval request.
  const reloaded = new Chat({ id: session, transport: transport(), messages: [chat.messages[0]] });
  await reloaded.resumeStream();
  assert.equal(reloaded.messages.length, 2);
  assert.equal(reloaded.messages[1].id, waiting.id);
  assert.ok(reloaded.messages[1].parts.some((p) => p.state === "approval-requested"));
});

test("regenerate() and an edited message make branches; a reload shows the active one", async () => {
  const session = await newChat();
  const errors = [];
  const chat = new Chat({ id: session, transport: transport(), onError: (e) => errors.push(e) });
  await chat.sendMessage({ text: "good morning" });
  const [question, first] = chat.messages;
  // regenerate(): the same question answered again, as a new turn
  await chat.regenerate();
  assert.deepEqual(errors, []);
  assert.equal(chat.messages.length, 2);
  const again = chat.messages[1];
  assert.notEqual(again.id, first.id, "a new turn answers");
  assert.equal(text(again), await storedAnswer(session, again.id));
  assert.ok(text(again).includes("good morning"), text(again));
  // An edit: the person's message sent again under its id with new text
  await chat.sendMessage({ text: "good evening", messageId: question.id });
  assert.deepEqual(errors, []);
  assert.equal(chat.messages.length, 2);
  const edited = chat.messages[1];
  assert.ok(text(edited).includes("good evening"), text(edited));
  // A reload reads the active branch: the edited question and its answer only
  const said = (events) =>
    events
      .filter((e) => e.type === "user_message_submitted" || e.type === "message_end")
      .map((e) => e.payload.content ?? e.turn_id);
  assert.deepEqual(said(await spool.events(session)), ["good evening", edited.id]);
  // Every earlier answer is still reachable through the API
  const all = said(await spool.events(session, { branch: "all" }));
  assert.deepEqual(all, ["good morning", first.id, "good morning", again.id, "good evening", edited.id]);
  // Sending the edit again is a retry, not another version
  await chat.sendMessage({ text: "good evening", messageId: question.id });
  assert.equal(chat.messages[1].id, edited.id);
  assert.equal(said(await spool.events(session, { branch: "all" })).length, 6);
});

test("a question is a client tool: its output is the person's answer", async () => {
  const session = await newChat();
  const calls = [];
  const chat = new Chat({
    id: session,
    transport: transport(),
    onToolCall: ({ toolCall }) => calls.push(toolCall),
    sendAutomaticallyWhen: lastAssistantMessageIsCompleteWithToolCalls,
  });
  await chat.sendMessage({ text: "ask me a question" });
  assert.equal(calls.length, 1);
  assert.equal(calls[0].toolName, "ask_user");
  assert.equal(calls[0].input.question, "What should I call you?");
  await chat.addToolOutput({ tool: "ask_user", toolCallId: calls[0].toolCallId, output: "Ada" });
  await until("the answer's continuation", () => chat.status === "ready" && text(chat.messages.at(-1)).includes("Ada"));
  const events = await spool.events(session);
  const answered = events.find((e) => e.type === "question_answered");
  assert.deepEqual(answered.payload, { question_id: calls[0].toolCallId, answer: "Ada" });
  assert.equal(events.at(-1).type, "agent_end");
});

test("a tool the front end declares and runs: the agent calls it, its output comes back, the answer goes on", async () => {
  const ws = await spool.api("POST", "/v1/workspaces", { title: "Client tools" });
  const { agents } = await spool.api("GET", `/v1/workspaces/${ws.id}/agents`);
  const script = {
    word_delay_ms: 0,
    rules: [
      {
        match: ["where"],
        rounds: [
          { say: "Let me look.", tools: [{ name: "get_location", arguments: { precise: true } }, { name: "get_weather", arguments: {} }] },
          { say: "You are in {result}." },
        ],
      },
    ],
    default: [{ say: "Hello." }],
  };
  await spool.api("PATCH", `/v1/agents/${agents[0].id}`, { instruction: JSON.stringify(script), runtime: "scripted" });
  const session = (await spool.api("POST", "/v1/sessions", { workspace_id: ws.id })).id;
  const tools = [
    { name: "get_location", description: "Where the person is", inputSchema: { type: "object", properties: { precise: { type: "boolean" } } } },
    { name: "get_weather", description: "The weather where the person is" },
  ];
  const calls = [];
  const chat = new Chat({
    id: session,
    transport: new DefaultChatTransport({
      api: `${spool.origin}/v1/ai-sdk/chat`,
      headers: { Authorization: `Bearer ${spool.token}` },
      body: { tools },
    }),
    onToolCall: ({ toolCall }) => calls.push(toolCall),
    sendAutomaticallyWhen: lastAssistantMessageIsCompleteWithToolCalls,
  });
  // Two calls of the app's own tools in one reply: both asked at once, both run by the app.
  await chat.sendMessage({ text: "where am I?" });
  assert.deepEqual(calls.map((c) => c.toolName), ["get_location", "get_weather"]);
  assert.deepEqual(calls[0].input, { precise: true });
  // (The stream ends as the turn starts waiting, at the first; the second follows it.)
  let waiting = [];
  for (let i = 0; i < 200 && waiting.filter((e) => e.type === "tool_start").length < 2; i++) {
    if (i) await new Promise((r) => setTimeout(r, 50));
    waiting = await spool.events(session);
  }
  const starts = waiting.filter((e) => e.type === "tool_start");
  assert.deepEqual(starts.map((e) => e.payload.client), [true, true]);
  assert.ok(!waiting.some((e) => e.type === "agent_end"), "the turn waits for the tools' outputs");
  await chat.addToolOutput({ tool: "get_weather", toolCallId: calls[1].toolCallId, output: null });
  await chat.addToolOutput({ tool: "get_location", toolCallId: calls[0].toolCallId, output: { city: "Paris" } });
  await until("the outputs' continuation", () => chat.status === "ready" && text(chat.messages.at(-1)).includes("Paris"));
  const events = await spool.events(session);
  const submitted = events.filter((e) => e.type === "tool_output_submitted");
  assert.equal(submitted.length, 2, "each output posted once");
  const byCall = Object.fromEntries(submitted.map((e) => [e.payload.tool_call_id, e.payload.output]));
  assert.deepEqual(byCall[calls[0].toolCallId], { city: "Paris" });
  assert.equal(byCall[calls[1].toolCallId], null);
  assert.equal(events.at(-1).type, "agent_end");
});

test("another organization cannot post to or resume a chat", async () => {
  const session = await newChat();
  const other = await spool.otherToken();
  const post = await fetch(`${spool.origin}/v1/ai-sdk/chat`, {
    method: "POST",
    headers: { authorization: `Bearer ${other}`, "content-type": "application/json" },
    body: JSON.stringify({ id: session, messages: [{ id: "x", role: "user", parts: [{ type: "text", text: "hi" }] }], trigger: "submit-message" }),
  });
  assert.equal(post.status, 404);
  const resume = await fetch(`${spool.origin}/v1/ai-sdk/chat/${session}/stream`, { headers: { authorization: `Bearer ${other}` } });
  assert.equal(resume.status, 404);
  assert.deepEqual(await spool.events(session), []);
  // Bad input is a clear 400 and changes nothing.
  const bad = await fetch(`${spool.origin}/v1/ai-sdk/chat`, {
    method: "POST",
    headers: { authorization: `Bearer ${spool.token}`, "content-type": "application/json" },
    body: JSON.stringify({ id: session, messages: [] }),
  });
  assert.equal(bad.status, 400);
  assert.match((await bad.json()).error.message, /nothing to send/);
  assert.deepEqual(await spool.events(session), []);
});
