// A workspace's chats, most recently active first, kept live by the workspace's feed: a page at a
// time as the list scrolls (the API's cursor), with a search by title that the server runs.

import { useCallback, useEffect, useRef, useState } from "preact/hooks";
import type { Agent, Client, Session } from "./api";
import { plainText } from "./markdown";
import { go, href } from "./route";
import { watchFeed } from "./live";
import { relative, useTick } from "./time";
import type { Notify } from "./toasts";

/** How many chats a page asks for. */
const PAGE = 50;
/** How long the search waits after the last keystroke before it asks the server. */
const SEARCH_DELAY_MS = 250;

export function ChatList({ client, ws, notify, open }: { client: Client; ws: string; notify: Notify; open?: string }) {
  const [sessions, setSessions] = useState<Session[] | null>(null);
  const [next, setNext] = useState<string | null>(null);
  const [loadingMore, setLoadingMore] = useState(false);
  const [typed, setTyped] = useState("");
  const [search, setSearch] = useState("");
  const [agents, setAgents] = useState<Agent[]>([]);
  const now = useTick();
  // What the latest request is for: an answer to an older one (another search) is dropped.
  const generation = useRef(0);
  // How many chats are shown, and for which search.
  const shown = useRef({ count: 0, search: "" });
  shown.current.count = sessions?.length ?? 0;

  // Reads the list again from the newest, as far as it was scrolled (so a live change never
  // shortens what is shown), for the current search.
  const reload = useCallback(async () => {
    const mine = ++generation.current;
    try {
      const sameSearch = shown.current.search === search;
      const limit = sameSearch ? Math.min(1000, Math.max(PAGE, shown.current.count)) : PAGE;
      const page = await client.sessionPage(ws, { limit, q: search });
      if (mine !== generation.current) return;
      shown.current.search = search;
      setSessions(page.sessions);
      setNext(page.next_cursor);
      setLoadingMore(false);
    } catch (e) {
      if (mine === generation.current) notify.error(e);
    }
  }, [client, ws, notify, search]);

  // The next page, after the last one shown.
  const loadMore = useCallback(async () => {
    if (!next || loadingMore) return;
    const mine = generation.current;
    setLoadingMore(true);
    try {
      const page = await client.sessionPage(ws, { limit: PAGE, cursor: next, q: search });
      if (mine !== generation.current) return;
      // A chat that moved up meanwhile may come again: it is shown once, where it was.
      setSessions((list) => {
        const seen = new Set((list ?? []).map((s) => s.id));
        return [...(list ?? []), ...page.sessions.filter((s) => !seen.has(s.id))];
      });
      setNext(page.next_cursor);
    } catch (e) {
      notify.error(e);
    } finally {
      if (mine === generation.current) setLoadingMore(false);
    }
  }, [client, ws, notify, search, next, loadingMore]);

  // The search asks the server once typing pauses; a new search starts from the newest.
  useEffect(() => {
    const timer = setTimeout(() => {
      const q = typed.trim();
      if (q !== search) setSearch(q);
    }, SEARCH_DELAY_MS);
    return () => clearTimeout(timer);
  }, [typed, search]);

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

  // The next page loads as the end of the list scrolls into view.
  const end = useRef<HTMLDivElement>(null);
  useEffect(() => {
    const target = end.current;
    if (!target || !next) return;
    const observer = new IntersectionObserver((entries) => {
      if (entries.some((e) => e.isIntersecting)) void loadMore();
    }, { rootMargin: "0px 0px 300px 0px" });
    observer.observe(target);
    return () => observer.disconnect();
  }, [next, loadMore]);

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

  const count = sessions?.length ?? 0;
  const status = loadingMore
    ? "Loading more…"
    : next
      ? `${count} ${count === 1 ? "chat" : "chats"} shown; scroll for more`
      : search
        ? `${count} ${count === 1 ? "chat matches" : "chats match"} “${search}”`
        : `All ${count} ${count === 1 ? "chat" : "chats"} shown`;

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
      </form>
      {sessions === null ? (
        <p aria-busy="true">Loading…</p>
      ) : sessions.length === 0 ? (
        <p class="empty">{search ? `No chat's title contains “${search}”.` : "No chats yet. Start one with “New chat”."}</p>
      ) : (
        <>
          <ul class="chat-list" aria-busy={loadingMore}>
            {sessions.map((s) => (
              <ChatRow key={s.id} session={s} ws={ws} now={now} onDelete={() => remove(s)} />
            ))}
          </ul>
          <div class="list-end" ref={end}>
            <p class="list-status" role="status">
              {status}
            </p>
            {next && !loadingMore && (
              <button type="button" class="link" onClick={() => void loadMore()}>
                Load more chats
              </button>
            )}
          </div>
        </>
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
