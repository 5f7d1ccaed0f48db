// Spool's TypeScript client. Every route of the API is typed from the OpenAPI document
// (docs/openapi.json; `npm run generate` writes src/schema.ts from it), called through
// openapi-fetch with the token from the handshake; followChat() reads a chat's events live
// and resumes from the last seq it yielded when the connection drops or the server recycles
// it, so a consumer sees every event once, in order.

import createFetchClient, { type Client as FetchClient } from "openapi-fetch";
import type { components, paths } from "./schema.js";

export type { components, paths };
/** One event of a chat: the envelope and its typed `type` and `payload`. */
export type ChatEvent = components["schemas"]["Event"];
/** What the handshake answers. */
export type Handshake = components["schemas"]["HandshakeResponse"];
/** The contract's error body. */
export type ErrorBody = components["schemas"]["ErrorBody"];

/** A refusal of Spool's: its HTTP status and the contract's `{error: {code, message}}`. */
export class SpoolError extends Error {
  constructor(
    readonly status: number,
    readonly code: string,
    message: string,
  ) {
    super(message);
    this.name = "SpoolError";
  }
}

export interface SpoolOptions {
  /** Where Spool is, e.g. `http://127.0.0.1:8080` or a deployment's URL. */
  baseUrl: string;
  /** A token from the handshake, if the caller has one. */
  token?: string;
  /** The fetch to use (the global one by default). */
  fetch?: typeof fetch;
}

export interface FollowOptions {
  /** Yield events after this seq (0: from the start). */
  after?: number;
  /** Stops following. */
  signal?: AbortSignal;
  /** Called when the connection dropped and is made again. */
  onReconnect?: (reason: unknown, after: number) => void;
  /** The longest wait between reconnections, in ms (default 5000). */
  maxBackoffMs?: number;
}

export class Spool {
  /** Every route of the API, typed: `spool.api.GET("/v1/sessions/{id}", { params: { path: { id } } })`. */
  readonly api: FetchClient<paths>;
  readonly baseUrl: string;
  token?: string;
  private readonly fetcher: typeof fetch;

  constructor(options: SpoolOptions) {
    this.baseUrl = options.baseUrl.replace(/\/+$/, "");
    this.token = options.token;
    this.fetcher = options.fetch ?? globalThis.fetch.bind(globalThis);
    this.api = createFetchClient<paths>({ baseUrl: this.baseUrl, fetch: this.fetcher });
    this.api.use({
      onRequest: ({ request }) => {
        if (this.token && !request.headers.has("authorization")) {
          request.headers.set("authorization", `Bearer ${this.token}`);
        }
        return request;
      },
    });
  }

  /** Signs in with an API key (`spool_…`): the handshake, whose token every call then sends. */
  static async connect(options: SpoolOptions & { apiKey: string }): Promise<Spool> {
    const spool = new Spool(options);
    await spool.handshake(options.apiKey);
    return spool;
  }

  /** `POST /v1/handshake`: exchanges `apiKey` for a token, which this client keeps. */
  async handshake(apiKey: string): Promise<Handshake> {
    const answer = ok(await this.api.POST("/v1/handshake", { body: { api_key: apiKey, version: "1" } }));
    this.token = answer.jwt;
    return answer;
  }

