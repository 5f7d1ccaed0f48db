// Runners in the web UI, in a real browser against a real `spool serve`: the CLI choice of a
// workspace whose CLI agents run on runners, the workspace's runners in its settings, and a
// chat whose turn waits for a runner. What the server says about runners (the workspace's
// `cli_host`, `GET /v1/clis`'s `runners`, `GET /v1/runners`, a turn's runner detail) is
// answered by the page's route interception; everything else is the real server's.

import assert from "node:assert/strict";
import { chmod, mkdtemp, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, before, test } from "node:test";
import { api, eventually, screenshot, signedInPage, startBrowser, startSpool } from "./harness.mjs";

let spool;
let browser;
let call;
/** The fake `claude` on the server's search path, and the file that lets it answer. */
let bin;
let gate;

before(async () => {
  bin = await mkdtemp(join(tmpdir(), "spool-web-bin-"));
  gate = join(bin, "answer-now");
  // A CLI to the seed's file protocol that answers once `gate` exists.
  await writeFile(
    join(bin, "claude"),
    `#!/bin/sh
if [ "$1" = "--version" ]; then echo "2.0.1 (fake)"; exit 0; fi
while [ ! -e "${gate}" ]; do sleep 0.1; done
echo '{"message": "Answered by the runner", "actions": []}' > "$SPOOL_OUTPUT_FILE"
`,
  );
  await chmod(join(bin, "claude"), 0o755);
  spool = await startSpool({ SPOOL_CLI_PATH: bin });
  browser = await startBrowser();
  call = await api(spool);
});

after(async () => {
  await browser?.close();
  await spool?.stop();
  await rm(bin, { recursive: true, force: true });
});

const MINUTE = 60_000;

/** A CLI as a runner reports it. */
const cli = (name, version, fields = {}) => ({ cli: name, installed: true, version, healthy: true, ...fields });
/** What a server without CLIs of its own says about each. */
const SERVER_CLIS = ["claude", "gemini", "codex", "opencode"].map((name) => ({
  cli: name,
  installed: false,
  healthy: false,
  reason: `the \`${name}\` CLI is not installed here`,
}));

/** The runners of the tests' organization: one online for every workspace, one offline, one for another workspace. */
function runners() {
  const now = Date.now();
  return [
    {
      name: "build-box",
      version: "0.9.0",
      clis: [cli("claude", "2.0.1"), cli("codex", "0.9", { healthy: false, reason: "codex exited with 1" })],
      workspaces: [],
      last_seen_ms: now - 2_000,
      online: true,
    },
    { name: "old-box", clis: [cli("gemini", "1.0.0")], workspaces: [], last_seen_ms: now - 5 * MINUTE, online: false },
    { name: "elsewhere", clis: [cli("opencode", "0.3")], workspaces: ["ws_other"], last_seen_ms: now, online: true },
  ];
}

/**
 * Makes the page see workspace `ws` with its CLI agents on `host.value` (a `PATCH` of
 * `cli_host` sets it; the rest of the change goes to the server), `GET /v1/clis` with
 * `list.value` as its runners, and `GET /v1/runners` with the same. Returns the `cli_host`
 * values the page sent.
 */
async function fakeRunners(page, ws, host, list) {
  const sent = [];
  await page.route(
    (url) => url.pathname === `/v1/workspaces/${ws.id}`,
    async (route) => {
      const request = route.request();
      let postData;
      if (request.method() === "PATCH") {
        const change = JSON.parse(request.postData() ?? "{}");
        if ("cli_host" in change) {
          sent.push(change.cli_host);
          host.value = change.cli_host ?? "server";
          delete change.cli_host;
        }
        postData = JSON.stringify(change);
      }
      const response = await route.fetch(postData === undefined ? {} : { postData });
      if (!response.ok()) return route.fulfill({ response });
      return route.fulfill({ response, json: { ...(await response.json()), cli_host: host.value } });
    },
  );
  await page.route("**/v1/clis", (route) => route.fulfill({ json: { clis: SERVER_CLIS, runners: list.value } }));
  await page.route(
    (url) => url.pathname === "/v1/runners",
    (route) => {
      const wsId = new URL(route.request().url()).searchParams.get("workspace_id");
      const serving = list.value.filter((r) => r.workspaces.length === 0 || r.workspaces.includes(wsId));
      return route.fulfill({ json: { runners: serving } });
    },
  );
  return sent;
}

