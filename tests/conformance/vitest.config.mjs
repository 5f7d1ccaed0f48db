import { resolve } from "node:path"
import { defineConfig } from "vitest/config"

const report = resolve(import.meta.dirname, process.env.CONFORMANCE_REPORT || "report.json")

export default defineConfig({
  test: {
    root: import.meta.dirname,
    include: ["conformance.test.mjs"],
    watch: false,
    // Long-poll tests wait ~20 s; the suite sets its own per-test timeouts
    // for those, this is the fallback for everything else.
    testTimeout: 60_000,
    hookTimeout: 60_000,
    teardownTimeout: 10_000,
    reporters: ["default", ["json", { outputFile: report }]],
    passWithNoTests: false,
  },
})
