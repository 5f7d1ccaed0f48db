// The web UI in a real browser (Debian's headless Chromium) against a real `spool serve` with
// the scripted demo agent: what a person does, clicked, typed and read back from the page, and
// checked against the chat's events through the API.

import assert from "node:assert/strict";
import { mkdir, mkdtemp, writeFile } from "node:fs/promises";
import { createServer } from "node:net";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, before, test } from "node:test";
import { api, eventually, screenshot, signedInPage, startBrowser, startCompanion, startSpool } from "./harness.mjs";

let spool;
let browser;
let call;
/** Where workspaces' working directories may be. */
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

const DEMO_START = "Hello! I am Spool's demo agent";
const DEMO_END = "or to set up a **team** of agents.";

/** A signed-in page on a new workspace's chats. */
async function workspacePage(name, viewport) {
  const ws = await call("POST", "/v1/workspaces", { name });
  const page = await signedInPage(browser, spool, viewport);
  await page.goto(`${spool.origin}/#/w/${ws.id}/chats`);
  await page.getByRole("heading", { name: "Chats" }).waitFor();
  const picker = page.getByRole("combobox", { name: "Workspace" });
  await eventually(async () => assert.equal(await picker.inputValue(), ws.id));
  return { page, ws };
}

/** Opens "New chat" and picks an agent; resolves with the chat's id once its window is open. */
async function newChat(page, agent = /Spool/) {
  await page.locator("summary", { hasText: "New chat" }).click();
  await page.locator("details.menu").getByRole("button", { name: agent }).click();
  await page.getByRole("dialog").waitFor({ timeout: 10_000 }).catch(async (e) => {
    await screenshot(page, "new-chat-failed");
    throw new Error(`${e.message}\npage: ${await page.locator("body").innerText()}`);
  });
  await page.waitForURL(/\/chats\/ses_/);
  return page.url().split("/chats/")[1];
}

const composer = (page) => page.getByRole("combobox", { name: "Message", exact: true });

async function send(page, text) {
  await composer(page).fill(text);
  await page.getByRole("button", { name: "Send" }).click();
}

const agentMessages = (page) => page.locator(".message.agent .bubble");
const userMessages = (page) => page.locator(".message.user .bubble");

/** The chat's events, from the API. */
const events = async (sessionId) => (await call("GET", `/v1/sessions/${sessionId}/events?after=0&limit=1000`)).events;

/** Waits until the chat's `count`-th turn has ended (in the stream, not the page); its `agent_end`. */
async function turnEnded(sessionId, count = 1) {
  return eventually(
    async () => {
      const ends = (await events(sessionId)).filter((e) => e.type === "agent_end");
      assert.ok(ends.length >= count, `turn ${count} has not ended (${ends.length} ended)`);
      return ends[count - 1];
    },
    { timeout: 20_000 },
  );
}

/** The first event of `type` in the chat, once the chat has one. */
const eventOf = (sessionId, type) =>
  eventually(async () => {
    const found = (await events(sessionId)).find((e) => e.type === type);
    assert.ok(found, `no ${type} event yet`);
    return found;
  });

/** The page's text of `locator`, compared by words: the page renders markdown, a duplicated delta breaks the words. */
const words = (s) => s.replace(/[*_]/g, "").replace(/\s+/g, " ").trim();

/** Waits until the page shows `locator` with the same words as `text`. */
const showsWords = (locator, text) =>
  eventually(async () => assert.equal(words(await locator.innerText()), words(text)));

/** Waits until `locator` matches `n` elements. */
const countIs = (locator, n, message) => eventually(async () => assert.equal(await locator.count(), n, message));

/**
 * Makes the workspace's built-in agent a script that answers "a long answer please" with its
 * first word and then waits a minute a word (so a test can stop it mid-answer however slow the
 * machine is), and anything else with one word at once.
 */
async function slowToAnswer(ws) {
  const builtin = (await call("GET", `/v1/workspaces/${ws.id}/agents`)).agents.find((a) => a.builtin);
  const script = {
    word_delay_ms: 60_000,
    rules: [{ match: ["long answer"], rounds: [{ say: HELD_ANSWER }] }],
    default: [{ say: "Noted." }],
  };
  await call("PATCH", `/v1/agents/${builtin.id}`, { instruction: JSON.stringify(script), runtime: "scripted" });
}
const HELD_ANSWER = "Thinking it over, one word a minute.";

/**
 * Resolves once `readers` readers of the workspace's feed on the page (the toasts, the chat list)
 * have read where it ends (their first read, from `now`): from then on they see every event of
 * the feed. Call it before what loads the page.
 */
function feedFollowed(page, ws, readers = 1) {
  let seen = 0;
  const tailRead = (url) => url.includes(`/workspaces/${ws.id}/feed?offset=now&`) && !url.includes("live=");
  return page.waitForResponse((r) => tailRead(r.url()) && r.ok() && ++seen === readers);
}

function assertNoErrors(page) {
  assert.deepEqual(page.errors, [], "the page logged errors");
}

test("a chat streams the scripted agent's answer in", async () => {
  const { page } = await workspacePage("Streaming");
  const id = await newChat(page);
  // The answer arrives in pieces: first its start, while the stop button shows... (watched in the
  // page from before the message goes, so a slow test still sees a moment that may be brief)
  const midAnswer = page.waitForFunction(
    ([start, end]) => {
      const text = document.querySelector(".message.agent .bubble")?.innerText ?? "";
      const stop = document.querySelector('button[aria-label="Stop the agent"]');
      return text.includes(start) && !text.includes(end) && stop && text;
    },
    [DEMO_START, "helper"],
  );
  await send(page, "hello there");
  const partial = await (await midAnswer).jsonValue();
  await screenshot(page, "chat-mid-answer");
  await userMessages(page).first().getByText("hello there").waitFor();
  await countIs(userMessages(page), 1);
  // ...then all of it, after which Send is back.
  await agentMessages(page).first().getByText("helper", { exact: true }).waitFor();
  await page.getByRole("button", { name: "Send" }).waitFor();
  await turnEnded(id);
  const end = (await events(id)).find((e) => e.type === "message_end");
  assert.ok(end.payload.text.endsWith(DEMO_END));
  await showsWords(agentMessages(page).first(), end.payload.text);
  const full = await agentMessages(page).first().innerText();
  assert.ok(full.length > partial.length, `the answer grew (${partial.length} → ${full.length} characters)`);
  assert.ok(full.includes("You wrote: hello there"));
  await screenshot(page, "chat-answered");
  assertNoErrors(page);
});

