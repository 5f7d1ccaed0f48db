// A chat's timeline, folded from its events. `apply` is pure and keyed by `seq`: an event at or
// below `lastSeq` is ignored, so replaying an overlap after a reconnect never shows anything twice.
// The state is plain JSON, so it can be cached and a reload resumes after `lastSeq`.

import type { ChatEvent, FileRef } from "./api";
import { type Ranges, setBy, shows } from "./branches";

export interface Action {
  id: string;
  tool: string;
  /** The MCP server whose tool it is (`tool` is then `{server}__{tool}`). */
  server?: string;
  arguments: unknown;
  status: "running" | "done" | "error" | "declined";
  result?: unknown;
}

/** What the timeline shows: each item knows the seq of the event that made it (`seq`). */
export type Item = (
  | {
      kind: "user";
      key: string;
      text: string;
      ts: string;
      files?: FileRef[];
      /** The earlier message this is a new version of (an edit, a regenerate). */
      versionOf?: number;
    }
  | { kind: "file"; key: string; file: FileRef; replaces?: string; ts: string }
  | {
      kind: "agent";
      key: string;
      author: string;
      text: string;
      ts: string;
      state: "streaming" | "done" | "aborted" | "interrupted";
      actions: Action[];
      toolCallIds: string[];
      /** Its turn, if it has one. */
      turnId?: string;
      /**
       * Where a fork "from here" ends (`at_seq`): its turn's `agent_end` when nothing was shown
       * after the message, else the message's end. Absent while it streams.
       */
      forkSeq?: number;
    }
  | { kind: "system"; key: string; level: string; text: string; ts: string }
  | { kind: "note"; key: string; text: string; ts: string }
  | { kind: "command"; key: string; invokedAs: string; commandKind: string; action?: string; turnId?: string; ts: string }
  | { kind: "command_failed"; key: string; invokedAs: string; reason: string; ts: string }
  | { kind: "compacted"; key: string; fromSeq: number; throughSeq: number; summary: string; by: string; reason: string; ts: string }
  | {
      kind: "approval";
      key: string;
      id: string;
      author: string;
      tool: string;
      /** The MCP server whose tool it is. */
      server?: string;
      arguments: unknown;
      decision?: string;
    }
  | { kind: "question"; key: string; id: string; question: string; answer?: string; author?: string }
  | { kind: "plan"; key: string; id: string; plan: string; action?: string; feedback?: string }
) & { seq?: number };

export interface Timeline {
  /** Items oldest first. */
  items: Item[];
  /** The last event folded in. */
  lastSeq: number;
  /** The turn whose `agent_end` has not arrived yet, if any. */
  pendingTurn: string | null;
  /** The last turn whose `agent_start` arrived: the pending turn runs when it is this one. */
  startedTurn?: string | null;
  /**
   * The seq since which the pending turn waits for its agent's next words (the message that
   * started it, or a person's answer to a question, approval or plan); `null` once they start.
   */
  awaiting?: number | null;
  /** The agent answering now (from `agent_start`). */
  agentName: string;
  /** What the chat's active branch leaves out (`./branches`); absent until it branches. */
  hidden?: Ranges;
}

export const EMPTY: Timeline = { items: [], lastSeq: 0, pendingTurn: null, agentName: "Agent" };

/** The well-formed file references among `v` (a message's `files`, an upload). */
const files = (v: unknown): FileRef[] =>
  Array.isArray(v)
    ? v.filter(
        (f): f is FileRef =>
          typeof f === "object" && f !== null && typeof (f as FileRef).id === "string" && typeof (f as FileRef).filename === "string",
      )
    : [];

/** An event's `server` (an MCP tool's), as a field to spread: absent for Spool's own tools. */
const server = (v: unknown): { server?: string } => (typeof v === "string" && v ? { server: v } : {});

const text = (v: unknown): string => (typeof v === "string" ? v : v === undefined || v === null ? "" : JSON.stringify(v));

