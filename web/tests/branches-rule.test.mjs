// The UI's active-branch rule (src/branches.ts) held to the cases the Rust rule is held to
// (shared/chat/data/branch_cases.json). `select` steps take the Rust rule's expected event.

import assert from "node:assert/strict";
import { readFile } from "node:fs/promises";
import { test } from "node:test";
import { build } from "esbuild";

const here = new URL(".", import.meta.url);
const bundled = await build({ entryPoints: [new URL("../src/branches.ts", here).pathname], bundle: true, format: "esm", write: false });
const { setBy, shows } = await import(`data:text/javascript;base64,${Buffer.from(bundled.outputFiles[0].text).toString("base64")}`);
const cases = JSON.parse(await readFile(new URL("../../shared/chat/data/branch_cases.json", here), "utf8")).cases;

test("the active branch follows the shared cases", () => {
  for (const { name, steps } of cases) {
    const seqs = [];
    let hidden;
    for (const step of steps) {
      if (step.events) for (let s = step.events[0]; s <= step.events[1]; s++) seqs.push(s);
      else if (step.message !== undefined) seqs.push(step.message);
      else if (step.revise) {
        const { seq, from_seq } = step.revise;
        hidden = setBy(seq, { from_seq, hidden: hidden ?? [] });
        seqs.push(seq);
      } else if (step.select) {
        if (step.expect === null) continue;
        hidden = setBy(step.select.seq, step.expect);
        seqs.push(step.select.seq);
      } else if (step.active) {
        const shown = seqs.filter((s) => shows(hidden, s));
        const expected = step.active.flatMap(([a, b]) => Array.from({ length: b - a + 1 }, (_, i) => a + i));
        assert.deepEqual(shown, expected, `${name}: after seq ${seqs.at(-1)}`);
      } else assert.fail(`${name}: a step of no known kind`);
    }
  }
});
