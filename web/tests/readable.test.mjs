// What the timeline shows reads as prose, once: a tool's arguments as fields (an instruction as
// markdown with its line breaks), an action's result as a sentence, agents' markdown without
// front matter headings or guessed links, previews as plain text, a file once (on its message,
// and not at all once removed before sending), an answered question once. In a real browser
// against a real `spool serve`, the built-in agent made a script for each test.

import assert from "node:assert/strict";
import { mkdtemp, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, before, test } from "node:test";
import { api, eventually, screenshot, signedInPage, startBrowser, startCompanion, startSpool } from "./harness.mjs";

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

/** A workspace whose built-in agent answers by `script`, and a signed-in page on its chats. */
async function scriptedWorkspace(name, script, companionUrl) {
  const ws = await call("POST", "/v1/workspaces", { name });
  const builtin = (await call("GET", `/v1/workspaces/${ws.id}/agents`)).agents.find((a) => a.builtin);
  await call("PATCH", `/v1/agents/${builtin.id}`, { instruction: JSON.stringify({ word_delay_ms: 1, ...script }), runtime: "scripted" });
  const page = await signedInPage(browser, spool);
  if (companionUrl) {
    await page.context().addInitScript((url) => localStorage.setItem("spool.companion.url", url), companionUrl);
    await page.reload();
  }
  await page.goto(`${spool.origin}/#/w/${ws.id}/chats`);
  await page.getByRole("heading", { name: "Chats" }).waitFor();
  return { page, ws };
}

/** Opens a new chat with the built-in agent; its id. */
async function newChat(page) {
  await page.locator("summary", { hasText: "New chat" }).click();
  await page.locator("details.menu").getByRole("button", { name: /Spool/ }).click();
  await page.getByRole("dialog").waitFor();
  await page.waitForURL(/\/chats\/ses_/);
  return page.url().split("/chats/")[1];
}

const composer = (page) => page.getByRole("combobox", { name: "Message", exact: true });

async function send(page, text) {
  await composer(page).fill(text);
  await page.getByRole("button", { name: "Send" }).click();
}

const events = async (id) => (await call("GET", `/v1/sessions/${id}/events?after=0&limit=1000`)).events;

async function turnEnded(id, count = 1) {
  await eventually(async () => assert.ok((await events(id)).filter((e) => e.type === "agent_end").length >= count), { timeout: 20_000 });
}

const agentSays = (page, text) => page.locator(".message.agent .bubble", { hasText: text });

const INSTRUCTION = "## Role\nAnswer briefly.\nKeep to the point.\n\n- cite sources";

