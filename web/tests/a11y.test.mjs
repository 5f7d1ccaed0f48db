// Accessibility in a real browser: axe-core (from npm) checks every view of the UI and finds no
// serious or critical violation; a skip link leads past the header; and the main flows (make a
// chat, send a message, open the settings) work from the keyboard alone.

import assert from "node:assert/strict";
import { readFile } from "node:fs/promises";
import { createRequire } from "node:module";
import { after, before, test } from "node:test";
import { api, eventually, screenshot, signedInPage, startBrowser, startSpool } from "./harness.mjs";

/** axe-core's script, run in the page as the test's own (the page's CSP is left as it is). */
const AXE = await readFile(createRequire(import.meta.url).resolve("axe-core/axe.min.js"), "utf8");

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

/** axe-core's serious and critical violations on the page as it is, each with where it is. */
async function violations(page) {
  if (!(await page.evaluate(() => "axe" in window))) await page.evaluate(AXE);
  const found = await page.evaluate(async () => {
    // @ts-ignore: axe is the script just added
    const result = await window.axe.run(document, { resultTypes: ["violations"] });
    return result.violations.map((v) => ({
      id: v.id,
      impact: v.impact,
      help: v.help,
      where: v.nodes.slice(0, 3).map((n) => `${n.target.join(" ")}: ${n.failureSummary.replace(/\s+/g, " ")}`),
    }));
  });
  return found.filter((v) => v.impact === "serious" || v.impact === "critical");
}

/** Asserts that axe-core finds nothing serious or critical on `view`. */
async function accessible(page, view) {
  const found = await violations(page);
  if (found.length) await screenshot(page, `a11y-${view.replace(/\W+/g, "-")}`);
  assert.deepEqual(found, [], `${view}: ${JSON.stringify(found, null, 2)}`);
}

/** The accessible name and role of what has the focus. */
const focused = (page) =>
  page.evaluate(() => {
    const e = document.activeElement;
    return e ? `${e.tagName.toLowerCase()}${e.id ? `#${e.id}` : ""}: ${(e.getAttribute("aria-label") ?? e.textContent ?? "").trim().slice(0, 40)}` : "";
  });

/** Presses Tab until what has the focus matches `target` (at most `most` times). */
async function tabTo(page, target, most = 40) {
  for (let i = 0; i < most; i++) {
    if (await page.evaluate((t) => document.activeElement?.matches(t) ?? false, target)) return;
    await page.keyboard.press("Tab");
  }
  throw new Error(`Tab never reached ${target} (the focus is on ${await focused(page)})`);
}

test("axe-core finds no serious or critical violation on any view, light or dark", async () => {
  const ws = await call("POST", "/v1/workspaces", { name: "Accessible" });
  const agent = (await call("GET", `/v1/workspaces/${ws.id}/agents`)).agents[0];
  await call("POST", "/v1/sessions", { workspace_id: ws.id, agent_id: agent.id, title: "An older chat" });
  await call("POST", `/v1/workspaces/${ws.id}/tasks`, { title: "Write the release notes", description: "For **1.0**" });
  for (const colorScheme of ["light", "dark"]) {
    const page = await signedInPage(browser, spool, undefined, { colorScheme });
    // A runner serving the workspace, for the settings' list of runners.
    await page.route(
      (url) => url.pathname === "/v1/runners",
      (route) =>
        route.fulfill({
          json: {
            runners: [
              {
                name: "build-box",
                clis: [{ cli: "claude", installed: true, version: "2.0.1", healthy: true }],
                workspaces: [],
                last_seen_ms: Date.now(),
                online: true,
              },
            ],
          },
        }),
    );
    const at = (view) => `${view} (${colorScheme})`;
    await page.goto(`${spool.origin}/#/w/${ws.id}/chats`);
    await page.locator(".chat-row").first().waitFor();
    await accessible(page, at("the chat list"));
    // The companion's panel in the header, open.
    await page.locator(".companion summary").click();
    await page.getByRole("button", { name: "Look again" }).waitFor();
    await accessible(page, at("the companion panel"));
    await page.locator(".companion summary").click();
    // An open chat with a message and the agent's answer.
    await page.locator("summary", { hasText: "New chat" }).click();
    await page.locator("details.menu").getByRole("button", { name: /Spool/ }).click();
    await page.getByRole("dialog").waitFor();
    await page.getByRole("combobox", { name: "Message", exact: true }).fill("Hello, **accessible** world");
    await page.getByRole("button", { name: "Send" }).click();
    await page.locator(".message.agent .bubble").getByText("demo agent").waitFor({ timeout: 20_000 });
    await page.getByRole("button", { name: "Send" }).waitFor({ timeout: 20_000 });
    await accessible(page, at("an open chat"));
    await page.getByRole("button", { name: "Close chat" }).click();
    await page.getByRole("dialog").waitFor({ state: "detached" });
    // Tasks, agents, commands.
    // By the workspace's tab, as a person goes there; the list says what it holds if it stays empty.
    await page.getByRole("navigation", { name: "Workspace" }).getByRole("link", { name: "Tasks" }).click();
    await page.locator(".tabs [aria-current='page']", { hasText: "Tasks" }).waitFor();
    await page
      .locator(".task")
      .first()
      .waitFor()
      .catch(async (e) => {
        throw new Error(`${e.message}\nthe page shows: ${(await page.locator("main").innerText()).slice(0, 500)}`);
      });
    await accessible(page, at("the tasks"));
    await page.goto(`${spool.origin}/#/w/${ws.id}/agents`);
    await page.locator(".agent-row").first().waitFor();
    await accessible(page, at("the agents"));
    await page.goto(`${spool.origin}/#/w/${ws.id}/commands`);
    await page.locator(".command-list, .commands .empty").first().waitFor();
    await accessible(page, at("the commands"));
    // The workspace's settings, with its runners listed.
    await page.goto(`${spool.origin}/#/w/${ws.id}/settings`);
    await page.getByRole("list", { name: "Runners of this workspace" }).waitFor();
    await accessible(page, at("the settings and runners"));
    // The MCP servers panel, with its form open.
    const mcp = page.getByRole("region", { name: "MCP servers" });
    await mcp.getByRole("button", { name: "Add MCP server" }).click();
    await mcp.getByRole("form", { name: "New MCP server" }).waitFor();
    await accessible(page, at("the MCP servers panel"));
    // The global chat.
    await page.goto(`${spool.origin}/#/global`);
    await page.getByRole("button", { name: "Send" }).waitFor();
    await accessible(page, at("the global chat"));
    assert.deepEqual(page.errors, []);
    await page.context().close();
  }
});

