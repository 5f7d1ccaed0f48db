// The form that adds or edits a workspace's MCP server: its name, how it is reached (a URL and
// headers, or a program, its arguments and environment), and its secrets, which are write-only:
// a value already set shows as "set", to be replaced or removed, never read back. A refusal's
// message shows by the field it names.

import { useEffect, useId, useRef, useState } from "preact/hooks";
import { ApiError } from "./api";
import { type McpServer, type McpServerChange, type McpTransport, type NewMcpServer, secretNames } from "./mcp";

/** One secret entry as the form edits it. */
interface SecretRow {
  key: number;
  name: string;
  value: string;
  /** It is set on the server (its value unknown here). */
  stored: boolean;
  /** What happens to a stored one: kept, replaced with `value`, removed. */
  state: "keep" | "replace" | "remove";
}

/** The fields a refusal's message may name, and where its message shows. */
type Field = "name" | "url" | "command" | "args" | "secrets" | "form";

/** The field a refusal is about, from its message (the contract has no field of its own). */
function fieldOf(message: string): Field {
  const m = message.toLowerCase();
  if (/\burl\b|address/.test(m)) return "url";
  if (/header|\benv\b|environment|variable/.test(m)) return "secrets";
  if (/\bargs?\b|argument/.test(m)) return "args";
  if (/command|program/.test(m)) return "command";
  if (/\bnamed?\b/.test(m)) return "name";
  return "form";
}

let nextKey = 1;
const rowsOf = (names: string[]): SecretRow[] =>
  names.map((name) => ({ key: nextKey++, name, value: "", stored: true, state: "keep" }));

/** What the form submits: a new server, or the change to an existing one (only what changed). */
export type McpSubmit = { kind: "create"; server: NewMcpServer } | { kind: "update"; change: McpServerChange };

