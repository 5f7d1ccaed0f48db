// A workspace's slash commands: every command its chats see (built-in, global, stored here, or
// files in its working directory), and the stored ones created, edited and deleted here as the
// markdown files they are.

import { useCallback, useEffect, useState } from "preact/hooks";
import type { Client, CommandEntry } from "./api";
import type { Notify } from "./toasts";

const TEMPLATE = "---\ndescription: What it does\nargument-hint: \"[ARGS]\"\n---\nThe prompt. $ARGUMENTS is everything after the name; $1, $2… are the words.\n";

export function CommandsTab({ client, ws, notify }: { client: Client; ws: string; notify: Notify }) {
  const [commands, setCommands] = useState<CommandEntry[] | null>(null);
  const [editing, setEditing] = useState<{ name: string; markdown: string; isNew: boolean } | null>(null);

  const reload = useCallback(async () => {
    try {
      setCommands(await client.commands(ws));
    } catch (e) {
      notify.error(e);
    }
  }, [client, ws, notify]);
  useEffect(() => void reload(), [reload]);

  const edit = async (name: string) => {
    try {
      setEditing({ name, markdown: await client.commandFile(ws, name), isNew: false });
    } catch (e) {
      notify.error(e);
    }
  };
  const save = async (e: Event) => {
    e.preventDefault();
    if (!editing) return;
    try {
      await client.saveCommand(ws, editing.name.trim().replace(/^\//, ""), editing.markdown);
      notify.info(`Saved /${editing.name.trim().replace(/^\//, "")}`);
      setEditing(null);
      await reload();
    } catch (err) {
      notify.error(err);
    }
  };
  const remove = async (name: string) => {
    if (!confirm(`Delete the command /${name}?`)) return;
    try {
      await client.deleteCommand(ws, name);
      notify.info(`Deleted /${name}`);
      await reload();
    } catch (e) {
      notify.error(e);
    }
  };

  // A stored workspace command (not a file, which is edited where it lives).
  const stored = (c: CommandEntry) => c.source === "workspace" && !c.file;
  return (
    <section class="commands" aria-labelledby="commands-heading">
      <div class="section-head">
        <h2 id="commands-heading">Commands</h2>
        {!editing && (
          <button type="button" class="primary" onClick={() => setEditing({ name: "", markdown: TEMPLATE, isNew: true })}>
            New command
          </button>
        )}
      </div>
      <p class="hint">
        Type <kbd>/</kbd> in a chat to use them. A workspace command overrides a global one of the same name, which
        overrides a built-in; files in the working directory's <code>.claude/commands/</code> and{" "}
        <code>.agents/commands/</code> override stored ones.
      </p>
      {editing && (
        <form class="command-form" onSubmit={save}>
          <fieldset>
            <legend>{editing.isNew ? "New command" : `Edit /${editing.name}`}</legend>
            <label>
              Name
              <input
                value={editing.name}
                required
                disabled={!editing.isNew}
                placeholder="review, or git:commit"
                onInput={(e) => setEditing({ ...editing, name: e.currentTarget.value })}
              />
            </label>
            <label>
              Markdown file
              <textarea
                rows={10}
                value={editing.markdown}
                onInput={(e) => setEditing({ ...editing, markdown: e.currentTarget.value })}
              />
            </label>
            <div class="buttons">
              <button type="submit" class="primary">
                Save
              </button>
              <button type="button" onClick={() => setEditing(null)}>
                Cancel
              </button>
            </div>
          </fieldset>
        </form>
      )}
      {commands === null ? (
        <p class="loading">Loading…</p>
      ) : (
        <ul class="command-list">
          {commands.map((c) => (
            <li key={c.name} class={c.error ? "broken" : ""}>
              <code>/{c.name}</code>
              {c.argument_hint && <span class="command-hint">{c.argument_hint}</span>}
              <span class="badge">{c.file ? "file" : c.source}</span>
              {c.kind === "action" && <span class="badge">action</span>}
              {c.overrides && <span class="badge warn">overrides {c.overrides}</span>}
              <span class="command-description">{c.error ? `Cannot run: ${c.error}` : c.description}</span>
              {c.file && <span class="command-file">{c.file}</span>}
              {stored(c) && (
                <span class="buttons">
                  <button type="button" onClick={() => void edit(c.name)} aria-label={`Edit /${c.name}`}>
                    Edit
                  </button>
                  <button type="button" class="danger" onClick={() => void remove(c.name)} aria-label={`Delete /${c.name}`}>
                    Delete
                  </button>
                </span>
              )}
            </li>
          ))}
        </ul>
      )}
    </section>
  );
}
