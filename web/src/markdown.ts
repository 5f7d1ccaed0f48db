// Agent text is markdown from a model or a script: rendered with raw HTML off (markdown-it then
// escapes every tag), links limited to http(s) and mailto, and opened in a new tab without an opener.

import MarkdownIt from "markdown-it";

// Images are off: a remote image in agent text would be fetched by every reader (a beacon).
const md = new MarkdownIt({ html: false, linkify: true, breaks: true }).disable("image");

md.validateLink = (url: string) => /^(https?:|mailto:|#|\/)/i.test(url.trim());

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

/** Safe HTML for `text`. */
export const renderMarkdown = (text: string): string => md.render(text);
