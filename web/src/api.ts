// The HTTP contract, as the UI uses it: a token from the handshake, JSON in and out, and the
// contract's `{"error": {"code", "message"}}` turned into an `ApiError` whose message can be shown.

import { type components, Spool } from "@spool/client";

/** The API's types, generated from its OpenAPI document (never kept by hand). */
type Schemas = components["schemas"];
export type Runtime = Schemas["Runtime"];
export type CliType = Schemas["CliType"];
export const CLI_TYPES: CliType[] = ["claude", "gemini", "codex", "opencode"];
export const RUNTIMES: Runtime[] = ["scripted", "openai", "anthropic", "cli"];
/** Where a workspace's CLI agents run: the server's worker, or runners (`spool runner`). */
export type CliHost = "server" | "runners";
export type Workspace = Schemas["WorkspaceView"];
/**
 * Where a workspace's CLI agents run (its effective `cli_host`); `undefined` from a server
 * without runners.
 */
export const cliHostOf = (workspace: Workspace): CliHost | undefined => (workspace as { cli_host?: CliHost }).cli_host;
export type Notifications = Schemas["Notifications"];
/** A change to a workspace's settings (`PATCH /v1/workspaces/{id}`): only what it names. */
export type WorkspaceChange = Schemas["WorkspaceChange"] & { cli_host?: CliHost | null };
export type Agent = Schemas["AgentView"];
export type Session = Schemas["SessionView"];
export type Task = Schemas["TaskView"];
/** A chat's tokens and their estimated cost (`GET /v1/sessions/{id}/usage`). */
export type ChatUsage = Schemas["ChatUsageView"];
/** A workspace's over a range of days, with its monthly budget (`GET /v1/workspaces/{id}/usage`). */
export type WorkspaceUsage = Schemas["WorkspaceUsageView"];
/** A page of chats, and the cursor of the next (`null` on the last page). */
export interface SessionPage {
  sessions: Session[];
  next_cursor: string | null;
}
/** One chat event: the envelope of the HTTP contract, its `type` and typed `payload`. */
export type ChatEvent = Schemas["Event"];
/** Every chat event type the server writes. */
export type EventType = ChatEvent["type"];

/** One event of a workspace's feed: flat, its `type`, its unique `id`, and its fields. */
export interface FeedEvent {
  type: string;
  id: string;
  ts: string;
  [field: string]: unknown;
}

/** A refusal of the API (or a network failure, `status` 0), with a message to show. */
export class ApiError extends Error {
  constructor(
    readonly status: number,
    readonly code: string,
    message: string,
  ) {
    super(message);
  }
}

/** Where the API and the stream routes are: the page's own origin unless `config.json` says. */
export interface Endpoints {
  api: string;
  streams: string;
}

export async function loadEndpoints(): Promise<Endpoints> {
  const here = { api: "", streams: "" };
  try {
    const response = await fetch("config.json", { cache: "no-cache" });
    if (!response.ok) return here;
    const config = (await response.json()) as Partial<Endpoints>;
    const api = (config.api ?? "").replace(/\/$/, "");
    return { api, streams: (config.streams ?? api).replace(/\/$/, "") };
  } catch {
    return here;
  }
}

const TOKEN_KEY = "spool.token";

/** A read grant: `POST /v1/read-tokens`. */
export type ReadToken = Schemas["ReadToken"];
/** Where a turn is (`GET /v1/sessions/{id}/turns/{turn_id}`). */
export type Turn = Schemas["TurnView"];
/** What `POST /v1/handshake` answers. */
export type Handshake = Schemas["HandshakeResponse"];
/** A CLI agent as the deployment has it (`GET /v1/clis`). */
export type CliStatus = Schemas["CliStatus"];
/**
 * A runner (`spool runner`) as it last reported itself: the CLIs it runs, the workspaces it
 * serves (none named: all of them), when it was last seen and whether that makes it online.
 */
