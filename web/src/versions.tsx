// Versions of a person's message, as people know them from the common chat apps: "Edit" on a
// message and "Regenerate" on the last answer each make a new version (the chat keeps every
// event, `./branches`), and `‹ 2/3 ›` moves between the versions. An edit's versions show
// their switch on the message; a regenerate's (the same text each time) on the answer.

import { useState } from "preact/hooks";
import type { Client } from "./api";
import type { Item } from "./timeline";
import type { Notify } from "./toasts";

/** Where a switch between versions shows: the versions (seqs, oldest first) and the one shown. */
export interface Switch {
  versions: number[];
  seq: number;
  /** Whether a turn runs (the chat moves to another version only between turns). */
  waiting: boolean;
}

/** What an item offers for its versions. */
export interface Versioning {
  /** The switch between versions, on this item. */
  switch?: Switch;
  /** On a person's message: its seq, to edit it. */
  edit?: number;
  /** On the last answer: the seq of the message it answers, to answer it again. */
  regenerate?: number;
}

/** What each shown item offers, by key: `all` is every item of the chat, `shown` the active branch's. */
export function versioning(all: Item[], shown: Item[], idle: boolean): Map<string, Versioning> {
  // Each person's message's first version, and the versions of each.
  const root = new Map<number, number>();
  const texts = new Map<number, string>();
  const groups = new Map<number, number[]>();
  for (const item of all) {
    if (item.kind !== "user" || item.seq === undefined) continue;
    const first = item.versionOf === undefined ? item.seq : (root.get(item.versionOf) ?? item.versionOf);
    root.set(item.seq, first);
    texts.set(item.seq, item.text);
    groups.set(first, [...(groups.get(first) ?? []), item.seq]);
  }
  const out = new Map<string, Versioning>();
  const at = (key: string) => out.get(key) ?? out.set(key, {}).get(key)!;
  let lastUser: number | undefined;
  shown.forEach((item, i) => {
    if (item.kind !== "user" || item.seq === undefined) return;
    lastUser = item.seq;
    if (idle) at(item.key).edit = item.seq;
    const versions = groups.get(root.get(item.seq) ?? item.seq) ?? [];
    if (versions.length < 2) return;
    const sameText = versions.every((v) => texts.get(v) === item.text);
    const answer = sameText ? shown.slice(i + 1).find((n) => n.kind === "agent" || n.kind === "user") : undefined;
    at(answer?.kind === "agent" ? answer.key : item.key).switch = { versions, seq: item.seq, waiting: !idle };
  });
  const last = shown.at(-1);
  if (idle && last?.kind === "agent" && last.state !== "streaming" && lastUser !== undefined) at(last.key).regenerate = lastUser;
  return out;
}

export function VersionControls(props: { client: Client; sessionId: string; item: Item; versioning?: Versioning; notify: Notify }) {
  const { client, sessionId, item, versioning, notify } = props;
  const [editing, setEditing] = useState<string | null>(null);
  const [busy, setBusy] = useState(false);
  if (!versioning) return null;
  const run = async (what: () => Promise<unknown>) => {
    setBusy(true);
    try {
      await what();
      setEditing(null);
    } catch (e) {
      notify.error(e);
    } finally {
      setBusy(false);
    }
  };
  const { switch: versions, edit, regenerate } = versioning;
  const k = versions ? versions.versions.indexOf(versions.seq) : -1;
  const go = (to: number | undefined) => to !== undefined && void run(() => client.selectVersion(sessionId, to));
  if (editing !== null && edit !== undefined)
    return (
      <form
        class="edit-message"
        onSubmit={(e) => {
          e.preventDefault();
          if (editing.trim()) void run(() => client.editMessage(sessionId, edit, editing));
        }}
      >
        <textarea aria-label="Edit message" value={editing} onInput={(e) => setEditing(e.currentTarget.value)} rows={3} />
        <div class="edit-buttons">
          <button type="button" class="link" onClick={() => setEditing(null)}>
            Cancel
          </button>
          <button type="submit" disabled={busy || !editing.trim()}>
            {busy ? "Sending…" : "Send"}
          </button>
        </div>
      </form>
    );
  return (
    <div class="versions">
      {versions && versions.versions.length > 1 && (
        <nav class="version-switch" aria-label="Versions">
          <button type="button" class="link" aria-label="Previous version" disabled={busy || versions.waiting || k <= 0} onClick={() => go(versions.versions[k - 1])}>
            ‹
          </button>
          <span>
            {k + 1}/{versions.versions.length}
          </span>
          <button
            type="button"
            class="link"
            aria-label="Next version"
            disabled={busy || versions.waiting || k >= versions.versions.length - 1}
            onClick={() => go(versions.versions[k + 1])}
          >
            ›
          </button>
        </nav>
      )}
      {edit !== undefined && item.kind === "user" && (
        <button type="button" class="link" disabled={busy} onClick={() => setEditing(item.text)}>
          Edit
        </button>
      )}
      {regenerate !== undefined && (
        <button type="button" class="link" disabled={busy} title="Answer this again; the earlier answer stays" onClick={() => void run(() => client.regenerate(sessionId, regenerate))}>
          {busy ? "Regenerating…" : "Regenerate"}
        </button>
      )}
    </div>
  );
}
