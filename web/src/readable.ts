// Tool arguments and results as a person reads them: a value in a few words (nested values
// summarized), an argument's label, and what a Spool action's result says ("Task created: …",
// "Agent added: …") with the place it links to. Pure functions: the cards (cards.tsx) and the
// markdown of agents' text (markdown.ts) both use them.

import { shortResult } from "./mcp";
import { href, parseRoute } from "./route";

/** `text` cut to `max` characters, with an ellipsis when cut. */
export const cut = (text: string, max: number): string => (text.length > max ? `${text.slice(0, max - 1)}…` : text);

const isRecord = (v: unknown): v is Record<string, unknown> => typeof v === "object" && v !== null && !Array.isArray(v);

/**
 * A value in a few words: a string as itself (on one line), a list as its items, an object as
 * `key: value` pairs, each nested value summarized the same way (one level deep, then counted).
 */
export function brief(v: unknown, max = 120, depth = 0): string {
  if (v === null || v === undefined) return "none";
  if (typeof v === "string") return cut(v.replace(/\s+/g, " ").trim(), max);
  if (typeof v === "number" || typeof v === "boolean") return String(v);
  if (Array.isArray(v)) {
    if (v.length === 0) return "none";
    if (depth > 0) return `${v.length} ${v.length === 1 ? "item" : "items"}`;
    return cut(v.map((x) => brief(x, max, depth + 1)).join(", "), max);
  }
  if (isRecord(v)) {
    const entries = Object.entries(v);
    if (entries.length === 0) return "none";
    if (depth > 0) return `${entries.length} ${entries.length === 1 ? "field" : "fields"}`;
    return cut(entries.map(([k, x]) => `${label(k).toLowerCase()}: ${brief(x, max, depth + 1)}`).join(", "), max);
  }
  return cut(String(v), max);
}

const LABELS: Record<string, string> = {
  cli_type: "CLI",
  agent_id: "Agent",
  agent_ids: "Agents",
  task_id: "Task",
  workspace_id: "Workspace",
  url: "URL",
  working_dir: "Working folder",
};

/** A result of no known shape in short: an MCP result as its text, anything else field by field. */
export const briefResult = (v: unknown, max = 200): string =>
  isRecord(v) && Array.isArray(v.content) ? shortResult(v, max) : brief(v, max);

/** An argument's name as a label: `cli_type` → "CLI", `notify_email` → "Notify email". */
export function label(key: string): string {
  const known = LABELS[key];
  if (known) return known;
  const words = key.replace(/[_-]+/g, " ").replace(/([a-z])([A-Z])/g, "$1 $2").trim().toLowerCase();
  return words ? words[0]!.toUpperCase() + words.slice(1) : key;
}

/** Arguments whose text is markdown an agent wrote (an instruction, a plan): rendered, with its line breaks. */
export const MARKDOWN_FIELDS = new Set(["instruction", "plan", "description", "text", "body", "content", "prompt"]);

/** A place a result links to. */
export type Place = { page: "tasks"; task: string } | { page: "agents" };

/** What an action's result says: "Task created" and the task's name, and where it is. */
export interface Outcome {
  says: string;
  name?: string;
  place?: Place;
}

const str = (v: unknown): string | undefined => (typeof v === "string" && v.trim() ? v : undefined);

/**
 * What a Spool action's `result` says, by its tool when known (`tool`, or the tools called just
 * before, `tools`) and otherwise by its shape; `null` for a result of no known shape.
 */
export function outcome(result: unknown, tool?: string, tools: string[] = []): Outcome | null {
  if (!isRecord(result)) return null;
  const name = str(result.name) ?? str(result.title) ?? str(result.summary);
  const called = tool ? [tool] : tools;
  if (typeof result.task_id === "string")
    return { says: "Task created", ...(name ? { name } : {}), place: { page: "tasks", task: result.task_id } };
  if (typeof result.agent_id === "string") {
    const updated = called.includes("update_agent") && !called.includes("create_agent");
    return { says: updated ? "Agent updated" : "Agent added", ...(name ? { name } : {}), place: { page: "agents" } };
  }
  if (typeof result.deleted === "string") return { says: "Agent removed", ...(name ? { name } : {}) };
  if (typeof result.workspace_id === "string") return { says: "Workspace updated", ...(name ? { name } : {}) };
  if (result.captured === true) return { says: "Saved to your notes", ...(name ? { name } : {}) };
  if (Array.isArray(result.order)) return { says: "Agents reordered" };
  if (tool === "rename_chat" || (Object.keys(result).length === 1 && typeof result.title === "string"))
    return { says: "Chat renamed", ...(name ? { name } : {}) };
  return null;
}

/** The workspace of the page in view (`#/w/{ws}/…`), for links to its tasks and agents. */
export function currentWorkspace(): string | undefined {
  if (typeof location === "undefined") return undefined;
  const route = parseRoute(location.hash);
  return "ws" in route ? route.ws : undefined;
}

/** The address of `place` in workspace `ws`. */
export const placeHref = (place: Place, ws: string): string =>
  place.page === "tasks" ? href({ page: "tasks", ws, task: place.task }) : href({ page: "agents", ws });

/**
 * A JSON object written inside `text` from `from` (`{"…`, balanced, strings respected): its
 * start, end and value; `null` when there is none there that parses.
 */
export function jsonObjectAt(text: string, from: number): { start: number; end: number; value: Record<string, unknown> } | null {
  for (let start = text.indexOf('{"', from); start >= 0; start = text.indexOf('{"', start + 1)) {
    let depth = 0;
    let inString = false;
    for (let i = start; i < text.length; i++) {
      const c = text[i];
      if (inString) {
        if (c === "\\") i++;
        else if (c === '"') inString = false;
      } else if (c === '"') inString = true;
      else if (c === "{" || c === "[") depth++;
      else if (c === "}" || c === "]") {
        depth--;
        if (depth === 0) {
          try {
            const value: unknown = JSON.parse(text.slice(start, i + 1));
            if (isRecord(value)) return { start, end: i + 1, value };
          } catch {
            // not JSON: look further on
          }
          break;
        }
      }
    }
  }
  return null;
}