test("a reload mid-answer continues the answer with nothing shown twice", async () => {
  const { page } = await workspacePage("Reload");
  // The chat is read with its read grant, never the person's token: behind a CDN every reader
  // of the chat shares one request.
  const chatReads = [];
  page.on("request", (r) => {
    if (r.url().includes("/v1/stream/sessions/")) chatReads.push({ url: r.url(), authorization: r.headers().authorization });
  });
  const id = await newChat(page);
  await send(page, "tell me about reloading");
  await agentMessages(page).first().getByText(DEMO_START).waitFor();
  await page.reload();
  await page.getByRole("dialog").waitFor();
  // The cached timeline shows at once, and the stream resumes after its last event.
  await agentMessages(page).first().getByText("helper", { exact: true }).waitFor({ timeout: 15_000 });
  await page.getByRole("button", { name: "Send" }).waitFor();
  await screenshot(page, "chat-after-reload");
  await countIs(userMessages(page), 1, "one message of the person");
  await countIs(agentMessages(page), 1, "one answer");
  await turnEnded(id);
  const end = (await events(id)).find((e) => e.type === "message_end");
  await showsWords(agentMessages(page).first(), end.payload.text);
  await countIs(agentMessages(page), 1, "one answer");

  await eventually(() => assert.ok(chatReads.some((r) => r.url.includes("live=long-poll")), "the chat is followed with long-polls"));
  for (const read of chatReads) {
    assert.match(read.url, /[?&]read_token=[^&]+/);
    assert.equal(read.authorization, undefined, read.url);
  }

  // A second reload after the end, and a page with no cache at all, show the same.
  await page.reload();
  await agentMessages(page).first().getByText("helper", { exact: true }).waitFor();
  await showsWords(agentMessages(page).first(), end.payload.text);
  await countIs(agentMessages(page), 1);
  await page.evaluate(() => localStorage.clear());
  const fresh = await signedInPage(browser, spool);
  await fresh.goto(page.url());
  await agentMessages(fresh).first().getByText("helper", { exact: true }).waitFor();
  await showsWords(agentMessages(fresh).first(), end.payload.text);
  assertNoErrors(page);
  assertNoErrors(fresh);
});

test("a network drop mid-answer loses nothing and repeats nothing", async () => {
  const { page } = await workspacePage("Offline");
  const id = await newChat(page);
  await send(page, "keep going while I am offline");
  await agentMessages(page).first().getByText(DEMO_START).waitFor();
  // Offline until the answer has ended on the server, not for a fixed time: whatever of it the
  // page had not read by then, it reads after the drop.
  await page.context().setOffline(true);
  await turnEnded(id);
  await page.context().setOffline(false);
  await agentMessages(page).first().getByText("helper", { exact: true }).waitFor({ timeout: 40_000 });
  const end = (await events(id)).find((e) => e.type === "message_end");
  await showsWords(agentMessages(page).first(), end.payload.text);
  await countIs(agentMessages(page), 1);
  await screenshot(page, "chat-after-offline");
});

test("the stop button aborts the turn and keeps the partial answer", async () => {
  const { page, ws } = await workspacePage("Abort");
  await slowToAnswer(ws);
  const id = await newChat(page);
  await send(page, "a long answer please");
  await agentMessages(page).first().getByText("Thinking").waitFor();
  await page.getByRole("button", { name: "Stop the agent" }).click();
  await page.getByText("You stopped the agent.").waitFor();
  await page.locator(".message.agent .badge", { hasText: "stopped" }).waitFor();
  await page.getByRole("button", { name: "Send" }).waitFor();
  const end = await turnEnded(id);
  assert.equal(end.payload.reason, "aborted");
  const kept = (await events(id)).find((e) => e.type === "message_end");
  assert.equal(kept.payload.aborted, true);
  assert.equal(kept.payload.text.trim(), "Thinking", "the answer was cut short");
  await agentMessages(page).first().getByText("Thinking").waitFor();
  await screenshot(page, "chat-aborted");
  assertNoErrors(page);
});

test("the / menu picks a command by keyboard, previews it, and the agent answers the prompt", async () => {
  const { page } = await workspacePage("Commands");
  const id = await newChat(page);
  const box = composer(page);
  await box.focus();
  await page.keyboard.type("/");
  const menu = page.getByRole("listbox", { name: "Commands" });
  await menu.waitFor();
  await eventually(async () => assert.ok((await menu.getByRole("option").count()) >= 8, "every built-in command is offered"));
  await page.keyboard.type("su");
  await countIs(menu.getByRole("option"), 1, "filtered as typed");
  await page.keyboard.press("ArrowDown");
  await page.keyboard.press("Tab");
  await eventually(async () => assert.equal(await box.inputValue(), "/summarize "));
  await menu.waitFor({ state: "detached" }); // the menu closes on a pick
  await page.keyboard.type("the budget");
  await page.locator(".command-preview", { hasText: "Summarize this chat so far" }).waitFor();
  await page.locator(".command-preview pre", { hasText: "what comes next. the budget" }).waitFor();
  // Escape closes the menu without leaving the chat.
  await box.fill("");
  await page.keyboard.type("/he");
  await menu.waitFor();
  await page.keyboard.press("Escape");
  await menu.waitFor({ state: "detached" });
  await page.getByRole("dialog").waitFor();
  await box.fill("/summarize the budget");
  await page.keyboard.press("Enter");
  await page.locator(".message.command", { hasText: "/summarize the budget" }).waitFor();
  await agentMessages(page).first().getByText("Summary so far").waitFor();
  const end = await turnEnded(id);
  assert.equal(end.payload.reason, "complete");
  const types = (await events(id)).map((e) => e.type);
  assert.deepEqual(types.slice(0, 2), ["slash_command_invoked", "user_message_submitted"]);
  assert.equal(await userMessages(page).filter({ hasText: "<slash-command" }).count(), 0, "the wrapper is not shown");
  await screenshot(page, "chat-command");
  assertNoErrors(page);
});

