// One chat: a modal window over the list (or the whole page, for the global chat). Its timeline
// is folded from the chat's event stream, cached, and resumed after the last event seen.

import { useEffect, useLayoutEffect, useMemo, useRef, useState } from "preact/hooks";
import { type Agent, CLI_TYPES, type ChatEvent, type Client, type Session } from "./api";
import { runCompanionCalls } from "./companion";
import { CompanionConfirms } from "./companion-view";
import { Composer } from "./composer";
import { forget, loadTimeline, saveTimeline } from "./cache";
import { focusComposer, HelpCard, HelpProvider } from "./feedback";
import { OptionalSelect } from "./fields";
import { FileCard, filesOnMessages, MessageFiles, replacements } from "./files-view";
import { ForkFromHere } from "./fork";
import { type Connection, ChatStream } from "./live";
import { relative, useTick } from "./time";
import { ActionCard, listedActions, ToolArguments, ToolName } from "./actions";
import { Markdown } from "./cards";
import { CaptureDecision, SaveToNotes } from "./notes";
import { TurnNotice } from "./turn-notice";
import { NoRunnerNote, useCliChoice } from "./runners";
import { apply, EMPTY, type Item, shown, type Timeline } from "./timeline";
import { Compacted } from "./compacted";
import { type Versioning, VersionControls, versioning } from "./versions";
import { type Notify, Toasts } from "./toasts";
import { ChatUsageDetails } from "./usage";

interface Props {
  client: Client;
  /** The organization, so cached timelines of two organizations never mix. */
  scope: string;
  sessionId: string;
  workspaceId?: string;
  notify: Notify;
  onClose?: () => void;
  /** A page of its own (the global chat) rather than a modal window. */
  page?: boolean;
}

