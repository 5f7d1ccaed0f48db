// Feedback and focus, in a real browser against a real `spool serve` with the scripted agent:
// a message that cannot go yet says why and stays, `/help` is answered in the chat, toasts cover
// no Send or form action, settings show the folders the server allows before a Save, an
// unavailable CLI cannot be chosen, the global chat offers only what it can do, and focus goes
// where the person acts next.

import assert from "node:assert/strict";
import { mkdtemp } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, before, test } from "node:test";
import { api, eventually, screenshot, signedInPage, startBrowser, startSpool } from "./harness.mjs";

let spool;
let browser;
let call;
/** Where workspaces' working directories may be on `spool`. */
let roots;

before(async () => {
  roots = await mkdtemp(join(tmpdir(), "spool-web-roots-"));
  spool = await startSpool({ SPOOL_WORKSPACE_ROOTS: roots });
  browser = await startBrowser();
  call = await api(spool);
});

after(async () => {
  await browser?.close();
  await spool?.stop();
});

/** A signed-in page on a new workspace's `tab`. */
async function workspacePage(name, tab = "chats", server = spool, viewport) {
  const ws = await (server === spool ? call : await api(server))("POST", "/v1/workspaces", { name });
  const page = await signedInPage(browser, server, viewport);
  await page.goto(`${server.origin}/#/w/${ws.id}/${tab}`);
  return { page, ws };
}

