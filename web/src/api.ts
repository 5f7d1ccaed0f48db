// The HTTP contract, as the UI uses it: a token from the handshake, JSON in and out, and the
// contract's `{"error": {"code", "message"}}` turned into an `ApiError` whose message can be shown.

export type Runtime = "scripted" | "openai" | "anthropic" | "cli";
export type CliType = "claude" | "gemini" | "codex" | "opencode";
export const CLI_TYPES: CliType[] = ["claude", "gemini", "codex", "opencode"];
export const RUNTIMES: Runtime[] = ["scripted", "openai", "anthropic", "cli"];

export interface Workspace {
  id: string;
  title: string;
  name: string;
  description: string;
  working_directory_mode: "static" | "temp";
  working_directory_path: string | null;
  working_dir: string | null;
  cleanup: { turn_record_days: number; chat_folder_days: number };
  notifications: Notifications & {
    /** What the settings do on this server: `off`, `log_only` (no email sender), `email`. */
    status: { state: "off" | "log_only" | "email"; message: string };
  };
  created_at: string;
  updated_at: string;
}

export interface Notifications {
  email: string | null;
  on_question: boolean;
  on_failure: boolean;
  on_task: boolean;
}

/** A change to a workspace's settings (`PATCH /v1/workspaces/{id}`): only what it names. */
export interface WorkspaceChange {
  title?: string;
  description?: string;
  working_directory_mode?: "static" | "temp";
  working_directory_path?: string | null;
  cleanup?: Partial<Workspace["cleanup"]>;
  notifications?: Partial<Notifications>;
}

export interface Agent {
  id: string;
  workspace_id: string;
  name: string;
  instruction: string;
  runtime: Runtime | null;
  model: string | null;
  cli_type: CliType | null;
  position: number;
  builtin: boolean;
}

export interface Session {
  id: string;
  workspace_id: string | null;
  agent_id: string | null;
  agent_name: string | null;
  title: string;
  cli_type: CliType | null;
  global: boolean;
  pending_turn_id: string | null;
  created_at: string;
  last_active_at: string;
  last_message_preview: string;
}

export interface Task {
  id: string;
  workspace_id: string;
  session_id: string | null;
  title: string;
  description: string;
  created_at: string;
}

/**
 * Every chat event type the server writes: the `type` values of the OpenAPI document's
 * `ChatEvent` union (a test in `tests/it/openapi_http.rs` fails if the two disagree).
 */
export type EventType =
  | "user_message_submitted"
  | "control_submitted"
  | "tool_output_submitted"
  | "approval_submitted"
  | "question_answered"
  | "plan_submitted"
  | "agent_message"
  | "agent_start"
  | "message_start"
  | "message_update"
  | "message_end"
  | "tool_start"
  | "tool_end"
  | "tool_approval_required"
  | "ask_question"
  | "plan_approval_required"
  | "usage"
  | "agent_end"
  | "system"
  | "slash_command_invoked"
  | "slash_command_failed";

/** One event of a workspace's feed: flat, its `type`, its unique `id`, and its fields. */
export interface FeedEvent {
  type: string;
  id: string;
  ts: string;
  [field: string]: unknown;
}

/** One chat event: the envelope of the HTTP contract. */
export interface ChatEvent {
  seq: number;
  ts: string;
  session_id: string;
  kind: "submit" | "harness" | "system";
  type: EventType;
  payload: Record<string, unknown>;
  client_message_id?: string;
  turn_id?: string;
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

/** An id in a path: ids come from URLs people can edit, so they never reach a path raw. */
const enc = encodeURIComponent;

/** A read grant: `POST /v1/read-tokens`. */
export interface ReadToken {
  path: string;
  read_token: string;
  expires_at: string;
  url: string;
}

/** What `POST /v1/handshake` answers. */
export interface Handshake {
  jwt: string;
  expires_at: string;
  org_id: string;
}

interface StoredToken {
  jwt: string;
  expires_at: string;
}

export class Client {
  private jwt: string | null = null;
  /** Called when the token is missing, expired or refused: the UI asks for a key again. */
  onSignedOut: (reason: string) => void = () => {};

