// The layout from a phone to a wide screen, in a real browser: on a 390 px and a 360 px phone
// (Chromium's mobile emulation, where a page wider than the screen zooms out and pushes fixed
// things off it) no view is wider than the screen, the tabs scroll sideways, and the chat window
// fills the screen with its Send and Close buttons whole.

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

/** Asserts (until it holds) that the page is no wider than the screen. */
const fits = (page, width, view) =>
  eventually(async () => {
    const wide = await page.evaluate(() => document.documentElement.scrollWidth);
    assert.ok(wide <= width, `${view} is ${wide} px wide on a ${width} px screen`);
  });

/** Asserts (until it holds) that `locator` is wholly on the screen. */
const onScreen = (page, locator, what) =>
  eventually(async () => {
    const box = await locator.boundingBox();
    const { width, height } = page.viewportSize();
    assert.ok(box, `${what} is not shown`);
    assert.ok(
      box.x >= 0 && box.y >= 0 && box.x + box.width <= width && box.y + box.height <= height,
      `${what} is at ${JSON.stringify(box)}, off a ${width}×${height} screen`,
    );
  });

for (const width of [390, 360]) {
  test(`on a ${width} px phone every view fits the screen and the chat window's Send and Close are whole`, async () => {
    const ws = await call("POST", "/v1/workspaces", { name: "A workspace with a rather long title for a phone" });
    const agent = (await call("GET", `/v1/workspaces/${ws.id}/agents`)).agents[0];
    await call("POST", "/v1/sessions", { workspace_id: ws.id, agent_id: agent.id, title: "A chat whose title is long enough to be cut short on a phone" });
    await call("POST", `/v1/workspaces/${ws.id}/tasks`, { title: "A task", description: "https://example.com/a/long/address/that/does/not/break/anywhere/at/all" });
    const page = await signedInPage(browser, spool, { width, height: 780 }, { isMobile: true, hasTouch: true });
    // Each tab, once what it lists has loaded.
    for (const [tab, loaded] of [
      ["chats", ".chat-row"],
      ["agents", ".agent-row"],
      ["tasks", ".task"],
      ["commands", "h2"],
      ["settings", ".runners"],
    ]) {
      await page.goto(`${spool.origin}/#/w/${ws.id}/${tab}`);
      await page.locator(loaded).first().waitFor();
      await fits(page, width, `the ${tab} tab`);
      // The tab strip scrolls: its last tab can be brought on screen, the page stays put.
      const last = page.getByRole("navigation", { name: "Workspace" }).getByRole("link", { name: "Settings" });
      await last.scrollIntoViewIfNeeded();
      await onScreen(page, last, "the Settings tab");
      await fits(page, width, `the ${tab} tab with its tabs scrolled`);
    }
    await screenshot(page, `phone-${width}-settings`);
    // The companion's form opens within the screen.
    await page.locator(".companion summary").click();
    await onScreen(page, page.getByRole("button", { name: "Look again" }), "the companion's Look again");
    await fits(page, width, "the companion's form");
    await page.locator(".companion summary").click();
    // A chat with a message and an answer fills the screen; Send and Close are whole.
    await page.goto(`${spool.origin}/#/w/${ws.id}/chats`);
    await page.locator("summary", { hasText: "New chat" }).click();
    await page.locator("details.menu").getByRole("button", { name: /Spool/ }).click();
    const dialog = page.getByRole("dialog");
    await dialog.waitFor();
    await page.getByRole("combobox", { name: "Message", exact: true }).fill(`hello from a ${width} px phone, see https://example.com/a/long/address/that/does/not/break`);
    await page.getByRole("button", { name: "Send" }).click();
    await page.locator(".message.agent .bubble").getByText("demo agent").waitFor({ timeout: 20_000 });
    await page.getByRole("button", { name: "Send" }).waitFor({ timeout: 20_000 });
    await eventually(async () => {
      const box = await dialog.boundingBox();
      assert.ok(box.x === 0 && box.y === 0 && box.width === width && box.height === 780, `the window fills the screen (${JSON.stringify(box)})`);
    });
    await fits(page, width, "the open chat");
    await onScreen(page, page.getByRole("button", { name: "Send" }), "Send");
    await onScreen(page, page.getByRole("button", { name: "Close chat" }), "Close");
    await screenshot(page, `phone-${width}-chat`);
    // The global chat fits too.
    await page.getByRole("button", { name: "Close chat" }).click();
    await page.getByRole("link", { name: "Global chat" }).click();
    await page.getByRole("button", { name: "Send" }).waitFor();
    await fits(page, width, "the global chat");
    await onScreen(page, page.getByRole("button", { name: "Send" }), "the global chat's Send");
    assert.deepEqual(page.errors, []);
  });
}
