// Usage in the web UI, in a real browser against a real `spool serve`: a workspace's month and
// its monthly token budget on the settings page (saved through the API), and a chat's usage
// behind the disclosure in its header. The chat's numbers are answered by the page's route
// interception (the ledger's own sums are the Rust tests' `usage_http`); the rest is the real
// server's.

import assert from "node:assert/strict";
import { test } from "node:test";
import { screenshot, served, signedInPage } from "./harness.mjs";

const server = served();
/** The API, as the server's key. */
const call = (...args) => server.call(...args);

test("the settings show the month's usage and save a monthly token budget; a chat shows its usage", async () => {
  const ws = await call("POST", "/v1/workspaces", { title: "Metered" });
  const chat = await call("POST", "/v1/sessions", { workspace_id: ws.id, title: "Costly" });
  const page = await signedInPage(server.browser, server.spool);

  // The settings: this month's usage (none yet), no budget; a budget set and saved.
  await page.goto(`${server.spool.origin}/#/w/${ws.id}/settings`);
  const month = page.getByRole("group", { name: "This month's usage" });
  await month.getByText("input and output tokens").waitFor();
  assert.match(await month.innerText(), /\b0\b input and output tokens\./);
  const budget = page.getByRole("spinbutton", { name: "Monthly token budget" });
  assert.equal(await budget.inputValue(), "");
  await budget.fill("250000");
  await page.getByRole("button", { name: "Save settings" }).click();
  await page.getByText("Settings saved.").waitFor();
  assert.equal((await call("GET", `/v1/workspaces/${ws.id}`)).monthly_token_budget, 250000);
  await month.getByText("of a budget of 250,000").waitFor();
  await page.getByRole("meter", { name: "Budget used" }).waitFor();
  await screenshot(page, "usage-settings");
  // Cleared, it is gone again.
  await budget.fill("");
  await page.getByRole("button", { name: "Save settings" }).click();
  await page.getByText("Settings saved.").last().waitFor();
  await eventuallyNull(ws.id);

  // The chat's usage, read when its disclosure opens.
  await page.route(`**/v1/sessions/${chat.id}/usage`, (route) =>
    route.fulfill({
      json: {
        input_tokens: 12000,
        cached_input_tokens: 2000,
        output_tokens: 800,
        estimated_cost_usd: 0.0123,
        unpriced_models: ["local-llama"],
        by_agent: [],
        by_model: [
          { model: "gpt-4o-mini", priced: true, input_tokens: 11000, cached_input_tokens: 2000, output_tokens: 700, estimated_cost_usd: 0.0123 },
          { model: "local-llama", priced: false, input_tokens: 1000, cached_input_tokens: 0, output_tokens: 100, estimated_cost_usd: null },
        ],
      },
    }),
  );
  await page.goto(`${server.spool.origin}/#/w/${ws.id}/chats/${chat.id}`);
  const dialog = page.getByRole("dialog");
  await dialog.locator("summary", { hasText: "Usage" }).click();
  const panel = dialog.getByRole("region", { name: "This chat's usage" });
  await panel.getByText("12,000 tokens (2,000 cached)").waitFor();
  assert.match(await panel.innerText(), /\$0\.01/);
  const rows = panel.getByRole("table", { name: "By model" }).getByRole("row");
  assert.equal(await rows.count(), 3);
  assert.match(await rows.nth(2).innerText(), /local-llama\s+1,000\s+100\s+no estimate/);
  await panel.getByText("Not in the price table, so not in the estimate: local-llama.").waitFor();
  assert.deepEqual(page.errors, []);
});

async function eventuallyNull(id) {
  for (let i = 0; i < 100; i++) {
    if ((await call("GET", `/v1/workspaces/${id}`)).monthly_token_budget == null) return;
    await new Promise((r) => setTimeout(r, 50));
  }
  assert.fail("the budget was not cleared");
}
