// The companion, as the UI sees it: a local service (`spool companion`) over the person's
// notes, looked for at start in parallel with everything else and never waited on. Every call
// to it has one second; a companion that is absent, slow or refused leaves the UI in "Offline
// mode", working exactly as without one, and then nothing consults it at all: a message is sent
// at once. Connected, each chat in view gets the companion's capabilities (its token, presented
// to Spool), and each message carries what the notes say about it (`client_context`). A chat
// whose capabilities include `capture_ingest` can save into the notes: "Save to notes" on a
// message, and a capture an agent proposes once the person approves it (`capture`). A chat
// whose capabilities include `mcp_tools` offers its agent the tools of the companion's own MCP
// servers: each message declares them as client tools (`companion__{server}__{tool}`), and an
// agent's call of one runs on the companion (`POST /mcp/call`), its result posted to Spool as the
// tool's output. Offline, those tools are simply not declared.

import { useEffect, useState } from "preact/hooks";
import type { ChatEvent, Client } from "./api";

/** Where the companion is looked for unless the person set another address. */
export const DEFAULT_COMPANION_URL = "http://127.0.0.1:8826";
const URL_KEY = "spool.companion.url";
/** How long any call to the companion may take. */
const TIMEOUT_MS = 1000;

export type CompanionState =
  | { status: "checking" }
  | { status: "connected"; url: string; library_id: string; jwt: string; capabilities: string[] }
  | { status: "offline"; reason: string };

let state: CompanionState = { status: "checking" };
const listeners = new Set<(s: CompanionState) => void>();
/** The chats whose capabilities were asked for with the current token. */
let enabled = new Map<string, Promise<void>>();
/** What Spool enabled for each chat with the current token. */
let granted = new Map<string, string[]>();

function set(next: CompanionState) {
  state = next;
  listeners.forEach((l) => l(next));
}

export function companionUrl(): string {
  return localStorage.getItem(URL_KEY) || DEFAULT_COMPANION_URL;
}

/** Looks for the companion at `url` from now on. */
export function setCompanionUrl(url: string) {
  if (url.trim() && url.trim() !== DEFAULT_COMPANION_URL) localStorage.setItem(URL_KEY, url.trim());
  else localStorage.removeItem(URL_KEY);
  void connect();
}

/** The companion's state, kept current. */
export function useCompanion(): CompanionState {
  const [current, setCurrent] = useState(state);
  useEffect(() => {
    listeners.add(setCurrent);
    setCurrent(state);
    return () => void listeners.delete(setCurrent);
  }, []);
  return current;
}

/** A call to the companion, its answer read whole, within `TIMEOUT_MS`: a companion that
 * sends its headers and then stalls is cut off too. */
async function timed(url: string, init: RequestInit = {}, timeoutMs = TIMEOUT_MS): Promise<{ ok: boolean; status: number; body: any }> {
  const abort = new AbortController();
  const timer = setTimeout(() => abort.abort(), timeoutMs);
  try {
    const response = await fetch(url, { ...init, signal: abort.signal });
    const body = await response.json().catch(() => ({}));
    return { ok: response.ok, status: response.status, body };
  } finally {
    clearTimeout(timer);
  }
}

/** A token is asked for again this long after the last, well before it expires (a day). */
const REFRESH_MS = 6 * 3600 * 1000;
let refresh: ReturnType<typeof setTimeout> | undefined;

/** Looks for the companion: its handshake, within a second. */
export async function connect(): Promise<void> {
  const url = companionUrl().replace(/\/+$/, "");
  set({ status: "checking" });
  enabled = new Map();
  granted = new Map();
  tools = null;
  clearTimeout(refresh);
  try {
    const { ok, status, body } = await timed(`${url}/handshake`, {
      method: "POST",
      headers: { "content-type": "application/json" },
      body: JSON.stringify({ version: "1", user_agent: "spool-web" }),
    });
    if (!ok) {
      set({ status: "offline", reason: `The companion at ${url} could not get a token: ${body?.error?.message ?? status}` });
      return;
    }
    set({ status: "connected", url, library_id: body.library_id, jwt: body.jwt, capabilities: body.capabilities ?? [] });
    // The companion starts its MCP servers for the first list: started now, ready for messages.
    if ((body.capabilities ?? []).includes(MCP_TOOLS)) void listTools(url);
    // A tab left open gets a fresh token before this one expires.
    refresh = setTimeout(() => void connect(), REFRESH_MS);
  } catch {
    set({
      status: "offline",
      reason: `No companion answered at ${url} within a second. Run \`spool companion --library ~/notes --spool-url ${location.origin}\` so that answers know your notes.`,
    });
  }
}