test("/new opens a new chat, /stop stops a running answer, and an unknown command says why", async () => {
  const { page, ws } = await workspacePage("Actions");
  await slowToAnswer(ws);
  const id = await newChat(page);
  await send(page, "a long answer please");
  await agentMessages(page).first().getByText("Thinking").waitFor();
  await send(page, "/stop");
  await page.locator(".message.agent .badge", { hasText: "stopped" }).waitFor();
  assert.equal((await turnEnded(id)).payload.reason, "aborted");
  await send(page, "/summarise");
  await page.locator(".command-failed", { hasText: "did you mean /summarize" }).waitFor();
  // Text that only starts with a slash is a message; `//` sends one that starts with `/`.
  await send(page, "/etc/hosts is wrong");
  await userMessages(page).getByText("/etc/hosts is wrong").waitFor();
  await turnEnded(id, 2);
  await send(page, "//help is a command");
  await userMessages(page).getByText("/help is a command").waitFor();
  await turnEnded(id, 3);
  await send(page, "/new");
  await page.waitForURL((url) => url.hash.includes("/chats/ses_") && !url.hash.endsWith(id));
  const made = page.url().split("/chats/")[1];
  assert.notEqual(made, id);
  const chat = await call("GET", `/v1/sessions/${made}`);
  assert.equal(chat.workspace_id, ws.id);
  assertNoErrors(page);
});

test("typing @ offers the working directory's files and the chat's own, and the message names the one picked", async () => {
  const { page, ws } = await workspacePage("Mentions");
  const dir = await mkdtemp(join(roots, "ws-"));
  await mkdir(join(dir, "src"));
  for (const f of ["src/lib.rs", "src/main.rs", "README.md"]) await writeFile(join(dir, f), "x");
  await call("PATCH", `/v1/workspaces/${ws.id}`, { working_dir: dir });
  const id = await newChat(page);
  const box = composer(page);
  await box.focus();
  await page.keyboard.type("look at @srcl");
  const menu = page.getByRole("listbox", { name: "Files" });
  await menu.getByRole("option", { name: "@src/lib.rs" }).waitFor();
  await page.keyboard.press("Tab");
  await eventually(async () => assert.equal(await box.inputValue(), "look at @src/lib.rs "));
  await page.keyboard.type("please");
  await page.keyboard.press("Enter");
  await userMessages(page).first().getByText("look at @src/lib.rs please").waitFor();
  await turnEnded(id);
  const sent = (await events(id)).find((e) => e.type === "user_message_submitted");
  assert.equal(sent.payload.content, "look at @src/lib.rs please");
  // The chat's own files are offered too, marked as the chat's; the one picked goes with the
  // message, named in its files as the agents read them.
  const declared = await call("POST", `/v1/sessions/${id}/attachments`, { filename: "report-q3.csv", content_type: "text/csv", size: 4 });
  const put = await fetch(`${spool.origin}${declared.upload.url}`, { method: "PUT", headers: declared.upload.headers, body: "a,b\n" });
  assert.ok(put.ok, `upload: ${put.status}`);
  await call("POST", `/v1/sessions/${id}/attachments/${declared.attachment_id}/complete`);
  await box.focus();
  await page.keyboard.type("see @repq");
  const chatFile = menu.getByRole("option", { name: /@report-q3\.csv/ });
  await chatFile.waitFor();
  assert.match(await chatFile.innerText(), /chat file/);
  await screenshot(page, "mention-chat-file");
  await page.keyboard.press("Tab");
  await page.getByRole("list", { name: "Files to send" }).getByText("report-q3.csv").waitFor();
  await eventually(async () => assert.equal(await box.inputValue(), "see @report-q3.csv "));
  await page.keyboard.type("now");
  await page.keyboard.press("Enter");
  await turnEnded(id, 2);
  const second = (await events(id)).filter((e) => e.type === "user_message_submitted")[1];
  assert.equal(second.payload.content, "see @report-q3.csv now");
  assert.deepEqual(
    second.payload.files.map((f) => f.id),
    [declared.attachment_id],
  );
  // A name nothing matches says so.
  await page.keyboard.type("@zzzz");
  await page.getByRole("status").getByText("No file matches").waitFor();
  assertNoErrors(page);
});

test("files dropped on a chat upload with progress, show as chips, go with the message and survive a reload", async () => {
  const { page } = await workspacePage("Files");
  const id = await newChat(page);
  // Hold each upload a moment, so its progress shows.
  await page.route("**/v1/uploads/**", async (route) => {
    await new Promise((r) => setTimeout(r, 700));
    await route.continue();
  });
  const png = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNk+M9QDwADhgGAWjR9awAAAABJRU5ErkJggg==";
  const files = await page.evaluateHandle((png) => {
    const dt = new DataTransfer();
    dt.items.add(new File(["name,score\nada,3\n"], "scores.csv", { type: "text/csv" }));
    const bytes = Uint8Array.from(atob(png), (c) => c.charCodeAt(0));
    dt.items.add(new File([bytes], "dot.png", { type: "image/png" }));
    return dt;
  }, png);
  await page.dispatchEvent("dialog", "dragover", { dataTransfer: files });
  await page.getByText("Drop files to upload them to this chat").waitFor();
  await page.dispatchEvent("dialog", "drop", { dataTransfer: files });
  // Each file shows its progress, then is uploaded.
  const pending = page.getByRole("list", { name: "Files to send" });
  await pending.getByRole("progressbar", { name: "Uploading scores.csv" }).waitFor();
  await pending.getByRole("progressbar", { name: "Uploading dot.png" }).waitFor();
  await screenshot(page, "files-uploading");
  await pending.locator(".upload.done").nth(1).waitFor({ timeout: 15_000 });
  await countIs(pending.getByRole("progressbar"), 0);
  // The message takes the files, shown on it as chips (the image as itself); the demo agent
  // acknowledges them.
  await send(page, "what do you make of these?");
  const card = (name) => page.getByRole("list", { name: "Files of this message" }).getByRole("listitem", { name: `File ${name}` });
  await card("scores.csv").getByRole("button", { name: /scores\.csv/ }).waitFor();
  await card("dot.png").getByRole("img", { name: "dot.png" }).waitFor();
  // (The two uploads finish in either order.)
  await agentMessages(page).first().getByText("I see you shared").waitFor();
  await turnEnded(id);
  await page.getByRole("button", { name: "Send" }).waitFor();
  await eventually(async () => {
    const said = await agentMessages(page).first().innerText();
    assert.ok(said.includes("scores.csv (17 B, text/csv)") && said.includes("dot.png (70 B, image/png)"), said);
  });
  const all = await events(id);
  assert.equal(all.filter((e) => e.type === "system" && e.payload.upload).length, 2, "one event per file");
  const message = all.find((e) => e.type === "user_message_submitted");
  assert.deepEqual(message.payload.files.map((f) => f.filename).sort(), ["dot.png", "scores.csv"]);
  // A chip downloads the file under its name.
  const [download] = await Promise.all([
    page.waitForEvent("download"),
    card("scores.csv").getByRole("button", { name: /scores\.csv/ }).click(),
  ]);
  assert.equal(download.suggestedFilename(), "scores.csv");
  const saved = await download.createReadStream();
  let body = "";
  for await (const chunk of saved) body += chunk;
  assert.equal(body, "name,score\nada,3\n");
  // After a reload the files are all still there.
  await page.reload();
  await page.getByRole("dialog").waitFor();
  await card("scores.csv").waitFor();
  const image = card("dot.png").getByRole("img", { name: "dot.png" });
  await image.waitFor();
  await page.waitForFunction(() => document.querySelector("img.file-preview")?.naturalWidth === 1);
  await page.getByRole("list", { name: "Files of this message" }).getByRole("button", { name: /scores\.csv/ }).waitFor();
  await screenshot(page, "files-after-reload");
  assertNoErrors(page);
});

