// The companion, as the UI sees it: a local service (`spool companion`) over the person's
// notes, looked for at start in parallel with everything else and never waited on. Every call
// to it has one second; a companion that is absent, slow or refused leaves the UI in "Offline
// mode", working exactly as without one, and then nothing consults it at all: a message is sent
// at once. Connected, each chat in view gets the companion's capabilities (its token, presented
// to Spool), and each message carries what the notes say about it (`client_context`). A chat
// whose capabilities include `capture_ingest` can save into the notes: "Save to notes" on a
// message, and a capture an agent proposes once the person approves it (`capture`).

import { useEffect, useState } from "preact/hooks";
import type { Client } from "./api";

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
    return ok ? body : null;
  } catch {
    return null; // late or failed: the message goes without it
  }
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