test("an approval card shows the arguments as fields, the instruction as markdown, and results read as sentences", async () => {
  const { page } = await scriptedWorkspace("Readable cards", {
    rules: [
      {
        match: ["helper"],
        rounds: [
          { say: "I can add one.", tools: [{ name: "create_agent", arguments: { name: "Helper", runtime: "scripted", order: 1, instruction: INSTRUCTION } }] },
          { say: "Result: {result}" },
        ],
      },
      {
        match: ["ferns"],
        rounds: [
          { say: "Noting it.", tools: [{ name: "create_task", arguments: { summary: "Water the ferns", description: "Every morning" } }] },
          { say: "Done: the task is in this workspace's task list ({result})." },
        ],
      },
    ],
    default: [{ say: "Hello." }],
  });
  const id = await newChat(page);
  await send(page, "add a helper agent");
  const request = page.getByRole("listitem", { name: "Approval request" });
  await request.getByText("Create agent").waitFor();
  // The arguments are labelled fields, not JSON.
  const field = (label) => request.locator(".field", { has: page.locator("dt", { hasText: label }) }).locator("dd");
  await eventually(async () => assert.equal(await field("Name").innerText(), "Helper"));
  assert.equal(await field("Runtime").innerText(), "scripted");
  // What it names first, the long text last.
  assert.deepEqual(await request.locator(".fields dt").allInnerTexts(), ["Name", "Order", "Runtime", "Instruction"]);
  const text = await request.innerText();
  assert.ok(!text.includes('{"'), `no JSON on the card: ${text}`);
  assert.ok(!text.includes("\\n"), `no literal \\n on the card: ${text}`);
  // The instruction is markdown, with its line breaks.
  const instruction = field("Instruction");
  await instruction.getByRole("heading", { name: "Role" }).waitFor();
  await instruction.getByRole("listitem").filter({ hasText: "cite sources" }).waitFor();
  assert.match(await instruction.innerText(), /Answer briefly\.\nKeep to the point\./);
  // The raw arguments are one click away.
  await request.getByText("Raw JSON").click();
  assert.equal(JSON.parse(await request.locator(".raw-json pre").innerText()).arguments.instruction, INSTRUCTION);
  await screenshot(page, "readable-approval");
  await request.getByRole("button", { name: "Approve" }).click();
  // The result reads as a sentence: in the action's card and in the agent's words.
  const action = page.locator(".action.done", { hasText: "Create agent" });
  await action.getByText("Agent added: Helper").waitFor();
  const said = agentSays(page, "Result:");
  await said.getByText("Agent added: Helper").waitFor();
  assert.ok(!(await said.innerText()).includes('{"'), await said.innerText());
  await said.getByRole("link", { name: "Helper" }).waitFor();
  await turnEnded(id);

  await send(page, "water the ferns please");
  const done = agentSays(page, "Done:");
  await done.getByText("Task created: Water the ferns").waitFor();
  assert.ok(!(await done.innerText()).includes('{"'), await done.innerText());
  assert.match((await done.getByRole("link", { name: "Water the ferns" }).getAttribute("href")) ?? "", /\/tasks\/task_/);
  await page.locator(".action.done", { hasText: "Create task" }).getByText("Task created: Water the ferns").waitFor();
  await screenshot(page, "readable-results");
  assert.deepEqual(page.errors, []);
});

test("markdown: front matter is never a heading, a file name is never a link, previews are plain text", async () => {
  const { page } = await scriptedWorkspace("Markdown", {
    rules: [
      { match: ["front"], rounds: [{ say: "---\ntitle: Launch notes\nstatus: open\n---\nThe notes say dropped.md is ready; see https://example.com/x" }] },
    ],
    default: [{ say: "Nice to meet you, **Kim**." }],
  });
  const id = await newChat(page);
  await send(page, "show the front matter");
  const bubble = agentSays(page, "The notes say");
  await bubble.locator('a[href="https://example.com/x"]').waitFor();
  await turnEnded(id);
  assert.equal(await bubble.locator("h1, h2, h3").count(), 0, "no headings");
  assert.equal(await bubble.locator("a", { hasText: "dropped.md" }).count(), 0, "a file name is not a link");
  // The front matter shows as a small block of its fields.
  await bubble.locator(".front-matter", { hasText: "status" }).waitFor();
  await send(page, "hello");
  await agentSays(page, "Nice to meet you").waitFor();
  await turnEnded(id, 2);
  await page.keyboard.press("Escape");
  const preview = page.locator(`.chat-row[data-session="${id}"] .chat-preview`);
  await eventually(async () => assert.equal(await preview.innerText(), "Nice to meet you, Kim."));
  await screenshot(page, "readable-preview");
  assert.deepEqual(page.errors, []);
});

/** Drops files (name → text) on the open chat, and waits until they are uploaded. */
async function dropFiles(page, files) {
  const transfer = await page.evaluateHandle((files) => {
    const dt = new DataTransfer();
    for (const [name, text] of Object.entries(files)) dt.items.add(new File([text], name, { type: "text/plain" }));
    return dt;
  }, files);
  await page.dispatchEvent("dialog", "drop", { dataTransfer: transfer });
  const pending = page.getByRole("list", { name: "Files to send" });
  await eventually(async () => assert.equal(await pending.locator(".upload.done").count(), Object.keys(files).length));
  return pending;
}