export interface Runner {
  name: string;
  version?: string | null;
  clis: CliStatus[];
  /** None (or absent): every workspace of its organization. */
  workspaces?: string[];
  last_seen_ms: number;
  online: boolean;
}
/** The CLI agents where agents can run (`GET /v1/clis`): the server's, and each runner's. */
export interface CliAvailability {
  clis: CliStatus[];
  runners: Runner[];
  /**
   * The folders under which a workspace's working directory may be on this server (as this
   * organization may use them); empty: working directories are off, each chat gets its own.
   */
  workspaceRoots: string[];
}
/** A chat's file, as events and the attachments routes name it. */
export type FileRef = Schemas["FileRef"];
/** A file an `@` mention may name: the working directory's, or the chat's own (`attachment`). */
export type FileMatch = Schemas["FileMatch"];
/** A command as a chat sees it (`GET /v1/workspaces/{id}/slash-commands`). */
export type CommandEntry = Schemas["EntryView"];
/** What invoking an input would do. */
export type CommandPreview = Schemas["Previewed"];
/** An invocation that ran. */
export type CommandInvoked = Schemas["InvokeAccepted"];
/** An agent's fields, as the form edits them. */
export type AgentFields = Required<Pick<Schemas["NewAgent"], "name" | "instruction">> & {
  runtime: Runtime | null;
  model: string | null;
  cli_type: CliType | null;
  /** Tokens of history it is given before the oldest part is summarised; null: its model's own. */
  context_tokens: number | null;
};

interface StoredToken {
  jwt: string;
  expires_at: string;
}

/** What an openapi-fetch call answers. */
interface Answer<T> {
  data?: T;
  error?: unknown;
  response: Response;
}

/**
 * The API as the UI calls it: `@spool/client` (every route typed from the OpenAPI document)
 * with the person's token, kept in `localStorage`; a refusal becomes an `ApiError`, and a
 * refused token signs the person out.
 */
export class Client {
  private jwt: string | null = null;
  /** Called when the token is missing, expired or refused: the UI asks for a key again. */
  onSignedOut: (reason: string) => void = () => {};
  private readonly spool: Spool;

  constructor(readonly endpoints: Endpoints) {
    try {
      const stored = JSON.parse(localStorage.getItem(TOKEN_KEY) ?? "null") as StoredToken | null;
      // A token that expires within the minute is as good as gone.
      if (stored && Date.parse(stored.expires_at) - Date.now() > 60_000) this.jwt = stored.jwt;
    } catch {
      localStorage.removeItem(TOKEN_KEY);
    }
    this.spool = new Spool({ baseUrl: endpoints.api || location.origin, fetch: (input, init) => this.fetch(input, init) });
  }

  get signedIn(): boolean {
    return this.jwt !== null;
  }

  get token(): string {
    return this.jwt ?? "";
  }

  /** Exchanges an API key for a token (`POST /v1/handshake`) and keeps the token, not the key. */
  async signIn(apiKey: string): Promise<void> {
    this.adopt(await this.exchange(apiKey));
  }

  /** Exchanges an API key for a token without keeping it (so the UI can ask first). */
  async exchange(apiKey: string): Promise<Handshake> {
    const body = { version: "1", user_agent: `spool-web (${navigator.userAgent})`, api_key: apiKey.trim() };
    return await this.call(this.spool.api.POST("/v1/handshake", { body }));
  }

  /** Keeps a token from [`exchange`]: the UI now acts for its organization. */
  adopt(answer: Handshake): void {
    this.jwt = answer.jwt;
    localStorage.setItem(TOKEN_KEY, JSON.stringify({ jwt: answer.jwt, expires_at: answer.expires_at }));
  }

  signOut(reason = ""): void {
    this.jwt = null;
    localStorage.removeItem(TOKEN_KEY);
    this.onSignedOut(reason);
  }

  /** A stream route (`/v1/stream/…`), answered as a raw response. */
  stream(path: string, init: RequestInit = {}): Promise<Response> {
    return this.checked(`${this.endpoints.streams}${path}`, init);
  }

  /**
   * A stream route read with a read grant (`?read_token=`) instead of the person's token: the
   * answer is the same for every reader of the stream, so a CDN in front of Spool answers them
   * all with one request. A refused grant is the caller's to renew; it never signs anyone out.
   */
  sharedStream(path: string, grant: string, init: RequestInit = {}): Promise<Response> {
    const url = `${this.endpoints.streams}${path}${path.includes("?") ? "&" : "?"}read_token=${encodeURIComponent(grant)}`;
    return this.checked(url, init, false);
  }

  /** A read grant for one stream (`POST /v1/read-tokens`). */
  readToken = (path: string) => this.call(this.spool.api.POST("/v1/read-tokens", { body: { path } }));

