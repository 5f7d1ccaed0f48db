// A chat's active branch, as `shared/chat/src/branch.rs` decides it (both are held to the same
// cases, `shared/chat/data/branch_cases.json`). Editing a person's message or answering it
// again appends a new version of it; choosing an earlier version appends `branch_selected`.
// Each such event says by itself which earlier events the active branch leaves out: its
// `hidden` ranges and everything from its `from_seq` up to itself. The chat keeps every event.

/** Inclusive seq ranges, sorted and merged. */
export type Ranges = [number, number][];

/** `ranges` with `from..=through` left out too. */
export function hide(ranges: Ranges, from: number, through: number): Ranges {
  let [lo, hi] = [Math.min(from, through), Math.max(from, through)];
  const kept: Ranges = [];
  for (const [a, b] of ranges) {
    if (b + 1 < lo || hi + 1 < a) kept.push([a, b]);
    else [lo, hi] = [Math.min(lo, a), Math.max(hi, b)];
  }
  kept.push([lo, hi]);
  return kept.sort((x, y) => x[0] - y[0]);
}

const ranges = (v: unknown): Ranges =>
  Array.isArray(v)
    ? v.filter((r): r is [number, number] => Array.isArray(r) && r.length === 2 && r.every((n) => typeof n === "number"))
    : [];

/** What a branch event (a message's `revision`, or `branch_selected`'s payload) at `seq` leaves out from then on. */
export function setBy(seq: number, branch: unknown): Ranges | undefined {
  if (typeof branch !== "object" || branch === null) return undefined;
  const { from_seq: from, hidden } = branch as { from_seq?: unknown; hidden?: unknown };
  if (typeof from !== "number") return undefined;
  let out: Ranges = [];
  for (const [a, b] of ranges(hidden)) out = hide(out, a, b);
  return from < seq ? hide(out, from, seq - 1) : out;
}

/** Whether the event at `seq` is on the branch that leaves out `hidden`. */
export const shows = (hidden: Ranges | undefined, seq: number | undefined): boolean =>
  !hidden || seq === undefined || !hidden.some(([a, b]) => seq >= a && seq <= b);
