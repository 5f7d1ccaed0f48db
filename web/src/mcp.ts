// A workspace's MCP servers as the UI uses them: the routes' shapes (typed here until the
// generated client has them), the calls through the client's raw JSON helper, and the short,
// readable forms of an MCP tool call's name, arguments and result that the timeline shows.

import type { Client } from "./api";

/** How a server is reached: the protocol's Streamable HTTP, or a program over stdio. */
export type McpTransport = "http" | "stdio";
/** What happens when an agent calls a tool: it runs, it asks the person first, it is not offered. */
export type ToolPolicy = "allow" | "ask" | "deny";
export const POLICIES: ToolPolicy[] = ["allow", "ask", "deny"];

/**
 * A server as the API shows it. Header and environment values are never shown: `headers` and
 * `env` name the ones that are set (`{"Authorization": "set"}`).
 */
export interface McpServer {
  id: string;
  workspace_id?: string;
  name: string;
  transport: McpTransport;
  url?: string | null;
  headers?: Record<string, string> | string[];
  command?: string | null;
  args?: string[];
  env?: Record<string, string> | string[];
  /** Policies set per tool (by the tool's own name); a tool not named follows its default. */
  tools?: Record<string, ToolPolicy>;
  enabled: boolean;
  /** A stdio server that only CLI agents on runners get (no worker here may start it). */
  runs_on?: "runners" | null;
}

/** A new server (`POST /v1/workspaces/{id}/mcp-servers`). */
export interface NewMcpServer {
  name: string;
  transport: McpTransport;
  url?: string;
  headers?: Record<string, string>;
  command?: string;
  args?: string[];
  env?: Record<string, string>;
  tools?: Record<string, ToolPolicy>;
  enabled?: boolean;
}

/**
 * A change to a server (`PATCH /v1/mcp-servers/{id}`): only what it names. A header or
 * environment entry set to a string replaces that one, set to `null` removes it; so does a
 * tool's policy in `tools` (merged entry by entry; `null` returns the tool to its default).
 */
export interface McpServerChange {
  name?: string;
  url?: string;
  headers?: Record<string, string | null>;
  command?: string;
  args?: string[];
  env?: Record<string, string | null>;
  tools?: Record<string, ToolPolicy | null>;
  enabled?: boolean;
}

/** A tool a server offers, as a test found it, with the policy it runs under. */
export interface McpTool {
  name: string;
  description?: string | null;
  read_only: boolean;
  input_schema?: unknown;
  policy?: ToolPolicy;
}

/** What testing a server's connection found (`POST /v1/mcp-servers/{id}/test`). */
export interface McpTestResult {
  ok: boolean;
  tools: McpTool[];
  error?: string | null;
}

/** The names of a server's headers or environment variables that are set (never their values). */
export const secretNames = (set: McpServer["headers"]): string[] =>
  Array.isArray(set) ? set : Object.keys(set ?? {});

/** The policy of a tool with none set: read-only tools run, others ask first. */
export const defaultPolicy = (tool: Pick<McpTool, "read_only">): ToolPolicy => (tool.read_only ? "allow" : "ask");

/** How a tool's default policy reads in its choice: `default (ask)`, `default (allow, read-only)`. */
export const defaultLabel = (tool: Pick<McpTool, "read_only">): string =>
  tool.read_only ? "default (allow, read-only)" : `default (${defaultPolicy(tool)})`;

const enc = encodeURIComponent;

/** A workspace's MCP servers, oldest first. */
export async function listMcpServers(client: Client, ws: string): Promise<McpServer[]> {
  const answer = await client.json<{ mcp_servers?: McpServer[]; servers?: McpServer[] } | McpServer[]>(
    "GET",
    `/v1/workspaces/${enc(ws)}/mcp-servers`,
  );
  if (Array.isArray(answer)) return answer;
  return answer.mcp_servers ?? answer.servers ?? [];
}

export const createMcpServer = (client: Client, ws: string, server: NewMcpServer) =>
  client.json<McpServer>("POST", `/v1/workspaces/${enc(ws)}/mcp-servers`, server);