test("a file shows once, on its message, and one removed with × never reaches the chat", async () => {
  const { page } = await scriptedWorkspace("Files once", { default: [{ say: "Got it." }] });
  const id = await newChat(page);
  const pending = await dropFiles(page, { "keep.txt": "kept", "drop.txt": "removed" });
  await pending.getByRole("button", { name: "Remove drop.txt" }).click();
  await eventually(async () => assert.equal(await pending.locator(".upload").count(), 1));
  await send(page, "here is the file");
  await agentSays(page, "Got it.").waitFor();
  await turnEnded(id);
  // The message names only the file kept, and the chat never recorded the other.
  const all = await events(id);
  const message = all.find((e) => e.type === "user_message_submitted");
  assert.deepEqual((message.payload.files ?? []).map((f) => f.filename), ["keep.txt"]);
  const uploads = all.filter((e) => e.type === "system" && e.payload.upload).map((e) => e.payload.upload.filename);
  assert.deepEqual(uploads, ["keep.txt"]);
  // The file shows once: on its message.
  const timeline = page.getByRole("list", { name: "Conversation" });
  await eventually(async () => assert.equal(await timeline.getByRole("button", { name: /keep\.txt/ }).count(), 1));
  assert.equal(await timeline.locator(".message.file").count(), 0, "no bubble of its own");
  await timeline.getByRole("list", { name: "Files of this message" }).getByRole("button", { name: /keep\.txt/ }).waitFor();
  assert.equal(await timeline.getByText("drop.txt").count(), 0);
  // So after a reload.
  await page.reload();
  await timeline.getByRole("list", { name: "Files of this message" }).getByRole("button", { name: /keep\.txt/ }).waitFor();
  assert.equal(await timeline.getByRole("button", { name: /keep\.txt/ }).count(), 1);
  await screenshot(page, "readable-files-once");
  assert.deepEqual(page.errors, []);
});

test("an answered question shows once: its card, marked answered, with the answer", async () => {
  const { page } = await scriptedWorkspace("Question once", {
    rules: [
      {
        match: ["ask me"],
        rounds: [
          { say: "One question first.", tools: [{ name: "ask_user", arguments: { question: "What should I call you?" } }] },
          { say: "Nice to meet you, {result}." },
        ],
      },
    ],
    default: [{ say: "Hello." }],
  });
  const id = await newChat(page);
  await send(page, "ask me something");
  const card = page.getByRole("listitem", { name: "Question" });
  await card.getByText("What should I call you?").waitFor();
  await card.getByRole("textbox", { name: "Your answer" }).fill("Ada");
  await card.getByRole("button", { name: "Answer" }).click();
  await card.getByText("You answered: Ada").waitFor();
  await agentSays(page, "Nice to meet you, Ada").waitFor();
  await turnEnded(id);
  const timeline = page.getByRole("list", { name: "Conversation" });
  assert.equal(await timeline.getByText("What should I call you?").count(), 1, "the question shows once");
  assert.equal(await timeline.locator(".message.user", { hasText: "Ada" }).count(), 0, "the answer is on the card, not again as a message");
  assert.equal(await timeline.getByRole("listitem", { name: "Question" }).count(), 1);
  await screenshot(page, "readable-question-once");
  assert.deepEqual(page.errors, []);
});

test("a companion's passages are quoted without their front matter: no headings in the reply", async () => {
  const library = await mkdtemp(join(tmpdir(), "spool-notes-"));
  await writeFile(join(library, "launch.md"), "---\nstatus: open\ntags: launch\n---\n# Launch plan\nThe launch needs a venue by Friday.\n");
  const companion = await startCompanion(spool, library);
  try {
    const { page } = await scriptedWorkspace(
      "Passages",
      { notes: "From your notes ({ids}): *{summary}*\n\n", default: [{ say: "That is what I found." }] },
      companion.url,
    );
    await page.getByText("Companion connected").waitFor();
    const id = await newChat(page);
    await send(page, "When does the launch need a venue?");
    const bubble = agentSays(page, "From your notes");
    await bubble.getByText(/venue by Friday/).waitFor();
    await turnEnded(id);
    assert.equal(await bubble.locator("h1, h2, h3, hr").count(), 0, await bubble.innerHTML());
    const sent = (await events(id)).find((e) => e.type === "user_message_submitted");
    const summary = sent.payload.client_context?.summary ?? "";
    assert.match(summary, /venue by Friday/);
    assert.ok(!summary.includes("---") && !summary.includes("\n"), summary);
    await screenshot(page, "readable-passages");
    assert.deepEqual(page.errors, []);
  } finally {
    await companion.stop();
  }
});
