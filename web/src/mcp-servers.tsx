// A workspace's MCP servers, in its settings: each server (how it is reached, which secrets are
// set, whether its tools are offered), adding and editing one, deleting it, testing its
// connection, and the policy of each tool the test found (allow, ask, deny, or the default its
// server's annotations give).

import { useCallback, useEffect, useRef, useState } from "preact/hooks";
import { ApiError, type Client } from "./api";
import { McpServerForm, type McpSubmit } from "./mcp-form";
import {
  createMcpServer,
  defaultLabel,
  deleteMcpServer,
  listMcpServers,
  type McpServer,
  type McpTestResult,
  type McpTool,
  POLICIES,
  secretNames,
  type ToolPolicy,
  testMcpServer,
  updateMcpServer,
} from "./mcp";
import type { Notify } from "./toasts";

/** Which form is open: a new server's, or an existing one's (by id). */
type Editing = { kind: "new" } | { kind: "edit"; id: string } | null;

export function McpServers({ client, ws, notify }: { client: Client; ws: string; notify: Notify }) {
  const [servers, setServers] = useState<McpServer[] | null>(null);
  const [failed, setFailed] = useState<string | null>(null);
  const [editing, setEditing] = useState<Editing>(null);
  const [tests, setTests] = useState<Record<string, McpTestResult | "testing">>({});
  const section = useRef<HTMLElement>(null);
  /** What to focus once the form closes: the button that opened it. */
  const opener = useRef<string | null>(null);
  const [refocus, setRefocus] = useState(0);

  const reload = useCallback(async () => {
    try {
      setServers(await listMcpServers(client, ws));
      setFailed(null);
    } catch (e) {
      // A server older than MCP servers has no such route: nothing to list, nothing wrong.
      setFailed(e instanceof ApiError && e.code === "no_route" ? "" : e instanceof Error ? e.message : String(e));
    }
  }, [client, ws]);
  useEffect(() => void reload(), [reload]);
  useEffect(() => {
    if (!refocus || !opener.current) return;
    const target = section.current?.querySelector<HTMLElement>(`[data-focus="${opener.current}"]`);
    (target ?? section.current?.querySelector<HTMLElement>('[data-focus="add"]'))?.focus();
  }, [refocus]);

  const open = (next: Editing, from: string) => {
    opener.current = from;
    setEditing(next);
  };
  const close = () => {
    setEditing(null);
    setRefocus((n) => n + 1);
  };
  const replace = (server: McpServer) => setServers((list) => (list ?? []).map((s) => (s.id === server.id ? server : s)));
  const act = async (f: () => Promise<unknown>, done?: string) => {
    try {
      await f();
      if (done) notify.info(done);
    } catch (e) {
      notify.error(e);
    }
  };
  const submit = (server?: McpServer) => async (s: McpSubmit) => {
    // A refusal is thrown on to the form, which shows it by its field.
    if (s.kind === "create") {
      const created = await createMcpServer(client, ws, s.server);
      setServers((list) => [...(list ?? []), created]);
      notify.info(`Added MCP server ${created.name}.`);
    } else if (server && Object.keys(s.change).length > 0) {
      replace(await updateMcpServer(client, server.id, s.change));
      // What a test found was of the server before the change.
      setTests(({ [server.id]: _, ...rest }) => rest);
      notify.info(`Saved MCP server ${server.name}.`);
    }
    close();
  };
  const test = async (server: McpServer) => {
    setTests((t) => ({ ...t, [server.id]: "testing" }));
    try {
      const result = await testMcpServer(client, server.id);
      setTests((t) => ({ ...t, [server.id]: result }));
    } catch (e) {
      setTests((t) => ({ ...t, [server.id]: { ok: false, tools: [], error: e instanceof Error ? e.message : String(e) } }));
    }
  };
  // The API merges `tools` entry by entry: send the one tool's policy, or null to remove it
  // (the tool then follows its default).
  const setPolicy = (server: McpServer, tool: string, policy: ToolPolicy | null) =>
    act(async () => replace(await updateMcpServer(client, server.id, { tools: { [tool]: policy } })));

  return (
    <section ref={section} class="mcp-servers" aria-labelledby="mcp-heading">
      <div class="section-head">
        <h3 id="mcp-heading">MCP servers</h3>
        {editing?.kind !== "new" && failed !== "" && (
          <button type="button" class="primary" data-focus="add" onClick={() => open({ kind: "new" }, "add")}>
            Add MCP server
          </button>
        )}
      </div>
      <p class="hint">Agents of this workspace call the tools of its enabled servers, as each tool's policy says.</p>
      {editing?.kind === "new" && <McpServerForm onSubmit={submit()} onCancel={close} />}
      {failed === "" ? (
        <p class="empty">This Spool server does not offer MCP servers.</p>
      ) : failed !== null ? (
        <p class="error" role="alert">
          The MCP servers cannot be listed: {failed}
        </p>
      ) : servers === null ? (
        <p aria-busy="true">Loading…</p>
      ) : servers.length === 0 ? (
        <p class="empty">No MCP servers yet.</p>
      ) : (
        <ul class="mcp-list" aria-label="MCP servers">
          {servers.map((server) =>
            editing?.kind === "edit" && editing.id === server.id ? (
              <li key={server.id} class="mcp-server">
                <McpServerForm server={server} onSubmit={submit(server)} onCancel={close} />
              </li>
            ) : (
              <ServerRow
                key={server.id}
                server={server}
                test={tests[server.id]}
                onEdit={() => open({ kind: "edit", id: server.id }, `edit-${server.id}`)}
                onToggle={(enabled) =>
                  act(async () => replace(await updateMcpServer(client, server.id, { enabled })), `${server.name} ${enabled ? "enabled" : "disabled"}.`)
                }
                onDelete={() => {
                  if (!confirm(`Delete the MCP server ${server.name}? Agents lose its tools.`)) return;
                  void act(async () => {
                    await deleteMcpServer(client, server.id);
                    setServers((list) => (list ?? []).filter((s) => s.id !== server.id));
                    opener.current = "add";
                    setRefocus((n) => n + 1);
                  }, `Deleted MCP server ${server.name}.`);
                }}
                onTest={() => void test(server)}
                onPolicy={(tool, policy) => void setPolicy(server, tool, policy)}
              />
            ),
          )}
        </ul>
      )}
    </section>
  );
}