export function ChatWindow({ client, scope, sessionId, workspaceId, notify, onClose, page }: Props) {
  const [session, setSession] = useState<Session | null>(null);
  const [agents, setAgents] = useState<Agent[]>([]);
  const [timeline, setTimeline] = useState<Timeline>(() => loadTimeline(scope, sessionId));
  const [connection, setConnection] = useState<Connection>("connecting");
  /** Files dropped on the chat, for the composer to upload. */
  const [dropped, setDropped] = useState<File[]>([]);
  const [dragging, setDragging] = useState(false);
  /** The files the composer uploaded, shown only on the message that takes them. */
  const [held, setHeld] = useState<ReadonlySet<string>>(() => new Set());
  const dropHandlers = {
    onDragOver: (e: DragEvent) => {
      if (!e.dataTransfer?.types.includes("Files")) return;
      e.preventDefault();
      setDragging(true);
    },
    onDragLeave: (e: DragEvent) => {
      if (e.target === e.currentTarget) setDragging(false);
    },
    onDrop: (e: DragEvent) => {
      const files = Array.from(e.dataTransfer?.files ?? []);
      setDragging(false);
      if (files.length === 0) return;
      e.preventDefault();
      setDropped(files);
    },
  };
  const dialog = useRef<HTMLDialogElement>(null);
  const start = useRef(timeline.lastSeq);
  const latest = useRef(timeline);
  latest.current = timeline;
  /** The chat was deleted: nothing of it is cached again. */
  const gone = useRef(false);

  const refresh = () =>
    client.session(sessionId).then(setSession, (e) => {
      notify.error(e);
    });

  useEffect(() => {
    void refresh();
    if (workspaceId) void client.agents(workspaceId).then(setAgents, notify.error);
    const stream = new ChatStream(client, sessionId, start.current, {
      events: (events: ChatEvent[]) => {
        setTimeline((t) => apply(t, events));
        // An agent's calls of the companion's tools run there (`mcp_tools`).
        runCompanionCalls(client, sessionId, events);
        // (New tasks are toasted from the workspace's feed, wherever the person is.)
        for (const e of events) {
          if (e.type === "tool_end" && e.payload.tool === "rename_chat") void refresh();
        }
      },
      connection: setConnection,
      gone: () => {
        gone.current = true;
        forget(scope, sessionId);
        notify.info("This chat no longer exists.");
        onClose?.();
      },
      reset: () => setTimeline(EMPTY),
    });
    return () => stream.close();
    // The stream is per chat; the callbacks it needs do not change while it is open.
    // eslint-disable-next-line react-hooks/exhaustive-deps
  }, [client, sessionId]);

  // Keep the timeline for the next visit or reload. It is written when the page is hidden or
  // left (a reload included) and when the chat closes, not on every streamed delta: the cache is
  // only a head start, since the stream resumes after whatever it holds.
  useEffect(() => {
    const save = () => {
      if (!gone.current) saveTimeline(scope, sessionId, latest.current);
    };
    const hidden = () => document.visibilityState === "hidden" && save();
    window.addEventListener("pagehide", save);
    document.addEventListener("visibilitychange", hidden);
    return () => {
      save();
      window.removeEventListener("pagehide", save);
      document.removeEventListener("visibilitychange", hidden);
    };
  }, [scope, sessionId]);

  useEffect(() => {
    const d = dialog.current;
    if (d && !d.open) d.showModal();
  }, []);

  const body = (
    <HelpProvider>
      <ChatHeader
        client={client}
        session={session}
        workspaceId={workspaceId}
        agents={agents}
        connection={connection}
        notify={notify}
        onChanged={setSession}
        onClose={page ? undefined : () => dialog.current?.close()}
      />
      {/* In the window's flow, under its header: never over the message box or a card's buttons. */}
      {!page && <Toasts inDialog />}
      <TimelineView client={client} sessionId={sessionId} workspaceId={workspaceId} timeline={timeline} notify={notify} held={held} />
      <CompanionConfirms sessionId={sessionId} />
      <Composer
        client={client}
        session={session}
        sessionId={sessionId}
        workspaceId={workspaceId}
        timeline={timeline}
        notify={notify}
        onSession={setSession}
        dropped={dropped}
        onDroppedTaken={() => setDropped([])}
        onHeld={(id, hold) =>
          setHeld((all) => {
            const next = new Set(all);
            if (hold) next.add(id);
            else next.delete(id);
            return next;
          })
        }
      />
      {dragging && (
        <div class="drop-hint" aria-hidden="true">
          Drop files to upload them to this chat
        </div>
      )}
    </HelpProvider>
  );
  if (page)
    return (
      <section class="chat-window page" {...dropHandlers}>
        {body}
      </section>
    );
  return (
    <dialog
      ref={dialog}
      {...dropHandlers}
      class="chat-window"
      aria-label={session?.title ?? "Chat"}
      onClose={() => onClose?.()}
      onClick={(e) => e.target === dialog.current && dialog.current?.close()}
    >
      {body}
    </dialog>
  );
}