/** A new workspace, and a signed-in page that sees its CLI agents run on runners. */
async function runnersWorkspace(name, { host = "runners", list = runners() } = {}) {
  const ws = await call("POST", "/v1/workspaces", { name });
  const page = await signedInPage(browser, spool);
  const state = { host: { value: host }, list: { value: list } };
  const sent = await fakeRunners(page, ws, state.host, state.list);
  return { page, ws, sent, ...state };
}

/** The options of a CLI choice: their labels and which can be picked. */
const optionsOf = (select) =>
  select.locator("option").evaluateAll((options) => options.map((o) => ({ value: o.value, label: o.textContent, disabled: o.disabled })));

/** Asserts that `select` offers what build-box runs and nothing else. */
async function offersBuildBoxOnly(select) {
  await eventually(async () => {
    const options = await optionsOf(select);
    const byValue = Object.fromEntries(options.map((o) => [o.value, o]));
    assert.deepEqual(byValue.claude, { value: "claude", label: "claude 2.0.1 — on build-box", disabled: false });
    assert.deepEqual(byValue.codex, { value: "codex", label: "codex — unavailable (build-box: codex exited with 1)", disabled: true });
    assert.deepEqual(byValue.gemini, { value: "gemini", label: "gemini — unavailable (old-box is offline)", disabled: true });
    assert.deepEqual(byValue.opencode, { value: "opencode", label: "opencode — unavailable (no online runner has it)", disabled: true });
  });
}

/** Trying to pick `value` in `select`, which must not take it. */
async function cannotPick(select, value) {
  const before = await select.inputValue();
  await assert.rejects(select.selectOption(value, { timeout: 1_000 }), `${value} cannot be picked`);
  assert.equal(await select.inputValue(), before);
}

test("a runners workspace's CLI choice offers what its online runners run, and an unavailable CLI cannot be picked", async () => {
  const { page, ws } = await runnersWorkspace("Runners' CLIs");
  // GIVEN the agent editor of a workspace whose CLI agents run on runners
  await page.goto(`${spool.origin}/#/w/${ws.id}/agents`);
  await page.getByRole("button", { name: "New agent" }).click();
  await page.getByRole("textbox", { name: "Name" }).fill("Coder");
  const choice = page.getByRole("combobox", { name: "CLI" });
  // THEN its CLIs are what build-box runs, the others disabled with why
  await offersBuildBoxOnly(choice);
  await cannotPick(choice, "codex");
  await cannotPick(choice, "gemini");
  // AND a runner is online: no note about starting one
  assert.equal(await page.getByRole("note").count(), 0);
  await choice.selectOption("claude");
  await screenshot(page, "runners-agent-cli");
  await page.getByRole("button", { name: "Save" }).click();
  await page.locator(".agent-row", { hasText: "Coder" }).waitFor();
  const agents = async () => (await call("GET", `/v1/workspaces/${ws.id}/agents`)).agents;
  await eventually(async () => assert.equal((await agents()).find((a) => a.name === "Coder")?.cli_type, "claude"));

  // WHEN a chat with it is opened, its CLI choice is the same
  await page.getByRole("link", { name: "Chats" }).click();
  await page.locator("summary", { hasText: "New chat" }).click();
  await page.locator("details.menu").getByRole("button", { name: "Coder" }).click();
  await page.waitForURL(/\/chats\/ses_/);
  const id = page.url().split("/chats/")[1];
  const chatChoice = page.getByRole("dialog").getByRole("combobox", { name: "CLI" });
  await offersBuildBoxOnly(chatChoice);
  await cannotPick(chatChoice, "opencode");
  assert.equal((await call("GET", `/v1/sessions/${id}`)).cli_type ?? null, null, "nothing was picked");
  assert.deepEqual(page.errors, [], "the page logged errors");
});

