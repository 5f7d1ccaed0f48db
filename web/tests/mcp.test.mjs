// MCP servers in the web UI, in a real browser against a real `spool serve`: a workspace's MCP
// servers in its settings (added, edited with write-only secrets, tested against the real
// reference server over Streamable HTTP, each tool's policy, disabled, deleted; by keyboard,
// with labels and focus), all through the server's real MCP routes, and MCP tool calls in a
// chat's timeline (server and tool, short arguments and results, raw JSON one click away, an
// approval). No route can append an MCP tool call to a chat, so the timeline test answers the
// chat's stream from a list of events shaped as the engine writes them (the reference server's
// real results); and the refusals of a registry that is down or absent are answered by the
// page's route interception. Everything else is the real server's.

import assert from "node:assert/strict";
import { spawn } from "node:child_process";
import { createServer } from "node:net";
import { dirname, join, resolve } from "node:path";
import { after, before, test } from "node:test";
import { fileURLToPath } from "node:url";
import { api, eventually, screenshot, signedInPage, startBrowser, startSpool } from "./harness.mjs";

/** The MCP reference server (tests/mcp's npm packages). */
const EVERYTHING = join(
  resolve(dirname(fileURLToPath(import.meta.url)), "../.."),
  "tests/mcp/node_modules/@modelcontextprotocol/server-everything/dist/index.js",
);

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

const SECRET = "Bearer s3cr3t-first";
const NEW_SECRET = "Bearer s3cr3t-second";

/** The accessible names of the form fields under `scope` that have none (should be none). */
const unlabelled = (scope) =>
  scope.evaluate((root) =>
    [...root.querySelectorAll("input, select, textarea")]
      .filter((el) => el.labels.length === 0 && !el.getAttribute("aria-label") && !el.getAttribute("aria-labelledby"))
      .map((el) => el.outerHTML),
  );

/** The focused element's accessible description: its tag, and its label's text. */
const focused = (page) =>
  page.evaluate(() => {
    const el = document.activeElement;
    const label = el?.labels?.[0]?.textContent ?? el?.textContent ?? "";
    return `${el?.tagName.toLowerCase()}: ${label.replace(/\s+/g, " ").trim()}`;
  });

/** A workspace's servers as the API shows them. */
async function storedServers(ws) {
  return (await call("GET", `/v1/workspaces/${ws}/mcp-servers`)).mcp_servers;
}
const names = (set) => (Array.isArray(set) ? set : Object.keys(set ?? {}));

/** The reference server over Streamable HTTP on a free loopback port; its URL and a `stop()`. */
async function startEverything() {
  const port = await new Promise((ok) => {
    const probe = createServer().listen(0, "127.0.0.1", () => {
      const { port } = probe.address();
      probe.close(() => ok(port));
    });
  });
  const child = spawn("node", [EVERYTHING, "streamableHttp"], { env: { ...process.env, PORT: String(port) }, stdio: "ignore" });
  const url = `http://127.0.0.1:${port}/mcp`;
  await eventually(async () => assert.ok((await fetch(url, { method: "GET" }).catch(() => null)) !== null, "not listening yet"), {
    timeout: 20_000,
  });
  return { url, stop: () => child.kill("SIGTERM") };
}

