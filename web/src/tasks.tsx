// A workspace's tasks (what agents noted with `create_task`, and what people add by hand),
// newest first, each linked to its chat; made, edited and deleted here. A page at a time as the
// list scrolls.

import { useCallback, useEffect, useState } from "preact/hooks";
import type { Client, Task } from "./api";
import { countOf, usePages } from "./pages";
import { href } from "./route";
import { relative, useTick } from "./time";
import type { Notify } from "./toasts";

/** How many tasks a page asks for. */
const PAGE = 50;

export function TasksTab({ client, ws, notify, highlight }: { client: Client; ws: string; notify: Notify; highlight?: string }) {
  const [editing, setEditing] = useState<string | null>(null);
  const now = useTick();
  const read = useCallback(
    async (limit: number, cursor?: string) => {
      const page = await client.taskPage(ws, { limit, ...(cursor ? { cursor } : {}) });
      return { items: page.tasks, next: page.next_cursor };
    },
    [client, ws],
  );
  const { items: tasks, more, loadingMore, reload, loadMore, end } = usePages(read, "", notify, PAGE);
  useEffect(() => {
    if (highlight && tasks) document.getElementById(`task-${highlight}`)?.focus();
  }, [highlight, tasks]);
  const run = async (f: () => Promise<unknown>) => {
    try {
      await f();
      await reload();
      return true;
    } catch (e) {
      notify.error(e);
      return false;
    }
  };
  return (
    <section class="tasks" aria-labelledby="tasks-heading">
      <h2 id="tasks-heading">Tasks</h2>
      <TaskForm
        label="New task"
        submit="Add task"
        onSave={(title, description) => run(() => client.createTask(ws, { title, description }))}
      />
      {tasks === null ? (
        <p aria-busy="true">Loading…</p>
      ) : tasks.length === 0 ? (
        <p class="empty">No tasks yet. Add one above, or ask an agent for one.</p>
      ) : (
        <>
          <p class="list-count" role="status" id="task-count">
            {countOf(tasks.length, more, ["task", "tasks"])}
          </p>
          <ul class="task-list" aria-busy={loadingMore} aria-describedby="task-count">
            {tasks.map((t) => (
              <li key={t.id} id={`task-${t.id}`} tabIndex={-1} class={t.id === highlight ? "task highlight" : "task"} aria-label={`Task ${t.title}`}>
                {editing === t.id ? (
                  <TaskForm
                    label="Edit task"
                    submit="Save task"
                    initial={t}
                    onCancel={() => setEditing(null)}
                    onSave={async (title, description) => {
                      const saved = await run(() => client.updateTask(t.id, { title, description }));
                      if (saved) setEditing(null);
                      return saved;
                    }}
                  />
                ) : (
                  <>
                    <span class="task-title">{t.title}</span>
                    {t.description && <p>{t.description}</p>}
                    <time dateTime={t.created_at}>{relative(t.created_at, now)}</time>
                    {t.session_id && <a href={href({ page: "chats", ws, chat: t.session_id })}>Open its chat</a>}
                    <div class="buttons">
                      <button type="button" onClick={() => setEditing(t.id)}>
                        Edit
                      </button>
                      <button
                        type="button"
                        class="link"
                        onClick={() => {
                          if (confirm(`Delete the task “${t.title}”?`)) void run(() => client.deleteTask(t.id));
                        }}
                      >
                        Delete
                      </button>
                    </div>
                  </>
                )}
              </li>
            ))}
          </ul>
          <div
            class="list-end"
            ref={(el) => {
              end.current = el;
            }}
          >
            {loadingMore ? (
              <p class="list-status" aria-busy="true">Loading more…</p>
            ) : more ? (
              <button type="button" class="link" onClick={() => void loadMore()}>
                Load more tasks
              </button>
            ) : null}
          </div>
        </>
      )}
    </section>
  );
}

/** A task's title and description, to add or to change. */
function TaskForm(props: {
  label: string;
  submit: string;
  initial?: Task;
  onSave: (title: string, description: string) => Promise<boolean>;
  onCancel?: () => void;
}) {
  const { label, submit, initial, onSave, onCancel } = props;
  const [title, setTitle] = useState(initial?.title ?? "");
  const [description, setDescription] = useState(initial?.description ?? "");
  const [busy, setBusy] = useState(false);
  const id = initial ? `task-form-${initial.id}` : "task-form-new";
  return (
    <form
      class="task-form"
      aria-label={label}
      onSubmit={async (e) => {
        e.preventDefault();
        setBusy(true);
        const saved = await onSave(title.trim(), description);
        setBusy(false);
        if (saved && !initial) {
          setTitle("");
          setDescription("");
        }
      }}
    >
      <label for={`${id}-title`}>Title</label>
      <input id={`${id}-title`} value={title} maxLength={200} required onInput={(e) => setTitle(e.currentTarget.value)} />
      <label for={`${id}-description`}>Description</label>
      <textarea id={`${id}-description`} rows={2} value={description} onInput={(e) => setDescription(e.currentTarget.value)} />
      <div class="buttons">
        <button type="submit" class="primary" disabled={busy || !title.trim()}>
          {submit}
        </button>
        {onCancel && (
          <button type="button" class="link" onClick={onCancel}>
            Cancel
          </button>
        )}
      </div>
    </form>
  );
}
