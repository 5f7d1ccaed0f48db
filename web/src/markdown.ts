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

/** Safe HTML for `text`. */
export const renderMarkdown = (text: string): string => md.render(text);
