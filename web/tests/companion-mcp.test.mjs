// The tools of the companion's own MCP servers (`mcp_tools`), in a real browser against a real
// `spool serve` and a real `spool companion` running the MCP reference server over stdio: an
// agent (a script) calls one, the page runs it through the companion, and the answer reaches
// the chat; without the companion the tool is simply absent.

import assert from "node:assert/strict";
import { mkdtemp, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { dirname, join, resolve } from "node:path";
import { fileURLToPath } from "node:url";
import { after, before, test } from "node:test";
import { api, eventually, screenshot, signedInPage, startBrowser, startCompanion, startSpool } from "./harness.mjs";

const here = dirname(fileURLToPath(import.meta.url));
const EVERYTHING = resolve(here, "../../tests/mcp/node_modules/@modelcontextprotocol/server-everything/dist/index.js");
const TOOL = "companion__everything__echo";
/** A tool of the reference server it does not mark read-only. */
const WRITE_TOOL = "companion__everything__toggle-simulated-logging";

let spool;
let browser;
let call;

before(async () => {
  spool = await startSpool();
  browser = await startBrowser();
  call = await api(spool);
});

after(async () => {
  await browser?.close();
  await spool?.stop();
});

/** A workspace whose built-in agent calls the companion's echo tool, then says what it got. */
async function workspaceWith(name, companionUrl) {
  const ws = await call("POST", "/v1/workspaces", { name });
  const builtin = (await call("GET", `/v1/workspaces/${ws.id}/agents`)).agents.find((a) => a.builtin);
  const script = {
    word_delay_ms: 1,
    rules: [
      {
        match: ["ferry"],
        rounds: [{ say: "Asking your server.", tools: [{ name: TOOL, arguments: { message: "{input}" } }] }, { say: "Your server said: {result}" }],
      },
      {
        match: ["logging"],
        rounds: [{ say: "Toggling it.", tools: [{ name: WRITE_TOOL, arguments: {} }] }, { say: "Toggle result: {result}" }],
      },
    ],
    default: [{ say: "Noted." }],
  };
  await call("PATCH", `/v1/agents/${builtin.id}`, { instruction: JSON.stringify(script), runtime: "scripted" });
  const page = await signedInPage(browser, spool);
  await page.context().addInitScript((url) => localStorage.setItem("spool.companion.url", url), companionUrl);
  await page.goto(`${spool.origin}/#/w/${ws.id}/chats`);
  await page.reload();
  await page.getByRole("heading", { name: "Chats" }).waitFor();
  return page;
}

async function newChat(page) {
  await page.locator("summary", { hasText: "New chat" }).click();
  await page.locator("details.menu").getByRole("button", { name: /Spool/ }).click();
  await page.waitForURL(/\/chats\/ses_/);
  return page.url().split("/chats/")[1];
}

async function send(page, text) {
  await page.getByRole("combobox", { name: "Message", exact: true }).fill(text);
  await page.getByRole("button", { name: "Send" }).click();
}

const events = async (id) => (await call("GET", `/v1/sessions/${id}/events?after=0&limit=1000`)).events;
const eventOf = (id, type) =>
  eventually(async () => {
    const found = (await events(id)).find((e) => e.type === type);
    assert.ok(found, `no ${type} event yet`);
    return found;
  }, { timeout: 30_000 });

function assertNoErrors(page) {
  assert.deepEqual(page.errors, [], "no script or console errors on the page");
}

test("an agent calls a tool of the companion's MCP server, the page runs it there, and the answer reaches the chat", async () => {
  const dir = await mkdtemp(join(tmpdir(), "spool-mcp-"));
  const config = join(dir, "companion-mcp.json");
  await writeFile(config, JSON.stringify({ mcpServers: { everything: { command: process.execPath, args: [EVERYTHING, "stdio"] } } }));
  await writeFile(join(dir, "week.md"), "# Week\n");
  const companion = await startCompanion(spool, dir, ["--mcp-config", config]);
  try {
    // The companion lists its server's tools (started on first use).
    const listed = await fetch(`${companion.url}/mcp/tools`).then((r) => r.json());
    assert.ok(listed.servers[0].tools.some((t) => t.name === TOOL), JSON.stringify(listed));
    const page = await workspaceWith("MCP tools", companion.url);
    await page.getByText("Companion connected").waitFor();
    const id = await newChat(page);
    await send(page, "When is the ferry?");
    // The message declared the companion's tools, the chat having `mcp_tools`.
    const sent = await eventOf(id, "user_message_submitted");
    const declared = (sent.payload.client_tools ?? []).map((t) => t.name);
    assert.ok(declared.includes(TOOL), `declared: ${declared}`);
    assert.ok(declared.every((name) => name.startsWith("companion__everything__")), `${declared}`);
    assert.ok((await call("GET", `/v1/sessions/${id}`)).capabilities.includes("mcp_tools"));
    // The agent's call waited for the client; the page ran it on the companion and posted its output.
    const start = await eventOf(id, "tool_start");
    assert.equal(start.payload.tool, TOOL);
    assert.equal(start.payload.client, true);
    assert.equal(start.payload.server, "companion:everything");
    const output = await eventOf(id, "tool_output_submitted");
    assert.equal(output.payload.tool_call_id, start.payload.tool_call_id);
    assert.equal(output.payload.output.content[0].text, "Echo: When is the ferry?", JSON.stringify(output.payload));
    // The agent's next reply quotes it, on the page.
    await page.locator(".message.agent .bubble").getByText(/Your server said: .*Echo: When is the ferry\?/).waitFor({ timeout: 30_000 });
    const outputs = (await events(id)).filter((e) => e.type === "tool_output_submitted");
    assert.equal(outputs.length, 1, "the call ran once");
    // A read-only tool runs without asking; its action is done once its output arrived.
    assert.equal(await page.getByRole("alertdialog").count(), 0);
    const action = page.locator("li.action.mcp").filter({ hasText: "echo" });
    await action.locator(".action-status", { hasText: /^done$/ }).waitFor();
    assert.equal(await page.getByText("running…").count(), 0);
    await screenshot(page, "companion-mcp-tool");
    assertNoErrors(page);
  } finally {
    await companion.stop();
  }
});

/** A companion running the reference server over stdio, in a fresh library. */
async function companionWithEverything() {
  const dir = await mkdtemp(join(tmpdir(), "spool-mcp-"));
  const config = join(dir, "companion-mcp.json");
  await writeFile(config, JSON.stringify({ mcpServers: { everything: { command: process.execPath, args: [EVERYTHING, "stdio"] } } }));
  await writeFile(join(dir, "week.md"), "# Week\n");
  return startCompanion(spool, dir, ["--mcp-config", config]);
}

test("a tool not marked read-only asks the person first: Run runs it, Decline answers that the person declined", async () => {
  const companion = await companionWithEverything();
  try {
    const listed = await fetch(`${companion.url}/mcp/tools`).then((r) => r.json());
    const write = listed.servers[0].tools.find((t) => t.name === WRITE_TOOL);
    assert.equal(write?.read_only, false, JSON.stringify(write));
    const page = await workspaceWith("MCP ask", companion.url);
    await page.getByText("Companion connected").waitFor();
    const id = await newChat(page);
    // Run: the card shows server, tool and arguments; nothing ran before the person's word.
    await send(page, "Turn logging on");
    const card = page.getByRole("alertdialog", { name: /toggle-simulated-logging/ });
    await card.waitFor({ timeout: 30_000 });
    await card.getByText("everything", { exact: true }).waitFor();
    // Its arguments read as fields (or "No arguments."), their JSON only behind "Raw JSON".
    await card.locator(".fields, .fields-none").first().waitFor();
    assert.equal(await card.locator("pre.tool-arguments").count(), 0, "no JSON block on the card");
    assert.equal((await events(id)).filter((e) => e.type === "tool_output_submitted").length, 0, "nothing ran before the person's word");
    await card.getByRole("button", { name: "Run" }).click();
    const ran = await eventOf(id, "tool_output_submitted");
    assert.equal(ran.payload.error ?? undefined, undefined, JSON.stringify(ran.payload));
    assert.match(JSON.stringify(ran.payload.output), /logging/i);
    await eventOf(id, "agent_end");
    // Decline: the call's output is the person's refusal, and nothing ran.
    await send(page, "Turn logging off");
    const again = page.getByRole("alertdialog", { name: /toggle-simulated-logging/ });
    await again.waitFor({ timeout: 30_000 });
    await again.getByRole("button", { name: "Decline" }).click();
    const declined = await eventually(async () => {
      const found = (await events(id)).filter((e) => e.type === "tool_output_submitted");
      assert.equal(found.length, 2);
      return found[1];
    }, { timeout: 30_000 });
    assert.equal(declined.payload.error, "declined by the person", JSON.stringify(declined.payload));
    assert.equal(declined.payload.output ?? undefined, undefined);
    await page.locator("li.action.mcp.error").first().waitFor();
    assertNoErrors(page);
  } finally {
    await companion.stop();
  }
});

test("a message posted through the API (not this browser) declaring a companion tool never runs on the companion", async () => {
  const companion = await companionWithEverything();
  try {
    const page = await workspaceWith("MCP foreign", companion.url);
    await page.getByText("Companion connected").waitFor();
    const id = await newChat(page);
    // The chat has `mcp_tools` (this browser's companion enabled it).
    await send(page, "hello");
    await eventually(async () => assert.ok((await call("GET", `/v1/sessions/${id}`)).capabilities.includes("mcp_tools")), { timeout: 30_000 });
    await eventOf(id, "agent_end");
    // Someone else declares the companion's echo tool and their turn calls it.
    const schema = { type: "object", properties: { message: { type: "string" } }, required: ["message"] };
    await call("POST", `/v1/sessions/${id}/messages`, {
      content: "When is the ferry?",
      client_message_id: crypto.randomUUID(),
      client_tools: [{ name: TOOL, server: "everything", description: "echo", input_schema: schema }],
    });
    const start = await eventOf(id, "tool_start");
    assert.equal(start.payload.tool, TOOL);
    assert.equal(start.payload.server, "companion:everything", "a client's server is shown as the client's");
    // The page sees the call and leaves it alone: no output, no card.
    await new Promise((r) => setTimeout(r, 5000));
    assert.equal((await events(id)).filter((e) => e.type === "tool_output_submitted").length, 0);
    assert.equal(await page.getByRole("alertdialog").count(), 0);
    assertNoErrors(page);
  } finally {
    await companion.stop();
  }
});

test("without the companion its tools are absent: the page says Offline mode and declares none", async () => {
  const page = await workspaceWith("MCP offline", "http://127.0.0.1:1");
  await page.getByText("Offline mode").waitFor();
  const id = await newChat(page);
  await send(page, "When is the ferry?");
  const sent = await eventOf(id, "user_message_submitted");
  assert.equal(sent.payload.client_tools, undefined, JSON.stringify(sent.payload));
  // The agent's call finds no such tool: an error of that call, not a wait.
  const end = await eventOf(id, "tool_end");
  assert.equal(end.payload.tool, TOOL);
  assert.match(end.payload.error, /no tool or action/);
  await eventOf(id, "agent_end");
  assert.equal((await events(id)).filter((e) => e.type === "tool_output_submitted").length, 0);
  assertNoErrors(page);
});