test("a workspace's MCP servers are added, tested, given tool policies, edited, disabled and deleted", async () => {
  const ws = await call("POST", "/v1/workspaces", { name: "MCP settings" });
  const page = await signedInPage(browser, spool);
  const everything = await startEverything();
  /** Every request the page made to the MCP routes, with its body. */
  const sent = [];
  page.on("request", (r) => {
    const path = new URL(r.url()).pathname;
    if (path.startsWith("/v1/mcp-servers/") || path.endsWith("/mcp-servers"))
      sent.push({ method: r.method(), path, body: r.postData() ? JSON.parse(r.postData()) : undefined });
  });
  const patches = () => sent.filter((r) => r.method === "PATCH").map((r) => r.body);
  const stored = async () => storedServers(ws.id);
  try {
    await page.goto(`${spool.origin}/#/w/${ws.id}/settings`);
    const section = page.getByRole("region", { name: "MCP servers" });
    await section.getByText("No MCP servers yet.").waitFor();

    // GIVEN the form opened from the keyboard: its first field has the focus
    const add = section.getByRole("button", { name: "Add MCP server" });
    await add.focus();
    await page.keyboard.press("Enter");
    const form = section.getByRole("form", { name: "New MCP server" });
    await form.waitFor();
    await eventually(async () => assert.match(await focused(page), /^input: Name/));
    assert.deepEqual(await unlabelled(section), [], "every field has a label");
    // AND Cancel closes it and gives the focus back to what opened it
    await form.getByRole("button", { name: "Cancel" }).click();
    await eventually(async () => assert.equal(await focused(page), "button: Add MCP server"));

    // WHEN a server is filled in by keyboard alone, with a header, and refused for its URL
    await page.keyboard.press("Enter");
    await eventually(async () => assert.match(await focused(page), /^input: Name/));
    await page.keyboard.type("everything");
    await page.keyboard.press("Tab"); // the transport (HTTP, checked)
    await page.keyboard.press("Tab");
    assert.match(await focused(page), /^input: URL/);
    await page.keyboard.type("https://10.0.0.7/mcp");
    await page.keyboard.press("Tab");
    assert.equal(await focused(page), "button: Add header");
    await page.keyboard.press("Enter");
    await eventually(async () => assert.match(await focused(page), /^input: Header name/));
    await page.keyboard.type("Authorization");
    await page.keyboard.press("Tab");
    await page.keyboard.type(SECRET);
    assert.deepEqual(await unlabelled(section), [], "every field has a label, the new header's too");
    await form.getByRole("button", { name: "Add server" }).focus();
    await page.keyboard.press("Enter");
    // THEN the refusal shows by the URL, which has the focus
    const url = form.getByRole("textbox", { name: "URL" });
    const refusal = form.locator(".field-error");
    await refusal.waitFor();
    assert.match(await refusal.innerText(), /url/i);
    assert.equal(await url.getAttribute("aria-invalid"), "true");
    assert.equal(await url.getAttribute("aria-describedby"), await refusal.getAttribute("id"));
    await eventually(async () => assert.match(await focused(page), /^input: URL/));
    await screenshot(page, "mcp-refused");

    // WHEN the URL is fixed and the server added
    await url.fill(everything.url);
    await form.getByRole("button", { name: "Add server" }).click();
    const row = section.getByRole("listitem", { name: "MCP server everything" });
    await row.waitFor();
    await eventually(async () => assert.equal(await focused(page), "button: Add MCP server"));
    // THEN the header's value went to the API once, and the page shows only that it is set
    assert.deepEqual(sent.filter((r) => r.method === "POST" && !r.path.endsWith("/test")).at(-1).body, {
      name: "everything",
      transport: "http",
      enabled: true,
      url: everything.url,
      headers: { Authorization: SECRET },
    });
    await row.getByText(everything.url).waitFor();
    await row.getByText("Authorization").waitFor();
    assert.ok(!(await page.content()).includes("s3cr3t"), "no secret is in the page once saved");

    // WHEN its connection is tested
    await row.getByRole("button", { name: "Test connection" }).click();
    const tools = row.getByRole("group", { name: "Tools of everything" });
    await tools.getByText(/Connected: \d+ tools found\./).waitFor({ timeout: 30_000 });
    // THEN each tool shows its default policy: read-only ones run, others ask
    const echo = tools.getByRole("combobox", { name: "Policy for echo" });
    const sum = tools.getByRole("combobox", { name: "Policy for get-sum" });
    const toggle = tools.getByRole("combobox", { name: "Policy for toggle-simulated-logging" });
    assert.equal(await echo.locator("option:checked").innerText(), "default (allow, read-only)");
    assert.equal(await toggle.locator("option:checked").innerText(), "default (ask)");
    await tools.getByText("Echoes back the input string").waitFor();
    await screenshot(page, "mcp-tools");
    // AND a policy set is sent as that one tool's, and the default again as null (the API merges
    // `tools` entry by entry), so the server keeps exactly the others
    await echo.selectOption("deny");
    await eventually(() => assert.deepEqual(patches().at(-1), { tools: { echo: "deny" } }));
    await sum.selectOption("ask");
    await eventually(() => assert.deepEqual(patches().at(-1), { tools: { "get-sum": "ask" } }));
    await eventually(async () => assert.deepEqual((await stored())[0].tools, { echo: "deny", "get-sum": "ask" }));
    await echo.selectOption("");
    await eventually(() => assert.deepEqual(patches().at(-1), { tools: { echo: null } }));
    await eventually(async () => assert.deepEqual((await stored())[0].tools, { "get-sum": "ask" }));
    await row.getByText("Tool policies set: get-sum ask").waitFor();

    // WHEN it is edited: the header's value replaced (the old one is never shown), a new one added
    await row.getByRole("button", { name: "Edit" }).click();
    const edit = section.getByRole("form", { name: "Edit everything" });
    await eventually(async () => assert.match(await focused(page), /^input: Name/));
    await edit.getByText("set", { exact: true }).waitFor();
    assert.equal(await edit.locator("input[type=password]").count(), 0, "a set value has no field until it is replaced");
    await edit.getByRole("button", { name: "Replace Authorization" }).click();
    await eventually(async () => assert.match(await focused(page), /^input: New value of Authorization/));
    await page.keyboard.type(NEW_SECRET);
    await edit.getByRole("button", { name: "Add header" }).click();
    await edit.getByRole("textbox", { name: "Header name" }).fill("X-Team");
    await edit.getByLabel("Value", { exact: true }).fill("blue");
    await edit.getByRole("button", { name: "Save server" }).click();
    await row.getByText("X-Team").waitFor();
    await eventually(async () => assert.equal(await focused(page), "button: Edit"));
    assert.equal(await page.evaluate(() => document.activeElement?.getAttribute("aria-label")), "Edit everything");
    assert.deepEqual(patches().at(-1), { headers: { Authorization: NEW_SECRET, "X-Team": "blue" } });
    // AND removing a header sends it as null
    await row.getByRole("button", { name: "Edit" }).click();
    await edit.getByRole("button", { name: "Remove X-Team" }).click();
    await edit.getByText("removed on save").waitFor();
    await edit.getByRole("button", { name: "Save server" }).click();
    await eventually(async () => assert.deepEqual(names((await stored())[0].headers), ["Authorization"]));
    assert.deepEqual(patches().at(-1), { headers: { "X-Team": null } });
    assert.ok(!(await page.content()).includes("s3cr3t"), "no secret is in the page once saved");
    assert.ok(!JSON.stringify(await stored()).includes("s3cr3t"), "no secret is in the API's answers");

    // AND saving it unchanged sends nothing
    const patched = patches().length;
    await row.getByRole("button", { name: "Edit" }).click();
    await edit.getByRole("button", { name: "Save server" }).click();
    await row.getByRole("button", { name: "Edit" }).waitFor();
    assert.equal(patches().length, patched, "an unchanged server is not sent");

    // WHEN it is disabled
    await row.getByRole("checkbox", { name: "Enabled" }).uncheck();
    await row.getByText("disabled", { exact: true }).waitFor();
    await eventually(async () => assert.equal((await stored())[0].enabled, false));

    // WHEN a stdio server is added with an environment variable
    await add.click();
    const stdio = section.getByRole("form", { name: "New MCP server" });
    await stdio.getByRole("textbox", { name: "Name" }).fill("local");
    await stdio.getByRole("radio", { name: /stdio/ }).check();
    await stdio.getByRole("textbox", { name: "Command" }).fill("node");
    await stdio.getByRole("textbox", { name: "Arguments (one a line)" }).fill("server.js\nstdio");
    await stdio.getByRole("button", { name: "Add environment variable" }).click();
    await stdio.getByRole("textbox", { name: "Variable name" }).fill("API_TOKEN");
    await stdio.getByLabel("Value", { exact: true }).fill("tok-123");
    assert.deepEqual(await unlabelled(section), [], "every field of the stdio form has a label");
    await stdio.getByRole("button", { name: "Add server" }).click();
    const local = section.getByRole("listitem", { name: "MCP server local" });
    await local.getByText("node server.js stdio").waitFor();
    await local.getByText("API_TOKEN").waitFor();
    assert.deepEqual(sent.filter((r) => r.method === "POST" && !r.path.endsWith("/test")).at(-1).body, {
      name: "local",
      transport: "stdio",
      enabled: true,
      command: "node",
      args: ["server.js", "stdio"],
      env: { API_TOKEN: "tok-123" },
    });
    const [, second] = await stored();
    assert.deepEqual([names(second.env), second.args, second.runs_on], [["API_TOKEN"], ["server.js", "stdio"], "worker"]);
    await screenshot(page, "mcp-servers");

    // WHEN one is deleted
    page.once("dialog", (d) => d.accept());
    await row.getByRole("button", { name: "Delete everything" }).click();
    await row.waitFor({ state: "detached" });
    await eventually(async () => assert.deepEqual((await stored()).map((s) => s.name), ["local"]));
    await eventually(async () => assert.equal(await focused(page), "button: Add MCP server"));
    // The refused create is the one error the browser logs (its 400).
    assert.deepEqual(
      page.errors.filter((e) => !/status of 400/.test(e)),
      [],
      "the page logged errors",
    );
  } finally {
    everything.stop();
  }
});

