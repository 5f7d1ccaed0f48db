// Short notices in a polite live region: errors the API explained, and links (a new task).

import { createContext } from "preact";
import { useContext, useMemo, useState } from "preact/hooks";
import { ApiError } from "./api";

export interface Toast {
  id: number;
  text: string;
  tone: "info" | "error";
  link?: { href: string; label: string };
}

export interface Notify {
  info(text: string, link?: Toast["link"]): void;
  error(error: unknown): void;
}

let next = 1;

export function useToasts() {
  const [list, setList] = useState<Toast[]>([]);
  const dismiss = (id: number) => setList((l) => l.filter((t) => t.id !== id));
  const notify = useMemo<Notify>(() => {
    const add = (toast: Omit<Toast, "id">) => {
      const id = next++;
      setList((l) => [...l.slice(-4), { ...toast, id }]);
      // A toast with a link stays until it is used or dismissed: it may be hard to reach in 8 s.
      if (!toast.link) setTimeout(() => setList((l) => l.filter((t) => t.id !== id)), toast.tone === "error" ? 10_000 : 8_000);
    };
    return {
      info: (text, link) => add({ text, tone: "info", link }),
      error: (e) => {
        // A refused token signs out; the sign-in page says so.
        if (e instanceof ApiError && e.status === 401) return;
        add({ text: e instanceof Error ? e.message : String(e), tone: "error" });
      },
    };
  }, []);
  return { list, notify, dismiss };
}

/** The toasts on show, for a modal window to show them inside itself. */
export const ToastList = createContext<{ list: Toast[]; dismiss: (id: number) => void }>({ list: [], dismiss: () => {} });

/**
 * Where toasts show. A modal `<dialog>` makes the rest of the page inert, so an open chat window
 * shows them inside itself (`inDialog`), and the page's own copy is hidden meanwhile (CSS).
 */
export function Toasts({ inDialog = false }: { inDialog?: boolean }) {
  const { list, dismiss } = useContext(ToastList);
  return (
    <div class={inDialog ? "toasts in-dialog" : "toasts"} role="status" aria-live="polite">
      {list.map((t) => (
        <div class={`toast ${t.tone}`} key={t.id}>
          <span>{t.text}</span>
          {t.link && (
            <a href={t.link.href} onClick={() => dismiss(t.id)}>
              {t.link.label}
            </a>
          )}
          <button type="button" class="link" aria-label="Dismiss" onClick={() => dismiss(t.id)}>
            ×
          </button>
        </div>
      ))}
    </div>
  );
}