test("a workspace's commands are created, listed with their source, and deleted", async () => {
  const { page, ws } = await workspacePage("Command page");
  await page.getByRole("link", { name: "Commands" }).click();
  await page.getByRole("heading", { name: "Commands" }).waitFor();
  await page.locator(".command-list li", { hasText: "/summarize" }).getByText("builtin").waitFor();
  await page.getByRole("button", { name: "New command" }).click();
  await page.getByRole("textbox", { name: "Name" }).fill("review");
  await page.getByRole("textbox", { name: "Markdown file" }).fill("---\ndescription: Review a file\n---\nReview $1.");
  await page.getByRole("button", { name: "Save" }).click();
  const row = page.locator(".command-list li", { hasText: "/review" });
  await row.getByText("Review a file").waitFor();
  await row.getByText("workspace").waitFor();
  // A bad file is refused with the reason, and nothing is stored.
  await page.getByRole("button", { name: "New command" }).click();
  await page.getByRole("textbox", { name: "Name" }).fill("bad");
  await page.getByRole("textbox", { name: "Markdown file" }).fill("---\naction: explode\n---\n");
  await page.getByRole("button", { name: "Save" }).click();
  await page.getByText(/not an action/).first().waitFor();
  await page.getByRole("button", { name: "Cancel" }).click();
  page.once("dialog", (d) => d.accept());
  await row.getByRole("button", { name: "Delete /review" }).click();
  await row.waitFor({ state: "detached" });
  await eventually(async () => {
    const left = (await call("GET", `/v1/workspaces/${ws.id}/slash-commands`)).commands.map((c) => c.name);
    assert.ok(!left.includes("review") && !left.includes("bad"), left.join(" "));
  });
  // The refused save is the one error the browser logs (its 400).
  assert.deepEqual(
    page.errors.filter((e) => !/status of 400/.test(e)),
    [],
    "the page logged errors",
  );
});

test("a tool call is approved inline and its action shows under its message", async () => {
  const { page, ws } = await workspacePage("Approval");
  const id = await newChat(page);
  await send(page, "add a helper agent");
  const request = page.getByRole("listitem", { name: "Approval request" });
  await request.getByText("Create agent").waitFor();
  await screenshot(page, "chat-approval");
  await request.getByRole("button", { name: "Approve" }).click();
  await request.getByText("Approved").waitFor();
  await page.locator(".action.done", { hasText: "Create agent" }).waitFor();
  await turnEnded(id);
  const agents = (await call("GET", `/v1/workspaces/${ws.id}/agents`)).agents;
  assert.ok(agents.some((a) => a.name === "Helper"), `the approved call ran: ${JSON.stringify(await events(id))}`);
  assert.ok((await events(id)).some((e) => e.type === "approval_submitted" && e.payload.decision === "approve"));
  assertNoErrors(page);
});

test("a question is answered inline and the agent carries on", async () => {
  const { page } = await workspacePage("Question");
  const id = await newChat(page);
  await send(page, "ask me a question");
  const card = page.getByRole("listitem", { name: "Question" });
  await card.getByText("What should I call you?").waitFor();
  await card.getByRole("textbox", { name: "Your answer" }).fill("Ada");
  await card.getByRole("button", { name: "Answer" }).click();
  await card.getByText("You answered: Ada").waitFor();
  await agentMessages(page).filter({ hasText: "Nice to meet you, Ada" }).waitFor();
  await screenshot(page, "chat-question");
  assert.equal((await turnEnded(id)).payload.reason, "complete");
  assertNoErrors(page);
});

test("a plan is rejected with feedback", async () => {
  const { page } = await workspacePage("Plan");
  const id = await newChat(page);
  await send(page, "make a plan");
  const card = page.getByRole("listitem", { name: "Plan" });
  await card.getByText("Draft an answer").waitFor();
  await card.getByRole("textbox", { name: "Feedback" }).fill("fewer steps");
  await card.getByRole("button", { name: "Reject plan" }).click();
  await card.getByText("Rejected: fewer steps").waitFor();
  await agentMessages(page).filter({ hasText: "The plan was rejected: fewer steps" }).waitFor();
  const answer = await eventOf(id, "plan_submitted");
  assert.deepEqual([answer.payload.action, answer.payload.feedback], ["reject", "fewer steps"]);
  await screenshot(page, "chat-plan");
  assertNoErrors(page);
});