test("the settings say so when the MCP servers cannot be listed", async () => {
  const ws = await call("POST", "/v1/workspaces", { name: "MCP refused" });
  const page = await signedInPage(browser, spool);
  await page.route(
    (url) => url.pathname === `/v1/workspaces/${ws.id}/mcp-servers`,
    (route) => route.fulfill({ status: 503, json: { error: { code: "unavailable", message: "the registry is down" } } }),
  );
  await page.goto(`${spool.origin}/#/w/${ws.id}/settings`);
  await page.getByRole("alert").filter({ hasText: "The MCP servers cannot be listed: the registry is down" }).waitFor();
  // The rest of the settings still work.
  await page.getByRole("button", { name: "Save settings" }).waitFor();
  // AND a server older than MCP servers (no such route) is said plainly, with nothing to add
  // (the route registered last answers first)
  await page.route(
    (url) => url.pathname === `/v1/workspaces/${ws.id}/mcp-servers`,
    (route) => route.fulfill({ status: 404, json: { error: { code: "no_route", message: "there is no route at …" } } }),
  );
  await page.reload();
  const section = page.getByRole("region", { name: "MCP servers" });
  await section.getByText("This Spool server does not offer MCP servers.").waitFor();
  assert.equal(await section.getByRole("button", { name: "Add MCP server" }).count(), 0);
});

