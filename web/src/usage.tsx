// What models' tokens added up to: a chat's usage behind a disclosure in its header, and a
// workspace's month on its settings page, beside its monthly token budget. Costs are the
// server's estimates from its price table; a model it does not price has no estimate, and
// the panel says which.

import { useEffect, useState } from "preact/hooks";
import type { ChatUsage, Client, WorkspaceUsage } from "./api";

const count = (n: number) => n.toLocaleString("en-US");

/** An estimated cost in US dollars, or that there is none. */
export const usd = (cost: number | null | undefined) =>
  cost == null ? "no estimate" : `$${cost > 0 && cost < 0.01 ? cost.toFixed(4) : cost.toFixed(2)}`;

type Totals = Pick<ChatUsage, "input_tokens" | "cached_input_tokens" | "output_tokens" | "estimated_cost_usd">;

function TotalsList({ totals }: { totals: Totals }) {
  return (
    <dl class="usage-totals">
      <dt>Input</dt>
      <dd>
        {count(totals.input_tokens)} tokens
        {totals.cached_input_tokens > 0 && ` (${count(totals.cached_input_tokens)} cached)`}
      </dd>
      <dt>Output</dt>
      <dd>{count(totals.output_tokens)} tokens</dd>
      <dt>Estimated cost</dt>
      <dd>{usd(totals.estimated_cost_usd)}</dd>
    </dl>
  );
}

/** The tokens and cost per model, and the models without a price. */
function ByModel({ usage, caption }: { usage: Pick<ChatUsage, "by_model" | "unpriced_models">; caption: string }) {
  if (usage.by_model.length === 0) return <p class="muted">No model has answered yet.</p>;
  return (
    <>
      <table class="usage-table">
        <caption>{caption}</caption>
        <thead>
          <tr>
            <th scope="col">Model</th>
            <th scope="col">Input</th>
            <th scope="col">Output</th>
            <th scope="col">Cost</th>
          </tr>
        </thead>
        <tbody>
          {usage.by_model.map((m) => (
            <tr key={m.model ?? "-"}>
              <th scope="row">{m.model ?? "(unnamed)"}</th>
              <td>{count(m.input_tokens)}</td>
              <td>{count(m.output_tokens)}</td>
              <td>{usd(m.estimated_cost_usd)}</td>
            </tr>
          ))}
        </tbody>
      </table>
      {usage.unpriced_models.length > 0 && (
        <p class="muted">Not in the price table, so not in the estimate: {usage.unpriced_models.join(", ")}.</p>
      )}
    </>
  );
}

/** A chat's usage, behind a disclosure in its header: read each time it opens. */
export function ChatUsageDetails({ client, sessionId }: { client: Client; sessionId: string }) {
  const [usage, setUsage] = useState<ChatUsage | null>(null);
  const [error, setError] = useState<string | null>(null);
  const load = () =>
    client.sessionUsage(sessionId).then(
      (u) => {
        setUsage(u);
        setError(null);
      },
      (e: unknown) => setError(e instanceof Error ? e.message : String(e)),
    );
  return (
    <details class="chat-usage" onToggle={(e) => e.currentTarget.open && void load()}>
      <summary>Usage</summary>
      <section class="usage-panel" aria-label="This chat's usage">
        {error ? (
          <p role="alert">{error}</p>
        ) : usage ? (
          <>
            <TotalsList totals={usage} />
            <ByModel usage={usage} caption="By model" />
          </>
        ) : (
          <p aria-busy="true">Loading…</p>
        )}
      </section>
    </details>
  );
}

/** A workspace's tokens this month against its budget, by model. */
export function WorkspaceMonth({ client, ws, version }: { client: Client; ws: string; version: string }) {
  const [usage, setUsage] = useState<WorkspaceUsage | null>(null);
  const [error, setError] = useState<string | null>(null);
  useEffect(() => {
    client.workspaceUsage(ws).then(setUsage, (e: unknown) => setError(e instanceof Error ? e.message : String(e)));
  }, [client, ws, version]);
  if (error) return <p role="alert">{error}</p>;
  if (!usage) return <p aria-busy="true">Loading usage…</p>;
  const budget = usage.monthly_token_budget ?? null;
  return (
    <div class="workspace-month" aria-label="This month's usage" role="group">
      <p>
        {usage.from} to {usage.to} (UTC, the last day excluded):{" "}
        <strong>{count(usage.month_tokens)}</strong> input and output tokens
        {budget !== null && (
          <>
            {" "}
            of a budget of <strong>{count(budget)}</strong>
          </>
        )}
        .
      </p>
      {budget !== null && (
        <meter min={0} max={budget} high={budget * 0.8} value={Math.min(usage.month_tokens, budget)} aria-label="Budget used">
          {Math.round((usage.month_tokens / budget) * 100)}%
        </meter>
      )}
      {budget !== null && usage.month_tokens >= budget && (
        <p class="status status-error" role="status">
          The budget is used up: new turns are refused until next month, or until you raise or clear it.
        </p>
      )}
      <TotalsList totals={usage} />
      <ByModel usage={usage} caption="This month by model" />
    </div>
  );
}