test("a task an agent creates shows a toast with a link to it", async () => {
  const { page, ws } = await workspacePage("Tasks");
  await newChat(page);
  await send(page, "make a task to water the ferns");
  const link = page.getByRole("status").getByRole("link", { name: "Open task" });
  await link.waitFor();
  await screenshot(page, "chat-task-toast");
  await link.click();
  await page.waitForURL(new RegExp(`#/w/${ws.id}/tasks/task_`));
  await page.locator(".task.highlight", { hasText: "Water the ferns" }).waitFor();
  assertNoErrors(page);
});

test("a task made elsewhere in the workspace toasts wherever the person is", async () => {
  const { page, ws } = await workspacePage("Task toasts");
  // On the Agents tab, away from any chat, opened afresh: the only feed reader is the toasts'.
  await page.getByRole("link", { name: "Agents" }).click();
  await page.waitForURL(new RegExp(`#/w/${ws.id}/agents`));
  await Promise.all([feedFollowed(page, ws), page.reload()]);
  const chat = await call("POST", "/v1/sessions", { workspace_id: ws.id });
  const task = await call("POST", `/v1/workspaces/${ws.id}/tasks`, { title: "Water the ferns", session_id: chat.id });
  const toast = page.getByRole("status").filter({ hasText: "Task created: Water the ferns" });
  await toast.waitFor();
  await toast.getByRole("link", { name: "Open task" }).click();
  await page.waitForURL(new RegExp(`#/w/${ws.id}/tasks/${task.id}`));
  await page.locator(".task.highlight", { hasText: "Water the ferns" }).waitFor();
  assertNoErrors(page);
});

test("a task is made, edited and deleted by hand", async () => {
  const { page, ws } = await workspacePage("Hand tasks");
  await page.getByRole("link", { name: "Tasks" }).click();
  await page.waitForURL(new RegExp(`#/w/${ws.id}/tasks`));
  const form = page.getByRole("form", { name: "New task" });
  await form.getByLabel("Title").fill("Call the plumber");
  await form.getByLabel("Description").fill("Before Friday");
  await form.getByRole("button", { name: "Add task" }).click();
  const item = page.getByRole("listitem", { name: "Task Call the plumber" });
  await item.getByText("Before Friday").waitFor();
  await eventually(async () => assert.equal(await form.getByLabel("Title").inputValue(), "", "the form is cleared"));
  // Edited in place.
  await item.getByRole("button", { name: "Edit" }).click();
  const edit = page.getByRole("form", { name: "Edit task" });
  await edit.getByLabel("Title").fill("Call the plumber today");
  await edit.getByRole("button", { name: "Save task" }).click();
  const edited = page.getByRole("listitem", { name: "Task Call the plumber today" });
  await edited.getByText("Before Friday").waitFor();
  const tasks = async () => (await call("GET", `/v1/workspaces/${ws.id}/tasks`)).tasks;
  await eventually(async () =>
    assert.deepEqual((await tasks()).map((t) => [t.title, t.description]), [["Call the plumber today", "Before Friday"]]),
  );
  await screenshot(page, "tasks-by-hand");
  // Deleted, after a confirmation.
  page.once("dialog", (d) => d.accept());
  await edited.getByRole("button", { name: "Delete" }).click();
  await page.getByText("No tasks yet.").waitFor();
  await eventually(async () => assert.deepEqual(await tasks(), []));
  assertNoErrors(page);
});

test("workspace settings are edited, saved and say where notifications go", async () => {
  const { page, ws } = await workspacePage("Settings");
  await page.getByRole("link", { name: "Settings" }).click();
  await page.waitForURL(new RegExp(`#/w/${ws.id}/settings`));
  const status = page.getByRole("status", { name: "Notification status" });
  await status.getByText("No email address is set").waitFor();
  await page.getByLabel("Title").fill("Research desk");
  await page.getByLabel("Description").fill("Papers and notes");
  await page.getByLabel("Keep an idle chat's folder (days)").fill("30");
  await page.getByLabel("Email").fill("ops@example.com");
  await page.getByLabel("When a task is created").uncheck();
  await page.getByRole("button", { name: "Save settings" }).click();
  // This server sends no email: the page says so, and what to do about it.
  await status.getByText("SPOOL_NOTIFY_FROM").waitFor();
  await eventually(async () => {
    const saved = await call("GET", `/v1/workspaces/${ws.id}`);
    assert.equal(saved.title, "Research desk");
    assert.equal(saved.description, "Papers and notes");
    assert.deepEqual(saved.cleanup, { turn_record_days: 7, chat_folder_days: 30 });
    assert.equal(saved.notifications.email, "ops@example.com");
    assert.deepEqual([saved.notifications.on_question, saved.notifications.on_task], [true, false]);
  });
  // The picker shows the new title.
  await page.getByRole("combobox", { name: "Workspace" }).getByRole("option", { name: "Research desk" }).waitFor({ state: "attached" });
  // A folder that does not exist is refused, and nothing changes.
  await page.getByLabel("One folder for every chat").check();
  await page.getByLabel(/^Folder/).fill("/no/such/folder");
  await page.getByRole("button", { name: "Save settings" }).click();
  await page.locator(".toast.error").waitFor();
  assert.equal((await call("GET", `/v1/workspaces/${ws.id}`)).working_directory_mode, "temp");
  // Settings survive a reload.
  await page.reload();
  await eventually(async () => {
    assert.equal(await page.getByLabel("Email").inputValue(), "ops@example.com");
    assert.equal(await page.getByLabel("Keep an idle chat's folder (days)").inputValue(), "30");
  });
  await screenshot(page, "workspace-settings");
  // The refused folder's 400 is the only thing the console reports.
  assert.deepEqual(page.errors.filter((e) => !/status of 400/.test(e)), []);
});

test("a workspace is deleted with its chats only once its title is typed", async () => {
  const { page, ws } = await workspacePage("Doomed");
  const chat = await call("POST", "/v1/sessions", { workspace_id: ws.id });
  await page.getByRole("link", { name: "Settings" }).click();
  await page.getByRole("button", { name: "Delete workspace…" }).click();
  const confirm = page.getByRole("button", { name: "Delete workspace and its chats" });
  await eventually(async () => assert.equal(await confirm.isDisabled(), true));
  await page.getByLabel("to confirm").fill("Doome");
  await eventually(async () => assert.equal(await confirm.isDisabled(), true, "a near miss does not delete"));
  await page.getByLabel("to confirm").fill("Doomed");
  await screenshot(page, "workspace-delete");
  await confirm.click();
  await page.getByRole("status").filter({ hasText: "Workspace “Doomed” deleted." }).waitFor();
  await page.waitForURL((url) => !url.hash.includes(ws.id));
  const workspaces = (await call("GET", "/v1/workspaces")).workspaces;
  assert.ok(!workspaces.some((w) => w.id === ws.id), "the workspace is gone");
  await assert.rejects(call("GET", `/v1/sessions/${chat.id}`), /: 404 /, "its chats are gone too");
  assertNoErrors(page);
});

