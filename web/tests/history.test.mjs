// Long chats in a real browser against a real `spool serve` with the scripted agent: `/compact`
// shows as a divider across the conversation that opens to the summary, the command's prompt is
// not shown as the person's message, and the messages before it stay.

import assert from "node:assert/strict";
import { test } from "node:test";
import { screenshot, served, signedInPage } from "./harness.mjs";

const server = served();
/** The API, as the server's key. */
const call = (...args) => server.call(...args);

test("a compaction is a divider that opens to the summary, and the chat keeps its messages", async () => {
  const ws = await call("POST", "/v1/workspaces", { name: "Long" });
  const builtin = (await call("GET", `/v1/workspaces/${ws.id}/agents`)).agents.find((a) => a.builtin);
  const script = { rules: [], default: [{ say: "Noted." }] };
  await call("PATCH", `/v1/agents/${builtin.id}`, { instruction: JSON.stringify(script), runtime: "scripted" });
  const chat = await call("POST", "/v1/sessions", { workspace_id: ws.id, agent_id: builtin.id });
  const page = await signedInPage(server.browser, server.spool);
  await page.goto(`${server.spool.origin}/#/w/${ws.id}/chats/${chat.id}`);
  const log = page.getByRole("dialog");
  await page.getByRole("combobox", { name: "Message", exact: true }).fill("Plan the launch for Tuesday");
  await page.getByRole("button", { name: "Send" }).click();
  await log.getByText("Noted.").waitFor();
  const invoked = await call("POST", `/v1/sessions/${chat.id}/slash-commands/invoke`, { input: "/compact keep the date" });
  assert.ok(invoked.turn_id, JSON.stringify(invoked));
  const divider = log.getByRole("listitem", { name: "History compacted" });
  await divider.waitFor();
  await divider.getByText("History compacted on request").click();
  const summary = divider.locator(".compacted-summary");
  await summary.waitFor();
  assert.match(await summary.innerText(), /Person: Plan the launch for Tuesday/);
  // The messages before it stay; the command's prompt is not shown as the person's message.
  await log.getByText("Plan the launch for Tuesday", { exact: true }).waitFor();
  assert.equal(await log.getByText("Compact this chat's history.").count(), 0);
  await screenshot(page, "compacted");
  assert.deepEqual(page.errors, [], "the page logged errors");
});
