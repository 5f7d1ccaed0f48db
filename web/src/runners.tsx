// Runners in the UI: which CLI a chat or an agent may pick where its workspace's CLI agents run
// (the server's, or what the online runners serving the workspace offer), the note that says
// how to start a runner when none is online, and the workspace's list of runners in settings.

import { useEffect, useState } from "preact/hooks";
import { CLI_TYPES, type CliAvailability, type CliHost, type CliType, type Client, cliHostOf, type Runner } from "./api";
import type { OptionView } from "./fields";
import { relative, useTick } from "./time";

/** How often the runners are asked again while a list or a choice of them is shown. */
export const RUNNERS_REFRESH_MS = 15_000;

/** What a CLI choice offers in a workspace: each CLI's option, and whether any runner is online. */
export interface CliChoice {
  host: CliHost;
  options: Record<CliType, OptionView>;
  /** A runners workspace with no runner online serving it (the person is told how to start one). */
  noRunner: boolean;
}

/** Whether `runner` takes the turns of workspace `ws` (it names none: all of them). */
export const serves = (runner: Runner, ws: string | undefined): boolean =>
  !runner.workspaces?.length || (ws !== undefined && runner.workspaces.includes(ws));

const listed = (names: string[]) => names.join(", ");

/**
 * The CLI choice where `host` runs the workspace `ws`'s CLI agents. On the server: each CLI;
 * one that cannot run there cannot be picked, and says why (a turn with it would only fail). On
 * runners: each CLI as the online runners serving the workspace offer it ("claude 2.0.1 — on
 * build-box"); one no online runner runs healthily cannot be picked, and says why.
 */
export function cliChoice(host: CliHost, available: CliAvailability, ws: string | undefined): CliChoice {
  const options = {} as Record<CliType, OptionView>;
  if (host === "server") {
    for (const cli of CLI_TYPES) {
      const status = available.clis.find((c) => c.cli === cli);
      options[cli] =
        status && !status.healthy
          ? { label: `${cli} — unavailable (${status.reason ?? "cannot run"})`, reason: status.reason ?? "cannot run", disabled: true }
          : { label: status?.version ? `${cli} ${status.version}` : cli };
    }
    return { host, options, noRunner: false };
  }
  const runners = available.runners.filter((r) => serves(r, ws));
  const online = runners.filter((r) => r.online);
  for (const cli of CLI_TYPES) {
    const running = online.flatMap((r) => r.clis.filter((c) => c.cli === cli && c.healthy).map((c) => ({ runner: r, status: c })));
    const first = running[0];
    if (first) {
      const version = first.status.version ? ` ${first.status.version}` : "";
      options[cli] = { label: `${cli}${version} — on ${listed(running.map((r) => r.runner.name))}` };
      continue;
    }
    // Why not: a runner has it but it fails, or only runners that are offline have it.
    const broken = online.flatMap((r) => r.clis.filter((c) => c.cli === cli && c.installed).map((c) => `${r.name}: ${c.reason ?? "cannot run"}`));
    const offline = runners.filter((r) => !r.online && r.clis.some((c) => c.cli === cli && c.healthy)).map((r) => r.name);
    const reason =
      broken.length > 0
        ? listed(broken)
        : offline.length > 0
          ? `${listed(offline)} ${offline.length === 1 ? "is" : "are"} offline`
          : "no online runner has it";
    options[cli] = { label: `${cli} — unavailable (${reason})`, reason, disabled: true };
  }
  return { host, options, noRunner: online.length === 0 };
}

/**
 * The CLI choice of workspace `ws`, kept fresh: where its CLI agents run and what can run
 * them, asked again every [`RUNNERS_REFRESH_MS`] while it is shown and runners run them.
 * `null` until known (or when it cannot be known: every CLI is offered as it is).
 */
export function useCliChoice(client: Client, ws: string | undefined): CliChoice | null {
  const [choice, setChoice] = useState<CliChoice | null>(null);
  useEffect(() => {
    let live = true;
    let timer: ReturnType<typeof setTimeout> | undefined;
    const look = async () => {
      /** Whether to ask again: runners come and go (and a failed look is tried again). */
      let again = true;
      try {
        const [workspace, available] = await Promise.all([ws ? client.workspace(ws) : null, client.clis()]);
        const host: CliHost = (workspace ? cliHostOf(workspace) : undefined) ?? "server";
        again = host === "runners";
        if (live) setChoice(cliChoice(host, available, ws));
      } catch {
        // The network blinked: the choice stays as it was.
      }
      if (live && again) timer = setTimeout(() => void look(), RUNNERS_REFRESH_MS);
    };
    void look();
    return () => {
      live = false;
      clearTimeout(timer);
    };
  }, [client, ws]);
  return choice;
}