function ChatHeader(props: {
  client: Client;
  session: Session | null;
  workspaceId?: string;
  agents: Agent[];
  connection: Connection;
  notify: Notify;
  onChanged: (s: Session) => void;
  onClose?: () => void;
}) {
  const { client, session, workspaceId, agents, connection, notify, onChanged, onClose } = props;
  const [editing, setEditing] = useState(false);
  /** What each CLI can do where the workspace's CLI agents run, for the CLI choice. */
  const choice = useCliChoice(client, workspaceId ?? session?.workspace_id ?? undefined);
  const [title, setTitle] = useState("");
  const titleButton = useRef<HTMLButtonElement>(null);
  const titleInput = useRef<HTMLInputElement>(null);
  const wasEditing = useRef(false);
  // Renaming starts in the title's box, its text selected; back from it, focus returns to the title.
  useEffect(() => {
    if (editing) titleInput.current?.select();
    if (wasEditing.current && !editing) titleButton.current?.focus();
    wasEditing.current = editing;
  }, [editing]);
  const save = async (patch: Parameters<Client["updateSession"]>[1]) => {
    if (!session) return;
    try {
      onChanged(await client.updateSession(session.id, patch));
    } catch (e) {
      notify.error(e);
    }
  };
  const agent = agents.find((a) => a.id === session?.agent_id);
  // The chat answers with a CLI (its own choice, or its agent's) and no runner could run it.
  const usesCli = Boolean(session?.cli_type || agent?.cli_type || agent?.runtime === "cli");
  const noRunner = Boolean(choice?.noRunner && usesCli);
  return (
    <header class="chat-header">
      {editing && session ? (
        <form
          class="rename"
          onSubmit={(e) => {
            e.preventDefault();
            setEditing(false);
            if (title.trim() && title.trim() !== session.title) void save({ title: title.trim() });
          }}
        >
          <label class="visually-hidden" for="chat-title">
            Chat title
          </label>
          <input
            id="chat-title"
            ref={titleInput}
            value={title}
            maxLength={200}
            onInput={(e) => setTitle(e.currentTarget.value)}
            onKeyDown={(e) => {
              if (e.key === "Escape") {
                e.preventDefault();
                e.stopPropagation();
                setEditing(false);
              }
            }}
          />
          <button type="submit" aria-label="Save title">
            ✓
          </button>
          <button type="button" class="link" aria-label="Cancel renaming" onClick={() => setEditing(false)}>
            ×
          </button>
        </form>
      ) : (
        <h2 class="chat-heading">
          <button
            ref={titleButton}
            type="button"
            class="title-button"
            title="Rename"
            aria-label={`Rename chat: ${session?.title ?? ""}`}
            disabled={!session || session.global}
            onClick={() => {
              setTitle(session?.title ?? "");
              setEditing(true);
            }}
          >
            {session?.title ?? "…"}
          </button>
        </h2>
      )}
      {session && !session.global && agents.length > 0 && (
        <div class="chat-settings">
          <label>
            <span class="visually-hidden">Agent</span>
            <select
              aria-label="Agent"
              value={session.agent_id ?? ""}
              // A new agent brings its own CLI: the chat's override is cleared.
              onChange={(e) => void save({ agent_id: e.currentTarget.value, cli_type: null })}
            >
              {agents.map((a) => (
                <option key={a.id} value={a.id}>
                  {a.name}
                </option>
              ))}
            </select>
          </label>
          <OptionalSelect
            label="CLI"
            hideLabel
            value={session.cli_type ?? null}
            options={CLI_TYPES}
            describe={choice ? (cli) => choice.options[cli] : undefined}
            describedBy={noRunner ? "chat-no-runner" : undefined}
            none={
              agent?.cli_type
                ? choice?.options[agent.cli_type].disabled
                  ? `${agent.cli_type} (agent's, unavailable)`
                  : `${agent.cli_type} (agent's)`
                : "Agent's runtime"
            }
            onChange={(cli_type) => void save({ cli_type })}
          />
        </div>
      )}
      {noRunner && <NoRunnerNote client={client} id="chat-no-runner" />}
      {session && <ChatUsageDetails key={session.id} client={client} sessionId={session.id} />}
      <span class={`connection ${connection}`} role="status">
        {connection === "live" ? "Live" : connection === "connecting" ? "Connecting…" : "Offline, retrying…"}
      </span>
      {onClose && (
        <button type="button" class="link close" aria-label="Close chat" onClick={onClose}>
          ×
        </button>
      )}
    </header>
  );
}

function TimelineView(props: {
  client: Client;
  sessionId: string;
  /** The chat's workspace: its chats can be forked (the global chat cannot). */
  workspaceId?: string;
  timeline: Timeline;
  notify: Notify;
  held: ReadonlySet<string>;
}) {
  const { client, sessionId, workspaceId, timeline, notify, held } = props;
  const list = useRef<HTMLOListElement>(null);
  const pinned = useRef(true);
  const now = useTick();
  // Follow the end while the reader is there; leave them be when they scrolled up.
  useLayoutEffect(() => {
    const el = list.current;
    if (el && pinned.current) el.scrollTop = el.scrollHeight;
  }, [timeline]);
  // The chat's active branch; its earlier versions are a switch away (`./versions`).
  const items = useMemo(() => shown(timeline), [timeline.items, timeline.hidden]);
  const idle = timeline.pendingTurn === null;
  const versions = useMemo(() => versioning(timeline.items, items, idle), [timeline.items, items, idle]);
  const streaming = items.some((i) => i.kind === "agent" && i.state === "streaming");
  // The tools each message's agent called just before it (so "Result: {…}" reads as what it was).
  const toolsBefore = useMemo(() => {
    let tools: string[] = [];
    return items.map((item) => {
      if (item.kind === "agent" && item.actions.length > 0) tools = [...tools, ...item.actions.map((a) => a.tool)].slice(-8);
      return tools;
    });
  }, [items]);
  const files = useMemo(() => ({ onMessages: filesOnMessages(items, held), replaced: replacements(items) }), [items, held]);
  // A live list (not role="log", which would take its items' list semantics away).
  return (
    <ol
      class="timeline"
      ref={list}
      aria-live="polite"
      aria-label="Conversation"
      aria-busy={streaming}
      onScroll={(e) => {
        const el = e.currentTarget;
        pinned.current = el.scrollHeight - el.scrollTop - el.clientHeight < 40;
      }}
    >
      {items.length === 0 && <li class="empty">No messages yet. Say hello.</li>}
      {items.map((item, i) => (
        <ItemView
          key={item.key}
          item={item}
          versioning={versions.get(item.key)}
          client={client}
          sessionId={sessionId}
          workspaceId={workspaceId}
          notify={notify}
          now={now}
          tools={toolsBefore[i]}
          files={files}
        />
      ))}
      <TurnNotice client={client} sessionId={sessionId} timeline={timeline} />
    </ol>
  );
}

