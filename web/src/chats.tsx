// A workspace's chats, most recently active first, kept live by the workspace's feed.

import { useCallback, useEffect, useRef, useState } from "preact/hooks";
import type { Agent, Client, Session } from "./api";
import { go, href } from "./route";
import { watchFeed } from "./live";
import { relative, useTick } from "./time";
import type { Notify } from "./toasts";

export function ChatList({ client, ws, notify, open }: { client: Client; ws: string; notify: Notify; open?: string }) {
  const [sessions, setSessions] = useState<Session[] | null>(null);
  const [agents, setAgents] = useState<Agent[]>([]);
  const now = useTick();

  const reload = useCallback(async () => {
    try {
      setSessions(await client.sessions(ws));
    } catch (e) {
      notify.error(e);
    }
  }, [client, ws, notify]);

  useEffect(() => {
    void reload();
    void client.agents(ws).then(setAgents, notify.error);
    // Any feed event (a message, a reply, a rename, a new chat) reorders the list: read it again,
    // at most every 300 ms. Once the feed is followed the list is read again, so a change made
    // between the first read and the feed's tail shows too.
    let timer: ReturnType<typeof setTimeout> | undefined;
    const changed = () => {
      clearTimeout(timer);
      timer = setTimeout(() => void reload(), 300);
    };
    const stop = watchFeed(client, ws, () => changed(), () => void reload());
    window.addEventListener("focus", changed);
    return () => {
      stop();
      clearTimeout(timer);
      window.removeEventListener("focus", changed);
    };
  }, [client, ws, reload, notify]);

  // Closing a chat may have changed it (renamed, deleted).
  // Focus returns to its row, for keyboard users.
  const wasOpen = useRef(open);
  useEffect(() => {
    const closed = wasOpen.current;
    if (closed && !open) {
      void reload();
      document.querySelector<HTMLElement>(`.chat-row[data-session="${CSS.escape(closed)}"] .chat-link`)?.focus();
    }
    wasOpen.current = open;
  }, [open, reload]);

  const create = async (agent: Agent) => {
    try {
      const session = await client.createSession(ws, agent.id);
      await reload();
      go({ page: "chats", ws, chat: session.id });
    } catch (e) {
      notify.error(e);
    }
  };

  const remove = async (session: Session) => {
    try {
      await client.deleteSession(session.id);
      setSessions((list) => list?.filter((s) => s.id !== session.id) ?? null);
      notify.info(`Deleted “${session.title}”`);
    } catch (e) {
      notify.error(e);
    }
  };

  return (
    <section class="chats" aria-labelledby="chats-heading">
      <div class="section-head">
        <h2 id="chats-heading">Chats</h2>
        <NewChatMenu agents={agents} onPick={create} />
      </div>
      {sessions === null ? (
        <p aria-busy="true">Loading…</p>
      ) : sessions.length === 0 ? (
        <p class="empty">No chats yet. Start one with “New chat”.</p>
      ) : (
        <ul class="chat-list">
          {sessions.map((s) => (
            <ChatRow key={s.id} session={s} ws={ws} now={now} onDelete={() => remove(s)} />
          ))}
        </ul>
      )}
    </section>
  );
}

function ChatRow({ session, ws, now, onDelete }: { session: Session; ws: string; now: number; onDelete: () => void }) {
  const [confirming, setConfirming] = useState(false);
  const deleteButton = useRef<HTMLButtonElement>(null);
  const wasConfirming = useRef(false);
  // A cancelled confirmation gives focus back to Delete (the confirmation's Cancel takes it first).
  useEffect(() => {
    if (wasConfirming.current && !confirming) deleteButton.current?.focus();
    wasConfirming.current = confirming;
  }, [confirming]);
  return (
    <li class="chat-row" data-session={session.id}>
      <a class="chat-link" href={href({ page: "chats", ws, chat: session.id })}>
        <span class="chat-title">{session.title}</span>
        <span class="chat-agent">{session.agent_name ?? "Spool"}</span>
        <span class="chat-preview">{session.last_message_preview || "No messages yet"}</span>
        <time class="chat-time" dateTime={session.last_active_at} title={new Date(session.last_active_at).toLocaleString()}>
          {relative(session.last_active_at, now)}
        </time>
      </a>
      {confirming ? (
        <span class="confirm" role="group" aria-label={`Delete ${session.title}?`}>
          <span>Delete this chat?</span>
          <button type="button" class="danger" onClick={onDelete}>
            Delete
          </button>
          <button type="button" class="link" autoFocus onClick={() => setConfirming(false)}>
            Cancel
          </button>
        </span>
      ) : (
        <button
          ref={deleteButton}
          type="button"
          class="link"
          aria-label={`Delete chat ${session.title}`}
          onClick={() => setConfirming(true)}
        >
          Delete
        </button>
      )}
    </li>
  );
}

/** “New chat”: the workspace's agents in order, the built-in Spool agent first. */
function NewChatMenu({ agents, onPick }: { agents: Agent[]; onPick: (agent: Agent) => void }) {
  const details = useRef<HTMLDetailsElement>(null);
  const pick = (agent: Agent) => {
    if (details.current) details.current.open = false;
    onPick(agent);
  };
  return (
    <details class="menu" ref={details} onKeyDown={(e) => e.key === "Escape" && details.current && (details.current.open = false)}>
      <summary class="button primary">New chat</summary>
      <ul aria-label="Start a chat with">
        {agents.map((a) => (
          <li key={a.id}>
            <button type="button" onClick={() => pick(a)}>
              {a.name}
              {a.builtin && <span class="badge">built-in</span>}
            </button>
          </li>
        ))}
      </ul>
    </details>
  );
}