/** A workspace's chats, with the UI looking for its companion at `companionUrl`. */
async function pageWithCompanionAt(name, companionUrl) {
  const ws = await call("POST", "/v1/workspaces", { name });
  const page = await signedInPage(browser, spool);
  await page.context().addInitScript((url) => localStorage.setItem("spool.companion.url", url), companionUrl);
  await page.goto(`${spool.origin}/#/w/${ws.id}/chats`);
  await page.reload();
  await page.getByRole("heading", { name: "Chats" }).waitFor();
  return { page, ws };
}

test("with the companion running, the header says connected and a message carries what the notes say", async () => {
  const library = await mkdtemp(join(tmpdir(), "spool-notes-"));
  await writeFile(join(library, "garden.md"), `# Garden\n\n${"Compost and soil. ".repeat(30)}The tomatoes need water every morning in July.${" Mulch the beds.".repeat(30)}`);
  await writeFile(join(library, "week.md"), "# Week\n- [ ] Call the plumber\n");
  const companion = await startCompanion(spool, library);
  try {
    const { page } = await pageWithCompanionAt("With notes", companion.url);
    await page.getByText("Companion connected").waitFor().catch(async (e) => {
      throw new Error(`${e.message}\nthe badge says: ${await page.locator(".companion summary").getAttribute("title")}`);
    });
    // The side panel shows what the notes leave open.
    await page.getByRole("complementary", { name: "From your notes" }).getByText("Call the plumber").first().waitFor();
    const id = await newChat(page);
    await send(page, "When do the tomatoes need water?");
    await userMessages(page).first().getByText("tomatoes need water").waitFor();
    const sent = await eventOf(id, "user_message_submitted");
    const context = sent.payload.client_context;
    assert.ok(context, "the message carries client_context");
    assert.equal(context.relevant_k_ids.length, 1, JSON.stringify(context));
    assert.match(context.summary, /tomatoes need water/);
    // The chat has the companion's capability, so the agent gets the context, and its reply
    // cites the note, shown as a chip.
    assert.deepEqual((await call("GET", `/v1/sessions/${id}`)).capabilities, ["capture_ingest", "context_for_query", "mcp_tools"]);
    await agentMessages(page).first().locator(".note-chip", { hasText: context.relevant_k_ids[0] }).waitFor();
    await page.keyboard.press("Escape");
    await screenshot(page, "companion-connected");
    assertNoErrors(page);
  } finally {
    await companion.stop();
  }
});

test("without a companion, or with one that hangs, the page says Offline mode and sends without asking it", async () => {
  // One that accepts connections and never answers.
  const hung = createServer(() => {});
  await new Promise((r) => hung.listen(0, "127.0.0.1", r));
  const hangUrl = `http://127.0.0.1:${hung.address().port}`;
  try {
    for (const url of ["http://127.0.0.1:1", hangUrl]) {
      const { page } = await pageWithCompanionAt(`Offline ${url}`, url);
      const asked = [];
      page.on("request", (r) => r.url().startsWith(url) && asked.push(new URL(r.url()).pathname));
      await page.getByText("Offline mode").waitFor();
      const badge = page.locator(".companion summary");
      await eventually(async () => assert.match((await badge.getAttribute("title")) ?? "", /No companion answered/));
      const id = await newChat(page);
      await send(page, "hello without notes");
      await userMessages(page).first().getByText("hello without notes").waitFor();
      const sent = await eventOf(id, "user_message_submitted");
      assert.equal(sent.payload.client_context, undefined);
      // The send never consulted the companion: offline mode does not wait on it.
      assert.deepEqual(asked, [], `${url}: ${asked}`);
      await turnEnded(id);
      assertNoErrors(page);
    }
  } finally {
    hung.close();
  }
});

test("agent text cannot inject script or markup", async () => {
  const { page } = await workspacePage("Safety");
  await newChat(page);
  // The demo agent repeats what it was sent, inside its markdown answer.
  await send(page, `<img src=x onerror="window.__pwned=1"> [click](javascript:window.__pwned=2) <script>window.__pwned=3</script>`);
  await agentMessages(page).first().getByText("helper", { exact: true }).waitFor();
  const bubble = agentMessages(page).first();
  await eventually(async () => assert.match(await bubble.innerText(), /<img src=x onerror=/));
  assert.equal(await bubble.locator("img, script").count(), 0, "tags are shown as text");
  assert.equal(await bubble.locator('a[href^="javascript"]').count(), 0, "no javascript: links");
  assert.equal(await page.evaluate(() => window.__pwned), undefined);
  await screenshot(page, "chat-escaped-markup");
  assertNoErrors(page);
});

test("an agent's failure shows as an error apart from the messages", async () => {
  const { page } = await workspacePage("Failure");
  const id = await newChat(page);
  await send(page, "please fail");
  const alert = page.locator(".timeline").getByRole("alert");
  await alert.getByText("The agent could not answer").waitFor();
  assert.equal(await agentMessages(page).count(), 0);
  assert.equal((await turnEnded(id)).payload.reason, "error");
  await page.getByRole("button", { name: "Send" }).waitFor();
  await screenshot(page, "chat-error");
  assertNoErrors(page);
});

