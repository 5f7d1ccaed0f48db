// What a chat's turn waits on before its agent's words start, from its turn record:
// - "Queued behind N turns": it waits for its organization's bound on turns running at once
//   (`SPOOL_ORG_TURN_CONCURRENCY`; the record's `queued_behind`, read from the queue when asked);
// - "Waiting for a runner…": its workspace's CLI agents run on runners and none has taken it
//   yet (the record is in progress, its detail `waiting for a runner`);
// - "Running on NAME": a runner took it and runs its CLI (`running on runner NAME`).
// While the chat's turn has not started answering the UI asks every second; it stops, and the
// notice goes, when the answer starts. A turn the server runs itself says so within a few looks,
// and is not asked about again.

import { useEffect, useState } from "preact/hooks";
import type { Client, Turn } from "./api";
import { silentTurn, type Timeline } from "./timeline";

/** How often a waiting turn's record is asked for. */
const POLL_MS = 1000;
/** How many looks in a row that show the turn running on the server stop the asking. */
const QUIET_LOOKS = 3;

/** What the chat's turn waits on. */
type Wait = { kind: "queued"; ahead: number } | { kind: "runner" } | { kind: "running"; runner: string };

const RUNNING_ON = /^running on runner (.+)$/;

/** What `view` says the turn waits on: a wait, nothing to show (`null`), or that it runs on the server. */
function waitOf(view: Turn): Wait | null | "server" {
  if (view.status === "queued") return view.queued_behind ? { kind: "queued", ahead: view.queued_behind } : null;
  if (view.status !== "in_progress") return null;
  if (view.detail === "waiting for a runner") return { kind: "runner" };
  const running = RUNNING_ON.exec(view.detail ?? "");
  return running ? { kind: "running", runner: running[1]! } : "server";
}

/** What the chat's turn waits on, while its answer has not started. */
function useTurnWait(client: Client, sessionId: string, timeline: Timeline): Wait | null {
  const key = silentTurn(timeline);
  const [wait, setWait] = useState<Wait | null>(null);
  useEffect(() => {
    setWait(null);
    if (!key) return;
    const turn = key.split("@")[0]!;
    let live = true;
    let timer: ReturnType<typeof setTimeout> | undefined;
    /** A runner had the turn: moments in between (the engine looking at it) keep the notice. */
    let onRunner = false;
    let quiet = 0;
    const look = async () => {
      try {
        const view = await client.turn(sessionId, turn);
        if (!live) return;
        const found = waitOf(view);
        if (view.status === "completed" || view.status === "failed") {
          setWait(null);
          return; // over: the events say the rest
        }
        if (found === "server") {
          quiet += 1;
          if (!onRunner) setWait(null);
          if (!onRunner && quiet >= QUIET_LOOKS) return; // the server runs it: the events say the rest
        } else {
          quiet = 0;
          if (found?.kind === "runner" || found?.kind === "running") onRunner = true;
          setWait(found);
        }
      } catch {
        // Not recorded yet, or the network blinked: ask again.
      }
      if (live) timer = setTimeout(() => void look(), POLL_MS);
    };
    void look();
    return () => {
      live = false;
      clearTimeout(timer);
    };
  }, [client, sessionId, key]);
  return key ? wait : null;
}

/** The notice, when the chat's turn waits behind others or for a runner, or runs on one. */
export function TurnNotice({ client, sessionId, timeline }: { client: Client; sessionId: string; timeline: Timeline }) {
  const wait = useTurnWait(client, sessionId, timeline);
  if (!wait) return null;
  switch (wait.kind) {
    case "queued":
      return (
        <li class="note queued" role="status">
          Queued behind {wait.ahead} {wait.ahead === 1 ? "turn" : "turns"}
        </li>
      );
    case "runner":
      return (
        <li class="note runner" role="status">
          Waiting for a runner…
        </li>
      );
    case "running":
      return (
        <li class="note runner" role="status">
          Running on {wait.runner}
        </li>
      );
  }
}
