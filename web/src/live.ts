// Live updates. A chat follows its SSE route (`/v1/sessions/{id}/stream`, one event per chat event
// with its seq as the SSE id) from a known seq; a workspace's chat list follows the workspace's
// feed with Durable Streams long-polls. Both resume from the last position they saw after a
// network drop, a sleeping laptop or a server restart, with capped, jittered backoff.

import { ApiError, type ChatEvent, type Client, type FeedEvent } from "./api";

const backoff = (attempt: number) => Math.min(30_000, 500 * 2 ** Math.min(attempt, 6)) * (0.5 + Math.random() / 2);

export type Connection = "connecting" | "live" | "offline";

export interface ChatStreamHandlers {
  /** New events, in seq order (several at once while catching up). */
  events(events: ChatEvent[]): void;
  connection(state: Connection): void;
  /** The chat is gone (deleted, or not this organization's). */
  gone(): void;
  /** The server has fewer events than `after` (its data was reset): start again from 0. */
  reset(): void;
}

/** Follows one chat from after `after` until `close()`. */
export class ChatStream {
  private source: EventSource | null = null;
  private timer: ReturnType<typeof setTimeout> | undefined;
  private attempt = 0;
  private closed = false;
  private batch: ChatEvent[] = [];
  private flushing = false;
  private hiddenAt = 0;
  /**
   * After a sleep or a network change the open connection may be dead without the browser
   * knowing (no RST arrives from a vanished network): reconnect from the last event, which costs
   * one request and can lose nothing.
   */
  private readonly wake = (event: Event) => {
    if (this.closed) return;
    if (document.visibilityState === "hidden") {
      this.hiddenAt = Date.now();
      return;
    }
    const slept = event.type === "visibilitychange" && this.hiddenAt > 0 && Date.now() - this.hiddenAt > 30_000;
    if (!this.source || event.type === "online" || slept) this.reconnectNow();
  };

  constructor(
    private readonly client: Client,
    private readonly sessionId: string,
    private after: number,
    private readonly on: ChatStreamHandlers,
  ) {
    window.addEventListener("online", this.wake);
    document.addEventListener("visibilitychange", this.wake);
    this.open();
  }

  close(): void {
    this.closed = true;
    clearTimeout(this.timer);
    this.source?.close();
    this.source = null;
    window.removeEventListener("online", this.wake);
    document.removeEventListener("visibilitychange", this.wake);
  }

  private open(): void {
    this.on.connection("connecting");
    const url = this.client.sseUrl(`/v1/sessions/${encodeURIComponent(this.sessionId)}/stream`, {
      after: String(this.after),
    });
    const source = new EventSource(url);
    this.source = source;
    source.onopen = () => {
      this.attempt = 0;
      this.on.connection("live");
    };
    source.onmessage = (m) => {
      let event: ChatEvent;
      try {
        event = JSON.parse(m.data as string) as ChatEvent;
      } catch {
        return;
      }
      if (event.seq <= this.after) return;
      this.after = event.seq;
      this.batch.push(event);
      // Events that arrive together (a catch-up: one SSE message per task) are folded in one
      // render, at most one a frame.
      if (!this.flushing) {
        this.flushing = true;
        setTimeout(() => {
          this.flushing = false;
          const batch = this.batch;
          this.batch = [];
          if (!this.closed && batch.length) this.on.events(batch);
        }, 16);
      }
    };
    source.onerror = () => {
      // CONNECTING: the browser reconnects by itself, sending Last-Event-ID (the server ends a
      // response now and then, and proxies drop idle ones). CLOSED: an HTTP error; find out why.
      if (source.readyState === EventSource.CLOSED) {
        source.close();
        this.source = null;
        void this.diagnose();
      } else {
        this.on.connection("connecting");
      }
    };
  }

  private reconnectNow(): void {
    clearTimeout(this.timer);
    this.source?.close();
    this.source = null;
    this.attempt = 0;
    this.open();
  }

  /** Why the stream closed: a missing chat, a reset store, an expired token or the network. */
  private async diagnose(): Promise<void> {
    if (this.closed) return;
    const probe = new AbortController();
    const timeout = setTimeout(() => probe.abort(), 10_000);
    try {
      // The same request with the token in a header: its status says what went wrong.
      const path = `/v1/sessions/${encodeURIComponent(this.sessionId)}/stream?after=${this.after}`;
      await this.client.stream(path, { signal: probe.signal });
      probe.abort();
    } catch (e) {
      if (e instanceof ApiError && e.status === 404) return this.on.gone();
      if (e instanceof ApiError && e.status === 400) {
        this.after = 0;
        this.on.reset();
      }
      if (e instanceof ApiError && e.status === 401) return; // signed out: the app shows the sign-in
    } finally {
      clearTimeout(timeout);
    }
    // Closed meanwhile, or already reconnected (the tab woke, the network came back).
    if (this.closed || this.source) return;
    this.on.connection("offline");
    this.timer = setTimeout(() => this.open(), backoff(this.attempt++));
  }
}

/**
 * Calls `changed()` whenever a workspace's feed (chat added, answered, renamed, …) gets an event,
 * following it from its tail with long-polls. They carry a read grant of the feed, not the
 * person's token, so behind a CDN every open tab of the workspace shares one request to Spool.
 * Returns a function that stops it.
 */
export function watchFeed(client: Client, workspaceId: string, changed: (events: FeedEvent[]) => void): () => void {
  const controller = new AbortController();
  const feed = `workspaces/${workspaceId}/feed`;
  const path = `/v1/stream/workspaces/${encodeURIComponent(workspaceId)}/feed`;
  void (async () => {
    let offset = "now";
    let attempt = 0;
    let cursor: string | null = null;
    let grant: { token: string; renewAt: number } | null = null;
    while (!controller.signal.aborted) {
      try {
        // A grant lives 5 to 10 minutes: renew it a minute before it ends.
        if (!grant || Date.now() >= grant.renewAt) {
          const answer = await client.readToken(feed);
          grant = { token: answer.read_token, renewAt: Date.parse(answer.expires_at) - 60_000 };
        }
        const query = `offset=${encodeURIComponent(offset)}&live=long-poll${cursor ? `&cursor=${cursor}` : ""}`;
        const response = await client.sharedStream(`${path}?${query}`, grant.token, { signal: controller.signal });
        attempt = 0;
        offset = response.headers.get("stream-next-offset") ?? offset;
        cursor = response.headers.get("stream-cursor") ?? cursor;
        if (response.status === 200) {
          const body = (await response.json()) as FeedEvent[];
          if (body.length) changed(body);
        }
      } catch (e) {
        if (controller.signal.aborted) return;
        // The person's token is refused (asking for a grant): signed out.
        if (e instanceof ApiError && e.status === 401 && !grant) return;
        // A refused grant (expired while the tab slept): ask for another.
        if (e instanceof ApiError && (e.status === 401 || e.status === 403)) grant = null;
        await new Promise((r) => setTimeout(r, backoff(attempt++)));
      }
    }
  })();
  return () => controller.abort();
}
