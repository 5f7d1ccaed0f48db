// A workspace's chats, most recently active first, kept live by the workspace's feed: a page at a
// time as the list scrolls (the API's cursor), with a search by title that the server runs.

import { useCallback, useEffect, useRef, useState } from "preact/hooks";
import type { Agent, Client, Session } from "./api";
import { plainText } from "./markdown";
import { go, href } from "./route";
import { watchFeed } from "./live";
import { countOf, usePages } from "./pages";
import { relative, useTick } from "./time";
import type { Notify } from "./toasts";

/** How many chats a page asks for. */
const PAGE = 50;
/** How long the search waits after the last keystroke before it asks the server. */
const SEARCH_DELAY_MS = 250;

export function ChatList({ client, ws, notify, open }: { client: Client; ws: string; notify: Notify; open?: string }) {
  const [typed, setTyped] = useState("");
  const [search, setSearch] = useState("");
  const [agents, setAgents] = useState<Agent[]>([]);
  const now = useTick();
  const read = useCallback(
    async (limit: number, cursor?: string) => {
      const page = await client.sessionPage(ws, { limit, q: search, ...(cursor ? { cursor } : {}) });
      return { items: page.sessions, next: page.next_cursor };
    },
    [client, ws, search],
  );
  const { items: sessions, more, loadingMore, reload, loadMore, end, update } = usePages(read, search, notify, PAGE);
  const current = useCurrentChat(client, open, sessions);

  // The search asks the server once typing pauses; a new search starts from the newest.
  useEffect(() => {
    const timer = setTimeout(() => {
      const q = typed.trim();
      if (q !== search) setSearch(q);
    }, SEARCH_DELAY_MS);
    return () => clearTimeout(timer);
  }, [typed, search]);

  useEffect(() => {
    void client.agents(ws).then(setAgents, notify.error);
    // Any feed event (a message, a reply, a rename, a new chat) reorders the list: read it again,
    // at most every 300 ms. Once the feed is followed the list is read again, so a change made
    // between the first read and the feed's tail shows too.
    let timer: ReturnType<typeof setTimeout> | undefined;
    const changed = () => {
      clearTimeout(timer);
      timer = setTimeout(() => {
        void reload();
        current.refresh();
      }, 300);
    };
    const stop = watchFeed(client, ws, () => changed(), () => void reload());
    window.addEventListener("focus", changed);
    return () => {
      stop();
      clearTimeout(timer);
      window.removeEventListener("focus", changed);
    };
  }, [client, ws, reload, notify, current.refresh]);

  // Closing a chat may have changed it (renamed, deleted).
  // Focus returns to its row, for keyboard users (the row is kept even when no page has it).
  const wasOpen = useRef(open);
  useEffect(() => {
    const closed = wasOpen.current;
    if (closed && !open) {
      void reload();
      current.refresh();
      document.querySelector<HTMLElement>(`.chat-row[data-session="${CSS.escape(closed)}"] .chat-link`)?.focus();
    }
    wasOpen.current = open;
  }, [open, reload, current.refresh]);

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
      update((list) => list.filter((s) => s.id !== session.id));
      current.forget(session.id);
      notify.info(`Deleted “${session.title}”`);
    } catch (e) {
      notify.error(e);
    }
  };

  const shown = sessions?.length ?? 0;
  const count = countOf(shown, more, ["chat", "chats"]);
  const status = search ? `${count} ${!more && shown === 1 ? "matches" : "match"} “${search}”` : count;
  const row = (s: Session, pinned = false) => (
    <ChatRow key={s.id} session={s} ws={ws} now={now} current={s.id === open} pinned={pinned} onDelete={() => remove(s)} />
  );

  return (
    <section class="chats" aria-labelledby="chats-heading">
      <div class="section-head">
        <h2 id="chats-heading">Chats</h2>
        <NewChatMenu agents={agents} onPick={create} />
      </div>
      <form role="search" class="chat-search" onSubmit={(e) => e.preventDefault()}>
        <label for="chat-search">Search chats</label>
        <input
          id="chat-search"
          type="search"
          placeholder="Title contains…"
          autocomplete="off"
          value={typed}
          onInput={(e) => setTyped(e.currentTarget.value)}
        />
        {sessions !== null && (
          <p class="list-count" role="status" id="chat-count">
            {status}
          </p>
        )}
      </form>
      {current.pinned && (
        <ul class="chat-list pinned" aria-label={open ? "The chat you are in" : "The chat you were in"}>
          {row(current.pinned, true)}
        </ul>
      )}
      {sessions === null ? (
        <p aria-busy="true">Loading…</p>
      ) : sessions.length === 0 ? (
        <p class="empty">{search ? `No chat's title contains “${search}”.` : "No chats yet. Start one with “New chat”."}</p>
      ) : (
        <>
          <ul class="chat-list" aria-busy={loadingMore} aria-describedby="chat-count">
            {sessions.map((s) => row(s))}
          </ul>
          <div class="list-end" ref={(el) => {
              end.current = el;
            }}>
            {loadingMore ? (
              <p class="list-status" aria-busy="true">
                Loading more…
              </p>
            ) : more ? (
              <button type="button" class="link" onClick={() => void loadMore()}>
                Load more chats
              </button>
            ) : (
              <p class="list-status">{search ? "End of the results" : "That is every chat"}</p>
            )}
          </div>
        </>
      )}
    </section>
  );
}

/**
 * The chat the person is in, or was in last: kept in view even when no loaded page has it (an
 * older chat, opened from a search or a link). `pinned` is that chat while the list lacks it.
 */
function useCurrentChat(client: Client, open: string | undefined, sessions: Session[] | null) {
  const [id, setId] = useState(open);
  const [session, setSession] = useState<Session | null>(null);
  const [version, setVersion] = useState(0);
  useEffect(() => {
    if (open) setId(open);
  }, [open]);
  const listed = !!id && !!sessions?.some((s) => s.id === id);
  useEffect(() => {
    if (!id || listed) return setSession(null);
    let live = true;
    client.session(id).then(
      (s) => live && setSession(s),
      () => live && setSession(null),
    );
    return () => {
      live = false;
    };
  }, [client, id, listed, version]);
  const refresh = useCallback(() => setVersion((v) => v + 1), []);
  const forget = useCallback((deleted: string) => setId((was) => (was === deleted ? undefined : was)), []);
  return { id, pinned: !listed && session?.id === id ? session : null, refresh, forget };
}

function ChatRow(props: { session: Session; ws: string; now: number; current: boolean; pinned: boolean; onDelete: () => void }) {
  const { session, ws, now, current, pinned, onDelete } = props;
  const [confirming, setConfirming] = useState(false);
  const deleteButton = useRef<HTMLButtonElement>(null);
  const wasConfirming = useRef(false);
  // A cancelled confirmation gives focus back to Delete (the confirmation's Cancel takes it first).
  useEffect(() => {
    if (wasConfirming.current && !confirming) deleteButton.current?.focus();
    wasConfirming.current = confirming;
  }, [confirming]);
  return (
    <li class={`chat-row${current ? " current" : ""}`} data-session={session.id}>
      <a class="chat-link" href={href({ page: "chats", ws, chat: session.id })} aria-current={current ? "true" : undefined}>
        {pinned && <span class="chat-pin">{current ? "Open chat" : "Last opened"}</span>}
        <span class="chat-title">{session.title}</span>
        <span class="chat-agent">{session.agent_name ?? "Spool"}</span>
        <span class="chat-preview">{plainText(session.last_message_preview ?? "") || "No messages yet"}</span>
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
