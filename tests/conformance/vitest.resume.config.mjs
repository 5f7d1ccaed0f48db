import { resolve } from "node:path"
import { defineConfig } from "vitest/config"

// Runs only the client resume test (resume.test.mjs) against CONFORMANCE_BASE_URL.
const report = resolve(import.meta.dirname, process.env.CONFORMANCE_REPORT || "resume-report.json")

export default defineConfig({
  test: {
    root: import.meta.dirname,
    include: ["resume.test.mjs"],
    watch: false,
    testTimeout: 90_000,
    hookTimeout: 30_000,
    teardownTimeout: 10_000,
    reporters: ["default", ["json", { outputFile: report }]],
    passWithNoTests: false,
  },
})