/** Turns the companion's capabilities on for chat `sessionId` (once per token). */
export function enableFor(client: Client, sessionId: string): Promise<void> {
  const current = state;
  if (current.status !== "connected") return Promise.resolve();
  let asked = enabled.get(sessionId);
  if (!asked) {
    asked = client
      .putCapabilities(sessionId, { library_id: current.library_id, jwt: current.jwt, capabilities: current.capabilities })
      .then((outcome) => {
        if (outcome.status === "rejected") set({ status: "offline", reason: `Spool refused the companion's token: ${outcome.reason ?? "no reason given"}` });
        // Authenticated, but nothing enabled: answers will not know the notes; say why.
        else if (outcome.capabilities_enabled.length === 0)
          set({ status: "offline", reason: `Spool enabled nothing for the companion: ${outcome.reason ?? "no reason given"}` });
        else if (state.status === "connected" && state.jwt === current.jwt) {
          granted.set(sessionId, outcome.capabilities_enabled);
          set({ ...state }); // the chat's views learn what it may do now
        }
      })
      // Asked again next time: a failed request is not an answer.
      .catch(() => void enabled.delete(sessionId));
    enabled.set(sessionId, asked);
  }
  return asked;
}

/** What the notes say about `query`, or nothing: at once when offline, within a second when connected. */
export async function contextFor(query: string): Promise<Record<string, unknown> | null> {
  const current = state;
  if (current.status !== "connected" || !query.trim()) return null;
  try {
    const { ok, body } = await timed(`${current.url}/context-for-query?q=${encodeURIComponent(query.slice(0, 1000))}`);
    if (!ok || typeof body !== "object" || body === null) return null;
    const context = body as Record<string, unknown>;
    return typeof context.summary === "string" ? { ...context, summary: quotable(context.summary) } : context;
  } catch {
    return null; // late or failed: the message goes without it
  }
}

/**
 * Passages of notes as an agent may quote them in its markdown: without the notes' front matter,
 * on one line (so no line of a passage becomes a heading, a rule or a list in the reply).
 */
