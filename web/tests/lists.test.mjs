// Lists that scale, in a real browser against a real `spool serve`: the chat list and the tasks
// read a page at a time as they scroll, say how many there are as far as the API says, the chat
// list searches on the server, and the chat the person is in never leaves the list.

import assert from "node:assert/strict";
import { after, before, test } from "node:test";
import { api, eventually, screenshot, signedInPage, startBrowser, startSpool } from "./harness.mjs";

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

/** Waits until `locator` matches `n` elements. */
const countIs = (locator, n, message) => eventually(async () => assert.equal(await locator.count(), n, message));

/** Scrolls `rows`' last one into view again and again until there are `n`. */
const scrollUntil = (rows, n) =>
  eventually(
    async () => {
      await rows.last().scrollIntoViewIfNeeded();
      assert.equal(await rows.count(), n);
    },
    { timeout: 30_000 },
  );

test("the chat list pages through 150 chats as it scrolls, counts them, finds an old one, and keeps the open chat", async () => {
  const ws = await call("POST", "/v1/workspaces", { name: "Many chats" });
  const agent = (await call("GET", `/v1/workspaces/${ws.id}/agents`)).agents[0];
  // GIVEN 150 chats, the first made the least recently active
  const first = await call("POST", "/v1/sessions", { workspace_id: ws.id, agent_id: agent.id, title: "The very first chat" });
  await new Promise((r) => setTimeout(r, 20));
  for (let i = 1; i < 150; i++) {
    await call("POST", "/v1/sessions", { workspace_id: ws.id, agent_id: agent.id, title: `Chat number ${i}` });
  }
  const page = await signedInPage(browser, spool);
  await page.goto(`${spool.origin}/#/w/${ws.id}/chats`);
  const list = page.locator(".chats .chat-list:not(.pinned)");
  const rows = list.locator(".chat-row");
  const oldest = list.locator(".chat-row", { hasText: "The very first chat" });
  const count = page.locator(".chats").getByRole("status");
  // WHEN the list opens THEN it shows the first page only, and says more follow (not how many: the API does not say)
  await countIs(rows, 50);
  assert.equal(await oldest.count(), 0, "the oldest chat is not on the first page");
  await eventually(async () => assert.equal(await count.innerText(), "50+ chats"));
  // WHEN it is scrolled to the end, again and again THEN the next pages load, down to the oldest
  await scrollUntil(rows, 150);
  assert.equal(await rows.last().locator(".chat-title").innerText(), "The very first chat");
  await eventually(async () => assert.equal(await count.innerText(), "150 chats"));
  const titles = await list.locator(".chat-title").allInnerTexts();
  assert.equal(new Set(titles).size, 150, "no chat is shown twice");
  await screenshot(page, "chat-list-end");
  // WHEN the oldest chat's title is searched for (any case) THEN the server finds it alone
  const search = page.getByRole("searchbox", { name: "Search chats" });
  await search.fill("very FIRST");
  await eventually(async () => assert.deepEqual(await list.locator(".chat-title").allInnerTexts(), ["The very first chat"]));
  await eventually(async () => assert.equal(await count.innerText(), "1 chat matches “very FIRST”"));
  // WHEN it is opened and the search cleared THEN the list shows the newest page, and the open chat still, marked
  await oldest.locator(".chat-link").click();
  await page.waitForURL(new RegExp(`/chats/${first.id}$`));
  await page.getByRole("dialog").waitFor();
  await page.getByRole("button", { name: "Close chat" }).click();
  await page.getByRole("dialog").waitFor({ state: "detached" });
  const pinned = page.getByRole("list", { name: "The chat you were in" });
  await search.fill("");
  await countIs(rows, 50);
  assert.equal(await rows.first().locator(".chat-title").innerText(), "Chat number 149");
  await eventually(async () => assert.equal(await pinned.locator(".chat-title").innerText(), "The very first chat"));
  await screenshot(page, "chat-list-pinned");
  // AND opening it from there keeps it in view, as the chat the person is in
  await pinned.locator(".chat-link").click();
  await page.getByRole("dialog").waitFor();
  await page.getByRole("list", { name: "The chat you are in" }).locator(".chat-link[aria-current='true']").waitFor({ state: "attached" });
  await page.keyboard.press("Escape");
  await page.getByRole("dialog").waitFor({ state: "detached" });
  // Focus returns to its row, kept though no page has it
  await page.waitForFunction((id) => document.activeElement?.closest(".chat-row")?.getAttribute("data-session") === id, first.id);
  // AND a search that matches nothing says so
  await search.fill("no such chat");
  await page.getByText("No chat's title contains “no such chat”.").waitFor();
  await eventually(async () => assert.equal(await count.innerText(), "0 chats match “no such chat”"));
  assert.deepEqual(page.errors, []);
});

test("the tasks page through 120 tasks as they scroll, with their count", async () => {
  const ws = await call("POST", "/v1/workspaces", { name: "Many tasks" });
  for (let i = 0; i < 120; i++) await call("POST", `/v1/workspaces/${ws.id}/tasks`, { title: `Task number ${i}` });
  const page = await signedInPage(browser, spool);
  await page.goto(`${spool.origin}/#/w/${ws.id}/tasks`);
  const rows = page.locator(".task-list > li");
  const count = page.locator(".tasks").getByRole("status");
  await countIs(rows, 50);
  await eventually(async () => assert.equal(await count.innerText(), "50+ tasks"));
  assert.equal(await rows.first().locator(".task-title").innerText(), "Task number 119");
  await scrollUntil(rows, 120);
  await eventually(async () => assert.equal(await count.innerText(), "120 tasks"));
  assert.equal(await rows.last().locator(".task-title").innerText(), "Task number 0");
  // A task added by hand comes on top, and the list keeps what was loaded
  await page.getByRole("form", { name: "New task" }).getByLabel("Title").fill("Added by hand");
  await page.getByRole("button", { name: "Add task" }).click();
  await countIs(rows, 121);
  assert.equal(await rows.first().locator(".task-title").innerText(), "Added by hand");
  await eventually(async () => assert.equal(await count.innerText(), "121 tasks"));
  assert.deepEqual(page.errors, []);
});