test("with no runner online, the CLI choice says how to start one", async () => {
  const offline = runners().map((r) => ({ ...r, online: false, last_seen_ms: Date.now() - 10 * MINUTE }));
  const { page, ws } = await runnersWorkspace("No runner", { list: offline });
  const agent = await call("POST", `/v1/workspaces/${ws.id}/agents`, { name: "Coder", instruction: "", runtime: "cli", cli_type: "claude" });
  const chat = await call("POST", "/v1/sessions", { workspace_id: ws.id, agent_id: agent.id });
  await page.goto(`${spool.origin}/#/w/${ws.id}/chats/${chat.id}`);
  const dialog = page.getByRole("dialog");
  const note = dialog.getByRole("note");
  await note.waitFor();
  const text = (await note.innerText()).replace(/\s+/g, " ");
  assert.ok(text.startsWith("No runner is online for this workspace: start one with"), text);
  assert.ok(text.includes(`SPOOL_API_KEY=<a runner key> spool runner --url ${spool.origin}`), text);
  assert.ok(text.includes("spool admin create-api-key ORG --capability runner"), text);
  // The choice is described by the note, and no CLI can be picked.
  const choice = dialog.getByRole("combobox", { name: "CLI" });
  assert.equal(await choice.getAttribute("aria-describedby"), await note.getAttribute("id"));
  const options = await optionsOf(choice);
  assert.deepEqual(
    options.filter((o) => !o.disabled).map((o) => o.value),
    [""],
    "only the agent's own CLI is left",
  );
  await screenshot(page, "runners-none-online");
  // WHEN a runner comes online (the chat is opened again), the note goes
  await runnersWorkspaceOnline(page);
  await page.reload();
  await dialog.getByRole("combobox", { name: "CLI" }).waitFor();
  await offersBuildBoxOnly(dialog.getByRole("combobox", { name: "CLI" }));
  assert.equal(await dialog.getByRole("note").count(), 0);
  assert.deepEqual(page.errors, [], "the page logged errors");
});

/** Makes the page's `GET /v1/clis` answer with build-box online again. */
async function runnersWorkspaceOnline(page) {
  await page.unroute("**/v1/clis");
  await page.route("**/v1/clis", (route) => route.fulfill({ json: { clis: SERVER_CLIS, runners: runners() } }));
}

test("settings choose where CLI agents run and list the workspace's runners, refreshed while open", async () => {
  const { page, ws, sent, list } = await runnersWorkspace("Runner settings", { host: "server" });
  await page.goto(`${spool.origin}/#/w/${ws.id}/settings`);
  const server = page.getByRole("radio", { name: "This server" });
  const onRunners = page.getByRole("radio", { name: "Runners" });
  await eventually(async () => assert.equal(await server.isChecked(), true));
  // The runners serving the workspace: build-box online, old-box last seen 5 minutes ago; not
  // the runner of another workspace.
  const shown = page.getByRole("list", { name: "Runners of this workspace" });
  const runner = (name) => shown.getByRole("listitem", { name: `Runner ${name}` });
  await runner("build-box").getByText("online", { exact: true }).waitFor();
  assert.equal(
    (await runner("build-box").getByRole("list", { name: "CLIs on build-box" }).innerText()).replace(/\s+/g, " ").trim(),
    "claude 2.0.1 codex 0.9 (codex exited with 1)",
  );
  await runner("old-box").getByText("last seen 5 minutes ago").waitFor();
  assert.equal(await runner("elsewhere").count(), 0);
  assert.equal(await shown.locator("li.runner").count(), 2);
  // WHEN the person picks runners and saves
  await onRunners.check();
  await page.getByRole("button", { name: "Save settings" }).click();
  await page.getByRole("status").filter({ hasText: "Settings saved." }).waitFor();
  assert.deepEqual(sent, ["runners"]);
  await eventually(async () => assert.equal(await onRunners.isChecked(), true));
  await page.getByText("Runners (spool runner, on the machines that hold the code) take the chats' CLI turns").waitFor();
  await screenshot(page, "runners-settings");
  // AND a runner starts: the open list shows it within its refresh
  list.value = [...runners(), { name: "new-box", clis: [cli("gemini", "1.1.0")], workspaces: [ws.id], last_seen_ms: Date.now(), online: true }];
  await runner("new-box").getByText("online", { exact: true }).waitFor({ timeout: 25_000 });
  assert.deepEqual(page.errors, [], "the page logged errors");
});

