// "Queued behind N turns": a chat's turn that waits for its organization's bound on turns
// running at once (`SPOOL_ORG_TURN_CONCURRENCY`) says how many turns are ahead of it. The turn
// record carries it (`queued_behind`, read from the queue when asked), so while the chat's turn
// has not started the UI asks every second; it stops, and the notice goes, when the turn starts.

import { useEffect, useState } from "preact/hooks";
import type { Client } from "./api";
import { type Timeline, waitingTurn } from "./timeline";

/** How often a waiting turn's place is asked for. */
const POLL_MS = 1000;

/** How many turns are ahead of the chat's waiting turn, while it waits for a slot. */
function useQueuedBehind(client: Client, sessionId: string, timeline: Timeline): number | null {
  const turn = waitingTurn(timeline);
  const [ahead, setAhead] = useState<number | null>(null);
  useEffect(() => {
    setAhead(null);
    if (!turn) return;
    let live = true;
    let timer: ReturnType<typeof setTimeout> | undefined;
    const look = async () => {
      try {
        const view = await client.turn(sessionId, turn);
        if (!live) return;
        if (view.status !== "queued") {
          setAhead(null);
          return; // started or over: the events say the rest
        }
        setAhead(view.queued_behind ?? null);
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
  }, [client, sessionId, turn]);
  return turn ? ahead : null;
}

/** The notice, when the chat's turn waits behind others. */
export function QueuedNotice({ client, sessionId, timeline }: { client: Client; sessionId: string; timeline: Timeline }) {
  const ahead = useQueuedBehind(client, sessionId, timeline);
  if (!ahead) return null;
  return (
    <li class="note queued" role="status">
      Queued behind {ahead} {ahead === 1 ? "turn" : "turns"}
    </li>
  );
}