/** Where a runner reaches this deployment's API: its configured address, or this page's origin. */
export const apiUrl = (client: Client): string => client.endpoints.api || location.origin;

/** How to start a runner for this deployment: the command line, and where its key comes from. */
function RunnerCommand({ client }: { client: Client }) {
  return (
    <>
      <code>SPOOL_API_KEY=&lt;a runner key&gt; spool runner --url {apiUrl(client)}</code> (the key from{" "}
      <code>spool admin create-api-key ORG --capability runner</code>).
    </>
  );
}

/** The note beside a CLI choice when no runner serving the workspace is online. */
export function NoRunnerNote({ client, id }: { client: Client; id: string }) {
  return (
    <p class="no-runner" id={id} role="note">
      No runner is online for this workspace: start one with <RunnerCommand client={client} />
    </p>
  );
}

/** "online", or when it was last seen. */
function seen(runner: Runner, now: number): string {
  if (runner.online) return "online";
  return `last seen ${relative(new Date(runner.last_seen_ms).toISOString(), now)}`;
}

/**
 * The runners that serve workspace `ws`, asked again every [`RUNNERS_REFRESH_MS`] while shown;
 * with none, how to start one when they are `wanted` (the workspace's CLI agents run on them).
 */
export function RunnersList({ client, ws, wanted }: { client: Client; ws: string; wanted: boolean }) {
  const [runners, setRunners] = useState<Runner[] | null>(null);
  const [failed, setFailed] = useState<string | null>(null);
  const now = useTick(RUNNERS_REFRESH_MS);
  useEffect(() => {
    let live = true;
    const look = () =>
      client.runners(ws).then(
        (list) => {
          if (!live) return;
          // Online ones first, then by name.
          setRunners([...list].sort((a, b) => Number(b.online) - Number(a.online) || a.name.localeCompare(b.name)));
          setFailed(null);
        },
        (e: unknown) => live && setFailed(e instanceof Error ? e.message : String(e)),
      );
    void look();
    const timer = setInterval(() => void look(), RUNNERS_REFRESH_MS);
    return () => {
      live = false;
      clearInterval(timer);
    };
  }, [client, ws]);
  return (
    <section class="runners" aria-labelledby="runners-heading">
      <h3 id="runners-heading">Runners</h3>
      {failed && runners === null ? (
        <p class="error">The runners cannot be listed: {failed}</p>
      ) : runners === null ? (
        <p aria-busy="true">Loading…</p>
      ) : runners.length === 0 ? (
        <p class="empty">
          No runner serves this workspace.
          {wanted && (
            <>
              {" "}
              Start one with <RunnerCommand client={client} />
            </>
          )}
        </p>
      ) : (
        <ul class="runner-list" aria-label="Runners of this workspace">
          {runners.map((r) => (
            <li key={r.name} class={`runner ${r.online ? "online" : "offline"}`} aria-label={`Runner ${r.name}`}>
              <div class="runner-head">
                <span class="runner-name">{r.name}</span>
                <span class="runner-seen">
                  <span class="dot" aria-hidden="true" />
                  {seen(r, now)}
                </span>
                {r.version && <span class="badge">spool {r.version}</span>}
                {!r.workspaces?.length && <span class="badge">every workspace</span>}
              </div>
              <ul class="runner-clis" aria-label={`CLIs on ${r.name}`}>
                {r.clis.length === 0 && <li class="empty">No CLI found</li>}
                {r.clis.map((c) => (
                  <li key={c.cli} class={c.healthy ? "healthy" : "broken"} title={c.reason ?? undefined}>
                    {c.cli}
                    {c.version ? ` ${c.version}` : ""}
                    {!c.healthy && ` (${c.installed ? (c.reason ?? "cannot run") : "not installed"})`}
                  </li>
                ))}
              </ul>
            </li>
          ))}
        </ul>
      )}
    </section>
  );
}
