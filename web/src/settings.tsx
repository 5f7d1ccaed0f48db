// A workspace's settings page: its title and description, where its CLI agents run (this
// server, or runners, with the runners that serve it), its working directory (with the folders
// this server allows, shown before one is chosen), how long what its
// chats leave behind is kept, whom Spool tells when an agent needs a person (with what that does
// on this server), its MCP servers (mcp-servers.tsx), and deleting the workspace, which asks for
// its title first. Its usage this month (usage.tsx) shows above its monthly token budget.

import { useEffect, useState } from "preact/hooks";
import { type CliHost, type Client, cliHostOf, type Workspace, type WorkspaceChange } from "./api";
import { McpServers } from "./mcp-servers";
import { RunnersList } from "./runners";
import type { Notify } from "./toasts";
import { WorkspaceMonth } from "./usage";

export function SettingsTab(props: {
  client: Client;
  ws: string;
  notify: Notify;
  /** The workspace changed (its title shows elsewhere). */
  onSaved: () => void;
  /** The workspace is gone. */
  onDeleted: () => void;
}) {
  const { client, ws, notify } = props;
  const [workspace, setWorkspace] = useState<Workspace | null>(null);
  useEffect(() => {
    client.workspace(ws).then(setWorkspace, notify.error);
  }, [client, ws, notify]);
  if (!workspace) return <p aria-busy="true">Loading…</p>;
  return (
    <section class="settings" aria-labelledby="settings-heading">
      <h2 id="settings-heading">Workspace settings</h2>
      <SettingsForm
        key={workspace.updated_at}
        client={client}
        workspace={workspace}
        onSave={async (change) => {
          try {
            setWorkspace(await client.updateWorkspace(ws, change));
            notify.info("Settings saved.");
            props.onSaved();
          } catch (e) {
            notify.error(e);
          }
        }}
      />
      <McpServers client={client} ws={ws} notify={notify} />
      <DeleteWorkspace
        title={workspace.title}
        onDelete={async () => {
          try {
            await client.deleteWorkspace(ws);
            notify.info(`Workspace “${workspace.title}” deleted.`);
            props.onDeleted();
          } catch (e) {
            notify.error(e);
          }
        }}
      />
    </section>
  );
}

