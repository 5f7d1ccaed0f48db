// A list read a page at a time (the API's `limit` and `cursor`, see "Lists in pages" in the
// README): the first page, the next one as the end of the list scrolls into view, and a reload
// that reads again from the newest as far as the list was scrolled (so a live change never
// shortens what is shown). The API says whether more follow, never how many there are in all:
// the count says exactly that much.

import { useCallback, useEffect, useRef, useState } from "preact/hooks";
import type { Notify } from "./toasts";

/** One page of a list, and the cursor of the next (`null` on the last page). */
export interface Page<T> {
  items: T[];
  next: string | null;
}

/** Reads `limit` items after `cursor` (the previous page's `next`), or from the newest without it. */
export type PageReader<T> = (limit: number, cursor?: string) => Promise<Page<T>>;

/** The most a reload asks for at once (the API's bound). */
const MOST = 1000;

export interface Pages<T> {
  /** What is loaded, in order; `null` until the first page answers. */
  items: T[] | null;
  /** Whether a next page exists. */
  more: boolean;
  loadingMore: boolean;
  /** Reads the list again from the newest, as far as it was scrolled. */
  reload: () => Promise<void>;
  /** Reads the next page (also done on its own as `end` scrolls into view). */
  loadMore: () => Promise<void>;
  /** Put on an element after the list: the next page loads as it comes near the viewport. */
  end: { current: HTMLElement | null };
  /** Changes what is loaded in place (an item deleted, say). */
  update: (change: (items: T[]) => T[]) => void;
}

/**
 * Pages of a list read with `read`. `query` names what is listed (a search, say): when it
 * changes, the list starts again from one page of the newest; an answer for an older query is
 * dropped.
 */
export function usePages<T extends { id: string }>(read: PageReader<T>, query: string, notify: Notify, pageSize: number): Pages<T> {
  const [items, setItems] = useState<T[] | null>(null);
  const [next, setNext] = useState<string | null>(null);
  const [loadingMore, setLoadingMore] = useState(false);
  // What the latest request is for: an answer to an older one is dropped.
  const generation = useRef(0);
  // How many items are shown, for which query, and whether that was all of them.
  const shown = useRef({ count: 0, query: null as string | null, all: false });
  shown.current.count = items?.length ?? 0;
  shown.current.all = items !== null && next === null;

  const reload = useCallback(async () => {
    const mine = ++generation.current;
    try {
      // As many as are shown; a whole list stays whole (with room for those added since).
      const { count, all } = shown.current;
      const sameQuery = shown.current.query === query;
      const limit = sameQuery ? Math.min(MOST, Math.max(pageSize, all ? count + pageSize : count)) : pageSize;
      const page = await read(limit);
      if (mine !== generation.current) return;
      shown.current.query = query;
      setItems(page.items);
      setNext(page.next);
      setLoadingMore(false);
    } catch (e) {
      if (mine === generation.current) notify.error(e);
    }
  }, [read, query, notify, pageSize]);

  const loadMore = useCallback(async () => {
    if (!next || loadingMore) return;
    const mine = generation.current;
    setLoadingMore(true);
    try {
      const page = await read(pageSize, next);
      if (mine !== generation.current) return;
      // An item that moved up meanwhile may come again: it is shown once, where it was.
      setItems((list) => {
        const seen = new Set((list ?? []).map((x) => x.id));
        return [...(list ?? []), ...page.items.filter((x) => !seen.has(x.id))];
      });
      setNext(page.next);
    } catch (e) {
      notify.error(e);
    } finally {
      if (mine === generation.current) setLoadingMore(false);
    }
  }, [read, notify, pageSize, next, loadingMore]);

  // The first page, and again from the newest when the query changes.
  useEffect(() => {
    void reload();
  }, [reload]);

  const end = useRef<HTMLElement | null>(null);
  const hasItems = items !== null && items.length > 0;
  useEffect(() => {
    const target = end.current;
    if (!target || !next) return;
    const observer = new IntersectionObserver(
      (entries) => {
        if (entries.some((e) => e.isIntersecting)) void loadMore();
      },
      { rootMargin: "0px 0px 300px 0px" },
    );
    observer.observe(target);
    return () => observer.disconnect();
  }, [next, loadMore, hasItems]);

  const update = useCallback((change: (items: T[]) => T[]) => setItems((list) => (list ? change(list) : list)), []);

  return { items, more: next !== null, loadingMore, reload, loadMore, end, update };
}

/**
 * How many there are, as far as the API says: "42 chats" once the last page is loaded, else
 * "50+ chats" (a next page exists, so more than those shown).
 */
export function countOf(shown: number, more: boolean, noun: [string, string]): string {
  if (more) return `${shown}+ ${noun[1]}`;
  return `${shown} ${shown === 1 ? noun[0] : noun[1]}`;
}