/** Where the timeline's files show: the ones on messages, and what each upload replaced. */
interface FilesShown {
  onMessages: Set<string>;
  replaced: Map<string, string>;
}

function ItemView(props: {
  item: Item;
  client: Client;
  sessionId: string;
  workspaceId?: string;
  notify: Notify;
  now: number;
  tools?: string[];
  files: FilesShown;
  versioning?: Versioning;
}) {
  const { item, client, sessionId, workspaceId, notify, now, tools, files } = props;
  const versionControls = <VersionControls client={client} sessionId={sessionId} item={item} versioning={props.versioning} notify={notify} />;
  switch (item.kind) {
    case "user":
      return (
        <li class="message user">
          <div class="bubble">{item.text}</div>
          {item.files && <MessageFiles files={item.files} replaced={files.replaced} client={client} sessionId={sessionId} notify={notify} />}
          <time dateTime={item.ts}>{relative(item.ts, now)}</time>
          {versionControls}
        </li>
      );
    case "file":
      // A file shows once: on its message.
      if (files.onMessages.has(item.file.id)) return null;
      return <FileCard item={item} client={client} sessionId={sessionId} notify={notify} now={now} />;
    case "agent":
      return (
        <li class={`message agent ${item.state}`} aria-label={`${item.author} says`}>
          <div class="author">{item.author}</div>
          <Markdown class="bubble" text={item.text} env={{ tools }} />
          <time dateTime={item.ts}>{relative(item.ts, now)}</time>
          {item.state === "aborted" && <span class="badge warn">stopped</span>}
          {item.state === "interrupted" && <span class="badge warn">interrupted</span>}
          {item.state === "done" && <SaveToNotes text={item.text} sessionId={sessionId} notify={notify} />}
          {versionControls}
          {workspaceId && item.state !== "streaming" && item.forkSeq !== undefined && (
            <ForkFromHere client={client} sessionId={sessionId} workspaceId={workspaceId} atSeq={item.forkSeq} notify={notify} />
          )}
          {listedActions(item.actions).length > 0 && (
            <ul class="actions" aria-label="Actions">
              {listedActions(item.actions).map((a) => (
                <ActionCard key={a.id} action={a} />
              ))}
            </ul>
          )}
        </li>
      );
    case "system":
      return (
        <li class={`system ${item.level}`} role={item.level === "error" ? "alert" : undefined}>
          {item.text}
        </li>
      );
    case "note":
      return <li class="note">{item.text}</li>;
    case "command":
      return (
        <>
          <li class="message user command" aria-label="Command">
            <div class="bubble">
              <code>{item.invokedAs}</code>
            </div>
            <time dateTime={item.ts}>{relative(item.ts, now)}</time>
          </li>
          <HelpCard itemKey={item.key} />
        </>
      );
    case "compacted":
      return <Compacted item={item} />;
    case "command_failed":
      return (
        <li class="system error command-failed" role="alert">
          <code>{item.invokedAs}</code> failed: {item.reason}
        </li>
      );
    case "approval":
      return <ApprovalCard item={item} client={client} sessionId={sessionId} notify={notify} />;
    case "question":
      return <QuestionCard item={item} client={client} sessionId={sessionId} notify={notify} />;
    case "plan":
      return <PlanCard item={item} client={client} sessionId={sessionId} notify={notify} />;
  }
}