function SettingsForm({
  client,
  workspace,
  onSave,
}: {
  client: Client;
  workspace: Workspace;
  onSave: (change: WorkspaceChange) => Promise<void>;
}) {
  const [title, setTitle] = useState(workspace.title);
  const [description, setDescription] = useState(workspace.description);
  const [host, setHost] = useState<CliHost>(cliHostOf(workspace) ?? "server");
  const [mode, setMode] = useState(workspace.working_directory_mode);
  const [path, setPath] = useState(workspace.working_directory_path ?? "");
  const [turnDays, setTurnDays] = useState(String(workspace.cleanup.turn_record_days));
  const [folderDays, setFolderDays] = useState(String(workspace.cleanup.chat_folder_days));
  const n = workspace.notifications;
  const [email, setEmail] = useState(n.email ?? "");
  const [onQuestion, setOnQuestion] = useState(n.on_question);
  const [onFailure, setOnFailure] = useState(n.on_failure);
  const [onTask, setOnTask] = useState(n.on_task);
  const [budget, setBudget] = useState(workspace.monthly_token_budget == null ? "" : String(workspace.monthly_token_budget));
  const [saving, setSaving] = useState(false);
  /** The folders this server allows a working directory under; `null` until known. */
  const [roots, setRoots] = useState<string[] | null>(null);
  useEffect(() => {
    client.clis().then(
      (available) => setRoots(available.workspaceRoots),
      () => setRoots(null),
    );
  }, [client]);
  // On this server with no roots, a fixed folder would always be refused.
  const noFolders = host === "server" && roots !== null && roots.length === 0;
  const submit = async (e: Event) => {
    e.preventDefault();
    setSaving(true);
    // Only what the person changed is sent, so a change made meanwhile (by an agent, or in
    // another tab) to another setting is not undone.
    const change: WorkspaceChange = {};
    if (title.trim() !== workspace.title) change.title = title.trim();
    if (description !== workspace.description) change.description = description;
    if (host !== (cliHostOf(workspace) ?? "server")) change.cli_host = host;
    if (mode !== workspace.working_directory_mode) change.working_directory_mode = mode;
    // A folder is sent only when it changed: setting one is checked against the server's roots.
    if (mode === "static" && path.trim() !== (workspace.working_directory_path ?? "")) {
      change.working_directory_path = path.trim();
    }
    const cleanup: WorkspaceChange["cleanup"] = {};
    if (Number(turnDays) !== workspace.cleanup.turn_record_days) cleanup.turn_record_days = Number(turnDays);
    if (Number(folderDays) !== workspace.cleanup.chat_folder_days) cleanup.chat_folder_days = Number(folderDays);
    if (Object.keys(cleanup).length > 0) change.cleanup = cleanup;
    const notifications: WorkspaceChange["notifications"] = {};
    if ((email.trim() || null) !== n.email) notifications.email = email.trim() || null;
    if (onQuestion !== n.on_question) notifications.on_question = onQuestion;
    if (onFailure !== n.on_failure) notifications.on_failure = onFailure;
    if (onTask !== n.on_task) notifications.on_task = onTask;
    if (Object.keys(notifications).length > 0) change.notifications = notifications;
    const newBudget = budget.trim() === "" ? null : Number(budget);
    if (newBudget !== (workspace.monthly_token_budget ?? null)) change.monthly_token_budget = newBudget;
    await onSave(change);
    setSaving(false);
  };
  const days = (label: string, value: string, set: (v: string) => void, hint: string) => (
    <label>
      {label}
      <input type="number" min={1} max={3650} required value={value} onInput={(e) => set(e.currentTarget.value)} />
      <small>{hint}</small>
    </label>
  );
  return (
    <form class="settings-form" onSubmit={submit}>
      <fieldset>
        <legend>About</legend>
        <label>
          Title
          <input required maxLength={100} value={title} onInput={(e) => setTitle(e.currentTarget.value)} />
        </label>
        <label>
          Description
          <textarea rows={3} value={description} onInput={(e) => setDescription(e.currentTarget.value)} />
          <small>Agents read it as the workspace's context.</small>
        </label>
      </fieldset>
      {/* A server without runners says nothing of where CLI agents run. */}
      {cliHostOf(workspace) && (
        <fieldset>
          <legend>Where CLI agents run</legend>
          <label class="choice">
            <input type="radio" name="cli-host" checked={host === "server"} onChange={() => setHost("server")} />
            This server
          </label>
          <label class="choice">
            <input type="radio" name="cli-host" checked={host === "runners"} onChange={() => setHost("runners")} />
            Runners
          </label>
          <small>
            {host === "runners"
              ? "Runners (spool runner, on the machines that hold the code) take the chats' CLI turns; the list below shows them."
              : "The server runs the CLI agents (claude, gemini, codex, opencode) itself, as it runs the others."}
          </small>
          <RunnersList client={client} ws={workspace.id} wanted={host === "runners"} />
        </fieldset>
      )}
      <fieldset>
        <legend>Working directory</legend>
        <label class="choice">
          <input type="radio" name="mode" checked={mode === "temp"} onChange={() => setMode("temp")} />
          A folder of each chat's own (temporary)
        </label>
        <label class="choice">
          <input
            type="radio"
            name="mode"
            checked={mode === "static"}
            disabled={noFolders && mode !== "static"}
            aria-describedby="allowed-folders"
            onChange={() => setMode("static")}
          />
          One folder for every chat
        </label>
        {host === "server" && roots !== null && <AllowedFolders id="allowed-folders" roots={roots} />}
        {mode === "static" && (
          <label>
            Folder
            <input
              required
              value={path}
              list="allowed-roots"
              placeholder={roots?.[0] ? `${roots[0]}/project` : "/srv/projects/docs"}
              onInput={(e) => setPath(e.currentTarget.value)}
            />
            <datalist id="allowed-roots">
              {(host === "server" ? (roots ?? []) : []).map((r) => (
                <option key={r} value={r} />
              ))}
            </datalist>
            <small>
              {host === "runners"
                ? "It must exist on the runners' machines, under a root each runner allows (SPOOL_WORKSPACE_ROOTS)."
                : "It must exist on the server, under a root the operator allowed."}
            </small>
          </label>
        )}
      </fieldset>
      <fieldset>
        <legend>Cleanup</legend>
        {days("Keep finished turn records (days)", turnDays, setTurnDays, "How long a chat's list of turns shows a finished one.")}
        {days("Keep an idle chat's folder (days)", folderDays, setFolderDays, "A daily sweep removes CLI agents' files of chats idle this long.")}
      </fieldset>
      <fieldset>
        <legend>Notifications</legend>
        <label>
          Email
          <input type="email" value={email} placeholder="you@example.com" onInput={(e) => setEmail(e.currentTarget.value)} />
        </label>
        <label class="choice">
          <input type="checkbox" checked={onQuestion} onChange={(e) => setOnQuestion(e.currentTarget.checked)} />
          When an agent asks a question or waits for an approval
        </label>
        <label class="choice">
          <input type="checkbox" checked={onFailure} onChange={(e) => setOnFailure(e.currentTarget.checked)} />
          When a turn fails
        </label>
        <label class="choice">
          <input type="checkbox" checked={onTask} onChange={(e) => setOnTask(e.currentTarget.checked)} />
          When a task is created
        </label>
        <p class={`status status-${n.status.state}`} role="status" aria-label="Notification status">
          {n.status.message}
        </p>
      </fieldset>
      <fieldset>
        <legend>Usage</legend>
        <WorkspaceMonth client={client} ws={workspace.id} version={workspace.updated_at} />
        <label>
          Monthly token budget
          <input
            type="number"
            min={1}
            step={1}
            inputMode="numeric"
            value={budget}
            placeholder="No budget"
            aria-describedby="budget-hint"
            onInput={(e) => setBudget(e.currentTarget.value)}
          />
          <small id="budget-hint">
            Input and output tokens the workspace's chats may use in a calendar month (UTC). Once reached, new turns are
            refused until the month ends. Leave empty for no budget.
          </small>
        </label>
      </fieldset>
      <button type="submit" class="primary" disabled={saving}>
        {saving ? "Saving…" : "Save settings"}
      </button>
    </form>
  );
}

