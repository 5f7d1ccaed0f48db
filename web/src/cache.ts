// The timelines of recently opened chats, kept in localStorage so that a reload shows the chat at
// once and resumes its stream after the last event it saw instead of replaying the whole chat.
// A cache is only a head start: an entry that cannot be read or written is dropped.

import { EMPTY, type Timeline } from "./timeline";

const PREFIX = "spool.chat.";
const INDEX = "spool.chats";
const KEEP = 30;

const key = (scope: string, sessionId: string) => `${PREFIX}${scope}.${sessionId}`;

export function loadTimeline(scope: string, sessionId: string): Timeline {
  try {
    const stored = JSON.parse(localStorage.getItem(key(scope, sessionId)) ?? "null") as Timeline | null;
    if (stored && Array.isArray(stored.items) && typeof stored.lastSeq === "number") return stored;
  } catch {
    forget(scope, sessionId);
  }
  return EMPTY;
}

export function saveTimeline(scope: string, sessionId: string, timeline: Timeline): void {
  const k = key(scope, sessionId);
  const recent = [k, ...readIndex().filter((x) => x !== k)];
  for (const old of recent.splice(KEEP)) localStorage.removeItem(old);
  try {
    localStorage.setItem(INDEX, JSON.stringify(recent));
    localStorage.setItem(k, JSON.stringify(timeline));
  } catch {
    // Over quota: drop every cached chat but this one, then give up quietly.
    for (const old of recent.slice(1)) localStorage.removeItem(old);
    try {
      localStorage.setItem(k, JSON.stringify(timeline));
    } catch {
      localStorage.removeItem(k);
    }
  }
}

export function forget(scope: string, sessionId: string): void {
  localStorage.removeItem(key(scope, sessionId));
}

function readIndex(): string[] {
  try {
    const index = JSON.parse(localStorage.getItem(INDEX) ?? "[]") as unknown;
    return Array.isArray(index) ? index.filter((x): x is string => typeof x === "string") : [];
  } catch {
    return [];
  }
}

/**
 * Drops every cached chat: on each sign-in, since a new token may be for a new store (a reset
 * `.spool`, another deployment) where the same chat ids hold other events.
 */
export function forgetAll(): void {
  for (const k of readIndex()) localStorage.removeItem(k);
  localStorage.removeItem(INDEX);
}