test("a chat whose turn waits for a runner says so, then which runner runs it, until the answer starts", async () => {
  const { page, ws } = await runnersWorkspace("Waiting");
  const agent = await call("POST", `/v1/workspaces/${ws.id}/agents`, { name: "Coder", instruction: "", runtime: "cli", cli_type: "claude" });
  const chat = await call("POST", "/v1/sessions", { workspace_id: ws.id, agent_id: agent.id });
  // The turn's record, as the server would keep it while runners have the turn.
  const record = { detail: "waiting for a runner" };
  await page.route(
    (url) => url.pathname.startsWith(`/v1/sessions/${chat.id}/turns/`),
    (route) => {
      const turn = new URL(route.request().url()).pathname.split("/").pop();
      const now = new Date().toISOString();
      return route.fulfill({
        json: { turn_id: turn, status: "in_progress", detail: record.detail, trigger_seq: 1, created_at: now, updated_at: now },
      });
    },
  );
  await page.goto(`${spool.origin}/#/w/${ws.id}/chats/${chat.id}`);
  await page.getByRole("combobox", { name: "Message", exact: true }).fill("fix the build");
  await page.getByRole("button", { name: "Send" }).click();
  // THEN (the turn started; its CLI has not answered) the chat says it waits for a runner
  const notice = page.getByRole("status").filter({ hasText: /Waiting for a runner|Running on/ });
  await notice.getByText("Waiting for a runner…").waitFor();
  await screenshot(page, "runners-waiting");
  // WHEN a runner takes it, the chat says which
  record.detail = "running on runner build-box";
  await notice.getByText("Running on build-box").waitFor();
  // WHEN the answer comes, the notice goes
  await writeFile(gate, "");
  await page.locator(".message.agent", { hasText: "Answered by the runner" }).waitFor({ timeout: 20_000 });
  await eventually(async () => assert.equal(await notice.count(), 0));
  assert.deepEqual(page.errors, [], "the page logged errors");
});

/** A handshake with `apiKey`; its answer. */
async function handshake(apiKey) {
  const r = await fetch(`${spool.origin}/v1/handshake`, {
    method: "POST",
    headers: { "content-type": "application/json" },
    body: JSON.stringify({ version: "1", user_agent: "web-tests", api_key: apiKey }),
  });
  if (!r.ok) throw new Error(`handshake: ${r.status} ${await r.text()}`);
  return r.json();
}

test("a runner that claims is listed in settings and offers its CLIs (a real server with runners, nothing faked)", async (t) => {
  const { org_id } = await handshake(spool.apiKey);
  let runnerKey;
  try {
    runnerKey = (await spool.admin("create-api-key", org_id, "--capability", "runner")).api_key;
  } catch (e) {
    return t.skip(`this server makes no runner keys: ${e.message}`);
  }
  const { jwt } = await handshake(runnerKey);
  const ws = await call("POST", "/v1/workspaces", { name: "Real runners" });
  // GIVEN a runner for the workspace that asked for work (and got none)
  const claim = await fetch(`${spool.origin}/v1/runner/claim`, {
    method: "POST",
    headers: { authorization: `Bearer ${jwt}`, "content-type": "application/json" },
    body: JSON.stringify({ name: "build-box", version: "0.9.0", clis: [cli("claude", "2.0.1")], workspaces: [ws.id], wait_ms: 0 }),
  });
  if (claim.status === 404) return t.skip("this server has no runner routes");
  assert.equal(claim.status, 204, await claim.text());
  await call("PATCH", `/v1/workspaces/${ws.id}`, { cli_host: "runners" });
  const page = await signedInPage(browser, spool);
  // THEN the settings list it, online, with its CLI
  await page.goto(`${spool.origin}/#/w/${ws.id}/settings`);
  await eventually(async () => assert.equal(await page.getByRole("radio", { name: "Runners" }).isChecked(), true));
  const runner = page.getByRole("listitem", { name: "Runner build-box" });
  await runner.getByText("online", { exact: true }).waitFor();
  await runner.getByText("claude 2.0.1").waitFor();
  // AND the agent editor offers its CLI, and only that one
  await page.getByRole("link", { name: "Agents" }).click();
  await page.getByRole("button", { name: "New agent" }).click();
  const choice = page.getByRole("combobox", { name: "CLI" });
  await eventually(async () => {
    const options = await optionsOf(choice);
    assert.deepEqual(
      options.filter((o) => o.value && !o.disabled).map((o) => o.label),
      ["claude 2.0.1 — on build-box"],
    );
  });
  await cannotPick(choice, "gemini");
  assert.deepEqual(page.errors, [], "the page logged errors");
});