/** Folds `events` (in `seq` order) into `timeline`; returns a new timeline, or the same one if nothing applied. */
export function apply(timeline: Timeline, events: ChatEvent[]): Timeline {
  const fresh = events.filter((e) => e.seq > timeline.lastSeq);
  if (fresh.length === 0) return timeline;
  const t: Timeline = { ...timeline, items: [...timeline.items] };
  // Index of each item by key, so updates find their item without a scan.
  const index = new Map<string, number>();
  t.items.forEach((item, i) => index.set(item.key, i));
  let at = 0;
  const push = (item: Item) => {
    index.set(item.key, t.items.length);
    t.items.push({ ...item, seq: at });
  };
  const update = <K extends Item["kind"]>(key: string, kind: K, f: (item: Extract<Item, { kind: K }>) => Item) => {
    const i = index.get(key);
    const item = i === undefined ? undefined : t.items[i];
    if (i !== undefined && item && item.kind === kind) t.items[i] = f(item as Extract<Item, { kind: K }>);
  };
  // The agent message that called a tool (or the latest agent message).
  const owner = (toolCallId: string): string | undefined => {
    for (let i = t.items.length - 1; i >= 0; i--) {
      const item = t.items[i];
      if (item?.kind === "agent" && item.toolCallIds.includes(toolCallId)) return item.key;
    }
    for (let i = t.items.length - 1; i >= 0; i--) {
      const item = t.items[i];
      if (item?.kind === "agent") return item.key;
    }
    return undefined;
  };
  const setAction = (toolCallId: string, f: (a: Action | undefined) => Action) => {
    const key = owner(toolCallId);
    if (!key) return;
    update(key, "agent", (m) => {
      const at = m.actions.findIndex((a) => a.id === toolCallId);
      const actions = [...m.actions];
      if (at < 0) actions.push(f(undefined));
      else actions[at] = f(actions[at]);
      return { ...m, actions };
    });
  };

  for (const e of fresh) {
    // Read field by field (the `text` and `files` helpers check each), whatever the type.
    const p: Record<string, unknown> = e.payload ?? {};
    const msgKey = `m:${text(p.message_id)}`;
    at = e.seq;
    switch (e.type) {
      case "branch_selected":
        t.hidden = setBy(e.seq, p) ?? t.hidden;
        break;
      case "slash_command_invoked":
        push({
          kind: "command",
          key: `c:${e.seq}`,
          invokedAs: text(p.invoked_as),
          commandKind: text(p.kind),
          action: typeof p.action === "string" ? p.action : undefined,
          turnId: e.turn_id ?? undefined,
          ts: e.ts,
        });
        if (e.turn_id) {
          t.pendingTurn = e.turn_id;
          t.awaiting = e.seq;
        }
        break;
      case "history_compacted":
        // The agent's memory of the chat before this: a divider that opens to the summary.
        push({
          kind: "compacted",
          key: `h:${e.seq}`,
          fromSeq: typeof p.from_seq === "number" ? p.from_seq : 0,
          throughSeq: typeof p.through_seq === "number" ? p.through_seq : 0,
          summary: text(p.summary),
          by: text(p.by),
          reason: text(p.reason),
          ts: e.ts,
        });
        break;
      case "slash_command_failed":
        push({ kind: "command_failed", key: `cf:${e.seq}`, invokedAs: text(p.invoked_as), reason: text(p.reason), ts: e.ts });
        break;
      case "user_message_submitted":
        if (p.revision) t.hidden = setBy(e.seq, p.revision) ?? t.hidden;
        // A prompt command's rendered prompt (the event after it, in its turn): the command
        // item stands for it.
        if (
          e.turn_id &&
          t.items.some(
            (i) =>
              i.kind === "command" &&
              i.key === `c:${e.seq - 1}` &&
              (i.commandKind === "prompt" || i.action === "compact_history") &&
              i.turnId === e.turn_id,
          )
        ) {
          t.pendingTurn = e.turn_id;
          t.awaiting = e.seq;
          break;
        }
        // In the global chat a plain message answers the agent's open question: the answer shows
        // once, on the question's card (the message too only when it brings files).
        if (typeof p.answers === "string" && index.has(`q:${p.answers}`)) {
          update(`q:${p.answers}`, "question", (q) => ({ ...q, answer: text(p.content) }));
          if (files(p.files).length > 0) push({ kind: "user", key: `u:${e.seq}`, text: text(p.content), ts: e.ts, files: files(p.files) });
        } else {
          const versionOf = (p.revision as { of?: unknown } | undefined)?.of;
          push({
            kind: "user",
            key: `u:${e.seq}`,
            text: text(p.content),
            ts: e.ts,
            ...(files(p.files).length > 0 ? { files: files(p.files) } : {}),
            ...(typeof versionOf === "number" ? { versionOf } : {}),
          });
        }
        if (e.turn_id) {
          t.pendingTurn = e.turn_id;
          t.awaiting = e.seq;
        }
        break;
      case "agent_message":
        if (!e.turn_id || e.turn_id === t.pendingTurn) t.awaiting = null;
        // A question shows once: as its card.
        if (p.ask === true && typeof p.question_id === "string")
          push({ kind: "question", key: `q:${p.question_id}`, id: p.question_id, question: text(p.text), author: text(p.author) });
        else
          push({ kind: "agent", key: `a:${e.seq}`, author: text(p.author), text: text(p.text), ts: e.ts, state: "done", actions: [], toolCallIds: [], forkSeq: e.seq });
        break;
      case "agent_start":
        t.agentName = text(p.agent_name) || t.agentName;
        if (e.turn_id) t.pendingTurn = t.startedTurn = e.turn_id;
        break;
      case "message_start":
        if (!e.turn_id || e.turn_id === t.pendingTurn) t.awaiting = null;
        push({ kind: "agent", key: msgKey, author: t.agentName, text: "", ts: e.ts, state: "streaming", actions: [], toolCallIds: [] });
        break;
      case "message_update":
        update(msgKey, "agent", (m) => ({ ...m, text: m.text + text(p.delta) }));
        break;
      case "message_end": {
        if (!e.turn_id || e.turn_id === t.pendingTurn) t.awaiting = null;
        const calls = Array.isArray(p.tool_calls) ? (p.tool_calls as { id: string }[]) : [];
        const state = p.aborted === true ? "aborted" : p.interrupted === true ? "interrupted" : "done";
        if (!index.has(msgKey))
          push({ kind: "agent", key: msgKey, author: t.agentName, text: "", ts: e.ts, state, actions: [], toolCallIds: [] });
        update(msgKey, "agent", (m) => ({
          ...m,
          text: typeof p.text === "string" ? p.text : m.text,
          state,
          toolCallIds: calls.map((c) => c.id),
          ...(e.turn_id ? { turnId: e.turn_id } : {}),
          forkSeq: e.seq,
        }));
        break;
      }
      case "tool_start":
        setAction(text(p.tool_call_id), () => ({
          id: text(p.tool_call_id),
          tool: text(p.tool),
          ...server(p.server),
          arguments: p.arguments,
          status: "running",
        }));
        break;
      case "tool_end": {
        const status = p.declined === true || p.status === "declined" ? "declined" : p.error !== undefined ? "error" : "done";
        setAction(text(p.tool_call_id), (a) => ({
          id: text(p.tool_call_id),
          tool: text(p.tool) || a?.tool || "",
          ...(a?.server ? { server: a.server } : {}),
          ...server(p.server),
          arguments: a?.arguments,
          status,
          result: p.error ?? p.result,
        }));
        break;
      }
      // A client tool's output (the companion's): its action is done, or failed.
      case "tool_output_submitted":
        setAction(text(p.tool_call_id), (a) => ({
          id: text(p.tool_call_id),
          tool: text(p.tool) || a?.tool || "",
          ...(a?.server ? { server: a.server } : {}),
          arguments: a?.arguments,
          status: p.error !== undefined && p.error !== null ? "error" : "done",
          result: p.error ?? p.output,
        }));
        break;
      case "tool_approval_required":
        push({
          kind: "approval",
          key: `ap:${text(p.tool_call_id)}`,
          id: text(p.tool_call_id),
          author: t.agentName,
          tool: text(p.tool),
          ...server(p.server),
          arguments: p.arguments,
        });
        break;
      case "approval_submitted":
        if (t.pendingTurn) t.awaiting = e.seq;
        update(`ap:${text(p.tool_call_id)}`, "approval", (a) => ({ ...a, decision: text(p.decision) }));
        break;
      case "ask_question":
        push({ kind: "question", key: `q:${text(p.question_id)}`, id: text(p.question_id), question: text(p.question), author: t.agentName });
        break;
      case "question_answered":
        if (t.pendingTurn) t.awaiting = e.seq;
        // The answer shows once, on the question's card.
        if (index.has(`q:${text(p.question_id)}`)) update(`q:${text(p.question_id)}`, "question", (q) => ({ ...q, answer: text(p.answer) }));
        else push({ kind: "user", key: `u:${e.seq}`, text: text(p.answer), ts: e.ts });
        break;
      case "plan_approval_required":
        push({ kind: "plan", key: `p:${text(p.plan_id)}`, id: text(p.plan_id), plan: text(p.plan) });
        break;
      case "plan_submitted":
        if (t.pendingTurn) t.awaiting = e.seq;
        update(`p:${text(p.plan_id)}`, "plan", (q) => ({ ...q, action: text(p.action), feedback: text(p.feedback) }));
        break;
      case "control_submitted":
        if (p.action === "abort") push({ kind: "note", key: `c:${e.seq}`, text: "You stopped the agent.", ts: e.ts });
        break;
      case "agent_end": {
        if (!e.turn_id || e.turn_id === t.pendingTurn) t.pendingTurn = t.awaiting = null;
        // The turn's last message, with nothing shown after it: a fork from it takes the whole turn.
        const last = t.items[t.items.length - 1];
        if (last?.kind === "agent" && last.turnId === e.turn_id && last.state === "done" && last.actions.every((a) => a.status !== "running"))
          t.items[t.items.length - 1] = { ...last, forkSeq: e.seq };
        for (let i = 0; i < t.items.length; i++) {
          const item = t.items[i];
          if (item?.kind === "agent" && item.state === "streaming") t.items[i] = { ...item, state: "interrupted" };
        }
        break;
      }
      case "system": {
        const upload = files([p.upload])[0];
        if (upload)
          push({ kind: "file", key: `f:${e.seq}`, file: upload, ts: e.ts, ...(typeof (p.upload as { replaces?: unknown }).replaces === "string" ? { replaces: (p.upload as { replaces: string }).replaces } : {}) });
        else push({ kind: "system", key: `s:${e.seq}`, level: text(p.level) || "info", text: text(p.message), ts: e.ts });
        break;
      }
      default:
        // usage, capability changes and anything newer: nothing to show
        break;
    }
    t.lastSeq = e.seq;
  }
  return t;
}

/** The items on the chat's active branch. */
export const shown = (t: Timeline): Item[] => (t.hidden ? t.items.filter((i) => shows(t.hidden, i.seq)) : t.items);

/** The requests still waiting on a person. */
export const open = (t: Timeline): Item[] =>
  shown(t).filter(
    (i) =>
      (i.kind === "approval" && !i.decision) || (i.kind === "question" && i.answer === undefined) || (i.kind === "plan" && !i.action),
  );

/** The pending turn, while it waits for the worker (no `agent_start` yet). */
const waitingTurn = (t: Timeline): string | null => (t.pendingTurn !== null && t.startedTurn !== t.pendingTurn ? t.pendingTurn : null);

/**
 * The pending turn while its agent's next words have not started (it waits for the worker, or
 * for a runner to take and run it), as `turn@seq` (the seq since which it waits), so a wait
 * after an answer is a new one.
 */
export const silentTurn = (t: Timeline): string | null => {
  if (t.pendingTurn === null) return null;
  if (t.awaiting != null) return `${t.pendingTurn}@${t.awaiting}`;
  return waitingTurn(t);
};