test("a chat is renamed inline and deleted from the list", async () => {
  const { page, ws } = await workspacePage("Rename");
  const id = await newChat(page);
  await page.getByRole("button", { name: /Rename chat/ }).click();
  await page.getByRole("textbox", { name: "Chat title" }).fill("Trip to Lisbon");
  await page.getByRole("button", { name: "Save title" }).click();
  await page.getByRole("button", { name: "Rename chat: Trip to Lisbon" }).waitFor();
  await eventually(async () => assert.equal((await call("GET", `/v1/sessions/${id}`)).title, "Trip to Lisbon"));
  await page.getByRole("button", { name: "Close chat" }).click();
  await page.getByRole("dialog").waitFor({ state: "detached" });
  const row = page.locator(".chat-row", { hasText: "Trip to Lisbon" });
  await row.waitFor();
  await row.getByRole("button", { name: "Delete chat Trip to Lisbon" }).click();
  await screenshot(page, "chat-delete-confirm");
  await row.getByRole("group").getByRole("button", { name: "Delete" }).click();
  await row.waitFor({ state: "detached" });
  await eventually(async () => assert.deepEqual((await call("GET", `/v1/sessions?workspace_id=${ws.id}`)).sessions, []));
  assertNoErrors(page);
});

test("the chat list puts the chat with new messages on top, live", async () => {
  const { page, ws } = await workspacePage("Live list");
  // The feed's long-polls carry the feed's read grant, never the person's token, so a CDN can
  // answer every tab of the workspace with one request.
  const feedReads = [];
  page.on("request", (r) => {
    if (r.url().includes("/feed?")) feedReads.push({ url: r.url(), authorization: r.headers().authorization });
  });
  const agent = (await call("GET", `/v1/workspaces/${ws.id}/agents`)).agents[0];
  const older = await call("POST", "/v1/sessions", { workspace_id: ws.id, agent_id: agent.id, title: "Older chat" });
  await call("POST", "/v1/sessions", { workspace_id: ws.id, agent_id: agent.id, title: "Newer chat" });
  // (Two readers of the feed: the chat list and the toasts.)
  await Promise.all([feedFollowed(page, ws, 2), page.reload()]);
  const titles = page.locator(".chat-title");
  await eventually(async () => assert.deepEqual(await titles.allInnerTexts(), ["Newer chat", "Older chat"]));
  // Someone else writes to the older chat: the feed moves it up without a reload.
  await call("POST", `/v1/sessions/${older.id}/messages`, { content: "a message from elsewhere" });
  await eventually(async () => assert.deepEqual(await titles.allInnerTexts(), ["Older chat", "Newer chat"]));
  await eventually(async () => assert.ok(feedReads.some((r) => r.url.includes("live=long-poll")), "the feed is followed with long-polls"));
  for (const read of feedReads) {
    assert.match(read.url, /[?&]read_token=[^&]+/);
    assert.equal(read.authorization, undefined, read.url);
  }
  const row = page.locator(".chat-row").first();
  await row.getByText("Spool", { exact: true }).waitFor();
  await row.locator(".chat-time", { hasText: "just now" }).waitFor();
  // Once the answer has ended the row previews it (for the screenshot).
  await turnEnded(older.id);
  await row.locator(".chat-preview", { hasText: "Hello! I am Spool" }).waitFor();
  await screenshot(page, "chat-list");
  assertNoErrors(page);
});

test("a chat renamed while the list starts following the feed shows its new title", async () => {
  // GIVEN a chat, and a page whose reads of the feed leave the browser only once the rename is
  // in the feed (a slow network, a loaded machine)
  const ws = await call("POST", "/v1/workspaces", { name: "Feed start" });
  const chat = await call("POST", "/v1/sessions", { workspace_id: ws.id, title: "Before" });
  const feed = async () => call("GET", `/v1/stream/workspaces/${ws.id}/feed?offset=-1`);
  const feedBefore = (await feed()).length;
  let renamed;
  const inFeed = new Promise((r) => (renamed = r));
  const page = await signedInPage(browser, spool);
  await page.route(`**/workspaces/${ws.id}/feed?**`, async (route) => {
    await inFeed;
    await route.continue();
  });
  await page.goto(`${spool.origin}/#/w/${ws.id}/chats`);
  await page.locator(".chat-title", { hasText: "Before" }).waitFor();
  // WHEN the chat is renamed elsewhere after the list was read, before its feed is followed
  await call("PATCH", `/v1/sessions/${chat.id}`, { title: "After" });
  await eventually(async () => assert.ok((await feed()).length > feedBefore, "the rename is in the feed"));
  renamed();
  // THEN the list shows the new title (a feed followed from where it ends when its first
  // long-poll arrives would never hear of it)
  await page.locator(".chat-title", { hasText: "After" }).waitFor({ timeout: 10_000 });
  assertNoErrors(page);
});

