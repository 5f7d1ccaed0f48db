// The application shell: sign-in, the hash router, the workspace picker and its tabs, toasts.

import "./styles.css";
import { render } from "preact";
import { useCallback, useEffect, useState } from "preact/hooks";
import { ApiError, Client, type Handshake, loadEndpoints, type Workspace } from "./api";
import { forgetAll } from "./cache";
import { AgentsTab } from "./agents";
import { CommandsTab } from "./commands";
import { ChatList } from "./chats";
import { ChatWindow } from "./chat";
import { connect } from "./companion";
import { CompanionBadge, CompanionPanel } from "./companion-view";
import { SettingsTab } from "./settings";
import { TasksTab } from "./tasks";
import { watchFeed } from "./live";
import { go, href, parseRoute, type Route } from "./route";
import { type Notify, ToastList, Toasts, useToasts } from "./toasts";

function useRoute(): Route {
  const [route, setRoute] = useState(() => parseRoute(location.hash));
  useEffect(() => {
    const changed = () => setRoute(parseRoute(location.hash));
    window.addEventListener("hashchange", changed);
    // A change between the first render and this subscription (a link followed, the address
    // typed) would be missed: read the address once more now that changes are heard.
    changed();
    return () => window.removeEventListener("hashchange", changed);
  }, []);
  return route;
}

/** The organization a token acts for (its `org` claim), to keep cached chats apart. */
function scopeOf(jwt: string): string {
  try {
    const claims = JSON.parse(atob(jwt.split(".")[1]!.replace(/-/g, "+").replace(/_/g, "/"))) as { org?: string };
    return claims.org ?? "default";
  } catch {
    return "default";
  }
}

function App({ client, offered, linkError }: { client: Client; offered: Handshake | null; linkError: unknown }) {
  const [signedIn, setSignedIn] = useState(client.signedIn);
  const [signInReason, setSignInReason] = useState(
    linkError && !client.signedIn ? `The sign-in link did not work: ${messageOf(linkError)}` : "",
  );
  // A link's key for another organization than the one signed in: asked about first.
  const [offer, setOffer] = useState(offered);
  const toasts = useToasts();
  useEffect(() => {
    client.onSignedOut = (reason) => {
      setSignInReason(reason);
      setSignedIn(false);
    };
  }, [client]);
  useEffect(() => {
    if (linkError && client.signedIn) toasts.notify.error(linkError);
  }, []);
  if (offer) {
    return (
      <SwitchOrganization
        from={scopeOf(client.token)}
        to={offer.org_id}
        onSwitch={() => {
          client.adopt(offer);
          forgetAll();
          setOffer(null);
          setSignedIn(true);
        }}
        onStay={() => setOffer(null)}
      />
    );
  }
  return (
    <ToastList.Provider value={{ list: toasts.list, dismiss: toasts.dismiss }}>
      {signedIn ? (
        <Shell client={client} notify={toasts.notify} />
      ) : (
        <SignIn client={client} reason={signInReason} onSignedIn={() => setSignedIn(true)} />
      )}
      <Toasts />
    </ToastList.Provider>
  );
}

function messageOf(e: unknown): string {
  return e instanceof ApiError ? e.message : String(e);
}

/** A sign-in link for another organization: nothing changes unless the person says so. */
function SwitchOrganization({
  from,
  to,
  onSwitch,
  onStay,
}: {
  from: string;
  to: string;
  onSwitch: () => void;
  onStay: () => void;
}) {
  return (
    <main class="signin" role="alertdialog" aria-labelledby="switch-title" aria-describedby="switch-text">
      <h1 id="switch-title">Switch organization?</h1>
      <p id="switch-text">
        This link signs you in to the organization <strong>{to}</strong>. You are signed in to{" "}
        <strong>{from}</strong>. Switch only if you expected this link: what you write afterwards goes to{" "}
        <strong>{to}</strong>.
      </p>
      <div class="actions">
        <button type="button" onClick={onSwitch}>
          Switch to {to}
        </button>
        <button type="button" class="link" onClick={onStay} autoFocus>
          Stay in {from}
        </button>
      </div>
    </main>
  );
}

function SignIn({ client, reason, onSignedIn }: { client: Client; reason: string; onSignedIn: () => void }) {
  const [key, setKey] = useState("");
  const [error, setError] = useState("");
  const [busy, setBusy] = useState(false);
  const submit = async (e: Event) => {
    e.preventDefault();
    setBusy(true);
    setError("");
    try {
      await client.signIn(key);
      forgetAll();
      onSignedIn();
    } catch (err) {
      setError(err instanceof ApiError ? err.message : String(err));
    } finally {
      setBusy(false);
    }
  };
  return (
    <main class="signin">
      <h1>Spool</h1>
      <p>Durable chat between people and AI agents.</p>
      {reason && <p class="notice">{reason}</p>}
      <form onSubmit={submit}>
        <label for="api-key">API key</label>
        <input
          id="api-key"
          type="password"
          autocomplete="off"
          placeholder="spool_…"
          value={key}
          onInput={(e) => setKey(e.currentTarget.value)}
          required
        />
        <button type="submit" disabled={busy || !key.trim()}>
          {busy ? "Signing in…" : "Sign in"}
        </button>
        {error && (
          <p role="alert" class="error">
            {error}
          </p>
        )}
      </form>
      <p class="hint">
        <code>make run</code> prints a link that signs you in, and the local API key. Other keys come from{" "}
        <code>spool admin create-api-key</code>.
      </p>
    </main>
  );
}

