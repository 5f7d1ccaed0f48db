// The hash router: every view has an address, so reload and the back button work, and the
// static files need no server-side routes (S3 serves them as they are).

/** The place the hash names: `#/`, `#/global`, `#/w/{ws}/chats[/{id}]`, `#/w/{ws}/agents`, `#/w/{ws}/commands`, `#/w/{ws}/settings`, `#/w/{ws}/tasks[/{id}]`. */
export type Route =
  | { page: "home" }
  | { page: "global" }
  | { page: "chats"; ws: string; chat?: string }
  | { page: "agents"; ws: string }
  | { page: "commands"; ws: string }
  | { page: "settings"; ws: string }
  | { page: "tasks"; ws: string; task?: string };

export function parseRoute(hash: string): Route {
  let parts: string[];
  try {
    parts = hash.replace(/^#\/?/, "").split("/").filter(Boolean).map(decodeURIComponent);
  } catch {
    return { page: "home" }; // a malformed %-escape
  }
  if (parts[0] === "global") return { page: "global" };
  if (parts[0] === "w" && parts[1]) {
    const ws = parts[1];
    if (parts[2] === "agents") return { page: "agents", ws };
    if (parts[2] === "commands") return { page: "commands", ws };
    if (parts[2] === "settings") return { page: "settings", ws };
    if (parts[2] === "tasks") return { page: "tasks", ws, task: parts[3] };
    return { page: "chats", ws, chat: parts[3] };
  }
  return { page: "home" };
}

export const href = (route: Route): string => {
  switch (route.page) {
    case "home":
      return "#/";
    case "global":
      return "#/global";
    case "chats":
      return `#/w/${encodeURIComponent(route.ws)}/chats${route.chat ? `/${encodeURIComponent(route.chat)}` : ""}`;
    case "agents":
      return `#/w/${encodeURIComponent(route.ws)}/agents`;
    case "commands":
      return `#/w/${encodeURIComponent(route.ws)}/commands`;
    case "settings":
      return `#/w/${encodeURIComponent(route.ws)}/settings`;
    case "tasks":
      return `#/w/${encodeURIComponent(route.ws)}/tasks${route.task ? `/${encodeURIComponent(route.task)}` : ""}`;
  }
};

export const go = (route: Route) => {
  location.hash = href(route);
};