export function McpServerForm(props: {
  /** The server edited; none for a new one. */
  server?: McpServer;
  onSubmit: (submit: McpSubmit) => Promise<void>;
  onCancel: () => void;
}) {
  const { server } = props;
  const id = useId();
  const [name, setName] = useState(server?.name ?? "");
  const [transport, setTransport] = useState<McpTransport>(server?.transport ?? "http");
  const [url, setUrl] = useState(server?.url ?? "");
  const [command, setCommand] = useState(server?.command ?? "");
  const [args, setArgs] = useState((server?.args ?? []).join("\n"));
  const [secrets, setSecrets] = useState<SecretRow[]>(() =>
    rowsOf(secretNames(server?.transport === "stdio" ? server.env : server?.headers)),
  );
  const [error, setError] = useState<{ field: Field; message: string } | null>(null);
  const [saving, setSaving] = useState(false);
  const first = useRef<HTMLInputElement>(null);
  const added = useRef<HTMLInputElement>(null);
  const [focusAdded, setFocusAdded] = useState(0);
  // A row just added (or a value to replace) is where the person types next.
  useEffect(() => {
    if (focusAdded) added.current?.focus();
  }, [focusAdded]);
  const form = useRef<HTMLFormElement>(null);
  // A new form is where the person types next.
  useEffect(() => first.current?.focus(), []);
  // A refusal's field takes the focus, so its message is read with it.
  useEffect(() => {
    if (error) form.current?.querySelector<HTMLElement>("[aria-invalid='true']")?.focus();
  }, [error]);

  const secretKind = transport === "http" ? "header" : "environment variable";
  const secretTitle = transport === "http" ? "Headers" : "Environment";
  const update = (key: number, change: Partial<SecretRow>) =>
    setSecrets((rows) => rows.map((r) => (r.key === key ? { ...r, ...change } : r)));

  const submit = async (e: Event) => {
    e.preventDefault();
    setError(null);
    const argList = args
      .split("\n")
      .map((a) => a.trim())
      .filter((a) => a !== "");
    const values: Record<string, string | null> = {};
    for (const row of secrets) {
      const n = row.name.trim();
      if (!n) continue;
      if (!row.stored) values[n] = row.value;
      else if (row.state === "replace") values[n] = row.value;
      else if (row.state === "remove") values[n] = null;
    }
    let submit: McpSubmit;
    if (!server) {
      const created: NewMcpServer = { name: name.trim(), transport, enabled: true };
      const set = Object.fromEntries(Object.entries(values).filter((v): v is [string, string] => v[1] !== null));
      if (transport === "http") {
        created.url = url.trim();
        if (Object.keys(set).length) created.headers = set;
      } else {
        created.command = command.trim();
        if (argList.length) created.args = argList;
        if (Object.keys(set).length) created.env = set;
      }
      submit = { kind: "create", server: created };
    } else {
      const change: McpServerChange = {};
      if (name.trim() !== server.name) change.name = name.trim();
      if (transport === "http" && url.trim() !== (server.url ?? "")) change.url = url.trim();
      if (transport === "stdio" && command.trim() !== (server.command ?? "")) change.command = command.trim();
      if (transport === "stdio" && argList.join("\n") !== (server.args ?? []).join("\n")) change.args = argList;
      if (Object.keys(values).length) change[transport === "http" ? "headers" : "env"] = values;
      submit = { kind: "update", change };
    }
    setSaving(true);
    try {
      await props.onSubmit(submit);
    } catch (err) {
      const message = err instanceof Error ? err.message : String(err);
      setError({ field: err instanceof ApiError ? fieldOf(message) : "form", message });
    } finally {
      setSaving(false);
    }
  };

  /** The attributes that tie a field to the refusal about it. */
  const invalid = (field: Field) =>
    error?.field === field ? { "aria-invalid": "true" as const, "aria-describedby": `${id}-error` } : {};
  const message = (field: Field) =>
    error?.field === field && (
      <small id={`${id}-error`} class="field-error" role="alert">
        {error.message}
      </small>
    );

  return (
    <form ref={form} class="mcp-form" onSubmit={submit} aria-label={server ? `Edit ${server.name}` : "New MCP server"}>
      <fieldset>
        <legend>{server ? `Edit ${server.name}` : "New MCP server"}</legend>
        <label>
          Name
          <input
            ref={first}
            required
            maxLength={32}
            pattern="[a-z0-9][a-z0-9_\-]*"
            value={name}
            onInput={(e) => setName(e.currentTarget.value)}
            {...invalid("name")}
          />
          <small>Lower-case letters, digits, - and _: its tools show as name__tool.</small>
          {message("name")}
        </label>
        {server ? (
          <p class="mcp-transport">Transport: {transport === "http" ? "HTTP" : "stdio"}</p>
        ) : (
          <div role="radiogroup" aria-label="Transport" class="choices">
            <label class="choice">
              <input type="radio" name={`${id}-transport`} checked={transport === "http"} onChange={() => (setTransport("http"), setSecrets([]))} />
              HTTP (a remote server's URL)
            </label>
            <label class="choice">
              <input type="radio" name={`${id}-transport`} checked={transport === "stdio"} onChange={() => (setTransport("stdio"), setSecrets([]))} />
              stdio (a program Spool starts)
            </label>
          </div>
        )}
        {transport === "http" ? (
          <label>
            URL
            <input type="url" required value={url} placeholder="https://mcp.example.com/mcp" onInput={(e) => setUrl(e.currentTarget.value)} {...invalid("url")} />
            {message("url")}
          </label>
        ) : (
          <>
            <label>
              Command
              <input required value={command} placeholder="npx" onInput={(e) => setCommand(e.currentTarget.value)} {...invalid("command")} />
              {message("command")}
            </label>
            <label>
              Arguments (one a line)
              <textarea rows={3} value={args} placeholder={"-y\n@modelcontextprotocol/server-everything"} onInput={(e) => setArgs(e.currentTarget.value)} {...invalid("args")} />
              {message("args")}
            </label>
          </>
        )}
        <fieldset class="secrets" {...invalid("secrets")} tabIndex={error?.field === "secrets" ? -1 : undefined}>
          <legend>{secretTitle}</legend>
          <small>Values are secrets: once saved they are never shown again, only replaced or removed.</small>
          {secrets.map((row) =>
            row.stored ? (
              <div class="secret-row" key={row.key}>
                <span class="secret-name">{row.name}</span>
                {row.state === "remove" ? (
                  <span class="badge warn">removed on save</span>
                ) : row.state === "replace" ? (
                  <label>
                    <span class="visually-hidden">New value of {row.name}</span>
                    <input
                      ref={row.key === focusAdded ? added : undefined}
                      type="password"
                      autoComplete="off"
                      required
                      value={row.value}
                      onInput={(e) => update(row.key, { value: e.currentTarget.value })}
                    />
                  </label>
                ) : (
                  <span class="badge">set</span>
                )}
                {row.state === "keep" ? (
                  <>
                    <button type="button" onClick={() => (update(row.key, { state: "replace" }), setFocusAdded(row.key))}>
                      Replace {row.name}
                    </button>
                    <button type="button" onClick={() => update(row.key, { state: "remove" })}>
                      Remove {row.name}
                    </button>
                  </>
                ) : (
                  <button type="button" class="link" onClick={() => update(row.key, { state: "keep", value: "" })}>
                    Keep {row.name}
                  </button>
                )}
              </div>
            ) : (
              <div class="secret-row" key={row.key}>
                <label>
                  {transport === "http" ? "Header name" : "Variable name"}
                  <input ref={row.key === focusAdded ? added : undefined} required value={row.name} onInput={(e) => update(row.key, { name: e.currentTarget.value })} />
                </label>
                <label>
                  Value
                  <input type="password" autoComplete="off" required value={row.value} onInput={(e) => update(row.key, { value: e.currentTarget.value })} />
                </label>
                <button type="button" aria-label={`Drop this ${secretKind}`} onClick={() => setSecrets((rows) => rows.filter((r) => r.key !== row.key))}>
                  ✕
                </button>
              </div>
            ),
          )}
          <button
            type="button"
            onClick={() => {
              const key = nextKey++;
              setSecrets((rows) => [...rows, { key, name: "", value: "", stored: false, state: "keep" }]);
              setFocusAdded(key);
            }}
          >
            Add {secretKind}
          </button>
          {message("secrets")}
        </fieldset>
        {message("form")}
        <div class="buttons">
          <button type="submit" class="primary" disabled={saving}>
            {saving ? "Saving…" : server ? "Save server" : "Add server"}
          </button>
          <button type="button" onClick={props.onCancel}>
            Cancel
          </button>
        </div>
      </fieldset>
    </form>
  );
}