function Shell({ client, notify }: { client: Client; notify: Notify }) {
  const route = useRoute();
  const [workspaces, setWorkspaces] = useState<Workspace[] | null>(null);
  const scope = scopeOf(client.token);

  // The companion is looked for once, beside everything else; nothing waits on it.
  useEffect(() => void connect(), []);
  const reload = useCallback(async () => {
    try {
      setWorkspaces(await client.workspaces());
    } catch (e) {
      notify.error(e);
    }
  }, [client, notify]);
  useEffect(() => {
    void reload();
  }, [reload]);

  const ws = "ws" in route ? route.ws : undefined;
  const current = workspaces?.find((w) => w.id === ws);
  // The home page opens the first workspace once there is one.
  useEffect(() => {
    // Read the hash again: it may have moved on since this render (to a sign-in link, too,
    // which is the start's to handle).
    if (parseRoute(location.hash).page === "home" && !keyInUrl() && workspaces && workspaces.length > 0) {
      const first = workspaces[0]!;
      history.replaceState(null, "", href({ page: "chats", ws: first.id }));
      dispatchEvent(new HashChangeEvent("hashchange"));
    }
  }, [route.page, workspaces]);

  // The tab strip scrolls sideways on a phone: it shows the current tab.
  useEffect(() => {
    document.querySelector(".tabs [aria-current='page']")?.scrollIntoView({ block: "nearest", inline: "nearest" });
  }, [route.page, current]);

  return (
    <div class="shell">
      <a class="skip-link" href="#content" onClick={skipToContent}>
        Skip to content
      </a>
      <header class="topbar">
        <a class="brand" href="#/">
          Spool
        </a>
        {workspaces && workspaces.length > 0 && (
          <label class="picker">
            <span class="visually-hidden">Workspace</span>
            <select
              aria-label="Workspace"
              value={ws ?? ""}
              onChange={(e) => go({ page: "chats", ws: e.currentTarget.value })}
            >
              {!current && <option value="">Choose a workspace</option>}
              {workspaces.map((w) => (
                <option value={w.id} key={w.id}>
                  {w.title}
                </option>
              ))}
            </select>
          </label>
        )}
        <NewWorkspace client={client} notify={notify} onCreated={(w) => void reload().then(() => go({ page: "chats", ws: w.id }))} />
        <a class={route.page === "global" ? "active" : ""} href="#/global">
          Global chat
        </a>
        <CompanionBadge />
        <button class="link" type="button" onClick={() => client.signOut("")}>
          Sign out
        </button>
      </header>
      {route.page === "global" ? (
        <main id="content" tabIndex={-1} class="global">
          <ChatWindow client={client} scope={scope} sessionId="global" notify={notify} page />
        </main>
      ) : ws && workspaces && !current ? (
        <main id="content" tabIndex={-1} class="empty">
          <p>This workspace does not exist, or is not yours.</p>
          <a href="#/">Back to your workspaces</a>
        </main>
      ) : ws && current ? (
        <main id="content" tabIndex={-1}>
          <nav class="tabs" aria-label="Workspace">
            <a href={href({ page: "chats", ws })} aria-current={route.page === "chats" ? "page" : undefined}>
              Chats
            </a>
            <a href={href({ page: "agents", ws })} aria-current={route.page === "agents" ? "page" : undefined}>
              Agents
            </a>
            <a href={href({ page: "tasks", ws })} aria-current={route.page === "tasks" ? "page" : undefined}>
              Tasks
            </a>
            <a href={href({ page: "commands", ws })} aria-current={route.page === "commands" ? "page" : undefined}>
              Commands
            </a>
            <a href={href({ page: "settings", ws })} aria-current={route.page === "settings" ? "page" : undefined}>
              Settings
            </a>
          </nav>
          <FeedToasts key={`toasts-${ws}`} client={client} ws={ws} notify={notify} />
          <CompanionPanel />
          {route.page === "chats" && (
            <>
              <ChatList key={ws} client={client} ws={ws} notify={notify} open={route.chat} />
              {route.chat && (
                <ChatWindow
                  key={route.chat}
                  client={client}
                  scope={scope}
                  sessionId={route.chat}
                  workspaceId={ws}
                  notify={notify}
                  onClose={() => go({ page: "chats", ws })}
                />
              )}
            </>
          )}
          {route.page === "agents" && <AgentsTab key={ws} client={client} ws={ws} notify={notify} />}
          {route.page === "commands" && <CommandsTab key={ws} client={client} ws={ws} notify={notify} />}
          {route.page === "settings" && (
            <SettingsTab
              key={ws}
              client={client}
              ws={ws}
              notify={notify}
              onSaved={() => void reload()}
              onDeleted={() => void reload().then(() => go({ page: "home" }))}
            />
          )}
          {route.page === "tasks" && <TasksTab key={ws} client={client} ws={ws} notify={notify} highlight={route.task} />}
        </main>
      ) : workspaces && workspaces.length === 0 ? (
        <main id="content" tabIndex={-1} class="empty">
          <h1>Welcome to Spool</h1>
          <p>A workspace holds chats, the agents that answer them, and their tasks. Make one to start.</p>
        </main>
      ) : (
        <main id="content" tabIndex={-1} class="empty" aria-busy="true">
          Loading…
        </main>
      )}
    </div>
  );
}