function useAnswer(notify: Notify) {
  const [busy, setBusy] = useState(false);
  const run = async (f: () => Promise<unknown>) => {
    setBusy(true);
    try {
      await f();
      // The card is answered: what the person does next is write.
      focusComposer();
    } catch (e) {
      notify.error(e);
    } finally {
      setBusy(false);
    }
  };
  return { busy, run };
}

type CardProps<K extends Item["kind"]> = { item: Extract<Item, { kind: K }>; client: Client; sessionId: string; notify: Notify };

function ApprovalCard({ item, client, sessionId, notify }: CardProps<"approval">) {
  const { busy, run } = useAnswer(notify);
  return (
    <li class="request approval" aria-label="Approval request">
      <p>
        <strong>{item.author}</strong> asks to {item.server ? "run " : ""}<ToolName tool={item.tool} server={item.server} />:
      </p>
      <ToolArguments tool={item.tool} server={item.server} args={item.arguments} />
      {item.decision ? (
        <p class="answered">{item.decision === "approve" ? "Approved" : "Declined"}</p>
      ) : item.tool === "propose_capture" ? (
        <CaptureDecision args={item.arguments} toolCallId={item.id} client={client} sessionId={sessionId} notify={notify} />
      ) : (
        <div class="buttons">
          <button type="button" class="primary" disabled={busy} onClick={() => run(() => client.approve(sessionId, item.id, "approve"))}>
            Approve
          </button>
          <button type="button" disabled={busy} onClick={() => run(() => client.approve(sessionId, item.id, "decline"))}>
            Decline
          </button>
        </div>
      )}
    </li>
  );
}

function QuestionCard({ item, client, sessionId, notify }: CardProps<"question">) {
  const { busy, run } = useAnswer(notify);
  const [answer, setAnswer] = useState("");
  const id = `answer-${item.id}`;
  return (
    <li class="request question" aria-label="Question">
      <p>
        <strong>{item.author || "The agent"}</strong> asks:
      </p>
      <Markdown class="question-text" text={item.question} />
      {item.answer !== undefined ? (
        <p class="answered">You answered: {item.answer}</p>
      ) : (
        <form
          class="inline"
          onSubmit={(e) => {
            e.preventDefault();
            void run(() => client.answer(sessionId, item.id, answer.trim()));
          }}
        >
          <label for={id} class="visually-hidden">
            Your answer
          </label>
          <input id={id} placeholder="Your answer" value={answer} onInput={(e) => setAnswer(e.currentTarget.value)} required />
          <button type="submit" class="primary" disabled={busy || !answer.trim()}>
            Answer
          </button>
        </form>
      )}
    </li>
  );
}

function PlanCard({ item, client, sessionId, notify }: CardProps<"plan">) {
  const { busy, run } = useAnswer(notify);
  const [feedback, setFeedback] = useState("");
  const id = `feedback-${item.id}`;
  return (
    <li class="request plan" aria-label="Plan">
      <p>
        <strong>Plan</strong> for your approval:
      </p>
      <Markdown text={item.plan} />
      {item.action ? (
        <p class="answered">
          {item.action === "approve" ? "Approved" : `Rejected${item.feedback ? `: ${item.feedback}` : ""}`}
        </p>
      ) : (
        <div class="plan-answer">
          <button type="button" class="primary" disabled={busy} onClick={() => run(() => client.plan(sessionId, item.id, "approve"))}>
            Approve plan
          </button>
          <label for={id} class="visually-hidden">
            Feedback
          </label>
          <textarea id={id} rows={2} placeholder="What should change? (for a rejection)" value={feedback} onInput={(e) => setFeedback(e.currentTarget.value)} />
          <button
            type="button"
            disabled={busy}
            onClick={() => run(() => client.plan(sessionId, item.id, "reject", feedback.trim() || undefined))}
          >
            Reject plan
          </button>
        </div>
      )}
    </li>
  );
}