  /** Every request: the token (unless `authorized` is false), and a network failure as an `ApiError`. */
  private async fetch(input: RequestInfo | URL, init: RequestInit = {}, authorized = true): Promise<Response> {
    const request = new Request(input, init);
    if (this.jwt && authorized) request.headers.set("authorization", `Bearer ${this.jwt}`);
    let response: Response;
    try {
      response = await fetch(request);
    } catch (e) {
      if (e instanceof DOMException && e.name === "AbortError") throw e;
      throw new ApiError(0, "network", "Spool cannot be reached; check your connection, then try again.");
    }
    if (response.status === 401 && authorized && !request.url.endsWith("/v1/handshake")) {
      this.signOut("Your sign-in has expired or was refused; enter an API key again.");
    }
    return response;
  }

  /** A raw route's response, a refusal thrown as an `ApiError`. */
  private async checked(url: string, init: RequestInit, authorized = true): Promise<Response> {
    const response = await this.fetch(url, { ...init, method: "GET" }, authorized);
    if (response.ok) return response;
    throw await refusal(response);
  }

  /**
   * A JSON route the generated client does not have yet: `body` sent as JSON, the answer parsed
   * (`null` for a 204), a refusal thrown as an `ApiError`.
   */
  async json<T>(method: string, path: string, body?: unknown): Promise<T> {
    const init: RequestInit =
      body === undefined ? { method } : { method, body: JSON.stringify(body), headers: { "content-type": "application/json" } };
    const response = await this.fetch(`${this.endpoints.api}${path}`, init);
    if (!response.ok) throw await refusal(response);
    return (response.status === 204 ? null : await response.json()) as T;
  }

  /** An openapi-fetch call's data, or its refusal as an `ApiError`. */
  private async call<T>(pending: Promise<Answer<T>>): Promise<T> {
    const answer = await pending;
    if (answer.response.ok) return answer.data as T;
    const error = (answer.error as { error?: { code?: string; message?: string } } | undefined)?.error;
    throw new ApiError(
      answer.response.status,
      error?.code ?? "http_error",
      error?.message ?? `${answer.response.url} failed with ${answer.response.status}`,
    );
  }

  // Workspaces, agents, tasks
  workspaces = async () => (await this.call(this.spool.api.GET("/v1/workspaces"))).workspaces;
  createWorkspace = (title: string) => this.call(this.spool.api.POST("/v1/workspaces", { body: { title } }));
  workspace = (ws: string) => this.call(this.spool.api.GET("/v1/workspaces/{id}", { params: { path: { id: ws } } }));
  /** The workspace's usage on days `[from, to)`: this UTC month by default. */
  workspaceUsage = (ws: string, query: { from?: string; to?: string } = {}) =>
    this.call(this.spool.api.GET("/v1/workspaces/{id}/usage", { params: { path: { id: ws }, query } }));
  /** A chat's usage, by agent and model. */
  sessionUsage = (id: string) => this.call(this.spool.api.GET("/v1/sessions/{id}/usage", { params: { path: { id } } }));
  updateWorkspace = (ws: string, change: WorkspaceChange) =>
    this.call(this.spool.api.PATCH("/v1/workspaces/{id}", { params: { path: { id: ws } }, body: change }));
  deleteWorkspace = (ws: string) =>
    this.call(this.spool.api.DELETE("/v1/workspaces/{id}", { params: { path: { id: ws } } }));
  agents = async (ws: string) =>
    (await this.call(this.spool.api.GET("/v1/workspaces/{id}/agents", { params: { path: { id: ws } } }))).agents;
  createAgent = (ws: string, agent: AgentFields) =>
    this.call(this.spool.api.POST("/v1/workspaces/{id}/agents", { params: { path: { id: ws } }, body: agent }));
  updateAgent = (id: string, patch: Partial<AgentFields>) =>
    this.call(this.spool.api.PATCH("/v1/agents/{id}", { params: { path: { id } }, body: patch }));
  deleteAgent = (id: string) => this.call(this.spool.api.DELETE("/v1/agents/{id}", { params: { path: { id } } }));
  reorderAgents = (ws: string, agent_ids: string[]) =>
    this.call(this.spool.api.PUT("/v1/workspaces/{id}/agents/order", { params: { path: { id: ws } }, body: { agent_ids } }));
  /** A page of a workspace's tasks, newest first: `limit` of them after `cursor` (the previous page's `next_cursor`). */
  taskPage = async (ws: string, page: { limit: number; cursor?: string }): Promise<{ tasks: Task[]; next_cursor: string | null }> => {
    const query = { limit: page.limit, ...(page.cursor ? { cursor: page.cursor } : {}) };
    const answer = await this.call(this.spool.api.GET("/v1/workspaces/{id}/tasks", { params: { path: { id: ws }, query } }));
    return { tasks: answer.tasks, next_cursor: answer.next_cursor ?? null };
  };
  task = (id: string) => this.call(this.spool.api.GET("/v1/tasks/{id}", { params: { path: { id } } }));
  createTask = (ws: string, task: { title: string; description: string; session_id?: string }) =>
    this.call(this.spool.api.POST("/v1/workspaces/{id}/tasks", { params: { path: { id: ws } }, body: task }));
  updateTask = (id: string, patch: { title?: string; description?: string }) =>
    this.call(this.spool.api.PATCH("/v1/tasks/{id}", { params: { path: { id } }, body: patch }));
  deleteTask = (id: string) => this.call(this.spool.api.DELETE("/v1/tasks/{id}", { params: { path: { id } } }));

