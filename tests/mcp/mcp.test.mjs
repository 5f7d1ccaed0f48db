// The official MCP SDK's client against Spool's MCP server: over stdio through `spool mcp`
// (StdioClientTransport) and over Streamable HTTP at `/v1/mcp`
// (StreamableHTTPClientTransport), both against a real `spool serve`. Each lists the tools and
// the chats, posts as an agent, and asks a person a question: `ask_user` returns the text the
// person then posts through the HTTP API. A key without the `agent` capability is refused.

import { after, before, describe, test } from "node:test";
import assert from "node:assert/strict";
import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StdioClientTransport } from "@modelcontextprotocol/sdk/client/stdio.js";
import { StreamableHTTPClientTransport } from "@modelcontextprotocol/sdk/client/streamableHttp.js";
import { SPOOL, startSpool } from "./spool.mjs";

const TOOLS = ["ask_user", "create_task", "list_chats", "post_agent", "post_message", "read_chat", "wait_user"];

let spool;
before(async () => {
  spool = await startSpool();
});
after(async () => {
  await spool?.stop();
});

/** A connected SDK client over `transport`. */
async function connect(transport) {
  const client = new Client({ name: "spool-mcp-test", version: "1.0.0" });
  await client.connect(transport);
  return client;
}

const http = async (apiKey) =>
  new StreamableHTTPClientTransport(new URL("/v1/mcp", spool.origin), {
    requestInit: { headers: { authorization: `Bearer ${await spool.token(apiKey)}` } },
  });

const stdio = (apiKey) => {
  const transport = new StdioClientTransport({
    command: SPOOL,
    args: ["mcp", "--url", spool.origin],
    env: { ...process.env, SPOOL_API_KEY: apiKey, RUST_LOG: "warn" },
    stderr: "pipe",
  });
  return transport;
};

/** The structured result of a tool call, asserting it is no error. */
async function call(client, name, args, options) {
  const result = await client.callTool({ name, arguments: args }, undefined, options);
  assert.notEqual(result.isError, true, `${name}: ${JSON.stringify(result.content)}`);
  return result.structuredContent;
}

for (const [via, transportOf] of [
  ["/v1/mcp", http],
  ["spool mcp", async (apiKey) => stdio(apiKey)],
]) {
  describe(`the SDK client through ${via}`, () => {
    test("lists the tools and chats, posts, and ask_user returns the person's answer", async () => {
      const client = await connect(await transportOf(await spool.key("agent")));
      try {
        const tools = (await client.listTools()).tools.map((t) => t.name).sort();
        assert.deepEqual(tools, TOOLS);
        const strict = (await client.listTools()).tools.find((t) => t.name === "post_message");
        assert.equal(strict.inputSchema.additionalProperties, false);

        const chat = await spool.api("POST", "/v1/sessions", { title: `MCP via ${via}` });
        const listed = await call(client, "list_chats", {});
        assert.ok(listed.sessions.some((s) => s.id === chat.id), JSON.stringify(listed));

        const posted = await call(client, "post_message", { chat_id: chat.id, author: "Claude Code", text: "Hello from MCP" });
        assert.ok(posted.seq > 0);
        const read = await call(client, "read_chat", { chat_id: chat.id });
        assert.ok(read.messages.some((m) => m.text === "Hello from MCP" && m.author === "Claude Code"), JSON.stringify(read));

        // A person answers the question through the HTTP API once it is asked.
        const progress = [];
        const asked = call(
          client,
          "ask_user",
          { chat_id: chat.id, author: "Claude Code", question: "Which branch?" },
          { onprogress: (p) => progress.push(p), resetTimeoutOnProgress: true, timeout: 120_000 },
        );
        let question;
        for (let i = 0; i < 100 && !question; i++) {
          await new Promise((r) => setTimeout(r, 200));
          const events = await spool.api("GET", `/v1/sessions/${chat.id}/events?after=0&limit=1000`);
          question = events.events.find((e) => e.type === "agent_message" && e.payload.ask);
        }
        assert.ok(question, "the question was posted");
        await new Promise((r) => setTimeout(r, 2500));
        await spool.api("POST", `/v1/sessions/${chat.id}/messages`, { content: "main, please" });
        const answered = await asked;
        assert.equal(answered.status, "answered");
        assert.equal(answered.answer, "main, please");
        assert.equal(answered.question_id, question.payload.question_id);
        assert.ok(progress.length > 0, "progress notifications were sent while it waited");

        // The global chat's trio.
        const global = await call(client, "post_agent", { author: "Claude Code", text: "Build is green" });
        assert.equal(global.chat_id, "global");
        const history = await spool.api("GET", "/chat/history");
        assert.ok(history.some((m) => m.text === "Build is green"));
        const waiting = call(client, "wait_user", { after: global.seq }, { resetTimeoutOnProgress: true, timeout: 120_000, onprogress: () => {} });
        await new Promise((r) => setTimeout(r, 1500));
        await spool.api("POST", "/chat/user_message", { text: "thanks" });
        const next = await waiting;
        assert.equal(next.status, "answered");
        assert.equal(next.answer, "thanks");

        // Bad arguments are the protocol's invalid params, not a server error.
        await assert.rejects(client.callTool({ name: "read_chat", arguments: { chat: chat.id } }), /-32602|Invalid|unknown field/i);
        // What Spool refuses is a tool error with its reason.
        const refused = await client.callTool({ name: "read_chat", arguments: { chat_id: "nope" } });
        assert.equal(refused.isError, true);
      } finally {
        await client.close();
      }
    });
  });
}

test("a key without the agent capability is refused by /v1/mcp", async () => {
  const transport = await http(await spool.key());
  await assert.rejects(connect(transport), /403|agent/);
});

test("spool mcp with a key without agent says how to make one", async () => {
  const transport = stdio(await spool.key());
  let stderr = "";
  transport.stderr?.on("data", (c) => (stderr += c));
  await assert.rejects(connect(transport));
  await new Promise((r) => setTimeout(r, 200));
  assert.match(stderr, /--capability agent/);
});

test("spool mcp keeps waiting across /v1/mcp's resumable answers (25 s each)", async () => {
  const client = await connect(stdio(await spool.key("agent")));
  try {
    const chat = await spool.api("POST", "/v1/sessions", { title: "A long wait" });
    const progress = [];
    const asked = call(
      client,
      "ask_user",
      { chat_id: chat.id, author: "Cursor", question: "Ship it?" },
      { onprogress: (p) => progress.push(p), resetTimeoutOnProgress: true, timeout: 120_000 },
    );
    // The person answers after /v1/mcp's first call has answered `waiting`.
    await new Promise((r) => setTimeout(r, 28_000));
    await spool.api("POST", `/v1/sessions/${chat.id}/messages`, { content: "ship it" });
    const answered = await asked;
    assert.equal(answered.status, "answered");
    assert.equal(answered.answer, "ship it");
    assert.ok(progress.length >= 5, `${progress.length} progress notifications`);
  } finally {
    await client.close();
  }
});
