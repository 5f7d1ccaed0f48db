// Live updates. A chat follows its stream (`/v1/stream/sessions/{id}`) from a known seq, and a
// workspace's chat list follows the workspace's feed, both with Durable Streams long-polls that
// carry the stream's read grant (so a CDN answers every reader of a chat with one request). Both
// resume from the last position they saw after a network drop, a sleeping laptop or a server
// restart, with capped, jittered backoff.

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

/** A stream's read grant: asked for when first needed, and again a minute before it ends. */
class Grant {
  private current: { token: string; renewAt: number } | null = null;

  constructor(
    private readonly client: Client,
    private readonly path: string,
  ) {}

  async token(): Promise<string> {
    if (!this.current || Date.now() >= this.current.renewAt) {
      const answer = await this.client.readToken(this.path);
      this.current = { token: answer.read_token, renewAt: Date.parse(answer.expires_at) - 60_000 };
    }
    return this.current.token;
  }

  /**
   * After a failed read: whether the person is signed out (their token was refused asking for
   * a grant: stop, the app shows the sign-in). A refused grant (it ended while the tab slept)
   * is dropped, so the next read asks for another.
   */
  signedOut(e: unknown): boolean {
    if (!(e instanceof ApiError) || (e.status !== 401 && e.status !== 403)) return false;
    if (e.status === 401 && !this.current) return true;
    this.current = null;
    return false;
  }
}

/** The Durable Streams offset just after event `seq` (an offset is a message count). */
const offsetAfter = (seq: number) => `0000000000000000_${String(seq).padStart(16, "0")}`;

/**
 * Follows one chat from after `after` until `close()`: catch-up reads, then long-polls, of the
 * chat's stream (`/v1/stream/sessions/{id}`), with the chat's read grant rather than the
 * person's token, so behind a CDN every reader of the chat shares one request to Spool and no
 * reader holds a stream function of its own.
 */
export class ChatStream {
  private controller: AbortController | null = null;
  private closed = false;
  private hiddenAt = 0;
  private readonly grant: Grant;
  private cursor: string | null = null;
  /** Ends a backoff pause early. */
  private resume: (() => void) | null = null;
  /**
   * After a sleep or a network change the open request may be dead without the browser knowing
   * (no RST arrives from a vanished network): ask again from the last event, which costs one
   * request and can lose nothing.
   */
  private readonly wake = (event: Event) => {
    if (this.closed) return;
    if (document.visibilityState === "hidden") {
      this.hiddenAt = Date.now();
      return;
    }
    const slept = event.type === "visibilitychange" && this.hiddenAt > 0 && Date.now() - this.hiddenAt > 30_000;
    if (event.type === "online" || slept) this.reconnectNow();
  };

  constructor(
    private readonly client: Client,
    private readonly sessionId: string,
    private after: number,
    private readonly on: ChatStreamHandlers,
  ) {
    this.grant = new Grant(client, `sessions/${sessionId}`);
    window.addEventListener("online", this.wake);
    document.addEventListener("visibilitychange", this.wake);
    void this.run();
  }

  close(): void {
    this.closed = true;
    this.controller?.abort();
    this.resume?.();
    window.removeEventListener("online", this.wake);
    document.removeEventListener("visibilitychange", this.wake);
  }

  private reconnectNow(): void {
    this.controller?.abort();
    this.resume?.();
  }

  private pause(ms: number): Promise<void> {
    return new Promise((done) => {
      const timer = setTimeout(done, ms);
      this.resume = () => {
        clearTimeout(timer);
        done();
      };
    });
  }

  private async run(): Promise<void> {
    const path = `/v1/stream/sessions/${encodeURIComponent(this.sessionId)}`;
    let attempt = 0;
    let live = false;
    let connected = false;
    this.on.connection("connecting");
    while (!this.closed) {
      const controller = new AbortController();
      this.controller = controller;
      try {
        const grant = await this.grant.token();
        let query = `offset=${offsetAfter(this.after)}`;
        if (live) query += `&live=long-poll${this.cursor ? `&cursor=${this.cursor}` : ""}`;
        const response = await this.client.sharedStream(`${path}?${query}`, grant, { signal: controller.signal });
        attempt = 0;
        if (!connected) {
          connected = true;
          this.on.connection("live");
        }
        this.cursor = response.headers.get("stream-cursor") ?? this.cursor;
        live = response.headers.get("stream-up-to-date") === "true";
        if (response.status === 200) {
          const events = ((await response.json()) as ChatEvent[]).filter((e) => e.seq > this.after);
          const last = events.at(-1);
          if (last && !this.closed) {
            this.after = last.seq;
            this.on.events(events);
          }
        }
      } catch (e) {
        if (this.closed) return;
        // Woken (the tab came back, the network changed): ask again at once.
        if (e instanceof DOMException && e.name === "AbortError") continue;
        if (e instanceof ApiError && e.status === 404) return this.on.gone();
        if (e instanceof ApiError && e.status === 400) {
          // The server has fewer events than we saw (its data was reset): start again.
          this.after = 0;
          live = false;
          this.on.reset();
          continue;
        }
        if (this.grant.signedOut(e)) return;
        connected = false;
        this.on.connection(attempt === 0 ? "connecting" : "offline");
        await this.pause(backoff(attempt++));
      }
    }
  }
}

/**
 * Calls `changed()` whenever a workspace's feed (chat added, answered, renamed, …) gets an event
 * after the moment it starts. It first reads where the feed's tail is (a catch-up read from
 * `now`, answered at once), calls `following()`, then long-polls from that offset: an event
 * appended after the tail was read is never missed, however late the first long-poll reaches the
 * server (a long-poll from `now` starts wherever the tail is when it arrives). The reads carry a
 * read grant of the feed, not the person's token, so behind a CDN every open tab of the workspace
 * shares one request to Spool. Returns a function that stops it.
 */
export function watchFeed(
  client: Client,
  workspaceId: string,
  changed: (events: FeedEvent[]) => void,
  following?: () => void,
): () => void {
  const controller = new AbortController();
  const feed = `workspaces/${workspaceId}/feed`;
  const path = `/v1/stream/workspaces/${encodeURIComponent(workspaceId)}/feed`;
  void (async () => {
    let offset: string | null = null;
    let attempt = 0;
    let cursor: string | null = null;
    const grant = new Grant(client, feed);
    while (!controller.signal.aborted) {
      try {
        const token = await grant.token();
        const query =
          offset === null
            ? "offset=now"
            : `offset=${encodeURIComponent(offset)}&live=long-poll${cursor ? `&cursor=${cursor}` : ""}`;
        const response = await client.sharedStream(`${path}?${query}`, token, { signal: controller.signal });
        attempt = 0;
        const next = response.headers.get("stream-next-offset");
        cursor = response.headers.get("stream-cursor") ?? cursor;
        if (offset === null) {
          if (!next) throw new Error("the feed's tail read has no Stream-Next-Offset");
          offset = next;
          following?.();
          continue;
        }
        offset = next ?? offset;
        if (response.status === 200) {
          const body = (await response.json()) as FeedEvent[];
          if (body.length) changed(body);
        }
      } catch (e) {
        if (controller.signal.aborted) return;
        if (grant.signedOut(e)) return;
        await new Promise((r) => setTimeout(r, backoff(attempt++)));
      }
    }
  })();
  return () => controller.abort();
}