  // Chats
  /**
   * A page of a workspace's chats, most recently active first: `limit` of them after `cursor`
   * (the previous page's `next_cursor`), only those whose title contains `q` when given.
   */
  sessionPage = async (ws: string, page: { limit: number; cursor?: string; q?: string }): Promise<SessionPage> => {
    const query = {
      workspace_id: ws,
      limit: page.limit,
      ...(page.cursor ? { cursor: page.cursor } : {}),
      ...(page.q ? { q: page.q } : {}),
    };
    const answer = await this.call(this.spool.api.GET("/v1/sessions", { params: { query } }));
    return { sessions: answer.sessions, next_cursor: answer.next_cursor ?? null };
  };
  session = (id: string) => this.call(this.spool.api.GET("/v1/sessions/{id}", { params: { path: { id } } }));
  createSession = (workspace_id: string, agent_id: string) =>
    this.call(this.spool.api.POST("/v1/sessions", { body: { workspace_id, agent_id } }));
  updateSession = (id: string, patch: { title?: string; agent_id?: string; cli_type?: CliType | null }) =>
    this.call(this.spool.api.PATCH("/v1/sessions/{id}", { params: { path: { id } }, body: patch }));
  /** A new chat whose history is this one's up to and including event `at_seq` (its last when absent). */
  forkSession = (id: string, at_seq?: number) =>
    this.call(this.spool.api.POST("/v1/sessions/{id}/fork", { params: { path: { id } }, body: at_seq === undefined ? {} : { at_seq } }));
  /** A new version of the person's message at `seq`, with new text; its turn answers it. */
  editMessage = (id: string, seq: number, content: string) =>
    this.call(this.spool.api.POST("/v1/sessions/{id}/messages/{seq}/edit", { params: { path: { id, seq } }, body: { content } }));
  /** The answer to the person's message at `seq` made again (a new version of the message). */
  regenerate = (id: string, seq: number) =>
    this.call(this.spool.api.POST("/v1/sessions/{id}/regenerate", { params: { path: { id } }, body: { seq } }));
  /** The person's message at `seq` (an earlier version) back on the chat's active branch. */
  selectVersion = (id: string, seq: number) =>
    this.call(this.spool.api.POST("/v1/sessions/{id}/messages/{seq}/select", { params: { path: { id, seq } } }));
  deleteSession = (id: string) => this.call(this.spool.api.DELETE("/v1/sessions/{id}", { params: { path: { id } } }));
  sendMessage = (
    id: string,
    content: string,
    client_message_id: string,
    files: string[] = [],
    client_context: Record<string, unknown> | null = null,
    client_tools: { name: string; server?: string; description?: string; input_schema?: Record<string, unknown> }[] = [],
    /** While a turn is pending: queue this message behind it (else it is refused, `409 turn_pending`). */
    enqueue = false,
  ) =>
    this.call(
      this.spool.api.POST("/v1/sessions/{id}/messages", {
        params: { path: { id } },
        body: {
          content,
          client_message_id,
          ...(files.length > 0 ? { files } : {}),
          ...(client_context ? { client_context } : {}),
          ...(enqueue ? { on_busy: "enqueue" as const } : {}),
          // (the generated type says an object schema as `Record<string, never>`)
          ...(client_tools.length > 0 ? { client_tools: client_tools as Schemas["ClientTool"][] } : {}),
        },
      }),
    );
  /** The output of a client tool's call the turn waits for (`tool_start` with `client: true`), or why it failed. */
  toolOutput = (id: string, tool: string, tool_call_id: string, answer: { output: unknown } | { error: string }) =>
    this.call(
      this.spool.api.POST("/v1/sessions/{id}/tool-output", {
        params: { path: { id } },
        body: { tool, tool_call_id, ...answer } as Schemas["ToolOutput"],
      }),
    );
  putCapabilities = (id: string, grant: { library_id: string; jwt: string; capabilities: string[] }) =>
    this.call(this.spool.api.PUT("/v1/sessions/{id}/capabilities", { params: { path: { id } }, body: grant }));
  /** Where a turn is; a queued one that waits for its organization's bound says how many turns are ahead (`queued_behind`). */
  turn = (id: string, turn_id: string): Promise<Turn> =>
    this.call(this.spool.api.GET("/v1/sessions/{id}/turns/{turn_id}", { params: { path: { id, turn_id } } }));
  abort = (id: string) =>
    this.call(this.spool.api.POST("/v1/sessions/{id}/control", { params: { path: { id } }, body: { action: "abort" } }));
  approve = (id: string, tool_call_id: string, decision: "approve" | "decline") =>
    this.call(this.spool.api.POST("/v1/sessions/{id}/approval", { params: { path: { id } }, body: { tool_call_id, decision } }));
  answer = (id: string, question_id: string, answer: string) =>
    this.call(this.spool.api.POST("/v1/sessions/{id}/question", { params: { path: { id } }, body: { question_id, answer } }));
  plan = (id: string, plan_id: string, action: "approve" | "reject", feedback?: string) =>
    this.call(this.spool.api.POST("/v1/sessions/{id}/plan", { params: { path: { id } }, body: { plan_id, action, feedback } }));