export function quotable(passages: string): string {
  return passages
    .replace(/(^|\n|: )---[ \t]*\n(?:[\w-]+[ \t]*:[^\n]*\n)+---[ \t]*(?=\n|$)/g, "$1")
    .replace(/(^|\n)[ \t]*(?:#{1,6}[ \t]+|---+[ \t]*(?=\n|$)|===+[ \t]*(?=\n|$))/g, "$1")
    .replace(/\s*\n\s*/g, " ")
    .trim();
}

export interface OpenLoop {
  id: string;
  title: string;
  last_mentioned: string;
}

export interface Suggestion {
  title: string;
  action: string;
  source: string;
}

/** The companion's open loops and suggestions, when connected. */
export async function sidePanel(): Promise<{ loops: OpenLoop[]; suggestions: Suggestion[] } | null> {
  const current = state;
  if (current.status !== "connected") return null;
  try {
    const [loops, suggestions] = await Promise.all([timed(`${current.url}/open-loops`), timed(`${current.url}/proactive-suggestions`)]);
    return { loops: loops.body.open_loops ?? [], suggestions: suggestions.body.suggestions ?? [] };
  } catch {
    return null;
  }
}

/** The capability that lets a chat save into the person's notes. */
export const CAPTURE_INGEST = "capture_ingest";

/** Whether chat `sessionId` may save into the notes now: Spool enabled `capture_ingest` for it and the companion is there. */
export function canCapture(companion: CompanionState, sessionId: string): boolean {
  return companion.status === "connected" && (granted.get(sessionId) ?? []).includes(CAPTURE_INGEST);
}

/** A note the companion captured. */
export interface Captured {
  id: string;
  path: string;
  title: string;
}

/** How long a capture may take: the companion writes and indexes the note before it answers. */
const CAPTURE_TIMEOUT_MS = 5000;

/** Saves a note into the person's library (`POST /capture`); throws an Error that says why not. */
export async function capture(note: { title?: string; text: string; source?: string }): Promise<Captured> {
  const current = state;
  if (current.status !== "connected") throw new Error("No companion is connected: start `spool companion` to save notes.");
  let answer;
  try {
    answer = await timed(
      `${current.url}/capture`,
      { method: "POST", headers: { "content-type": "application/json" }, body: JSON.stringify(note) },
      CAPTURE_TIMEOUT_MS,
    );
  } catch {
    throw new Error(`The companion at ${current.url} did not answer; is \`spool companion\` still running?`);
  }
  if (!answer.ok) throw new Error(`The companion did not save the note: ${answer.body?.error?.message ?? answer.status}`);
  return answer.body as Captured;
}

/** The capability that lets a chat's agents use the tools of the companion's MCP servers. */
export const MCP_TOOLS = "mcp_tools";
/** How the names of the companion's tools begin: `companion__{server}__{tool}`. */
export const TOOL_PREFIX = "companion__";
/** The most tools a message declares (Spool's `ClientTool::MAX`). */
const MAX_CLIENT_TOOLS = 16;
/** The largest input schema a declared tool may have (Spool's rule), as JSON. */
const MAX_SCHEMA_BYTES = 16 * 1024;
/** How long listing the tools may take: the companion starts its servers for the first list. */
const LIST_TIMEOUT_MS = 40_000;
/** How long a message waits for a list not there yet: after that it goes without the tools. */
const LIST_WAIT_MS = 1000;
/** A list is asked for again this long after the last (a server added or restarted). */
const LIST_TTL_MS = 60_000;
/** How long a call may take: the companion bounds its own at 60 s. */
const CALL_TIMEOUT_MS = 65_000;

/** A tool of one of the companion's MCP servers (`GET /mcp/tools`). */
export interface CompanionTool {
  name: string;
  server: string;
  tool: string;
  description?: string;
  input_schema: Record<string, unknown>;
  /** The server marks it read-only: it runs without asking the person. */
  read_only?: boolean;
}

/** A tool a message declares for its turn (Spool's `ClientTool`). */
export interface ClientTool {
  name: string;
  /** The companion's MCP server that runs it, named with its calls (`tool_start`'s `server`). */
  server?: string;
  description?: string;
  input_schema?: { [key: string]: unknown };
}

let tools: { url: string; at: number; list: Promise<CompanionTool[]> } | null = null;

/** The companion's tools, asked for at most once a minute; none when it cannot list them. */
function listTools(url: string): Promise<CompanionTool[]> {
  if (tools && tools.url === url && Date.now() - tools.at < LIST_TTL_MS) return tools.list;
  const list = timed(`${url}/mcp/tools`, {}, LIST_TIMEOUT_MS).then(
    ({ ok, body }) => (ok ? ((body.servers ?? []) as { tools?: CompanionTool[] }[]).flatMap((s) => s.tools ?? []) : []),
    () => [] as CompanionTool[],
  );
  const asked = { url, at: Date.now(), list };
  tools = asked;
  // A failed list is asked for again with the next message.
  void list.then((found) => {
    if (found.length === 0 && tools === asked) tools = null;
  });
  return list;
}

/**
 * The companion's tools for the next message of chat `sessionId`: none at once when offline or
 * when Spool did not enable `mcp_tools` for the chat; within a second otherwise. At most 16 go
 * (Spool's bound), each telling the model which of the person's servers runs it.
 */
export async function toolsFor(sessionId: string): Promise<ClientTool[]> {
  const current = state;
  if (current.status !== "connected" || !(granted.get(sessionId) ?? []).includes(MCP_TOOLS)) return [];
  const late = new Promise<CompanionTool[]>((r) => setTimeout(() => r([]), LIST_WAIT_MS));
  const listed = await Promise.race([listTools(current.url), late]);
  return listed
    .filter((t) => t.name.startsWith(TOOL_PREFIX) && t.input_schema?.type === "object" && JSON.stringify(t.input_schema).length <= MAX_SCHEMA_BYTES)
    .slice(0, MAX_CLIENT_TOOLS)
    .map((t) => ({
      name: t.name,
      server: t.server,
      description: `${t.description ?? t.tool} (tool \`${t.tool}\` of the MCP server \`${t.server}\` on the person's machine)`.slice(0, 1024),
      input_schema: t.input_schema,
    }));
}

/** A tool this browser declared for a turn it sent: the only calls it runs on the companion. */
interface Declared {
  name: string;
  server?: string;
}
/** Where this browser keeps the turns it sent and the tools each declared (a reload still knows them). */
const TURNS_KEY = "spool.companion.turns";
/** The most turns remembered; the oldest are forgotten first. */
const MAX_TURNS = 200;

function sentTurns(): Record<string, { session: string; tools: Declared[] }> {
  try {
    const found = JSON.parse(localStorage.getItem(TURNS_KEY) ?? "{}");
    return found && typeof found === "object" ? found : {};
  } catch {
    return {};
  }
}

/** Calls whose turn this tab did not know yet (its send not answered): run once it is noted. */
const parked = new Map<string, { client: Client; sessionId: string; events: ChatEvent[] }>();

/** Notes that this browser sent turn `turnId` of chat `sessionId`, declaring `declared`. */
export function sentTurn(turnId: string, sessionId: string, declared: ClientTool[]) {
  const turns = sentTurns();
  turns[turnId] = { session: sessionId, tools: declared.map((t) => ({ name: t.name, server: t.server })) };
  const ids = Object.keys(turns);
  for (const old of ids.slice(0, Math.max(0, ids.length - MAX_TURNS))) delete turns[old];
  localStorage.setItem(TURNS_KEY, JSON.stringify(turns));
  const waiting = parked.get(turnId);
  parked.delete(turnId);
  if (waiting) runCompanionCalls(waiting.client, waiting.sessionId, waiting.events);
}

/** The calls this tab has taken. */
const taken = new Set<string>();

/**
 * Runs the companion's tools that chat `sessionId`'s agent called in `events` (a `tool_start`
 * with `client: true` and a `companion__` name), posting each result as the tool's output. Only
 * a call of a turn this browser sent, of a tool it declared for that turn, runs: anyone else's
 * message declaring a companion tool never runs anything here. A call is run once across this
 * browser's tabs; one the companion's server does not mark read-only asks the person first.
 */
export function runCompanionCalls(client: Client, sessionId: string, events: ChatEvent[]) {
  const answered = new Set<string>();
  for (const e of events) {
    const p = e.payload as { tool_call_id?: unknown };
    if ((e.type === "tool_output_submitted" || e.type === "tool_end") && typeof p.tool_call_id === "string") answered.add(p.tool_call_id);
  }
  const turns = sentTurns();
  for (const e of events) {
    if (e.type !== "tool_start" || !e.turn_id) continue;
    const p = e.payload as { tool_call_id: string; tool: string; arguments?: unknown; client?: boolean };
    if (p.client !== true || !p.tool.startsWith(TOOL_PREFIX) || answered.has(p.tool_call_id) || taken.has(p.tool_call_id)) continue;
    const turn = turns[e.turn_id];
    if (!turn) {
      // Perhaps this tab's send not answered yet: kept a while for `sentTurn`.
      const waiting = parked.get(e.turn_id) ?? { client, sessionId, events: [] };
      waiting.events.push(e);
      parked.set(e.turn_id, waiting);
      setTimeout(() => parked.delete(e.turn_id!), 30_000);
      continue;
    }
    const declared = turn.tools.find((t) => t.name === p.tool);
    if (turn.session !== sessionId || !declared) continue;
    taken.add(p.tool_call_id);
    void once(p.tool_call_id, () => runCall(client, sessionId, declared, p.tool_call_id, p.arguments));
  }
}

/** A call waiting for the person's word: run it on the companion, or decline. */
export interface Confirm {
  id: string;
  sessionId: string;
  server: string;
  tool: string;
  arguments: unknown;
  answer: (run: boolean) => void;
}

let confirms: Confirm[] = [];
const confirmListeners = new Set<(c: Confirm[]) => void>();

function setConfirms(next: Confirm[]) {
  confirms = next;
  confirmListeners.forEach((l) => l(next));
}

/** The calls of chat `sessionId` waiting for the person's word, kept current. */
export function useConfirms(sessionId: string): Confirm[] {
  const [current, setCurrent] = useState(confirms);
  useEffect(() => {
    confirmListeners.add(setCurrent);
    setCurrent(confirms);
    return () => void confirmListeners.delete(setCurrent);
  }, []);
  return current.filter((c) => c.sessionId === sessionId);
}

/** Asks the person whether to run `tool` of `server` with `args`: true to run. */
function ask(id: string, sessionId: string, server: string, tool: string, args: unknown): Promise<boolean> {
  return new Promise((resolve) => {
    const answer = (run: boolean) => {
      setConfirms(confirms.filter((c) => c.id !== id));
      resolve(run);
    };
    setConfirms([...confirms, { id, sessionId, server, tool, arguments: args, answer }]);
  });
}

/** Runs `run` unless another tab of this browser ran call `id` (a lock, and a mark left). */
async function once(id: string, run: () => Promise<void>) {
  const key = `spool.companion.call.${id}`;
  const guarded = async () => {
    if (localStorage.getItem(key)) return;
    localStorage.setItem(key, String(Date.now()));
    await run();
  };
  if (navigator.locks) await navigator.locks.request(key, guarded);
  else await guarded();
}

async function runCall(client: Client, sessionId: string, declared: Declared, id: string, args: unknown) {
  const name = declared.name;
  // The chat must still have `mcp_tools`: otherwise the call is not this browser's to run.
  const session = await client.session(sessionId).catch(() => null);
  if (!((session as { capabilities?: string[] } | null)?.capabilities ?? []).includes(MCP_TOOLS)) return;
  const current = state;
  let answer: { output: unknown } | { error: string };
  // `companion__{server}__{tool}`: a server's name has no `__`.
  const rest = name.slice(TOOL_PREFIX.length);
  const cut = rest.indexOf("__");
  if (current.status !== "connected") {
    answer = { error: "The person's companion is not connected (Offline mode), so its tools cannot run." };
  } else {
    const known = (await listTools(current.url)).find((t) => t.name === name);
    const server = known?.server ?? declared.server ?? rest.slice(0, cut);
    const tool = known?.tool ?? rest.slice(cut + 2);
    const body = JSON.stringify({ server, tool, ...(args && typeof args === "object" ? { arguments: args } : {}) });
    if (known?.read_only !== true && !(await ask(id, sessionId, server, tool, args))) {
      answer = { error: "declined by the person" };
    } else {
      try {
        const r = await timed(`${current.url}/mcp/call`, { method: "POST", headers: { "content-type": "application/json" }, body }, CALL_TIMEOUT_MS);
        answer = r.ok ? { output: r.body } : { error: `The MCP server \`${server}\` on the person's companion failed: ${r.body?.error?.message ?? r.status}` };
      } catch {
        answer = { error: `The person's companion did not answer the call of \`${tool}\` (MCP server \`${server}\`) in time.` };
      }
    }
  }
  try {
    await client.toolOutput(sessionId, name, id, answer);
  } catch (e) {
    // Answered already (by another tab), or the turn ended: nothing waits for it.
    console.warn("the companion's tool output was not taken", e);
  }
}