function ServerRow(props: {
  server: McpServer;
  test: McpTestResult | "testing" | undefined;
  onEdit: () => void;
  onToggle: (enabled: boolean) => void;
  onDelete: () => void;
  onTest: () => void;
  onPolicy: (tool: string, policy: ToolPolicy | null) => void;
}) {
  const { server, test } = props;
  const secrets = secretNames(server.transport === "http" ? server.headers : server.env);
  const where = server.transport === "http" ? (server.url ?? "") : [server.command ?? "", ...(server.args ?? [])].join(" ");
  return (
    <li class={`mcp-server${server.enabled ? "" : " disabled"}`} aria-label={`MCP server ${server.name}`}>
      <div class="mcp-head">
        <span class="mcp-name">{server.name}</span>
        <span class="badge">{server.transport === "http" ? "HTTP" : "stdio"}</span>
        {!server.enabled && <span class="badge warn">disabled</span>}
        {server.runs_on === "runners" && (
          <span class="badge" title="No worker here may start it: only CLI agents on runners get its tools">
            runners only
          </span>
        )}
      </div>
      <code class="mcp-where">{where}</code>
      {secrets.length > 0 && (
        <p class="mcp-secrets">
          {server.transport === "http" ? "Headers" : "Environment"}:{" "}
          {secrets.map((n) => (
            <span key={n} class="secret-set">
              {n} <span class="badge">set</span>
            </span>
          ))}
        </p>
      )}
      {Object.keys(server.tools ?? {}).length > 0 && (
        <p class="mcp-policies">
          Tool policies set:{" "}
          {Object.entries(server.tools ?? {})
            .map(([tool, policy]) => `${tool} ${policy}`)
            .join(", ")}
        </p>
      )}
      <div class="buttons">
        <label class="choice">
          <input type="checkbox" checked={server.enabled} onChange={(e) => props.onToggle(e.currentTarget.checked)} />
          Enabled<span class="visually-hidden"> ({server.name})</span>
        </label>
        <button type="button" aria-label={`Test connection to ${server.name}`} onClick={props.onTest} disabled={test === "testing"}>
          {test === "testing" ? "Testing…" : "Test connection"}
        </button>
        <button type="button" aria-label={`Edit ${server.name}`} data-focus={`edit-${server.id}`} onClick={props.onEdit}>
          Edit
        </button>
        <button type="button" class="danger" aria-label={`Delete ${server.name}`} onClick={props.onDelete}>
          Delete
        </button>
      </div>
      {test && test !== "testing" && <TestResult server={server} result={test} onPolicy={props.onPolicy} />}
    </li>
  );
}

function TestResult({
  server,
  result,
  onPolicy,
}: {
  server: McpServer;
  result: McpTestResult;
  onPolicy: (tool: string, policy: ToolPolicy | null) => void;
}) {
  if (!result.ok)
    return (
      <p class="mcp-test error" role="status">
        Connection failed: {result.error ?? "no reason given"}
      </p>
    );
  return (
    <div class="mcp-test" role="group" aria-label={`Tools of ${server.name}`}>
      <p role="status">
        Connected: {result.tools.length} {result.tools.length === 1 ? "tool" : "tools"} found.
      </p>
      {result.tools.length > 0 && (
        <ul class="mcp-tools">
          {result.tools.map((tool) => (
            <ToolRow key={tool.name} tool={tool} set={server.tools?.[tool.name] ?? null} onPolicy={(p) => onPolicy(tool.name, p)} />
          ))}
        </ul>
      )}
    </div>
  );
}

function ToolRow({ tool, set, onPolicy }: { tool: McpTool; set: ToolPolicy | null; onPolicy: (policy: ToolPolicy | null) => void }) {
  return (
    <li class="mcp-tool">
      <div>
        <code>{tool.name}</code>
        {tool.read_only && <span class="badge">read-only</span>}
        {tool.description && <p class="mcp-tool-description">{tool.description}</p>}
      </div>
      <label>
        <span class="visually-hidden">Policy for {tool.name}</span>
        <select value={set ?? ""} onChange={(e) => onPolicy((e.currentTarget.value || null) as ToolPolicy | null)}>
          <option value="">{defaultLabel(tool)}</option>
          {POLICIES.map((p) => (
            <option key={p} value={p}>
              {p}
            </option>
          ))}
        </select>
      </label>
    </li>
  );
}