  /**
   * The CLI agents where agents run: the server's (installed, version, healthy or why not),
   * and the runners' beside them (none from a server that has no runners).
   */
  clis = async (): Promise<CliAvailability> => {
    const answer: { clis: CliStatus[]; runners?: Runner[]; workspace_roots?: string[] } = await this.call(this.spool.api.GET("/v1/clis"));
    return { clis: answer.clis, runners: answer.runners ?? [], workspaceRoots: answer.workspace_roots ?? [] };
  };
  /** The runners that serve a workspace (`GET /v1/runners?workspace_id=`). */
  runners = async (ws: string): Promise<Runner[]> => {
    const url = `${this.endpoints.api}/v1/runners?workspace_id=${encodeURIComponent(ws)}`;
    const answer = (await (await this.checked(url, {})).json()) as { runners?: Runner[] };
    return answer.runners ?? [];
  };

  // Files
  /**
   * Uploads `file` into a chat in its three steps: declare it, send its bytes where Spool says
   * (straight to storage on AWS), complete it. `progress` hears the fraction sent.
   */
  async uploadFile(session: string, file: File, progress: (fraction: number) => void): Promise<FileRef> {
    return this.completeFile(session, await this.stageFile(session, file, progress));
  }

  /**
   * The first two steps of an upload: declares `file` and sends its bytes. The chat records it
   * (and its agents see it) only once it is completed ([`completeFile`]); one never completed is
   * cleaned up. Answers its attachment id.
   */
  async stageFile(session: string, file: File, progress: (fraction: number) => void): Promise<string> {
    const declared = await this.call(
      this.spool.api.POST("/v1/sessions/{id}/attachments", {
        params: { path: { id: session } },
        body: { filename: file.name, content_type: file.type, size: file.size },
      }),
    );
    const { method, url, headers } = declared.upload;
    // A relative URL is Spool's own upload route.
    const target = url.startsWith("/") ? `${this.endpoints.api}${url}` : url;
    await sendBytes(method, target, headers, file, progress);
    return declared.attachment_id;
  }

