// An agent's actions as the timeline shows them: what each tool is called, and a card for each call.

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

function summary(action: Action): string {
  const args = (action.arguments ?? {}) as Record<string, unknown>;
  const first = args.summary ?? args.title ?? args.name ?? args.question;
  return typeof first === "string" ? first : "";
}

export function ActionCard({ action }: { action: Action }) {
  const label = ACTION_LABELS[action.tool] ?? action.tool;
  const status = { running: "running…", done: "done", error: "failed", declined: "declined" }[action.status];
  return (
    <li class={`action ${action.status}`}>
      <span class="badge">{label}</span> <span class="action-summary">{summary(action)}</span>{" "}
      <span class="action-status">{status}</span>
      {action.status === "error" && typeof action.result === "string" && <div class="action-error">{action.result}</div>}
    </li>
  );
}
