// Agent text is markdown from a model or a script: rendered with raw HTML off (markdown-it then
// escapes every tag), links limited to http(s) and mailto (written out, never guessed from a bare
// name such as `dropped.md`), and opened in a new tab without an opener. A text's YAML front
// matter shows as a small block of its fields, never as headings; a JSON object written in the
// text (a tool's result an agent quotes) reads as a sentence. `plainText` gives a text's words
// without their markup (the chat list's previews).

import MarkdownIt from "markdown-it";
import { briefResult, currentWorkspace, jsonObjectAt, outcome, placeHref } from "./readable";

// Images are off: a remote image in agent text would be fetched by every reader (a beacon).
const md = new MarkdownIt({ html: false, linkify: true, breaks: true }).disable("image");
// Only links written with their scheme: no `dropped.md` → http://dropped.md/, no `//host`.
md.linkify.set({ fuzzyLink: false, fuzzyEmail: false, fuzzyIP: false });
md.linkify.add("//", null).add("ftp:", null);

md.validateLink = (url: string) => /^(https?:|mailto:|#|\/(?!\/))/i.test(url.trim());

const defaultLinkOpen =
  md.renderer.rules.link_open ?? ((tokens, idx, options, _env, self) => self.renderToken(tokens, idx, options));
md.renderer.rules.link_open = (tokens, idx, options, env, self) => {
  const token = tokens[idx]!;
  token.attrSet("target", "_blank");
  token.attrSet("rel", "noopener noreferrer nofollow");
  return defaultLinkOpen(tokens, idx, options, env, self);
};

// A companion's note ids in an agent's text (`k_…` notes, `d_…` documents) show as chips: the
// reply cites what the person's notes said. Only the id (hex) goes into the markup.
const NOTE_ID = /\b([kd]_[0-9a-f]{16})\b/g;
md.core.ruler.push("note_chips", (state) => {
  for (const block of state.tokens) {
    if (block.type !== "inline" || !block.children) continue;
    const out: typeof block.children = [];
    for (const token of block.children) {
      const matches = token.type === "text" ? [...token.content.matchAll(NOTE_ID)] : [];
      if (matches.length === 0) {
        out.push(token);
        continue;
      }
      let last = 0;
      const text = (content: string) => {
        const t = new state.Token("text", "", 0);
        t.content = content;
        out.push(t);
      };
      for (const m of matches) {
        if (m.index! > last) text(token.content.slice(last, m.index));
        const chip = new state.Token("html_inline", "", 0);
        const kind = m[1]!.startsWith("k_") ? "note" : "document";
        chip.content = `<span class="note-chip" title="A ${kind} from your library">${m[1]}</span>`;
        out.push(chip);
        last = m.index! + m[0].length;
      }
      if (last < token.content.length) text(token.content.slice(last));
    }
    block.children = out;
  }
});

// A JSON object in an agent's words (`Done ({"summary":…,"task_id":…})`) reads as what it
// says: "Task created: …" linked to the task, or its fields in short; the JSON shows on hover.
md.core.ruler.push("readable_json", (state) => {
  const env = state.env as Env;
  const esc = md.utils.escapeHtml;
  const textToken = (content: string) => {
    const t = new state.Token("text", "", 0);
    t.content = content;
    return t;
  };
  for (const block of state.tokens) {
    if (block.type !== "inline" || !block.children) continue;
    const out: typeof block.children = [];
    for (const token of block.children) {
      let found = token.type === "text" ? jsonObjectAt(token.content, 0) : null;
      if (!found) {
        out.push(token);
        continue;
      }
      let last = 0;
      while (found) {
        if (found.start > last) out.push(textToken(token.content.slice(last, found.start)));
        const said = outcome(found.value, undefined, env?.tools);
        const ws = currentWorkspace();
        const name = said?.name ? esc(said.name) : "";
        const named = said?.place && ws && name ? `<a href="${esc(placeHref(said.place, ws))}">${name}</a>` : name;
        const html = said ? `${esc(said.says)}${named ? `: ${named}` : ""}` : esc(briefResult(found.value));
        const chip = new state.Token("html_inline", "", 0);
        chip.content = `<span class="inline-result" title="${esc(token.content.slice(found.start, found.end))}">${html}</span>`;
        out.push(chip);
        last = found.end;
        found = jsonObjectAt(token.content, last);
      }
      if (last < token.content.length) out.push(textToken(token.content.slice(last)));
    }
    block.children = out;
  }
});

/** What a text is rendered with: the tools its agent called just before (to say what a result was). */
export interface Env {
  tools?: string[];
}

/** A text's YAML front matter (`---` lines around `key: value` lines at its start) and the rest. */
export function frontMatter(text: string): { fields: [string, string][]; body: string } {
  const m = /^\uFEFF?---[ \t]*\r?\n([\s\S]*?)\r?\n---[ \t]*(?:\r?\n|$)/.exec(text);
  if (!m) return { fields: [], body: text };
  const lines = m[1]!.split(/\r?\n/).filter((l) => l.trim());
  // Front matter is fields; anything else between two rules is left as the text wrote it.
  if (!lines.every((l) => /^([\w-]+\s*:|\s+\S|-\s)/.test(l))) return { fields: [], body: text };
  const fields: [string, string][] = [];
  for (const line of lines) {
    const field = /^([\w-]+)\s*:\s*(.*)$/.exec(line);
    if (field) fields.push([field[1]!, field[2]!.trim()]);
    else if (fields.length > 0) fields[fields.length - 1]![1] += ` ${line.trim()}`;
  }
  return { fields, body: text.slice(m[0].length) };
}

/** Safe HTML for `text`: its front matter as a small block of fields, then its markdown. */
export function renderMarkdown(text: string, env: Env = {}): string {
  const { fields, body } = frontMatter(text);
  const esc = md.utils.escapeHtml;
  const meta =
    fields.length > 0
      ? `<dl class="front-matter" aria-label="Front matter">${fields.map(([k, v]) => `<div><dt>${esc(k)}</dt><dd>${esc(v)}</dd></div>`).join("")}</dl>`
      : "";
  return meta + md.render(body, { ...env });
}

/** A text's words without their markup, on one line: `**Kim** said` → `Kim said`. */
export function plainText(text: string): string {
  const words: string[] = [];
  for (const block of md.parse(frontMatter(text).body, {})) {
    if (block.type === "fence" || block.type === "code_block") words.push(block.content);
    for (const t of block.children ?? []) {
      if (t.type === "text" || t.type === "code_inline") words.push(t.content);
      else if (t.type === "softbreak" || t.type === "hardbreak") words.push(" ");
    }
    if (block.type.endsWith("_close") || block.type === "fence") words.push(" ");
  }
  // A preview cut mid-markup leaves a lone `**` or `` ` ``: dropped too.
  return words.join("").replace(/\*\*|__|`/g, "").replace(/\s+/g, " ").trim();
}
