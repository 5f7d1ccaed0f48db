// The companion in the page: the header's indicator ("Companion connected" or "Offline mode",
// with why, and where to look for it), the side panel of open loops and suggestions, and the
// cards that ask the person before a tool of the companion's MCP servers that is not read-only runs.

import { useEffect, useState } from "preact/hooks";
import { RawJson } from "./actions";
import { ArgumentFields } from "./cards";
import { companionUrl, type OpenLoop, type Suggestion, setCompanionUrl, sidePanel, useCompanion, useConfirms } from "./companion";

export function CompanionBadge() {
  const companion = useCompanion();
  const [address, setAddress] = useState(companionUrl());
  const [label, why] =
    companion.status === "connected"
      ? ["Companion connected", `Answers can use your notes (library ${companion.library_id}, at ${companion.url}).`]
      : companion.status === "offline"
        ? ["Offline mode", companion.reason]
        : ["Looking for a companion…", `Asking ${companionUrl()} (one second at most).`];
  return (
    <details class={`companion companion-${companion.status}`}>
      <summary title={why} aria-label={`${label}. ${why}`}>
        <span class="dot" aria-hidden="true" />
        {label}
      </summary>
      <form
        class="companion-form"
        onSubmit={(e) => {
          e.preventDefault();
          setCompanionUrl(address);
        }}
      >
        <p>{why}</p>
        <label>
          Companion address
          <input value={address} onInput={(e) => setAddress(e.currentTarget.value)} placeholder="http://127.0.0.1:8826" />
        </label>
        <button type="submit">Look again</button>
      </form>
    </details>
  );
}

/** Open loops and suggestions from the person's notes, when a companion is connected. */
export function CompanionPanel() {
  const companion = useCompanion();
  const [panel, setPanel] = useState<{ loops: OpenLoop[]; suggestions: Suggestion[] } | null>(null);
  useEffect(() => {
    if (companion.status !== "connected") {
      setPanel(null);
      return;
    }
    let live = true;
    void sidePanel().then((p) => live && setPanel(p));
    return () => {
      live = false;
    };
  }, [companion]);
  if (!panel || (panel.loops.length === 0 && panel.suggestions.length === 0)) return null;
  return (
    <aside class="companion-panel" aria-label="From your notes">
      {panel.loops.length > 0 && (
        <section>
          <h3>Open loops</h3>
          <ul>
            {panel.loops.slice(0, 8).map((l) => (
              <li key={l.id}>{l.title}</li>
            ))}
          </ul>
        </section>
      )}
      {panel.suggestions.length > 0 && (
        <section>
          <h3>Suggestions</h3>
          <ul>
            {panel.suggestions.slice(0, 5).map((s) => (
              <li key={s.action}>{s.title}</li>
            ))}
          </ul>
        </section>
      )}
    </aside>
  );
}

/** The calls of chat `sessionId`'s agent of the companion's tools waiting for the person's word: Run or Decline. */
export function CompanionConfirms({ sessionId }: { sessionId: string }) {
  const waiting = useConfirms(sessionId);
  if (waiting.length === 0) return null;
  return (
    <div class="companion-confirms">
      {waiting.map((c) => (
        <section key={c.id} class="request approval" role="alertdialog" aria-label={`Run ${c.tool} on your companion?`}>
          <p>
            The agent asks to run <code>{c.tool}</code> of your companion's MCP server <code>{c.server}</code> on this machine, with:
          </p>
          <ArgumentFields args={c.arguments} />
          <RawJson value={{ arguments: c.arguments }} />
          <div class="buttons">
            <button type="button" class="primary" onClick={() => c.answer(true)}>
              Run
            </button>
            <button type="button" onClick={() => c.answer(false)}>
              Decline
            </button>
          </div>
        </section>
      ))}
    </div>
  );
}