  /** Completes a staged file: the chat records it, and a message may name it. */
  async completeFile(session: string, attachmentId: string): Promise<FileRef> {
    const done = await this.call(
      this.spool.api.POST("/v1/sessions/{id}/attachments/{attachment_id}/complete", {
        params: { path: { id: session, attachment_id: attachmentId } },
      }),
    );
    return done.attachment;
  }

  /** A chat's file, fetched with the token (following the redirect to storage on AWS). */
  fileBlob = async (session: string, id: string): Promise<Blob> =>
    // An empty file has no body to parse: it is an empty Blob.
    (await this.call(
      this.spool.api.GET("/v1/sessions/{id}/attachments/{attachment_id}", {
        params: { path: { id: session, attachment_id: id } },
        parseAs: "blob",
      }),
    )) ?? new Blob([]);

  // Slash commands
  commands = async (ws: string) =>
    (await this.call(this.spool.api.GET("/v1/workspaces/{id}/slash-commands", { params: { path: { id: ws } } }))).commands;
  commandFile = (ws: string, name: string): Promise<string> =>
    this.call(
      this.spool.api.GET("/v1/workspaces/{id}/slash-commands/{name}", { params: { path: { id: ws, name } }, parseAs: "text" }),
    );
  /** A command's markdown file, sent as itself (`text/markdown`). */
  saveCommand = (ws: string, name: string, markdown: string) =>
    this.call(
      this.spool.api.PUT("/v1/workspaces/{id}/slash-commands/{name}", {
        params: { path: { id: ws, name } },
        body: markdown,
        bodySerializer: (text: string) => text,
        headers: { "content-type": "text/markdown" },
      }),
    );
  deleteCommand = (ws: string, name: string) =>
    this.call(this.spool.api.DELETE("/v1/workspaces/{id}/slash-commands/{name}", { params: { path: { id: ws, name } } }));
  /** Files for an `@` mention: the chat's own and the working directory's, best first. */
  searchFiles = async (ws: string, session: string, q: string) =>
    (
      await this.call(
        this.spool.api.GET("/v1/workspaces/{id}/files", { params: { path: { id: ws }, query: { q, limit: 8, session_id: session } } }),
      )
    ).files;
  previewCommand = (id: string, input: string) =>
    this.call(this.spool.api.POST("/v1/sessions/{id}/slash-commands/preview", { params: { path: { id } }, body: { input } }));
  invokeCommand = (id: string, input: string, client_message_id: string) =>
    this.call(
      this.spool.api.POST("/v1/sessions/{id}/slash-commands/invoke", { params: { path: { id } }, body: { input, client_message_id } }),
    );
}

/** A refusal's `ApiError`: the contract's code and message, or the status line. */
async function refusal(response: Response): Promise<ApiError> {
  let code = "http_error";
  let message = `${response.url} failed with ${response.status}`;
  try {
    const error = ((await response.json()) as { error?: { code: string; message: string } }).error;
    if (error) ({ code, message } = error);
  } catch {
    // not the contract's JSON (a proxy's page): keep the status line
  }
  return new ApiError(response.status, code, message);
}

/**
 * Sends a file's bytes with XMLHttpRequest (fetch reports no upload progress), with exactly the
 * headers the upload needs (`content-length` is the browser's own to set).
 */
function sendBytes(
  method: string,
  url: string,
  headers: Record<string, string>,
  file: File,
  progress: (fraction: number) => void,
): Promise<void> {
  return new Promise((resolve, reject) => {
    const xhr = new XMLHttpRequest();
    xhr.open(method, url);
    for (const [name, value] of Object.entries(headers)) {
      if (name.toLowerCase() !== "content-length" && name.toLowerCase() !== "host") xhr.setRequestHeader(name, value);
    }
    xhr.upload.onprogress = (e) => e.lengthComputable && progress(e.loaded / e.total);
    xhr.onload = () => {
      if (xhr.status >= 200 && xhr.status < 300) {
        progress(1);
        resolve();
        return;
      }
      let message = `the upload of ${file.name} failed with ${xhr.status}`;
      try {
        const error = (JSON.parse(xhr.responseText) as { error?: { message: string } }).error;
        if (error) message = error.message;
      } catch {
        // storage's own error document: keep the status
      }
      reject(new ApiError(xhr.status, "upload_failed", message));
    };
    xhr.onerror = () => reject(new ApiError(0, "network", `The upload of ${file.name} was cut off; try again.`));
    xhr.send(file);
  });
}
