// The readable parts of the timeline's cards: markdown (agents' words, instructions, plans), a
// tool's arguments as labelled fields rather than JSON, and what an action's result says as a
// sentence ("Task created: Water the ferns", linked to the task).

import { useMemo } from "preact/hooks";
import { type Env, renderMarkdown } from "./markdown";
import { brief, currentWorkspace, label, MARKDOWN_FIELDS, type Outcome, placeHref } from "./readable";

/** `text` rendered as markdown (safe: see markdown.ts). */
export function Markdown({ text, class: className, env }: { text: string; class?: string; env?: Env }) {
  const tools = env?.tools?.join(" ");
  // eslint-disable-next-line react-hooks/exhaustive-deps
  const html = useMemo(() => renderMarkdown(text, env), [text, tools]);
  // renderMarkdown escapes all HTML: see markdown.ts.
  return <div class={`${className ?? ""} markdown`} dangerouslySetInnerHTML={{ __html: html }} />;
}

/** One argument's value: markdown an agent wrote, a text as itself (wrapped), anything else in short. */
function Value({ name, value }: { name: string; value: unknown }) {
  if (typeof value === "string") {
    if (MARKDOWN_FIELDS.has(name) || value.includes("\n")) return <Markdown class="field-markdown" text={value} />;
    return <span class="field-text">{value}</span>;
  }
  if (Array.isArray(value) && value.every((v) => typeof v !== "object" || v === null))
    return <span class="field-text">{value.length === 0 ? "none" : value.map((v) => brief(v)).join(", ")}</span>;
  return <span class="field-text">{brief(value, 240)}</span>;
}

/** Which fields come first: what the call names (a name, a title), then the rest, then long texts. */
const FIRST = ["name", "title", "summary", "question", "agent_id", "agent"];
const rank = (key: string): number => {
  const at = FIRST.indexOf(key);
  return at >= 0 ? at : MARKDOWN_FIELDS.has(key) ? 100 : 50;
};

/** A tool's arguments as labelled fields (`Name: Helper`), nested values in short. */
export function ArgumentFields({ args }: { args: unknown }) {
  if (typeof args !== "object" || args === null || Array.isArray(args))
    return args === undefined || args === null ? <p class="fields-none">No arguments.</p> : <p class="field-text">{brief(args, 400)}</p>;
  const entries = Object.entries(args as Record<string, unknown>)
    .filter(([, v]) => v !== null && v !== undefined && v !== "")
    .sort(([a], [b]) => rank(a) - rank(b));
  if (entries.length === 0) return <p class="fields-none">No arguments.</p>;
  return (
    <dl class="fields">
      {entries.map(([key, value]) => (
        <div key={key} class={`field field-${key}`}>
          <dt>{label(key)}</dt>
          <dd>
            <Value name={key} value={value} />
          </dd>
        </div>
      ))}
    </dl>
  );
}

/** What an action's result says, its name linked to where it is (the task, the agents). */
export function OutcomeText({ outcome }: { outcome: Outcome }) {
  const ws = currentWorkspace();
  return (
    <span class="action-outcome">
      {outcome.says}
      {outcome.name && ": "}
      {outcome.name && (outcome.place && ws ? <a href={placeHref(outcome.place, ws)}>{outcome.name}</a> : <strong>{outcome.name}</strong>)}
    </span>
  );
}