test("the skip link focuses the main content, and a chat is made, sent to and left, and the settings opened, by keyboard alone", async () => {
  const ws = await call("POST", "/v1/workspaces", { name: "Keyboard only" });
  const page = await signedInPage(browser, spool);
  await page.goto(`${spool.origin}/#/w/${ws.id}/chats`);
  await page.getByRole("heading", { name: "Chats" }).waitFor();
  // The first Tab reaches the skip link, shown on screen; Enter moves the focus to the content.
  await page.locator("body").focus();
  await page.keyboard.press("Tab");
  const skip = page.getByRole("link", { name: "Skip to content" });
  await eventually(async () => assert.equal(await focused(page), "a: Skip to content"));
  const box = await skip.boundingBox();
  assert.ok(box && box.y >= 0 && box.x >= 0, `the focused skip link is on screen (${JSON.stringify(box)})`);
  await page.keyboard.press("Enter");
  await eventually(async () => assert.equal(await page.evaluate(() => document.activeElement?.id), "content"));
  assert.match(page.url(), /#\/w\/ws_[^/]+\/chats$/, "the route stays where it was");
  // The next Tab is in the content: the workspace's tabs, then "New chat".
  await page.keyboard.press("Tab");
  await eventually(async () => assert.equal(await focused(page), "a: Chats"));
  await tabTo(page, "details.menu > summary");
  await page.keyboard.press("Enter");
  await page.keyboard.press("Tab");
  await eventually(async () => assert.match(await focused(page), /^button: Spool/));
  await page.keyboard.press("Enter");
  // The chat opens with the focus in the message box; Enter sends.
  await page.getByRole("dialog").waitFor();
  await page.waitForFunction(() => document.activeElement?.id === "composer-input");
  await page.keyboard.type("typed without a mouse");
  await page.keyboard.press("Enter");
  await page.locator(".message.user .bubble", { hasText: "typed without a mouse" }).waitFor();
  await page.locator(".message.agent .bubble").getByText("demo agent").waitFor({ timeout: 20_000 });
  // Escape leaves the chat; the focus is on its row in the list.
  await page.getByRole("button", { name: "Send" }).waitFor({ timeout: 20_000 });
  await page.keyboard.press("Escape");
  await page.getByRole("dialog").waitFor({ state: "detached" });
  await page.waitForFunction(() => document.activeElement?.classList.contains("chat-link"));
  // The settings: back to the top with the skip link, into the tabs, then to Settings.
  await page.locator("body").focus();
  await page.keyboard.press("Tab");
  await page.keyboard.press("Enter");
  await tabTo(page, ".tabs a[href$='/settings']");
  await page.keyboard.press("Enter");
  await page.waitForURL(/\/settings$/);
  await page.getByRole("heading", { name: /settings/i }).first().waitFor();
  await tabTo(page, "#content input, #content textarea");
  assert.match(await focused(page), /^(input|textarea)/);
  await screenshot(page, "keyboard-settings");
  assert.deepEqual(page.errors, []);
});