export const updateMcpServer = (client: Client, id: string, change: McpServerChange) =>
  client.json<McpServer>("PATCH", `/v1/mcp-servers/${enc(id)}`, change);

export const deleteMcpServer = (client: Client, id: string) => client.json<null>("DELETE", `/v1/mcp-servers/${enc(id)}`);

export const testMcpServer = (client: Client, id: string) => client.json<McpTestResult>("POST", `/v1/mcp-servers/${enc(id)}/test`);

/** An MCP tool call's server and the tool's own name (`everything`, `echo`), or `null` for Spool's own tools. */
export function mcpTool(tool: string, server: string | undefined): { server: string; name: string } | null {
  if (!server) return null;
  // A client tool's server is the client's (`companion:{name}`, the tool `companion__{name}__{tool}`).
  const prefix = server.startsWith("companion:") ? `companion__${server.slice("companion:".length)}__` : `${server}__`;
  return { server, name: tool.startsWith(prefix) ? tool.slice(prefix.length) : tool };
}

/** `text` cut to `max` characters, with an ellipsis when cut. */
const cut = (text: string, max: number) => (text.length > max ? `${text.slice(0, max - 1)}…` : text);

/** A value in a line: a string as itself, anything else as compact JSON. */
const scalar = (v: unknown): string => (typeof v === "string" ? v : (JSON.stringify(v) ?? String(v)));

/**
 * A call's arguments in a line (`message: hello, a: 1`), or `""` for none; a long one is cut
 * (the raw JSON shows it whole).
 */
export function shortArguments(args: unknown, max = 160): string {
  if (args === undefined || args === null) return "";
  if (typeof args !== "object" || Array.isArray(args)) return cut(scalar(args), max);
  const parts = Object.entries(args as Record<string, unknown>).map(([k, v]) => `${k}: ${scalar(v)}`);
  return cut(parts.join(", "), max);
}

/** One part of an MCP tool result's `content`. */
interface ContentPart {
  type?: string;
  text?: string;
  mimeType?: string;
  resource?: { uri?: string; text?: string };
  uri?: string;
  name?: string;
}

/** A text that is a JSON object (many servers answer so) in its short form; any other as itself. */
function readable(text: string, max: number): string {
  const t = text.trim();
  if (t.startsWith("{")) {
    try {
      const parsed: unknown = JSON.parse(t);
      if (parsed && typeof parsed === "object" && !Array.isArray(parsed)) return shortArguments(parsed, max);
    } catch {
      // not JSON after all: as itself
    }
  }
  return cut(text, max);
}

/**
 * A call's result in a few lines: an MCP result's text parts (a JSON object's in short form, an
 * image or a resource by its kind), or its structured content when it has no text; a plain
 * string as itself, anything else in short form; a long one is cut (the raw JSON shows it whole).
 */
export function shortResult(result: unknown, max = 400): string {
  if (result === undefined || result === null) return "";
  if (typeof result === "string") return readable(result, max);
  if (typeof result !== "object" || Array.isArray(result)) return cut(scalar(result), max);
  const r = result as { content?: unknown; structuredContent?: unknown };
  const parts = Array.isArray(r.content) ? (r.content as ContentPart[]) : null;
  if (!parts) return shortArguments(result, max);
  const shown = parts.map((p) => {
    if (p.type === "text" && typeof p.text === "string") return parts.length === 1 ? readable(p.text, max) : p.text;
    if (p.type === "image" || p.type === "audio") return `[${p.type}${p.mimeType ? ` ${p.mimeType}` : ""}]`;
    if (p.type === "resource") return p.resource?.uri ? `[resource ${p.resource.uri}]` : "[resource]";
    if (p.type === "resource_link") return `[link ${p.uri ?? p.name ?? ""}]`;
    return `[${p.type ?? "content"}]`;
  });
  const text = shown.join("\n").trim();
  if (text) return cut(text, max);
  return r.structuredContent !== undefined ? shortArguments(r.structuredContent, max) : "";
}

/** Whether an MCP result says the tool failed (`isError`). */
export const resultIsError = (result: unknown): boolean =>
  typeof result === "object" && result !== null && (result as { isError?: unknown }).isError === true;
