// Saving into the person's notes (`capture_ingest`) and a turn queued behind others, in a real
// browser against a real `spool serve` and `spool companion`.

import assert from "node:assert/strict";
import { mkdtemp, readdir, readFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, before, test } from "node:test";
import { api, eventually, screenshot, signedInPage, startBrowser, startCompanion, startSpool } from "./harness.mjs";

let browser;

before(async () => {
  browser = await startBrowser();
});

after(async () => {
  await browser?.close();
});

/** A workspace whose built-in agent runs `script`, and a signed-in page on its chats. */
async function workspaceWith(spool, call, script, companionUrl) {
  const ws = await call("POST", "/v1/workspaces", { name: "Notes" });
  const builtin = (await call("GET", `/v1/workspaces/${ws.id}/agents`)).agents.find((a) => a.builtin);
  await call("PATCH", `/v1/agents/${builtin.id}`, { instruction: JSON.stringify(script), runtime: "scripted" });
  const page = await signedInPage(browser, spool);
  if (companionUrl) await page.context().addInitScript((url) => localStorage.setItem("spool.companion.url", url), companionUrl);
  await page.goto(`${spool.origin}/#/w/${ws.id}/chats`);
  await page.reload();
  await page.getByRole("heading", { name: "Chats" }).waitFor();
  return { page, ws };
}

/** Opens a new chat with the built-in agent; its id. */
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

test("Save to notes on a message and an agent's approved capture write notes the companion finds at once", async () => {
  const spool = await startSpool();
  const call = await api(spool);
  const library = await mkdtemp(join(tmpdir(), "spool-notes-"));
  const companion = await startCompanion(spool, library);
  try {
    const script = {
      word_delay_ms: 1,
      rules: [
        {
          match: ["remember"],
          rounds: [
            { say: "Shall I keep it?", tools: [{ name: "propose_capture", arguments: { title: "Ferry times", text: "The ferry leaves at 7:40." } }] },
            { say: "Kept." },
          ],
        },
      ],
      default: [{ say: "The quince harvest is in October." }],
    };
    const { page } = await workspaceWith(spool, call, script, companion.url);
    await page.getByText("Companion connected").waitFor();
    const id = await newChat(page);
    await send(page, "when is the harvest?");
    // The chat has `capture_ingest`: the answer offers "Save to notes".
    const answer = page.locator(".message.agent", { hasText: "quince harvest" });
    await answer.getByRole("button", { name: "Save to notes" }).click();
    await answer.getByRole("button", { name: "Saved to notes" }).waitFor();
    await page.getByText("Saved to your notes as the-quince-harvest-is-in-october.md.").first().waitFor();
    const note = await readFile(join(library, "the-quince-harvest-is-in-october.md"), "utf8");
    assert.match(note, /^---\ntitle: "The quince harvest is in October\."\nsource: "http:\/\/127\.0\.0\.1:\d+\/#\/chats\/ses_/);
    const context = await fetch(`${companion.url}/context-for-query?q=quince%20harvest`).then((r) => r.json());
    assert.equal(context.relevant_k_ids.length, 1, JSON.stringify(context));

    // An agent proposes a capture: the card saves it into the notes as the person approves.
    await send(page, "remember the ferry");
    const card = page.getByRole("listitem", { name: "Approval request" });
    await card.getByText("Save to notes", { exact: true }).first().waitFor();
    await screenshot(page, "capture-proposed");
    await card.getByRole("button", { name: "Save to notes" }).click();
    await card.getByText("Approved").waitFor();
    await page.locator(".message.agent", { hasText: "Kept." }).waitFor();
    assert.match(await readFile(join(library, "ferry-times.md"), "utf8"), /# Ferry times\n\nThe ferry leaves at 7:40\.\n$/);
    const events = (await call("GET", `/v1/sessions/${id}/events?after=0&limit=1000`)).events;
    const end = events.find((e) => e.type === "tool_end" && e.payload.tool === "propose_capture");
    assert.equal(end?.payload.result?.captured, true, JSON.stringify(events));
    assert.deepEqual((await readdir(library)).sort(), ["ferry-times.md", "the-quince-harvest-is-in-october.md"]);
    assert.deepEqual(page.errors, [], "the page logged errors");
  } finally {
    await companion.stop();
    await spool.stop();
  }
});

test("a turn waiting for its organization's slot says how many turns are ahead, until it starts", async () => {
  const spool = await startSpool({ SPOOL_ORG_TURN_CONCURRENCY: "1" });
  const call = await api(spool);
  try {
    const script = {
      word_delay_ms: 60_000,
      rules: [{ match: ["long answer"], rounds: [{ say: "Thinking it over, one word a minute." }] }],
      default: [{ say: "Noted." }],
    };
    const { page, ws } = await workspaceWith(spool, call, script);
    // GIVEN the organization's one slot taken by another chat's long turn
    const busy = await call("POST", "/v1/sessions", { workspace_id: ws.id });
    await call("POST", `/v1/sessions/${busy.id}/messages`, { content: "a long answer please" });
    await eventually(async () => {
      const events = (await call("GET", `/v1/sessions/${busy.id}/events?after=0&limit=100`)).events;
      assert.ok(events.some((e) => e.type === "agent_start"), "the long turn started");
    });
    // WHEN the person asks in another chat
    await newChat(page);
    await send(page, "hello");
    // THEN the chat says its turn is queued behind that one
    const notice = page.getByRole("status").filter({ hasText: "Queued behind" });
    await notice.getByText("Queued behind 1 turn").waitFor();
    await screenshot(page, "queued-behind");
    // WHEN the long turn is stopped, the person's turn runs and the notice goes
    await call("POST", `/v1/sessions/${busy.id}/control`, { action: "abort" });
    await page.locator(".message.agent", { hasText: "Noted." }).waitFor();
    await eventually(async () => assert.equal(await notice.count(), 0));
    assert.deepEqual(page.errors, [], "the page logged errors");
  } finally {
    await spool.stop();
  }
});
