// A compaction in the timeline: a divider across the conversation that opens to the summary the
// agent sees instead of the messages before it (they stay in the chat).

import { Markdown } from "./cards";
import type { Item } from "./timeline";

export function Compacted({ item }: { item: Extract<Item, { kind: "compacted" }> }) {
  return (
    <li class="compacted" aria-label="History compacted">
      <details>
        <summary>
          {item.reason === "command" ? "History compacted on request" : "Earlier messages summarised for the agent"}
        </summary>
        <p class="compacted-note">
          The agent now sees this summary instead of the messages before it; they stay in the chat.
          {item.by === "extract" ? " Spool wrote it from the messages' first lines." : ` Written by ${item.by}.`}
        </p>
        <Markdown class="compacted-summary" text={item.summary} />
      </details>
    </li>
  );
}
