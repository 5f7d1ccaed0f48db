// The message box of a chat: messages, `/` commands (a menu of the chat's commands, a preview of
// what the typed one does, Enter to run it), `@` mentions of the chat's own files and the working
// directory's (a chat's file picked goes with the message, as its agents read it), and files to
// upload (the paperclip, a paste, or a drop on the chat), each with its progress, sent with the
// next message. An upload's bytes go at once, but the chat records the file (and its agents see
// it) only when the message that takes it is sent: one removed before is never recorded. While
// the agent answers, a typed message waits in the box with the reason, and "Send when done"
// queues it behind the answer.

import { useEffect, useRef, useState } from "preact/hooks";
import type { Client, CommandEntry, CommandPreview, FileMatch, FileRef, Session } from "./api";
import { contextFor, enableFor, sentTurn, toolsFor, useCompanion } from "./companion";
import { SendBlocked, useAddHelp } from "./feedback";
import { Paperclip } from "./icons";
import { go } from "./route";
import { open, type Timeline } from "./timeline";
import type { Notify } from "./toasts";

/** A file on its way into the chat, or uploaded and waiting to go with the next message. */
interface Upload {
  key: string;
  name: string;
  progress: number;
  status: "uploading" | "done" | "error";
  /** A file of the chat picked from the `@` menu, not uploaded now. */
  picked?: boolean;
  /** Its upload's id, once its bytes are sent (it is completed when the message is sent). */
  attachmentId?: string;
  /** What was uploaded, to upload again if it waited too long to be completed. */
  source?: File;
  /** The file as the chat recorded it (completed), or the picked one. */
  file?: FileRef;
  error?: string;
}

/** One choice of the composer's menu: a command, or a file to mention. */
interface Option {
  key: string;
  label: string;
  hint?: string | null;
  description?: string | null;
  badge?: string;
  /** The composer's text once it is picked. */
  text: string;
  /** A chat's file it names, sent with the message. */
  file?: FileRef;
}

