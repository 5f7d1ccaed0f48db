// Edit and regenerate in a real browser against a real `spool serve` with the demo agent (it
// answers "You wrote: *…*"): Regenerate answers the last message again and `‹ 2/2 ›` on the
// answer moves between the answers; Edit on the person's message sends new text and `‹ 2/2 ›`
// on the message moves between the versions; a reload shows the version chosen; the chat keeps
// every event.

import assert from "node:assert/strict";
import { test } from "node:test";
import { eventually, screenshot, served, signedInPage } from "./harness.mjs";

const server = served();
/** The API, as the server's key. */
const call = (...args) => server.call(...args);

test("Regenerate and Edit make versions, ‹ › moves between them, and a reload keeps the one chosen", async () => {
  const ws = await call("POST", "/v1/workspaces", { name: "Versions" });
  const chat = (await call("POST", "/v1/sessions", { workspace_id: ws.id, title: "Greetings" })).id;
  const page = await signedInPage(server.browser, server.spool);
  await page.goto(`${server.spool.origin}/#/w/${ws.id}/chats/${chat}`);
  const dialog = page.getByRole("dialog");
  await page.getByRole("combobox", { name: "Message", exact: true }).fill("hello there");
  await page.getByRole("button", { name: "Send" }).click();
  const answers = dialog.getByRole("listitem", { name: /says$/ });
  await answers.filter({ hasText: "hello there" }).first().waitFor();
  const firstTurn = await eventually(async () => {
    const end = (await call("GET", `/v1/sessions/${chat}/events?after=0&limit=1000`)).events.find((e) => e.type === "agent_end");
    assert.ok(end, "the answer's turn has not ended yet");
    return end.turn_id;
  });

  // Regenerate: a second answer, and the switch on it
  await dialog.getByRole("button", { name: "Regenerate" }).click();
  const switcher = dialog.getByRole("navigation", { name: "Versions" });
  await switcher.getByText("2/2").waitFor();
  await dialog.getByRole("button", { name: "Regenerate" }).waitFor();
  assert.equal(await answers.count(), 1, "one answer shows");
  await switcher.getByRole("button", { name: "Previous version" }).click();
  await switcher.getByText("1/2").waitFor();
  assert.ok(await switcher.getByRole("button", { name: "Previous version" }).isDisabled());

  // Edit: new text, its answer, and the switch on the message
  const message = dialog.locator(".message.user").filter({ hasText: "hello there" });
  await message.getByRole("button", { name: "Edit" }).click();
  const editor = dialog.getByRole("textbox", { name: "Edit message" });
  assert.equal(await editor.inputValue(), "hello there");
  await editor.fill("good evening");
  await dialog.locator(".edit-message").getByRole("button", { name: "Send" }).click();
  await answers.filter({ hasText: "good evening" }).first().waitFor();
  await dialog.getByRole("button", { name: "Regenerate" }).waitFor();
  await eventually(async () => assert.equal(await dialog.getByText("hello there", { exact: true }).count(), 0));
  const edited = dialog.locator(".message.user").filter({ hasText: "good evening" });
  // The message's three versions (the first, its regenerate, the edit) switch on the message now
  await edited.getByRole("navigation", { name: "Versions" }).getByText("3/3").waitFor();
  await screenshot(page, "versions");

  // Back one version: the regenerate, with its answer
  await edited.getByRole("button", { name: "Previous version" }).click();
  const back = dialog.locator(".message.user").filter({ hasText: "hello there" });
  await back.getByRole("navigation", { name: "Versions" }).getByText("2/3").waitFor();

  // A reload shows the version chosen
  await page.reload();
  await dialog.locator(".message.user").filter({ hasText: "hello there" }).getByText("2/3").waitFor();
  assert.equal(await dialog.getByText("good evening").count(), 0);

  // The chat keeps every event; the API shows the active branch by default
  const all = (await call("GET", `/v1/sessions/${chat}/events?after=0&limit=1000&branch=all`)).events;
  const turns = all.filter((e) => e.type === "agent_end").map((e) => e.turn_id);
  assert.equal(turns.length, 3);
  assert.equal(turns[0], firstTurn);
  const active = (await call("GET", `/v1/sessions/${chat}/events?after=0&limit=1000`)).events;
  assert.deepEqual(
    active.filter((e) => e.type === "agent_end").map((e) => e.turn_id),
    [turns[1]],
  );
  assert.deepEqual(page.errors, [], "the page logged errors");
});
