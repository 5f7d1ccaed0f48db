// An agent's actions as the timeline shows them: what each tool is called, and a card for each
// call. An MCP server's tool shows as its server (a badge) and its own name ("everything › echo"),
// its arguments and result in short, readable form, the raw JSON one click away. Spool's own
// actions show their arguments as fields and their result as a sentence ("Agent added: Helper").

import { ArgumentFields, OutcomeText } from "./cards";
import { mcpTool, resultIsError, shortArguments, shortResult } from "./mcp";
import { outcome } from "./readable";
import type { Action } from "./timeline";

export const ACTION_LABELS: Record<string, string> = {
  rename_chat: "Rename chat",
  create_task: "Create task",
  create_agent: "Create agent",
  update_agent: "Update agent",
  delete_agent: "Delete agent",
  reorder_agents: "Reorder agents",
  update_workspace: "Update workspace",
  ask_user: "Question",
  get_workspace_context: "Read the workspace",
  propose_plan: "Plan",
  propose_capture: "Save to notes",
};

/** Tools whose call has a card of its own in the timeline (the question, the plan): not listed again as an action. */
const OWN_CARD = new Set(["ask_user", "propose_plan"]);

/** The actions a message lists. */
export const listedActions = (actions: Action[]): Action[] => actions.filter((a) => !OWN_CARD.has(a.tool));

function summary(action: Action): string {
  const args = (action.arguments ?? {}) as Record<string, unknown>;
  const first = args.summary ?? args.title ?? args.name ?? args.question;
  return typeof first === "string" ? first : "";
}

/** A tool's name as a person reads it: an MCP tool as "server › tool", Spool's own by its label. */
export function ToolName({ tool, server }: { tool: string; server?: string }) {
  const mcp = mcpTool(tool, server);
  if (!mcp) return <strong>{ACTION_LABELS[tool] ?? tool}</strong>;
  return (
    <span class="mcp-call" title={`${mcp.server}__${mcp.name}`}>
      <span class="badge mcp-server-badge" title="MCP server">
        {mcp.server}
      </span>
      {" › "}
      <span class="mcp-tool-name">{mcp.name}</span>
    </span>
  );
}

/** A call's raw JSON (its arguments, and its result when it has one), behind one click. */
export function RawJson({ value }: { value: unknown }) {
  return (
    <details class="raw-json">
      <summary>Raw JSON</summary>
      <pre>{JSON.stringify(value, null, 2)}</pre>
    </details>
  );
}

/** An MCP call's arguments in a line, Spool's own tools' as labelled fields; their raw JSON one click away. */
export function ToolArguments({ tool, server, args }: { tool: string; server?: string; args: unknown }) {
  if (!mcpTool(tool, server))
    return (
      <>
        <ArgumentFields args={args} />
        <RawJson value={{ arguments: args }} />
      </>
    );
  const short = shortArguments(args);
  return (
    <>
      <p class="mcp-args">{short || "No arguments."}</p>
      <RawJson value={{ arguments: args }} />
    </>
  );
}

export function ActionCard({ action }: { action: Action }) {
  const mcp = mcpTool(action.tool, action.server);
  const failed = action.status === "error" || (action.status === "done" && resultIsError(action.result));
  const state = failed ? "error" : action.status;
  const status = { running: "running…", done: "done", error: "failed", declined: "declined" }[state];
  if (!mcp) {
    const said = action.status === "done" ? outcome(action.result, action.tool) : null;
    const raw = action.result === undefined ? { arguments: action.arguments } : { arguments: action.arguments, [action.status === "error" ? "error" : "result"]: action.result };
    return (
      <li class={`action ${action.status}`}>
        <span class="badge">{ACTION_LABELS[action.tool] ?? action.tool}</span>{" "}
        <span class="action-summary">{said ? <OutcomeText outcome={said} /> : summary(action)}</span> <span class="action-status">{status}</span>
        {action.status === "error" && typeof action.result === "string" && <div class="action-error">{action.result}</div>}
        <RawJson value={raw} />
      </li>
    );
  }
  const result = shortResult(action.result);
  return (
    <li class={`action mcp ${state}`}>
      <div>
        <ToolName tool={action.tool} server={action.server} /> <span class="action-summary">{shortArguments(action.arguments, 80)}</span>{" "}
        <span class="action-status">{status}</span>
      </div>
      {result && <div class={failed ? "action-error" : "action-result"}>{result}</div>}
      <RawJson value={action.result === undefined ? { arguments: action.arguments } : { arguments: action.arguments, [action.status === "error" ? "error" : "result"]: action.result }} />
    </li>
  );
}
