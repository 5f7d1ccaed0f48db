// Saving into the person's notes (`capture_ingest`): "Save to notes" on a message, and the
// approval card of an agent's proposed capture. Only this page reaches the companion (on
// loopback), so it saves the note there itself: for a proposal, before it tells Spool that the
// person approved, so that an approved capture is a saved one.

import { useState } from "preact/hooks";
import type { Client } from "./api";
import { canCapture, capture, useCompanion } from "./companion";
import type { Notify } from "./toasts";

/** Where a note saved from chat `sessionId` comes from, as its front matter's `source` says. */
const sourceOf = (sessionId: string) => `${location.origin}${location.pathname}#/chats/${sessionId}`;

/** "Save to notes" on a message, when the chat may save into the notes. */
export function SaveToNotes({ text, sessionId, notify }: { text: string; sessionId: string; notify: Notify }) {
  const companion = useCompanion();
  const [state, setState] = useState<"idle" | "saving" | "saved">("idle");
  if (!canCapture(companion, sessionId) || !text.trim()) return null;
  const save = async () => {
    setState("saving");
    try {
      const note = await capture({ text, source: sourceOf(sessionId) });
      setState("saved");
      notify.info(`Saved to your notes as ${note.path}.`);
    } catch (e) {
      setState("idle");
      notify.error(e);
    }
  };
  return (
    <button type="button" class="link save-note" disabled={state !== "idle"} onClick={() => void save()}>
      {state === "saved" ? "Saved to notes" : state === "saving" ? "Saving…" : "Save to notes"}
    </button>
  );
}

/** The decision on an agent's `propose_capture`: saved into the notes, then approved; or declined. */
export function CaptureDecision({
  args,
  toolCallId,
  client,
  sessionId,
  notify,
}: {
  args: unknown;
  toolCallId: string;
  client: Client;
  sessionId: string;
  notify: Notify;
}) {
  const companion = useCompanion();
  const [busy, setBusy] = useState(false);
  const note = (args ?? {}) as { title?: unknown; text?: unknown };
  const title = typeof note.title === "string" ? note.title : undefined;
  const text = typeof note.text === "string" ? note.text : "";
  const able = canCapture(companion, sessionId);
  const decide = async (save: boolean) => {
    setBusy(true);
    try {
      if (save) {
        const saved = await capture({ title, text, source: sourceOf(sessionId) });
        notify.info(`Saved to your notes as ${saved.path}.`);
      }
      await client.approve(sessionId, toolCallId, save ? "approve" : "decline");
    } catch (e) {
      notify.error(e);
    } finally {
      setBusy(false);
    }
  };
  return (
    <div class="buttons">
      <button type="button" class="primary" disabled={busy || !able} onClick={() => void decide(true)}>
        Save to notes
      </button>
      <button type="button" disabled={busy} onClick={() => void decide(false)}>
        Don't save
      </button>
      {!able && <p class="hint">Connect your companion to save this note.</p>}
    </div>
  );
}