  constructor(readonly endpoints: Endpoints) {
    try {
      const stored = JSON.parse(localStorage.getItem(TOKEN_KEY) ?? "null") as StoredToken | null;
      // A token that expires within the minute is as good as gone.
      if (stored && Date.parse(stored.expires_at) - Date.now() > 60_000) this.jwt = stored.jwt;
    } catch {
      localStorage.removeItem(TOKEN_KEY);
    }
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
    return await this.request<Handshake>("POST", "/v1/handshake", {
      version: "1",
      user_agent: `spool-web (${navigator.userAgent})`,
      api_key: apiKey.trim(),
    });
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

  async request<T>(method: string, path: string, body?: unknown): Promise<T> {
    const response = await this.send(method, `${this.endpoints.api}${path}`, body);
    if (response.status === 204) return undefined as T;
    return (await response.json()) as T;
  }

  /** A stream route (`/v1/stream/…`), answered as a raw response. */
  stream(path: string, init: RequestInit = {}): Promise<Response> {
    return this.send("GET", `${this.endpoints.streams}${path}`, undefined, init);
  }

  /**
   * A stream route read with a read grant (`?read_token=`) instead of the person's token: the
   * answer is the same for every reader of the stream, so a CDN in front of Spool answers them
   * all with one request. A refused grant is the caller's to renew; it never signs anyone out.
   */
  sharedStream(path: string, grant: string, init: RequestInit = {}): Promise<Response> {
    const url = `${this.endpoints.streams}${path}${path.includes("?") ? "&" : "?"}read_token=${encodeURIComponent(grant)}`;
    return this.send("GET", url, undefined, init, false);
  }

  /** A read grant for one stream (`POST /v1/read-tokens`). */
  readToken = (path: string) => this.request<ReadToken>("POST", "/v1/read-tokens", { path });


  private async send(
    method: string,
    url: string,
    body?: unknown,
    init: RequestInit = {},
    authorized = true,
  ): Promise<Response> {
    const headers: Record<string, string> = {};
    if (this.jwt && authorized) headers.authorization = `Bearer ${this.jwt}`;
    // A command's markdown file goes as itself; everything else as JSON.
    const markdown = body instanceof Markdown;
    if (body !== undefined) headers["content-type"] = markdown ? "text/markdown" : "application/json";
    let response: Response;
    try {
      response = await fetch(url, {
        ...init,
        method,
        headers,
        body: body === undefined ? undefined : markdown ? body.text : JSON.stringify(body),
      });
    } catch (e) {
      if (e instanceof DOMException && e.name === "AbortError") throw e;
      throw new ApiError(0, "network", "Spool cannot be reached; check your connection, then try again.");
    }
    if (response.ok) return response;
    let code = "http_error";
    let message = `${method} ${url} failed with ${response.status}`;
    try {
      const error = ((await response.json()) as { error?: { code: string; message: string } }).error;
      if (error) ({ code, message } = error);
    } catch {
      // not the contract's JSON (a proxy's page): keep the status line
    }
    if (response.status === 401 && authorized && !url.endsWith("/v1/handshake")) {
      this.signOut("Your sign-in has expired or was refused; enter an API key again.");
    }
    throw new ApiError(response.status, code, message);
  }

  // Workspaces, agents, tasks
  workspaces = () => this.request<{ workspaces: Workspace[] }>("GET", "/v1/workspaces").then((r) => r.workspaces);
  createWorkspace = (title: string) => this.request<Workspace>("POST", "/v1/workspaces", { title });
  workspace = (ws: string) => this.request<Workspace>("GET", `/v1/workspaces/${enc(ws)}`);
  updateWorkspace = (ws: string, change: WorkspaceChange) =>
    this.request<Workspace>("PATCH", `/v1/workspaces/${enc(ws)}`, change);
  deleteWorkspace = (ws: string) => this.request<void>("DELETE", `/v1/workspaces/${enc(ws)}`);
  agents = (ws: string) =>
    this.request<{ agents: Agent[] }>("GET", `/v1/workspaces/${enc(ws)}/agents`).then((r) => r.agents);
  createAgent = (ws: string, agent: AgentFields) => this.request<Agent>("POST", `/v1/workspaces/${enc(ws)}/agents`, agent);
  updateAgent = (id: string, patch: Partial<AgentFields>) => this.request<Agent>("PATCH", `/v1/agents/${enc(id)}`, patch);
  deleteAgent = (id: string) => this.request<void>("DELETE", `/v1/agents/${enc(id)}`);
  reorderAgents = (ws: string, agent_ids: string[]) =>
    this.request<unknown>("PUT", `/v1/workspaces/${enc(ws)}/agents/order`, { agent_ids });
  tasks = (ws: string) => this.request<{ tasks: Task[] }>("GET", `/v1/workspaces/${enc(ws)}/tasks`).then((r) => r.tasks);
  task = (id: string) => this.request<Task>("GET", `/v1/tasks/${enc(id)}`);
  createTask = (ws: string, task: { title: string; description: string; session_id?: string }) =>
    this.request<Task>("POST", `/v1/workspaces/${enc(ws)}/tasks`, task);
  updateTask = (id: string, patch: { title?: string; description?: string }) =>
    this.request<Task>("PATCH", `/v1/tasks/${enc(id)}`, patch);
  deleteTask = (id: string) => this.request<void>("DELETE", `/v1/tasks/${enc(id)}`);

  // Chats
  sessions = (ws: string) =>
    this.request<{ sessions: Session[] }>("GET", `/v1/sessions?workspace_id=${encodeURIComponent(ws)}`).then(
      (r) => r.sessions,
    );
  session = (id: string) => this.request<Session>("GET", `/v1/sessions/${enc(id)}`);
  createSession = (workspace_id: string, agent_id: string) =>
    this.request<Session>("POST", "/v1/sessions", { workspace_id, agent_id });
  updateSession = (id: string, patch: { title?: string; agent_id?: string; cli_type?: CliType | null }) =>
    this.request<Session>("PATCH", `/v1/sessions/${enc(id)}`, patch);
  deleteSession = (id: string) => this.request<void>("DELETE", `/v1/sessions/${enc(id)}`);
  sendMessage = (
    id: string,
    content: string,
    client_message_id: string,
    files: string[] = [],
    client_context: Record<string, unknown> | null = null,
  ) =>
    this.request<{ seq: number; turn_id?: string }>("POST", `/v1/sessions/${enc(id)}/messages`, {
      content,
      client_message_id,
      ...(files.length > 0 ? { files } : {}),
      ...(client_context ? { client_context } : {}),
    });
  putCapabilities = (id: string, grant: { library_id: string; jwt: string; capabilities: string[] }) =>
    this.request<{ status: "enabled" | "rejected"; capabilities_enabled: string[]; reason?: string }>(
      "PUT",
      `/v1/sessions/${enc(id)}/capabilities`,
      grant,
    );
  abort = (id: string) => this.request<unknown>("POST", `/v1/sessions/${enc(id)}/control`, { action: "abort" });
  approve = (id: string, tool_call_id: string, decision: "approve" | "decline") =>
    this.request<unknown>("POST", `/v1/sessions/${enc(id)}/approval`, { tool_call_id, decision });
  answer = (id: string, question_id: string, answer: string) =>
    this.request<unknown>("POST", `/v1/sessions/${enc(id)}/question`, { question_id, answer });
  plan = (id: string, plan_id: string, action: "approve" | "reject", feedback?: string) =>
    this.request<unknown>("POST", `/v1/sessions/${enc(id)}/plan`, { plan_id, action, feedback });

  /** The CLI agents where agents run: installed, version, healthy or why not. */
  clis = () => this.request<{ clis: CliStatus[] }>("GET", "/v1/clis").then((r) => r.clis);

  // Files
  /**
   * Uploads `file` into a chat in its three steps: declare it, send its bytes where Spool says
   * (straight to storage on AWS), complete it. `progress` hears the fraction sent.
   */
  async uploadFile(session: string, file: File, progress: (fraction: number) => void): Promise<FileRef> {
    const declared = await this.request<Declared>("POST", `/v1/sessions/${enc(session)}/attachments`, {
      filename: file.name,
      content_type: file.type,
      size: file.size,
    });
    const { method, url, headers } = declared.upload;
    // A relative URL is Spool's own upload route.
    const target = url.startsWith("/") ? `${this.endpoints.api}${url}` : url;
    await sendBytes(method, target, headers, file, progress);
    const done = await this.request<{ attachment: FileRef }>(
      "POST",
      `/v1/sessions/${enc(session)}/attachments/${enc(declared.attachment_id)}/complete`,
    );
    return done.attachment;
  }

  /** A chat's file, fetched with the token (following the redirect to storage on AWS). */
  async fileBlob(session: string, id: string): Promise<Blob> {
    const response = await this.send("GET", `${this.endpoints.api}/v1/sessions/${enc(session)}/attachments/${enc(id)}`);
    return await response.blob();
  }

  // Slash commands
  commands = (ws: string) =>
    this.request<{ commands: CommandEntry[] }>("GET", `/v1/workspaces/${enc(ws)}/slash-commands`).then((r) => r.commands);
  commandFile = async (ws: string, name: string): Promise<string> => {
    const response = await this.send("GET", `${this.endpoints.api}/v1/workspaces/${enc(ws)}/slash-commands/${enc(name)}`);
    return await response.text();
  };
  saveCommand = (ws: string, name: string, markdown: string) =>
    this.request<unknown>("PUT", `/v1/workspaces/${enc(ws)}/slash-commands/${enc(name)}`, new Markdown(markdown));
  deleteCommand = (ws: string, name: string) =>
    this.request<void>("DELETE", `/v1/workspaces/${enc(ws)}/slash-commands/${enc(name)}`);
  searchFiles = (ws: string, q: string) =>
    this.request<{ files: { path: string; score: number }[]; truncated: boolean }>(
      "GET",
      `/v1/workspaces/${enc(ws)}/files?q=${encodeURIComponent(q)}&limit=8`,
    ).then((r) => r.files.map((f) => f.path));
  previewCommand = (id: string, input: string) =>
    this.request<CommandPreview>("POST", `/v1/sessions/${enc(id)}/slash-commands/preview`, { input });
  invokeCommand = (id: string, input: string, client_message_id: string) =>
    this.request<CommandInvoked>("POST", `/v1/sessions/${enc(id)}/slash-commands/invoke`, { input, client_message_id });
}

/** A CLI agent as the deployment has it (`GET /v1/clis`). */
export interface CliStatus {
  cli: CliType;
  installed: boolean;
  version?: string;
  healthy: boolean;
  reason?: string;
}

/** The CLIs that cannot run, with why, for a CLI dropdown. */
export function unavailableClis(clis: CliStatus[]): Partial<Record<CliType, string>> {
  return Object.fromEntries(clis.filter((c) => !c.healthy).map((c) => [c.cli, c.reason ?? "cannot run"]));
}

/** A chat's file, as events and the attachments routes name it. */
export interface FileRef {
  id: string;
  filename: string;
  content_type: string;
  size: number;
}

/** What declaring a file answers. */
interface Declared {
  attachment_id: string;
  upload: { method: string; url: string; headers: Record<string, string> };
  expires_at: string;
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

/** A command's markdown file, sent as `text/markdown`. */
class Markdown {
  constructor(readonly text: string) {}
}

/** A command as a chat sees it (`GET /v1/workspaces/{id}/slash-commands`). */
export interface CommandEntry {
  name: string;
  description?: string;
  argument_hint?: string;
  source: "builtin" | "global" | "workspace";
  kind?: "prompt" | "action";
  action?: string;
  overrides?: "builtin" | "global" | "workspace";
  file?: string;
  error?: string;
}

/** What invoking an input would do. */
export interface CommandPreview {
  name: string;
  kind: "prompt" | "action";
  prompt?: string;
  model?: string;
  action?: string;
  effect?: string;
}

/** An invocation that ran. */
export interface CommandInvoked {
  seq: number;
  duplicate: boolean;
  turn_id?: string;
  action?: string;
  new_session?: Session;
  session?: Session;
  commands?: CommandEntry[];
}

export interface AgentFields {
  name: string;
  instruction: string;
  runtime: Runtime | null;
  model: string | null;
  cli_type: CliType | null;
}