/** The folders this server allows a working directory under, or that it allows none. */
function AllowedFolders({ id, roots }: { id: string; roots: string[] }) {
  if (roots.length === 0)
    return (
      <p class="allowed-folders" id={id}>
        This server allows no fixed folder: agents work in a folder of each chat's own. (An operator allows folders by
        listing roots in <code>SPOOL_WORKSPACE_ROOTS</code>.)
      </p>
    );
  return (
    <div class="allowed-folders" id={id}>
      A fixed folder must be an existing folder under one of these:
      <ul aria-label="Allowed folders">
        {roots.map((r) => (
          <li key={r}>
            <code>{r}</code>
          </li>
        ))}
      </ul>
    </div>
  );
}

function DeleteWorkspace({ title, onDelete }: { title: string; onDelete: () => Promise<void> }) {
  const [asking, setAsking] = useState(false);
  const [typed, setTyped] = useState("");
  const [deleting, setDeleting] = useState(false);
  return (
    <section class="danger" aria-labelledby="danger-heading">
      <h3 id="danger-heading">Delete this workspace</h3>
      <p>This deletes every chat in it, its agents, tasks and commands. It cannot be undone.</p>
      {asking ? (
        <form
          onSubmit={async (e) => {
            e.preventDefault();
            if (typed !== title) return;
            setDeleting(true);
            await onDelete();
            setDeleting(false);
          }}
        >
          <label>
            Type <strong>{title}</strong> to confirm
            <input autoFocus value={typed} onInput={(e) => setTyped(e.currentTarget.value)} />
          </label>
          <div class="buttons">
            <button type="submit" class="danger" disabled={typed !== title || deleting}>
              {deleting ? "Deleting…" : "Delete workspace and its chats"}
            </button>
            <button type="button" class="link" onClick={() => (setAsking(false), setTyped(""))}>
              Cancel
            </button>
          </div>
        </form>
      ) : (
        <button type="button" class="danger" onClick={() => setAsking(true)}>
          Delete workspace…
        </button>
      )}
    </section>
  );
}
