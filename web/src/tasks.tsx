// A workspace's tasks (what agents noted with `create_task`), newest first, each linked to its chat.

import { useEffect, useState } from "preact/hooks";
import type { Client, Task } from "./api";
import { href } from "./route";
import { relative, useTick } from "./time";
import type { Notify } from "./toasts";

export function TasksTab({ client, ws, notify, highlight }: { client: Client; ws: string; notify: Notify; highlight?: string }) {
  const [tasks, setTasks] = useState<Task[] | null>(null);
  const now = useTick();
  useEffect(() => {
    client.tasks(ws).then(setTasks, notify.error);
  }, [client, ws, notify]);
  useEffect(() => {
    if (highlight && tasks) document.getElementById(`task-${highlight}`)?.focus();
  }, [highlight, tasks]);
  return (
    <section class="tasks" aria-labelledby="tasks-heading">
      <h2 id="tasks-heading">Tasks</h2>
      {tasks === null ? (
        <p aria-busy="true">Loading…</p>
      ) : tasks.length === 0 ? (
        <p class="empty">No tasks yet. Agents add them when you ask for one.</p>
      ) : (
        <ul class="task-list">
          {tasks.map((t) => (
            <li key={t.id} id={`task-${t.id}`} tabIndex={-1} class={t.id === highlight ? "task highlight" : "task"}>
              <span class="task-title">{t.title}</span>
              {t.description && <p>{t.description}</p>}
              <time dateTime={t.created_at}>{relative(t.created_at, now)}</time>
              {t.session_id && <a href={href({ page: "chats", ws, chat: t.session_id })}>Open its chat</a>}
            </li>
          ))}
        </ul>
      )}
    </section>
  );
}
