// A workspace's agents, in the order chats offer them: create, edit, delete, reorder.

import { useCallback, useEffect, useId, useState } from "preact/hooks";
import { type Agent, type AgentFields, CLI_TYPES, type Client, RUNTIMES } from "./api";
import { OptionalSelect } from "./fields";
import { type CliChoice, NoRunnerNote, useCliChoice } from "./runners";
import type { Notify } from "./toasts";

const BLANK: AgentFields = { name: "", instruction: "", runtime: null, model: null, cli_type: null, context_tokens: null };

export function AgentsTab({ client, ws, notify }: { client: Client; ws: string; notify: Notify }) {
  const [agents, setAgents] = useState<Agent[] | null>(null);
  const [editing, setEditing] = useState<string | null>(null);
  const [creating, setCreating] = useState(false);
  const choice = useCliChoice(client, ws);

  const reload = useCallback(async () => {
    try {
      setAgents(await client.agents(ws));
    } catch (e) {
      notify.error(e);
    }
  }, [client, ws, notify]);
  useEffect(() => void reload(), [reload]);

  const act = async (f: () => Promise<unknown>, done?: string) => {
    try {
      await f();
      if (done) notify.info(done);
    } catch (e) {
      notify.error(e);
    }
    await reload();
  };

  const move = (index: number, by: number) => {
    if (!agents) return;
    const order = agents.map((a) => a.id);
    const [id] = order.splice(index, 1);
    order.splice(index + by, 0, id!);
    // Show the new order at once; the reload confirms it.
    setAgents(order.map((i) => agents.find((a) => a.id === i)!));
    void act(() => client.reorderAgents(ws, order));
  };

  return (
    <section class="agents" aria-labelledby="agents-heading">
      <div class="section-head">
        <h2 id="agents-heading">Agents</h2>
        {!creating && (
          <button type="button" class="primary" onClick={() => setCreating(true)}>
            New agent
          </button>
        )}
      </div>
      {creating && (
        <AgentForm
          legend="New agent"
          initial={BLANK}
          client={client}
          choice={choice}
          onCancel={() => setCreating(false)}
          onSave={(fields) =>
            act(async () => {
              await client.createAgent(ws, fields);
              setCreating(false);
            }, `Created ${fields.name}`)
          }
        />
      )}
      {agents === null ? (
        <p aria-busy="true">Loading…</p>
      ) : (
        <ol class="agent-list">
          {agents.map((agent, i) => (
            <li key={agent.id} class="agent-row" data-agent={agent.id}>
              {editing === agent.id ? (
                <AgentForm
                  legend={`Edit ${agent.name}`}
                  client={client}
                  choice={choice}
                  initial={{
                    name: agent.name,
                    instruction: agent.instruction,
                    runtime: agent.runtime ?? null,
                    model: agent.model ?? null,
                    cli_type: agent.cli_type ?? null,
                    context_tokens: agent.context_tokens ?? null,
                  }}
                  onCancel={() => setEditing(null)}
                  onSave={(fields) =>
                    act(async () => {
                      await client.updateAgent(agent.id, fields);
                      setEditing(null);
                    }, `Saved ${fields.name}`)
                  }
                />
              ) : (
                <>
                  <div class="agent-info">
                    <span class="agent-name">{agent.name}</span>
                    {agent.builtin && <span class="badge">built-in</span>}
                    <span class="badge">{agent.runtime ?? "automatic"}</span>
                    {agent.model && <span class="badge">{agent.model}</span>}
                    {agent.cli_type && <span class="badge">{agent.cli_type}</span>}
                    <p class="agent-instruction">
                      {agent.builtin
                        ? agent.instruction
                          ? `Spool's own instruction, and: ${agent.instruction}`
                          : "Spool's own instruction (add to it with Edit)"
                        : agent.instruction}
                    </p>
                  </div>
                  <div class="buttons">
                    <button type="button" aria-label={`Move ${agent.name} up`} disabled={i === 0} onClick={() => move(i, -1)}>
                      ↑
                    </button>
                    <button
                      type="button"
                      aria-label={`Move ${agent.name} down`}
                      disabled={i === agents.length - 1}
                      onClick={() => move(i, 1)}
                    >
                      ↓
                    </button>
                    <button type="button" aria-label={`Edit ${agent.name}`} onClick={() => setEditing(agent.id)}>
                      Edit
                    </button>
                    {!agent.builtin && (
                      <button
                        type="button"
                        class="danger"
                        aria-label={`Delete ${agent.name}`}
                        onClick={() => confirm(`Delete the agent ${agent.name}?`) && void act(() => client.deleteAgent(agent.id), `Deleted ${agent.name}`)}
                      >
                        Delete
                      </button>
                    )}
                  </div>
                </>
              )}
            </li>
          ))}
        </ol>
      )}
    </section>
  );
}

