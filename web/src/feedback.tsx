// What a chat says back to the person beyond its events: the answer to `/help` as a card of its
// own in the timeline (shown only here, never sent to the agent), the reason a message cannot be
// sent yet (with "Send when done"), and where focus goes once a card is answered.

import { createContext, type ComponentChildren } from "preact";
import { useContext, useMemo, useState } from "preact/hooks";
import type { CommandEntry } from "./api";

/** The `/help` answers of this chat, by the key of their command's item (`c:{seq}`). */
interface HelpAnswers {
  answers: Record<string, CommandEntry[]>;
  add: (itemKey: string, commands: CommandEntry[]) => void;
}

const Help = createContext<HelpAnswers>({ answers: {}, add: () => {} });

/** Holds a chat's `/help` answers for its timeline (they live as long as the chat is open). */
export function HelpProvider({ children }: { children: ComponentChildren }) {
  const [answers, setAnswers] = useState<Record<string, CommandEntry[]>>({});
  const value = useMemo<HelpAnswers>(
    () => ({ answers, add: (key, commands) => setAnswers((all) => ({ ...all, [key]: commands })) }),
    [answers],
  );
  return <Help.Provider value={value}>{children}</Help.Provider>;
}

/** Records a `/help` answer, for the card under its command. */
export const useAddHelp = () => useContext(Help).add;

/** The card under a `/help` command: the chat's commands, marked as seen only here. */
export function HelpCard({ itemKey }: { itemKey: string }) {
  const commands = useContext(Help).answers[itemKey];
  if (!commands) return null;
  return (
    <li class="help-card" aria-label="Commands of this chat">
      <p class="help-note">Only you see this: Spool answered /help, the agent did not.</p>
      <dl>
        {commands.map((c) => (
          <div key={c.name}>
            <dt>
              <code>/{c.name}</code>
              {c.argument_hint && <span class="command-hint"> {c.argument_hint}</span>}
            </dt>
            <dd>{c.error ? `Cannot run: ${c.error}` : (c.description ?? "")}</dd>
          </div>
        ))}
      </dl>
    </li>
  );
}

/**
 * Why the typed message is not sent: the agent is still answering. The message stays in the box;
 * it can go now, queued behind the answer, or the answer can be stopped.
 */
export function SendBlocked({ tried, busy, onQueue }: { tried: boolean; busy: boolean; onQueue: () => void }) {
  return (
    <div class={`send-blocked${tried ? " tried" : ""}`} role={tried ? "alert" : "status"}>
      <span>The agent is still answering, so this message waits here.</span>
      <button type="button" class="link" disabled={busy} onClick={onQueue}>
        Send when done
      </button>
      <span>or stop the answer.</span>
    </div>
  );
}

/** Moves focus to the chat's message box (after a card was answered, the next thing to do). */
export function focusComposer(): void {
  document.getElementById("composer-input")?.focus();
}