test("agents are created, edited, reordered and deleted", async () => {
  const { page, ws } = await workspacePage("Agents");
  // The server runs every CLI here (a CLI that cannot run could not be picked).
  const healthy = ["claude", "gemini", "codex", "opencode"].map((cli) => ({ cli, installed: true, version: "1.0", healthy: true }));
  await page.route("**/v1/clis", (route) => route.fulfill({ json: { clis: healthy, runners: [], workspace_roots: [] } }));
  await page.getByRole("link", { name: "Agents" }).click();
  const agents = async () => (await call("GET", `/v1/workspaces/${ws.id}/agents`)).agents;
  /** Waits until the API lists the workspace's agents as `expected`, in that order. */
  const namesAre = (expected) => eventually(async () => assert.deepEqual((await agents()).map((a) => a.name), expected));
  for (const name of ["Researcher", "Writer"]) {
    await page.getByRole("button", { name: "New agent" }).click();
    await page.getByRole("textbox", { name: "Name" }).fill(name);
    await page.getByRole("textbox", { name: "Instruction" }).fill(`You are the ${name.toLowerCase()}.`);
    await page.getByRole("combobox", { name: "Runtime" }).selectOption("openai");
    await page.getByRole("button", { name: "Save" }).click();
    await page.locator(".agent-name", { hasText: name }).waitFor();
  }
  await namesAre(["Spool", "Researcher", "Writer"]);
  await page.getByRole("button", { name: "Move Writer up" }).click();
  await page.waitForFunction(() => document.querySelectorAll(".agent-name")[1]?.textContent === "Writer");
  await page.getByRole("button", { name: "Move Writer up" }).click();
  await page.waitForFunction(() => document.querySelectorAll(".agent-name")[0]?.textContent === "Writer");
  await namesAre(["Writer", "Spool", "Researcher"]);
  await page.getByRole("button", { name: "Edit Researcher" }).click();
  await page.getByRole("textbox", { name: "Model" }).fill("gpt-test");
  await page.getByRole("combobox", { name: "CLI" }).selectOption("codex");
  await page.getByRole("button", { name: "Save" }).click();
  await page.locator(".agent-row", { hasText: "Researcher" }).getByText("gpt-test").waitFor();
  await eventually(async () => {
    const researcher = (await agents()).find((a) => a.name === "Researcher");
    assert.deepEqual([researcher.model, researcher.cli_type, researcher.runtime], ["gpt-test", "codex", "openai"]);
  });
  await screenshot(page, "agents");
  page.once("dialog", (d) => d.accept());
  await page.getByRole("button", { name: "Delete Researcher" }).click();
  await page.locator(".agent-name", { hasText: "Researcher" }).waitFor({ state: "detached" });
  await namesAre(["Writer", "Spool"]);
  // A new chat offers the agents in their order, and the chat's header switches agent and CLI.
  await page.getByRole("link", { name: "Chats" }).click();
  await page.locator("summary", { hasText: "New chat" }).click();
  const menu = page.locator("details.menu");
  await eventually(async () => assert.deepEqual(await menu.getByRole("button").allInnerTexts(), ["Writer", "Spoolbuilt-in"]));
  await menu.getByRole("button", { name: "Writer" }).click();
  await page.getByRole("dialog").waitFor();
  await page.waitForURL(/\/chats\/ses_/);
  const id = page.url().split("/chats/")[1];
  const chat = async () => call("GET", `/v1/sessions/${id}`);
  await page.getByRole("combobox", { name: "CLI" }).selectOption("gemini");
  await eventually(async () => assert.equal((await chat()).cli_type, "gemini"));
  await page.getByRole("combobox", { name: "Agent" }).selectOption({ label: "Spool" });
  await eventually(async () => {
    const { agent_name, cli_type } = await chat();
    assert.deepEqual([agent_name, cli_type], ["Spool", null], "a new agent resets the CLI");
  });
  const cli = page.getByRole("combobox", { name: "CLI" });
  await eventually(async () => assert.equal(await cli.inputValue(), "", "the CLI dropdown shows the agent's own again"));
  assertNoErrors(page);
});

test("the global chat is a page of its own", async () => {
  const page = await signedInPage(browser, spool);
  await page.getByRole("link", { name: "Global chat" }).click();
  await page.getByRole("button", { name: "Rename chat: Global chat" }).waitFor();
  await send(page, "ask me a question");
  await page.getByText("What should I call you?").first().waitFor();
  // There, a plain message answers the agent's question.
  await composer(page).fill("Grace");
  await page.getByRole("button", { name: "Send" }).click();
  await agentMessages(page).filter({ hasText: "Nice to meet you, Grace" }).waitFor();
  await page.getByText("You answered: Grace").waitFor();
  await countIs(page.getByRole("textbox", { name: "Your answer" }), 0, "the question is closed");
  await screenshot(page, "global-chat");
  assertNoErrors(page);
});

test("on a phone-sized screen the chat fills the screen and works by keyboard", async () => {
  const { page } = await workspacePage("Phone", { width: 390, height: 844 });
  await newChat(page);
  // Focus starts in the message box; Enter sends.
  await page.waitForFunction(() => document.activeElement?.id === "composer-input");
  await page.keyboard.type("hi from a phone");
  await page.keyboard.press("Enter");
  await agentMessages(page).first().getByText(DEMO_START).waitFor();
  await eventually(async () => {
    const box = await page.getByRole("dialog").boundingBox();
    assert.ok(box.width >= 380 && box.height >= 800, `the window fills the screen (${box.width}×${box.height})`);
  });
  await screenshot(page, "phone-chat");
  // Escape closes the window and focus returns to the page.
  await page.getByRole("button", { name: "Send" }).waitFor({ timeout: 15_000 });
  await page.keyboard.press("Escape");
  await page.getByRole("dialog").waitFor({ state: "detached" });
  await page.waitForURL(/\/chats$/);
  await page.waitForFunction(() => document.activeElement?.classList.contains("chat-link"));
  assertNoErrors(page);
});

test("a sign-in link for another organization asks before it switches", async () => {
  const org = await spool.admin("create-org", "Elsewhere", "--id", "elsewhere");
  const { api_key } = await spool.admin("create-api-key", org.org_id);
  const page = await signedInPage(browser, spool);
  const orgOf = () =>
    page.evaluate(() => {
      const jwt = JSON.parse(localStorage.getItem("spool.token")).jwt;
      return JSON.parse(atob(jwt.split(".")[1].replace(/-/g, "+").replace(/_/g, "/"))).org;
    });
  await eventually(async () => assert.equal(await orgOf(), "local"));
  // A link with the other organization's key, followed in the open tab: asked, not switched
  await page.goto(`${spool.origin}/#key=${api_key}`);
  const prompt = page.getByRole("alertdialog", { name: "Switch organization?" });
  await prompt.waitFor({ timeout: 15_000 }).catch(async (e) => {
    await screenshot(page, "switch-prompt-missing");
    throw new Error(`${e.message}\nurl: ${page.url()}\npage: ${await page.locator("body").innerText()}\nerrors: ${page.errors}`);
  });
  await eventually(async () => assert.match(await prompt.innerText(), /signs you in to the organization elsewhere[\s\S]*signed in to local/));
  assert.equal(await orgOf(), "local");
  assert.ok(!page.url().includes("key="), "the key stays in the address bar");
  await page.getByRole("button", { name: "Stay in local" }).click();
  await page.getByRole("button", { name: "Sign out" }).waitFor();
  assert.equal(await orgOf(), "local");
  // The same link, accepted
  await page.goto(`${spool.origin}/#key=${api_key}`);
  await page
    .getByRole("button", { name: "Switch to elsewhere" })
    .click({ timeout: 15_000 })
    .catch(async (e) => {
      throw new Error(`${e.message}\nurl: ${page.url()}\npage: ${await page.locator("body").innerText()}\nerrors: ${page.errors}`);
    });
  await page.getByRole("button", { name: "Sign out" }).waitFor();
  await eventually(async () => assert.equal(await orgOf(), "elsewhere"));
  assertNoErrors(page);
});