function AgentForm({
  legend,
  initial,
  client,
  choice,
  onSave,
  onCancel,
}: {
  legend: string;
  initial: AgentFields;
  client: Client;
  /** What each CLI can do where the workspace's CLI agents run. */
  choice: CliChoice | null;
  onSave: (fields: AgentFields) => void;
  onCancel: () => void;
}) {
  const [f, setF] = useState<AgentFields>({
    name: initial.name,
    instruction: initial.instruction,
    runtime: initial.runtime,
    model: initial.model,
    cli_type: initial.cli_type,
    context_tokens: initial.context_tokens,
  });
  const set = <K extends keyof AgentFields>(k: K, v: AgentFields[K]) => setF((old) => ({ ...old, [k]: v }));
  // It answers with a CLI, and no runner could run one.
  const noRunner = Boolean(choice?.noRunner && (f.cli_type || f.runtime === "cli"));
  const noteId = `${useId()}-no-runner`;
  return (
    <form
      class="agent-form"
      onSubmit={(e) => {
        e.preventDefault();
        onSave({ ...f, name: f.name.trim(), model: f.model?.trim() || null });
      }}
      onKeyDown={(e) => e.key === "Escape" && onCancel()}
    >
      <fieldset>
        <legend>{legend}</legend>
        <label>
          Name
          <input value={f.name} required maxLength={100} autoFocus onInput={(e) => set("name", e.currentTarget.value)} />
        </label>
        <label>
          Instruction
          <textarea rows={3} value={f.instruction} onInput={(e) => set("instruction", e.currentTarget.value)} />
        </label>
        <div class="row">
          <OptionalSelect label="Runtime" value={f.runtime} options={RUNTIMES} none="automatic" onChange={(v) => set("runtime", v)} />
          <label>
            Model
            <input value={f.model ?? ""} placeholder="provider default" onInput={(e) => set("model", e.currentTarget.value)} />
          </label>
          <OptionalSelect
            label="CLI"
            value={f.cli_type}
            options={CLI_TYPES}
            none="none"
            describe={choice ? (cli) => choice.options[cli] : undefined}
            describedBy={noRunner ? noteId : undefined}
            onChange={(v) => set("cli_type", v)}
          />
        </div>
        <label>
          Context budget (tokens)
          <input
            type="number"
            min={256}
            max={2000000}
            step={1}
            value={f.context_tokens ?? ""}
            placeholder="the model's own"
            aria-describedby={`${noteId}-context`}
            onInput={(e) => {
              const n = Number.parseInt(e.currentTarget.value, 10);
              set("context_tokens", Number.isFinite(n) ? n : null);
            }}
          />
        </label>
        <p class="hint" id={`${noteId}-context`}>
          How much of the chat the agent is given; past it, the oldest part is summarised (the chat keeps every message).
        </p>
        {noRunner && <NoRunnerNote client={client} id={noteId} />}
        <div class="buttons">
          <button type="submit" class="primary" disabled={!f.name.trim()}>
            Save
          </button>
          <button type="button" class="link" onClick={onCancel}>
            Cancel
          </button>
        </div>
      </fieldset>
    </form>
  );
}
