// "Fork from here", in a real browser against a real `spool serve` with the demo agent: the
// button on an agent's answer makes a new chat whose history is the chat's up to that answer,
// opens it, and what the source said after that answer is not in it.

import assert from "node:assert/strict";
import { test } from "node:test";
import { eventually, screenshot, served, signedInPage } from "./harness.mjs";

const server = served();
/** The API, as the server's key. */
const call = (...args) => server.call(...args);

/** All of a chat's events (a small chat: one page). */
const events = async (chat) => (await call("GET", `/v1/sessions/${chat}/events?after=0&limit=1000`)).events;

/** Sends `text` and waits for its turn's end; the events then. */
async function answered(chat, text) {
  const { turn_id } = await call("POST", `/v1/sessions/${chat}/messages`, { content: text });
  return eventually(async () => {
    const all = await events(chat);
    assert.ok(all.some((e) => e.turn_id === turn_id && e.type === "agent_end"), `no agent_end of ${turn_id} yet`);
    return all;
  });
}

test("Fork from here on an answer opens a new chat with the history up to it, and nothing after", async () => {
  // GIVEN a chat of two answered turns
  const ws = await call("POST", "/v1/workspaces", { name: "Forks" });
  const chat = (await call("POST", "/v1/sessions", { workspace_id: ws.id, title: "Launch" })).id;
  const first = await answered(chat, "Please rename this chat to Launch planning");
  await answered(chat, "Please rename this chat to Second step");
  const page = await signedInPage(server.browser, server.spool);
  await page.goto(`${server.spool.origin}/#/w/${ws.id}/chats/${chat}`);
  const dialog = page.getByRole("dialog");
  const firstAnswer = dialog.getByRole("listitem", { name: /says$/ }).filter({ hasText: "now called Launch planning" });
  await firstAnswer.waitFor();
  await dialog.getByText("This chat is now called Second step.").waitFor();
  // WHEN the person forks from the first answer
  await firstAnswer.getByRole("button", { name: "Fork from here" }).click();
  // THEN the fork opens: a new chat, titled after the source, with the first answer and not the second
  await page.waitForURL((url) => /\/chats\/ses_/.test(url.hash) && !url.hash.endsWith(chat));
  const fork = page.url().split("/chats/")[1];
  assert.notEqual(fork, chat);
  const forkDialog = page.getByRole("dialog", { name: "Second step (fork)" });
  await forkDialog.getByRole("heading", { name: /Second step \(fork\)/ }).waitFor();
  await forkDialog.getByText("This chat is now called Launch planning.").waitFor();
  await forkDialog.getByText(/This chat is a fork of “Second step” after its event/).waitFor();
  assert.equal(await forkDialog.getByText("This chat is now called Second step.").count(), 0);
  await screenshot(page, "fork-opened");
  // AND its history is the source's up to the first turn's end, event for event
  const end = first.findLast((e) => e.type === "agent_end");
  const inherited = (await events(fork)).filter((e) => e.seq <= end.seq);
  assert.deepEqual(inherited, first.filter((e) => e.seq <= end.seq));
  // AND the fork is listed in the workspace
  await eventually(async () => {
    const listed = await call("GET", `/v1/sessions?workspace_id=${ws.id}`);
    assert.ok(listed.sessions.some((s) => s.id === fork), "the fork is not listed yet");
  });
  assert.deepEqual(page.errors, [], "the page logged errors");
});