  /**
   * A chat's events as they are written, after `after`: reads the chat's SSE stream and, when
   * the connection drops (or the server recycles it), reconnects from the last seq yielded,
   * with backoff. Ends when `signal` aborts; a refusal (`401`, `404`) is thrown.
   */
  async *followChat(sessionId: string, options: FollowOptions = {}): AsyncGenerator<ChatEvent> {
    let after = options.after ?? 0;
    let backoff = 250;
    const max = options.maxBackoffMs ?? 5000;
    while (!options.signal?.aborted) {
      let response: Response;
      try {
        response = await this.fetcher(
          `${this.baseUrl}/v1/sessions/${encodeURIComponent(sessionId)}/stream?after=${after}`,
          { headers: this.headers({ accept: "text/event-stream" }), signal: options.signal },
        );
      } catch (reason) {
        if (options.signal?.aborted) return;
        options.onReconnect?.(reason, after);
        await sleep(backoff, options.signal);
        backoff = Math.min(backoff * 2, max);
        continue;
      }
      // A refusal is the caller's to handle, but for "too many" and "timed out": retried.
      if (response.status >= 400 && response.status < 500 && response.status !== 408 && response.status !== 429) {
        throw await refusal(response);
      }
      if (!response.ok || !response.body) {
        await response.body?.cancel().catch(() => {});
        options.onReconnect?.(new Error(`the stream answered ${response.status}`), after);
        await sleep(backoff, options.signal);
        backoff = Math.min(backoff * 2, max);
        continue;
      }
      let progressed = false;
      try {
        for await (const data of sseData(response.body)) {
          const event = JSON.parse(data) as ChatEvent;
          if (event.seq <= after) continue;
          after = event.seq;
          progressed = true;
          backoff = 250;
          yield event;
        }
        // The server ended the response (it recycles them): go on from `after`, at once if it
        // carried events, after a wait that grows if it carried none.
        if (progressed) continue;
      } catch (reason) {
        if (options.signal?.aborted) return;
        options.onReconnect?.(reason, after);
      }
      await sleep(backoff, options.signal);
      backoff = Math.min(backoff * 2, max);
    }
  }

  private headers(extra: Record<string, string> = {}): Record<string, string> {
    return this.token ? { ...extra, authorization: `Bearer ${this.token}` } : extra;
  }
}

/** The data of an openapi-fetch answer, or its refusal as a SpoolError. */
export function ok<T>(answer: { data?: T; error?: unknown; response: Response }): T {
  // A 204 (or an empty body) is a success with no data.
  if (answer.error !== undefined || !answer.response.ok) {
    const body = answer.error as Partial<ErrorBody> | undefined;
    throw new SpoolError(
      answer.response.status,
      body?.error?.code ?? "unknown",
      body?.error?.message ?? `Spool answered ${answer.response.status}`,
    );
  }
  return answer.data as T;
}

async function refusal(response: Response): Promise<SpoolError> {
  const body = (await response.json().catch(() => ({}))) as Partial<ErrorBody>;
  return new SpoolError(response.status, body.error?.code ?? "unknown", body.error?.message ?? response.statusText);
}

/** The `data:` of each SSE event in `body`. */
async function* sseData(body: ReadableStream<Uint8Array>): AsyncGenerator<string> {
  const decoder = new TextDecoder();
  const reader = body.getReader();
  let buffer = "";
  try {
    for (;;) {
      const { value, done } = await reader.read();
      if (done) return;
      yield* events(value);
    }
  } finally {
    reader.releaseLock();
    await body.cancel().catch(() => {});
  }

  function* events(chunk: Uint8Array): Generator<string> {
    // Line ends may be CRLF behind an intermediary: one form for the split.
    buffer = (buffer + decoder.decode(chunk, { stream: true })).replace(/\r\n/g, "\n");
    let end: number;
    while ((end = buffer.indexOf("\n\n")) >= 0) {
      const block = buffer.slice(0, end);
      buffer = buffer.slice(end + 2);
      const data = block
        .split("\n")
        .filter((line) => line.startsWith("data:"))
        .map((line) => line.slice(5).replace(/^ /, ""))
        .join("\n");
      if (data) yield data;
    }
  }
}

function sleep(ms: number, signal?: AbortSignal): Promise<void> {
  return new Promise((resolve) => {
    const done = () => {
      clearTimeout(timer);
      signal?.removeEventListener("abort", done);
      resolve();
    };
    const timer = setTimeout(done, ms);
    signal?.addEventListener("abort", done);
  });
}