/**
 * Answers chat `session`'s stream on `page` from `events` (a list the test appends to), as the
 * stream route does: a catch-up read gets what follows its offset, a long-poll waits for more.
 */
async function fakeStream(page, session, events) {
  await page.route(
    (url) => url.pathname === `/v1/stream/sessions/${session}`,
    async (route) => {
      const query = new URL(route.request().url()).searchParams;
      const after = Number((query.get("offset") ?? "0").split("_").at(-1));
      const fresh = () => events.filter((e) => e.seq > after);
      if (query.get("live")) {
        const deadline = Date.now() + 20_000;
        while (fresh().length === 0 && Date.now() < deadline && !page.isClosed()) await new Promise((r) => setTimeout(r, 100));
      }
      const found = fresh();
      const last = found.at(-1)?.seq ?? after;
      const headers = {
        "stream-up-to-date": "true",
        "stream-next-offset": `0000000000000000_${String(last).padStart(16, "0")}`,
        "stream-cursor": String(last),
      };
      if (found.length === 0) return route.fulfill({ status: 204, headers }).catch(() => {});
      return route.fulfill({ status: 200, headers, json: found }).catch(() => {});
    },
  );
}

test("an MCP tool call shows its server and tool, short arguments and result, and is approved inline", async () => {
  const ws = await call("POST", "/v1/workspaces", { name: "MCP timeline" });
  const chat = await call("POST", "/v1/sessions", { workspace_id: ws.id, title: "Echo" });
  const page = await signedInPage(browser, spool);
  // The events a model agent's turn writes when it calls the `everything` server's tools.
  let seq = 0;
  const ts = new Date().toISOString();
  const event = (type, payload) => ({ v: 1, seq: ++seq, ts, session_id: chat.id, kind: "agent", type, payload });
  const mcp = (tool) => ({ tool: `everything__${tool}`, server: "everything" });
  const events = [
    { ...event("user_message_submitted", { content: "Echo hi, add 2 and 3, then look at the logs" }), kind: "user" },
    event("agent_start", { agent_name: "Spool" }),
    event("message_start", { message_id: "msg_1" }),
    event("message_end", {
      message_id: "msg_1",
      text: "Let me use the everything server.",
      tool_calls: ["call_echo", "call_logs", "call_image", "call_weather", "call_sum"].map((id) => ({ id })),
    }),
    event("tool_start", { tool_call_id: "call_echo", ...mcp("echo"), arguments: { message: "hi" } }),
    event("tool_end", { tool_call_id: "call_echo", ...mcp("echo"), result: { content: [{ type: "text", text: "Echo: hi" }] } }),
    event("tool_start", { tool_call_id: "call_logs", ...mcp("get-logs"), arguments: {} }),
    event("tool_end", { tool_call_id: "call_logs", ...mcp("get-logs"), error: "the MCP server everything did not answer in 30 s" }),
    event("tool_start", { tool_call_id: "call_image", ...mcp("get-tiny-image"), arguments: {} }),
    event("tool_end", {
      tool_call_id: "call_image",
      ...mcp("get-tiny-image"),
      result: {
        content: [
          { type: "text", text: "Here's the image you requested:" },
          { type: "image", data: "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8BQDwAEhQGAhKmMIQAAAABJRU5ErkJggg==", mimeType: "image/png" },
          { type: "text", text: "The image above is the MCP logo." },
        ],
      },
    }),
    event("tool_start", { tool_call_id: "call_weather", ...mcp("get-structured-content"), arguments: { location: "Los Angeles" } }),
    event("tool_end", {
      tool_call_id: "call_weather",
      ...mcp("get-structured-content"),
      result: {
        content: [{ type: "text", text: '{"temperature":73,"conditions":"Sunny / Clear","humidity":48}' }],
        structuredContent: { temperature: 73, conditions: "Sunny / Clear", humidity: 48 },
      },
    }),
    // get-sum is read-only (it would run at once) but the person set it to ask.
    event("tool_approval_required", { tool_call_id: "call_sum", ...mcp("get-sum"), arguments: { a: 2, b: 3 } }),
  ];
  await fakeStream(page, chat.id, events);
  const approvals = [];
  await page.route(
    (url) => url.pathname === `/v1/sessions/${chat.id}/approval`,
    async (route) => {
      const body = JSON.parse(route.request().postData());
      approvals.push(body);
      events.push(
        { ...event("approval_submitted", { tool_call_id: body.tool_call_id, decision: body.decision }), kind: "user" },
        event("tool_start", { tool_call_id: "call_sum", ...mcp("get-sum"), arguments: { a: 2, b: 3 } }),
        event("tool_end", {
          tool_call_id: "call_sum",
          ...mcp("get-sum"),
          result: { content: [{ type: "text", text: "The sum of 2 and 3 is 5." }] },
        }),
        event("agent_end", {}),
      );
      return route.fulfill({ status: 202, json: { seq: events.at(-4).seq } });
    },
  );
  await page.goto(`${spool.origin}/#/w/${ws.id}/chats/${chat.id}`);

  // THEN the call shows as "server › tool", its arguments and result in short form
  const echo = page.locator(".action.mcp", { hasText: "echo" });
  await echo.waitFor();
  assert.equal(words(await echo.locator(".mcp-call").innerText()), "everything › echo");
  await echo.getByText("message: hi").waitFor();
  assert.equal(await echo.locator(".action-result").innerText(), "Echo: hi");
  await echo.getByText("done").waitFor();
  // AND its raw JSON is one click away (and hidden before)
  const raw = echo.locator(".raw-json pre");
  assert.equal(await raw.isVisible(), false);
  await echo.getByText("Raw JSON").click();
  await raw.waitFor();
  assert.deepEqual(JSON.parse(await raw.innerText()), {
    arguments: { message: "hi" },
    result: { content: [{ type: "text", text: "Echo: hi" }] },
  });
  // AND a failed call says why
  const logs = page.locator(".action.mcp.error", { hasText: "get-logs" });
  await logs.locator(".action-error", { hasText: "the MCP server everything did not answer in 30 s" }).waitFor();
  await logs.getByText("Raw JSON").click();
  assert.deepEqual(JSON.parse(await logs.locator(".raw-json pre").innerText()), {
    arguments: {},
    error: "the MCP server everything did not answer in 30 s",
  });
  await logs.getByText("failed").waitFor();

  // AND an image is named by its kind (never its bytes), structured content read field by field
  const image = page.locator(".action.mcp", { hasText: "get-tiny-image" }).locator(".action-result");
  assert.equal(await image.innerText(), "Here's the image you requested:\n[image image/png]\nThe image above is the MCP logo.");
  const weather = page.locator(".action.mcp", { hasText: "get-structured-content" });
  await weather.getByText("location: Los Angeles").waitFor();
  assert.equal(await weather.locator(".action-result").innerText(), "temperature: 73, conditions: Sunny / Clear, humidity: 48");

  // WHEN the call that asks is approved from its card
  const request = page.getByRole("listitem", { name: "Approval request" });
  await request.waitFor();
  assert.equal(words(await request.locator(".mcp-call").innerText()), "everything › get-sum");
  await request.getByText("a: 2, b: 3").waitFor();
  await request.getByText("Raw JSON").click();
  assert.deepEqual(JSON.parse(await request.locator(".raw-json pre").innerText()), { arguments: { a: 2, b: 3 } });
  await screenshot(page, "mcp-approval");
  await request.getByRole("button", { name: "Approve" }).click();
  // THEN the decision is sent for that call, and the call runs and shows its result
  await request.getByText("Approved").waitFor();
  assert.deepEqual(approvals, [{ tool_call_id: "call_sum", decision: "approve" }]);
  const sum = page.locator(".action.mcp.done", { hasText: "get-sum" });
  await sum.locator(".action-result", { hasText: "The sum of 2 and 3 is 5." }).waitFor();
  await screenshot(page, "mcp-timeline");
  assert.deepEqual(page.errors, [], "the page logged errors");
  await page.close();
});

const words = (s) => s.replace(/\s+/g, " ").trim();