export function Composer(props: {
  client: Client;
  session: Session | null;
  sessionId: string;
  workspaceId?: string;
  timeline: Timeline;
  notify: Notify;
  onSession: (s: Session) => void;
  /** Files dropped on the chat, to upload. */
  dropped: File[];
  onDroppedTaken: () => void;
  /** A file uploaded here, to show on its message only; released: removed after the chat recorded it. */
  onHeld?: (fileId: string, held: boolean) => void;
}) {
  const { client, session, sessionId, workspaceId, timeline, notify, onSession, dropped, onDroppedTaken, onHeld } = props;
  // With a companion, the chat in view gets its capabilities (its token, presented to Spool).
  const companion = useCompanion();
  useEffect(() => {
    if (companion.status === "connected") void enableFor(client, sessionId);
  }, [companion, client, sessionId]);
  const [text, setText] = useState("");
  const [uploads, setUploads] = useState<Upload[]>([]);
  const picker = useRef<HTMLInputElement>(null);
  /** Uploads each file into the chat, showing its progress; done ones go with the next message. */
  const addFiles = (files: File[]) => {
    for (const file of files) {
      const key = crypto.randomUUID();
      const set = (patch: Partial<Upload>) => setUploads((all) => all.map((u) => (u.key === key ? { ...u, ...patch } : u)));
      setUploads((all) => [...all, { key, name: file.name, progress: 0, status: "uploading" }]);
      client.stageFile(sessionId, file, (progress) => set({ progress })).then(
        (attachmentId) => {
          onHeld?.(attachmentId, true);
          set({ status: "done", progress: 1, attachmentId, source: file });
        },
        (err: unknown) => {
          set({ status: "error", error: err instanceof Error ? err.message : String(err) });
          notify.error(err);
        },
      );
    }
  };
  useEffect(() => {
    if (dropped.length === 0) return;
    addFiles(dropped);
    onDroppedTaken();
    // addFiles only reads what does not change while the chat is open.
    // eslint-disable-next-line react-hooks/exhaustive-deps
  }, [dropped]);
  const uploading = uploads.some((u) => u.status === "uploading");
  const attached = uploads.filter((u) => u.status === "done" && (u.file || u.attachmentId));
  const [sent, setSent] = useState<{ turn: string; seq: number } | null>(null);
  const [busy, setBusy] = useState(false);
  const [commands, setCommands] = useState<CommandEntry[]>([]);
  const [menuOpen, setMenuOpen] = useState(false);
  const [selected, setSelected] = useState(0);
  const [preview, setPreview] = useState<CommandPreview | null>(null);
  const [files, setFiles] = useState<FileMatch[]>([]);
  /** The person moved through the menu with the arrows: Enter picks (else, for files, it sends). */
  const [navigated, setNavigated] = useState(false);
  const [filesNote, setFilesNote] = useState("");
  // The workspace's commands, for the `/` menu.
  useEffect(() => {
    if (workspaceId) void client.commands(workspaceId).then(setCommands, () => setCommands([]));
  }, [client, workspaceId]);
  // The sent message has arrived (its turn now shows in the timeline), or the store was reset.
  useEffect(() => {
    if (sent && (timeline.lastSeq >= sent.seq || timeline.lastSeq === 0)) setSent(null);
  }, [sent, timeline.lastSeq]);
  // In the global chat a plain message answers the agent's open question.
  const answersQuestion = session?.global === true && open(timeline).some((i) => i.kind === "question");
  const pending = (timeline.pendingTurn !== null || (sent !== null && timeline.lastSeq < sent.seq)) && !answersQuestion;
  // A message typed while the agent answers cannot go now (a command can): it says so.
  const blocked = pending && text.trim() !== "" && !isCommand(text.trim());
  /** Enter was pressed on a blocked message: the reason is announced. */
  const [tried, setTried] = useState(false);
  useEffect(() => {
    if (!blocked) setTried(false);
  }, [blocked]);
  const addHelp = useAddHelp();

  // `/name` being typed: the commands that start with it; `@file` being typed: matching files.
  const typing = /^\/(\S*)$/.exec(text);
  const mention = /(^|\s)@(\S+)$/.exec(text)?.[2];
  const options: Option[] = typing
    ? commands
        .filter((c) => c.name.startsWith(typing[1] ?? "") && !c.error)
        .map((c) => ({
          key: c.name,
          label: `/${c.name}`,
          hint: c.argument_hint,
          description: c.description,
          badge: c.source === "builtin" ? undefined : c.file ? "file" : c.source,
          text: `/${c.name} `,
        }))
    : mention
      ? files.map((f) => ({
          key: `${f.source}:${f.path}`,
          label: `@${f.path}`,
          hint: f.attachment ? humanSize(f.attachment.size) : undefined,
          badge: f.attachment ? "chat file" : undefined,
          text: text.replace(/@\S+$/, `@${f.path} `),
          file: f.attachment ?? undefined,
        }))
      : [];
  const showMenu = menuOpen && options.length > 0;
  // Files for an `@` mention, asked for once the person pauses.
  useEffect(() => {
    setFiles([]);
    setFilesNote("");
    if (!mention || !workspaceId) return;
    // An answer that comes after the person typed on is dropped.
    let current = true;
    const timer = setTimeout(() => {
      client.searchFiles(workspaceId, sessionId, mention).then(
        (found) => {
          if (!current) return;
          setFiles(found);
          setFilesNote(found.length === 0 ? `No file matches “${mention}”.` : "");
        },
        (err: unknown) => current && setFilesNote(err instanceof Error ? err.message : String(err)),
      );
    }, 150);
    return () => {
      current = false;
      clearTimeout(timer);
    };
  }, [client, workspaceId, sessionId, mention]);
  const command = /^\/(\S+)/.exec(text)?.[1];
  const known = command !== undefined && commands.some((c) => c.name === command && !c.error);
  // What the typed command would do, asked for once the person pauses.
  useEffect(() => {
    setPreview(null);
    if (!known || showMenu) return;
    const input = text.trim();
    const timer = setTimeout(() => {
      client.previewCommand(sessionId, input).then(setPreview, () => setPreview(null));
    }, 250);
    return () => clearTimeout(timer);
  }, [client, sessionId, text, known, showMenu]);

  const pick = (option: Option) => {
    setText(option.text);
    // A chat's file goes with the message, named in its `files`, once.
    const file = option.file;
    if (file)
      setUploads((all) =>
        all.some((u) => u.file?.id === file.id)
          ? all
          : [...all, { key: file.id, name: file.filename, progress: 1, status: "done", picked: true, file }],
      );
    setMenuOpen(false);
    setSelected(0);
    setNavigated(false);
  };

  const invoke = async (input: string) => {
    const done = await client.invokeCommand(sessionId, input, crypto.randomUUID());
    if (done.turn_id && done.action === undefined) setSent({ turn: done.turn_id, seq: done.seq + 1 });
    if (done.session) onSession(done.session);
    if (done.new_session && workspaceId) go({ page: "chats", ws: workspaceId, chat: done.new_session.id });
    // `/help` is answered in the timeline, under the command.
    if (done.commands) addHelp(`c:${done.seq}`, done.commands);
  };

  /** Sends the typed message (`enqueue`: behind the pending turn). */
  const send = async (e?: Event, enqueue = false) => {
    e?.preventDefault();
    const typed = text.trim();
    // Files alone make a message that names them.
    const content = typed || (attached.length > 0 ? `Attached ${attached.map((u) => u.name).join(", ")}` : "");
    if (!content || busy || uploading) return;
    setBusy(true);
    setText("");
    setPreview(null);
    try {
      // A retry of this send (same id) would be recognised by the server, not stored twice.
      if (isCommand(content) && !answersQuestion) await invoke(content);
      else {
        // `//…` sends a message that starts with `/`.
        const message = content.startsWith("//") ? content.slice(1) : content;
        const ids = (await recordFiles(attached)).map((f) => f.id);
        // What the person's notes say about it, and the tools of the companion's MCP servers:
        // nothing asked (and no wait) in offline mode.
        await enableFor(client, sessionId);
        const [context, tools] = await Promise.all([contextFor(message), toolsFor(sessionId)]);
        const answer = await client.sendMessage(sessionId, message, crypto.randomUUID(), ids, context, tools, enqueue);
        setUploads((all) => all.filter((u) => !attached.some((a) => a.key === u.key)));
        if (answer.turn_id) {
          sentTurn(answer.turn_id, sessionId, tools);
          setSent({ turn: answer.turn_id, seq: answer.seq });
        }
      }
    } catch (err) {
      setText(typed);
      notify.error(err);
    } finally {
      setBusy(false);
    }
  };
  /**
   * Completes the uploads that go with a message (the chat records them now, before the
   * message that names them); one that waited past its upload's time is uploaded again first.
   */
  const recordFiles = async (going: Upload[]): Promise<FileRef[]> => {
    const files: FileRef[] = [];
    for (const u of going) {
      let file = u.file;
      if (!file && u.attachmentId) {
        try {
          file = await client.completeFile(sessionId, u.attachmentId);
        } catch (err) {
          if (!u.source) throw err;
          const again = await client.stageFile(sessionId, u.source, () => {});
          onHeld?.(again, true);
          file = await client.completeFile(sessionId, again);
        }
        const recorded = file;
        // Recorded: a retry of this send names it again, and completes nothing twice.
        setUploads((all) => all.map((x) => (x.key === u.key ? { ...x, file: recorded } : x)));
      }
      if (file) files.push(file);
    }
    return files;
  };
  const stop = async () => {
    try {
      await client.abort(sessionId);
    } catch (err) {
      notify.error(err);
    }
  };
  // A command may run while a turn is pending (`/stop`, `/model`…); a prompt is refused then.
  const canSend = !pending || isCommand(text.trim());
  return (
    <form class="composer" onSubmit={send}>
      {showMenu && (
        <ul class="command-menu" id="command-menu" role="listbox" aria-label={typing ? "Commands" : "Files"}>
          {options.map((o, i) => (
            <li
              key={o.key}
              id={`command-${i}`}
              role="option"
              aria-selected={i === selected}
              class={i === selected ? "selected" : ""}
              onMouseDown={(e) => {
                e.preventDefault();
                pick(o);
              }}
            >
              <span class="command-name">{o.label}</span>
              {o.hint && <span class="command-hint">{o.hint}</span>}
              {o.description && <span class="command-description">{o.description}</span>}
              {o.badge && <span class="badge">{o.badge}</span>}
            </li>
          ))}
        </ul>
      )}
      {menuOpen && mention && filesNote && (
        <div class="command-preview" role="status">
          {filesNote}
        </div>
      )}
      {preview && (
        <div class="command-preview" aria-live="polite">
          <strong>{preview.kind === "prompt" ? "The agent will get:" : "This will:"}</strong>{" "}
          {preview.kind === "prompt" ? <pre>{preview.prompt}</pre> : preview.effect}
        </div>
      )}
      {uploads.length > 0 && (
        <ul class="uploads" aria-label="Files to send">
          {uploads.map((u) => (
            <li key={u.key} class={`upload ${u.status}`}>
              <span class="upload-name">
                <Paperclip /> {u.name}
              </span>
              {u.status === "uploading" && <progress max={1} value={u.progress} aria-label={`Uploading ${u.name}`} />}
              {u.status === "done" && <span class="badge">{u.picked ? "chat file" : "uploaded"}</span>}
              {u.status === "error" && (
                <span class="badge warn" title={u.error}>
                  failed
                </span>
              )}
              {u.status !== "uploading" && (
                <button
                  type="button"
                  class="link"
                  aria-label={`Remove ${u.name}`}
                  onClick={() => {
                    setUploads((all) => all.filter((x) => x.key !== u.key));
                    // Never recorded, it is gone (the chat cleans up what is not completed); one
                    // the chat recorded already (a send that failed) shows in the chat again.
                    if (u.file && !u.picked) onHeld?.(u.file.id, false);
                  }}
                >
                  ×
                </button>
              )}
            </li>
          ))}
        </ul>
      )}
      {blocked && <SendBlocked tried={tried} busy={busy || uploading} onQueue={() => void send(undefined, true)} />}
      <input
        ref={picker}
        type="file"
        multiple
        hidden
        aria-label="Files to upload"
        onChange={(e) => {
          addFiles(Array.from(e.currentTarget.files ?? []));
          e.currentTarget.value = "";
        }}
      />
      <button type="button" class="attach" aria-label="Attach files" title="Attach files (or drop or paste them)" onClick={() => picker.current?.click()}>
        <Paperclip />
      </button>
      <label for="composer-input" class="visually-hidden">
        Message
      </label>
      <textarea
        id="composer-input"
        rows={2}
        autoFocus
        role="combobox"
        aria-expanded={showMenu}
        aria-controls="command-menu"
        aria-autocomplete="list"
        aria-activedescendant={showMenu ? `command-${selected}` : undefined}
        placeholder={
          answersQuestion ? "Your answer…" : "Write a message, or / for commands…  (Enter sends, Shift+Enter for a new line)"
        }
        value={text}
        onPaste={(e) => {
          const pasted = Array.from(e.clipboardData?.files ?? []);
          if (pasted.length === 0) return;
          e.preventDefault();
          addFiles(pasted);
        }}
        onInput={(e) => {
          const value = e.currentTarget.value;
          setText(value);
          setMenuOpen(/^\/\S*$/.test(value) || /(^|\s)@\S+$/.test(value));
          setSelected(0);
          setNavigated(false);
        }}
        onKeyDown={(e) => {
          if (showMenu) {
            if (e.key === "ArrowDown" || e.key === "ArrowUp") {
              e.preventDefault();
              const by = e.key === "ArrowDown" ? 1 : -1;
              setSelected((i) => (i + by + options.length) % options.length);
              setNavigated(true);
              return;
            }
            // Tab always picks; Enter picks a command, and a file only once chosen with the
            // arrows (a message that ends in `@word` still sends).
            if (e.key === "Tab" || (e.key === "Enter" && !e.shiftKey && !e.isComposing && (typing || navigated))) {
              e.preventDefault();
              const option = options[selected];
              if (option) pick(option);
              return;
            }
            if (e.key === "Escape") {
              e.preventDefault();
              e.stopPropagation();
              setMenuOpen(false);
              return;
            }
          }
          if (e.key === "Enter" && !e.shiftKey && !e.isComposing) {
            e.preventDefault();
            if (canSend && !uploading) void send();
            else if (!canSend) setTried(true);
          }
        }}
      />
      {pending && !isCommand(text.trim()) ? (
        <button type="button" class="stop" aria-label="Stop the agent" onClick={stop}>
          Stop
        </button>
      ) : (
        <button
          type="submit"
          class="primary"
          disabled={busy || uploading || (!text.trim() && attached.length === 0)}
          title={uploading ? "Waiting for the files to upload" : undefined}
        >
          Send
        </button>
      )}
    </form>
  );
}

/**
 * Whether the text is a command to run: `/name…` where the name could be a command's
 * (letters, digits, `-`, `_`, `:`), so a message such as `/etc/hosts is wrong` is sent as a
 * message; `//…` always is.
 */
function isCommand(text: string): boolean {
  return /^\/[A-Za-z0-9][\w:-]*(\s|$)/.test(text);
}

/** `512 B`, `12.3 KB`, `4.0 MB`. */
export function humanSize(bytes: number): string {
  if (bytes < 1000) return `${bytes} B`;
  if (bytes < 1e6) return `${(bytes / 1e3).toFixed(1)} KB`;
  if (bytes < 1e9) return `${(bytes / 1e6).toFixed(1)} MB`;
  return `${(bytes / 1e9).toFixed(1)} GB`;
}