/** Opens "New chat" with the workspace's first agent; the chat's id once its window is open. */
async function newChat(page) {
  await page.getByRole("heading", { name: "Chats" }).waitFor();
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

/** Makes the workspace's built-in agent a script that answers "long" a word a minute. */
async function slowToAnswer(ws) {
  const builtin = (await call("GET", `/v1/workspaces/${ws.id}/agents`)).agents.find((a) => a.builtin);
  const script = { word_delay_ms: 60_000, rules: [{ match: ["long"], rounds: [{ say: "Thinking it over, slowly." }] }], default: [{ say: "Noted." }] };
  await call("PATCH", `/v1/agents/${builtin.id}`, { instruction: JSON.stringify(script), runtime: "scripted" });
}

const activeId = (page) => page.evaluate(() => document.activeElement?.id ?? "");

/** Whether two bounding boxes overlap. */
const overlap = (a, b) => a.x < b.x + b.width && b.x < a.x + a.width && a.y < b.y + b.height && b.y < a.y + a.height;

function assertNoErrors(page) {
  assert.deepEqual(page.errors, [], "the page logged errors");
}

test("a message typed while the agent answers stays, says why, and can go when the answer is done", async () => {
  const { page, ws } = await workspacePage("Busy");
  await slowToAnswer(ws);
  const id = await newChat(page);
  await send(page, "a long answer please");
  await page.getByRole("button", { name: "Stop the agent" }).waitFor();
  await composer(page).fill("and then this");
  await page.keyboard.press("Enter");
  // The reason shows, and the message is still in the box.
  const reason = page.locator(".send-blocked");
  await reason.getByText("The agent is still answering").waitFor();
  assert.equal(await reason.getAttribute("role"), "alert");
  assert.equal(await composer(page).inputValue(), "and then this");
  await screenshot(page, "send-blocked");
  // "Send when done" queues it behind the answer.
  await reason.getByRole("button", { name: "Send when done" }).click();
  await page.locator(".message.user .bubble", { hasText: "and then this" }).waitFor();
  await eventually(async () => assert.equal(await composer(page).inputValue(), ""));
  const sent = (await call("GET", `/v1/sessions/${id}/events?after=0&limit=100`)).events.filter((e) => e.type === "user_message_submitted");
  assert.deepEqual(
    sent.map((e) => e.payload.content),
    ["a long answer please", "and then this"],
  );
  await page.getByRole("button", { name: "Stop the agent" }).click();
  assertNoErrors(page);
});

test("/help is answered in the chat, and stays after every toast is gone", async () => {
  const { page } = await workspacePage("Help");
  await newChat(page);
  await composer(page).fill("/help");
  // The menu opens once the chat's commands are read: Escape closes it (before, it would close the chat).
  const menu = page.getByRole("listbox", { name: "Commands" });
  await menu.waitFor();
  await page.keyboard.press("Escape");
  await menu.waitFor({ state: "hidden" });
  await page.keyboard.press("Enter");
  const card = page.getByRole("listitem", { name: "Commands of this chat" });
  await card.waitFor();
  await page.locator(".toast").waitFor({ state: "detached", timeout: 15_000 });
  assert.match(await card.innerText(), /Only you see this/);
  for (const name of ["/help", "/new", "/stop"]) await card.getByText(name, { exact: true }).waitFor();
  // It sits under the command in the timeline.
  const order = await page.locator(".timeline > li").evaluateAll((items) => items.map((li) => li.className));
  const at = order.indexOf("help-card");
  assert.ok(at > 0 && order[at - 1].includes("command"), order.join(", "));
  await screenshot(page, "help-card");
  assertNoErrors(page);
});

test("toasts cover neither Send nor Delete workspace…", async () => {
  const { page } = await workspacePage("Toasts");
  await newChat(page);
  // An unknown command is refused with a toast; the typed text comes back, with Send.
  await composer(page).fill("/nosuchcommand");
  await page.keyboard.press("Enter");
  const toast = page.locator(".toast").first();
  await toast.waitFor();
  const sendButton = page.getByRole("button", { name: "Send" });
  await sendButton.waitFor();
  assert.ok(!overlap(await toast.boundingBox(), await sendButton.boundingBox()), "the toast covers Send");
  await screenshot(page, "toast-in-chat");
  assertNoErrors(page);
  await page.context().close();
  // Settings saved on a phone, scrolled to the foot of the page: the toast leaves "Delete
  // workspace…" and "Save settings" clear.
  const { page: phone } = await workspacePage("Toasts on a phone", "settings", spool, { width: 390, height: 844 });
  await phone.getByRole("button", { name: "Save settings" }).click();
  const saved = phone.locator(".toast", { hasText: "Settings saved." });
  await saved.waitFor();
  await phone.evaluate(() => window.scrollTo(0, document.documentElement.scrollHeight));
  const del = phone.getByRole("button", { name: "Delete workspace…" });
  await eventually(async () => assert.ok(!overlap(await saved.boundingBox(), await del.boundingBox()), "the toast covers Delete workspace…"), { timeout: 1000 });
  await phone.getByRole("button", { name: "Save settings" }).scrollIntoViewIfNeeded();
  assert.ok(!overlap(await saved.boundingBox(), await phone.getByRole("button", { name: "Save settings" }).boundingBox()), "the toast covers Save");
  await screenshot(phone, "toast-in-settings");
  assertNoErrors(phone);
});

test("settings show the folders the server allows before a folder is chosen", async () => {
  const { page } = await workspacePage("Folders", "settings");
  const allowed = page.getByRole("list", { name: "Allowed folders" });
  await allowed.getByText(roots, { exact: true }).waitFor();
  assert.equal(await page.locator(".toast").count(), 0, "nothing was saved to learn it");
  await page.getByRole("radio", { name: "One folder for every chat" }).check();
  await screenshot(page, "settings-allowed-folders");
  assertNoErrors(page);

  // A server that allows no folder says so, and offers no fixed folder.
  const bare = await startSpool();
  try {
    const { page: other } = await workspacePage("No folders", "settings", bare);
    await other.getByText("This server allows no fixed folder").waitFor();
    assert.ok(await other.getByRole("radio", { name: "One folder for every chat" }).isDisabled());
    assertNoErrors(other);
    await other.context().close();
  } finally {
    await bare.stop();
  }
});

test("a CLI that cannot run here cannot be chosen, and says why", async (t) => {
  const { clis } = await call("GET", "/v1/clis");
  const broken = clis.find((c) => !c.healthy);
  if (!broken) return t.skip("every CLI runs on this machine");
  const { page } = await workspacePage("CLIs");
  await newChat(page);
  const option = page.locator(".chat-settings select").nth(1).locator(`option[value="${broken.cli}"]`);
  await eventually(async () => assert.ok(await option.isDisabled(), `${broken.cli} is disabled`));
  const label = await option.innerText();
  assert.match(label, /unavailable/);
  assert.ok(label.includes(broken.reason ?? "cannot run"), label);
  assertNoErrors(page);
});

test("renaming a chat starts in its title box, and typing renames it", async () => {
  const { page } = await workspacePage("Rename");
  const id = await newChat(page);
  await page.getByRole("button", { name: /^Rename chat:/ }).click();
  await eventually(async () => assert.equal(await activeId(page), "chat-title"));
  await page.keyboard.type("Launch planning");
  await page.keyboard.press("Enter");
  await page.getByRole("button", { name: "Rename chat: Launch planning" }).waitFor();
  await eventually(async () => assert.equal((await call("GET", `/v1/sessions/${id}`)).title, "Launch planning"));
  assertNoErrors(page);
});

test("after a question is answered focus is in the message box, and the agent's messages show their time", async () => {
  const { page } = await workspacePage("Focus");
  await newChat(page);
  await send(page, "ask me a question");
  const answer = page.getByRole("textbox", { name: "Your answer" });
  await answer.fill("Grace");
  await page.getByRole("button", { name: "Answer" }).click();
  await page.getByText("You answered: Grace").waitFor();
  await eventually(async () => assert.equal(await activeId(page), "composer-input"));
  const time = page.locator(".message.agent time").first();
  await time.waitFor();
  assert.ok(Date.parse(await time.getAttribute("datetime")) > 0);
  assert.ok((await time.innerText()).trim().length > 0);
  assertNoErrors(page);
});

test("the global chat's agent offers only what a chat outside a workspace can do", async () => {
  const page = await signedInPage(browser, spool);
  await page.getByRole("link", { name: "Global chat" }).click();
  await page.getByRole("button", { name: "Rename chat: Global chat" }).waitFor();
  await send(page, "please add a helper agent");
  const reply = page.locator(".message.agent", { hasText: "Here I cannot add any" });
  await reply.waitFor({ timeout: 15_000 });
  await page.getByRole("button", { name: "Send" }).waitFor();
  assert.equal(await page.getByRole("listitem", { name: "Approval request" }).count(), 0);
  assert.equal(await page.locator(".system.error").count(), 0);
  assertNoErrors(page);
});
