// "Fork from here" on an agent's message: a new chat whose history is this one's up to that
// message (`POST /v1/sessions/{id}/fork`), opened at once. The fork has its own turns and files;
// what either chat says next never shows in the other.

import { useState } from "preact/hooks";
import type { Client } from "./api";
import { go } from "./route";
import type { Notify } from "./toasts";

export function ForkFromHere(props: { client: Client; sessionId: string; workspaceId: string; atSeq: number; notify: Notify }) {
  const { client, sessionId, workspaceId, atSeq, notify } = props;
  const [busy, setBusy] = useState(false);
  const fork = async () => {
    setBusy(true);
    try {
      const forked = await client.forkSession(sessionId, atSeq);
      notify.info(`Forked into “${forked.title}”.`);
      go({ page: "chats", ws: workspaceId, chat: forked.id });
    } catch (e) {
      notify.error(e);
      setBusy(false);
    }
  };
  return (
    <button
      type="button"
      class="link fork"
      disabled={busy}
      title="A new chat with this conversation up to here"
      onClick={() => void fork()}
    >
      {busy ? "Forking…" : "Fork from here"}
    </button>
  );
}