/** The skip link moves the focus to the page's main content (the address's fragment is the route's). */
function skipToContent(e: Event) {
  e.preventDefault();
  document.getElementById("content")?.focus();
}

function NewWorkspace({ client, notify, onCreated }: { client: Client; notify: Notify; onCreated: (w: Workspace) => void }) {
  const [open, setOpen] = useState(false);
  const [name, setName] = useState("");
  if (!open)
    return (
      <button type="button" onClick={() => setOpen(true)}>
        New workspace
      </button>
    );
  const submit = async (e: Event) => {
    e.preventDefault();
    try {
      const w = await client.createWorkspace(name.trim());
      setOpen(false);
      setName("");
      onCreated(w);
    } catch (err) {
      notify.error(err);
    }
  };
  return (
    <form class="inline" onSubmit={submit}>
      <label for="new-workspace" class="visually-hidden">
        Workspace name
      </label>
      <input
        id="new-workspace"
        placeholder="Workspace name"
        value={name}
        autoFocus
        onInput={(e) => setName(e.currentTarget.value)}
        onKeyDown={(e) => e.key === "Escape" && setOpen(false)}
        required
      />
      <button type="submit" disabled={!name.trim()}>
        Create
      </button>
      <button type="button" class="link" onClick={() => setOpen(false)}>
        Cancel
      </button>
    </form>
  );
}

/**
 * Signs in with a key passed in the URL (`#key=spool_…`, the link `spool serve` prints), then
 * forgets it. Signed in already, a key of the same organization just renews the token; one of
 * another organization is offered, and the person decides.
 */
async function start() {
  const client = new Client(await loadEndpoints());
  const key = keyInUrl() ?? takePendingKey();
  let offered: Handshake | null = null;
  let linkError: unknown = null;
  if (key) {
    history.replaceState(null, "", `${location.pathname}${location.search}#/`);
    try {
      const answer = await client.exchange(key);
      if (!client.signedIn || answer.org_id === scopeOf(client.token)) {
        client.adopt(answer);
        forgetAll();
      } else {
        offered = answer;
      }
    } catch (e) {
      // Said on the sign-in page, or in a toast when already signed in.
      linkError = e;
    }
  }
  render(<App client={client} offered={offered} linkError={linkError} />, document.getElementById("app")!);
}

/** The key of a sign-in link in an address (the address bar's by default), if any. */
function keyInUrl(url: string = location.href): string | null {
  const hash = url.includes("#") ? url.slice(url.indexOf("#") + 1) : "";
  return new URLSearchParams(hash).get("key");
}

const PENDING_KEY = "spool.link-key";

/** A link's key kept across the reload that handles it (the address may change meanwhile). */
function takePendingKey(): string | null {
  try {
    const key = sessionStorage.getItem(PENDING_KEY);
    sessionStorage.removeItem(PENDING_KEY);
    return key;
  } catch {
    return null;
  }
}

// A link followed in an open tab changes only the fragment: keep its key for a moment (the
// shell may rewrite the address before the reload) and start again to handle it.
window.addEventListener("hashchange", (e) => {
  // The address the event is about: the shell may have rewritten the bar since.
  // (an event the shell dispatches itself has no address: the bar's is the one)
  const key = keyInUrl(e.newURL || location.href);
  if (!key) return;
  try {
    sessionStorage.setItem(PENDING_KEY, key);
  } catch {
    // Without session storage the reload reads the key from the address, as before.
  }
  history.replaceState(null, "", `${location.pathname}${location.search}#/`);
  location.reload();
});

void start();

/**
 * Toasts what the workspace's feed says a person should see wherever in the workspace they are:
 * each task made (by an agent in any chat, or by hand), with a link to it, and a notification
 * that could not be sent, with a link to the settings.
 */
function FeedToasts({ client, ws, notify }: { client: Client; ws: string; notify: Notify }) {
  useEffect(
    () =>
      watchFeed(client, ws, (events) => {
        for (const e of events) {
          if (e.type === "task.created" && typeof e.task_id === "string") {
            const summary = typeof e.summary === "string" ? e.summary : "";
            notify.info(`Task created: ${summary}`, { href: href({ page: "tasks", ws, task: e.task_id }), label: "Open task" });
          } else if (e.type === "notification.failed") {
            notify.info(`Could not notify ${String(e.to)}: ${String(e.error)}`, { href: href({ page: "settings", ws }), label: "Settings" });
          }
        }
      }),
    [client, ws, notify],
  );
  return null;
}
