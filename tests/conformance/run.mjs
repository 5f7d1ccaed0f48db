#!/usr/bin/env node
// Starts `spool serve` on a free loopback port, runs the official Durable Streams
// conformance suite and then the client resume test (resume.test.mjs) against it,
// stops the server and checks the pass count.
//
//   node tests/conformance/run.mjs [--backend embedded|aws] [--min N] [--spool PATH]
//                                  [--long-poll-ms MS] [--no-resume]
//
// Each option falls back to an environment variable:
//   --backend       CONFORMANCE_BACKEND   (default embedded)
//   --min           CONFORMANCE_MIN       (default 0) minimum passing suite tests
//   --spool         SPOOL_BIN             (default target/debug/spool)
//   --long-poll-ms  SPOOL_LONG_POLL_MS    (default 20000) the server's long-poll timeout,
//                                         also passed to the suite as CONFORMANCE_LONG_POLL_MS
//   --no-resume     CONFORMANCE_RESUME=0  skip the resume test
// The aws backend reads the emulator's env file from SPOOL_EMULATOR_ENV (as `make test` sets it).
//
// Writes target/conformance/<backend>.json (vitest JSON report of the suite),
// <backend>-resume.json, <backend>.server.log and <backend>.txt (the summary printed last).
// Exits 1 if fewer than --min suite tests pass, if the resume test fails, or on any setup error.
import { spawn } from "node:child_process"
import { createWriteStream, existsSync, mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs"
import net from "node:net"
import { tmpdir } from "node:os"
import { join, resolve } from "node:path"

const here = import.meta.dirname
const root = resolve(here, "../..")

function parseArgs(argv) {
  const out = {}
  for (let i = 0; i < argv.length; i++) {
    const arg = argv[i]
    const [key, inline] = arg.startsWith("--") ? arg.slice(2).split(/=(.*)/s, 2) : [null]
    if (key === "no-resume") {
      out.resume = false
    } else if (["backend", "min", "spool", "long-poll-ms"].includes(key)) {
      const value = inline ?? argv[++i]
      if (value === undefined) die(`${arg} needs a value`)
      out[key] = value
    } else if (key === "help" || arg === "-h") {
      console.log(readFileSync(import.meta.filename, "utf8").split("\n").filter((l) => l.startsWith("//")).slice(0, 20).map((l) => l.slice(3)).join("\n"))
      process.exit(0)
    } else {
      die(`unknown argument ${arg} (try --help)`)
    }
  }
  return out
}

function die(message) {
  console.error(`conformance: ${message}`)
  process.exit(2)
}

const args = parseArgs(process.argv.slice(2))
const backend = args.backend ?? process.env.CONFORMANCE_BACKEND ?? "embedded"
if (!["embedded", "aws"].includes(backend)) die(`unknown backend ${backend}; use embedded or aws`)
const minPassed = Number(args.min ?? process.env.CONFORMANCE_MIN ?? 0)
if (!Number.isInteger(minPassed) || minPassed < 0) die(`bad minimum ${args.min ?? process.env.CONFORMANCE_MIN}`)
const spoolBin = resolve(root, args.spool ?? process.env.SPOOL_BIN ?? "target/debug/spool")
const longPollMs = String(args["long-poll-ms"] ?? process.env.SPOOL_LONG_POLL_MS ?? 20000)
const runResume = args.resume ?? !/^(0|false|no)$/i.test(process.env.CONFORMANCE_RESUME ?? "")
const outDir = join(root, "target", "conformance")
const reportPath = join(outDir, `${backend}.json`)
const resumeReportPath = join(outDir, `${backend}-resume.json`)
const summaryPath = join(outDir, `${backend}.txt`)
const serverLogPath = join(outDir, `${backend}.server.log`)
const vitestBin = join(here, "node_modules", "vitest", "vitest.mjs")
const READY_TIMEOUT_MS = 60_000
const SUITE_TIMEOUT_MS = 15 * 60_000
const RESUME_TIMEOUT_MS = 5 * 60_000

if (!existsSync(spoolBin)) die(`no spool binary at ${spoolBin}; build it with cargo build -p spool-local`)
if (!existsSync(vitestBin)) die(`vitest is not installed; run npm ci --prefix tests/conformance`)
mkdirSync(outDir, { recursive: true })

// --- children and cleanup -------------------------------------------------------------

const children = new Set()
let server = null
let dataDir = null

// vitest runs in its own process group (its workers would outlive it otherwise), so it is
// signalled as a group.
function signalChild(child, signal) {
  if (child.exitCode !== null || child.signalCode !== null) return
  try {
    if (child.group) process.kill(-child.pid, signal)
    else child.kill(signal)
  } catch {}
}

function killAll(signal) {
  for (const child of children) signalChild(child, signal)
}

// Last resort (uncaught error, process.exit anywhere): never leave a server behind.
process.on("exit", () => {
  killAll("SIGKILL")
  if (dataDir) rmSync(dataDir, { recursive: true, force: true })
})
for (const signal of ["SIGINT", "SIGTERM", "SIGHUP"]) {
  process.on(signal, () => {
    console.error(`conformance: ${signal}, stopping`)
    killAll("SIGTERM")
    process.exit(128 + ({ SIGINT: 2, SIGTERM: 15, SIGHUP: 1 })[signal])
  })
}

function track(child, group = false) {
  child.group = group
  children.add(child)
  child.on("exit", () => children.delete(child))
  return child
}

function waitExit(child, ms) {
  if (child.exitCode !== null || child.signalCode !== null) return Promise.resolve(true)
  return new Promise((resolve) => {
    const timer = setTimeout(() => resolve(false), ms)
    child.once("exit", () => {
      clearTimeout(timer)
      resolve(true)
    })
  })
}

async function stopServer() {
  if (!server) return
  const child = server
  server = null
  if (child.exitCode === null && child.signalCode === null) {
    child.kill("SIGTERM")
    if (!(await waitExit(child, 10_000))) {
      child.kill("SIGKILL")
      await waitExit(child, 5_000)
    }
  }
  if (dataDir) {
    rmSync(dataDir, { recursive: true, force: true })
    dataDir = null
  }
}

// --- server ---------------------------------------------------------------------------

function freePort() {
  return new Promise((resolve, reject) => {
    const srv = net.createServer()
    srv.unref()
    srv.on("error", reject)
    srv.listen(0, "127.0.0.1", () => {
      const { port } = srv.address()
      srv.close(() => resolve(port))
    })
  })
}

async function startServer() {
  const port = await freePort()
  const addr = `127.0.0.1:${port}`
  // A data directory of its own on either backend: the AWS backend keeps its local secrets
  // there too, and the repository's .spool is the developer's.
  dataDir = mkdtempSync(join(tmpdir(), "spool-conformance-"))
  const argv = ["serve", "--addr", addr, "--no-auth", "--data-dir", dataDir]
  if (backend === "aws") {
    const envFile = process.env.SPOOL_EMULATOR_ENV
    if (!envFile || !existsSync(envFile)) {
      throw new Error(`the aws backend needs SPOOL_EMULATOR_ENV to name the emulator's env file (got ${envFile || "nothing"})`)
    }
    argv.push("--backend", "aws", "--env-file", envFile)
  }
  console.log(`conformance: starting ${spoolBin} ${argv.join(" ")} (SPOOL_LONG_POLL_MS=${longPollMs})`)
  const log = createWriteStream(serverLogPath)
  const child = track(
    spawn(spoolBin, argv, {
      cwd: root,
      // The suite tests the protocol, not Spool's rate limits, and writes fast.
      env: { ...process.env, SPOOL_LONG_POLL_MS: longPollMs, SPOOL_RATE_LIMITS: "off" },
      stdio: ["ignore", "pipe", "pipe"],
    }),
  )
  server = child
  let output = ""
  const keep = (chunk) => {
    log.write(chunk)
    output = (output + chunk.toString()).slice(-20_000)
  }
  child.stdout.on("data", keep)
  child.stderr.on("data", keep)
  child.on("exit", () => log.end())

  const url = await new Promise((resolve, reject) => {
    const done = (err, value) => {
      clearTimeout(timer)
      clearInterval(poll)
      child.off("exit", onExit)
      child.off("error", onError)
      err ? reject(err) : resolve(value)
    }
    const failure = (why) => new Error(`spool serve ${why}; its output:\n${output.trimEnd() || "(none)"}`)
    const onExit = (code, signal) => done(failure(`exited (${signal ?? `code ${code}`}) before it was ready`))
    const onError = (err) => done(failure(`could not start: ${err.message}`))
    const timer = setTimeout(() => done(failure(`was not ready within ${READY_TIMEOUT_MS / 1000} s`)), READY_TIMEOUT_MS)
    const poll = setInterval(() => {
      const match = output.match(/Spool is listening on (http:\/\/[^\s(]+)/)
      if (match) done(null, match[1].replace(/\/+$/, ""))
    }, 50)
    child.once("exit", onExit)
    child.once("error", onError)
  })
  // After startup, a server that dies mid-run is reported (the tests will fail anyway).
  child.once("exit", (code, signal) => {
    if (server === child) console.error(`conformance: spool serve died during the run (${signal ?? `code ${code}`}); see ${serverLogPath}`)
  })
  return url
}

// --- vitest ---------------------------------------------------------------------------

async function runVitest(config, env, timeoutMs) {
  const child = track(
    spawn(process.execPath, [vitestBin, "run", "--config", config], {
      cwd: here,
      env: { ...process.env, ...env },
      stdio: ["ignore", "inherit", "inherit"],
      detached: true,
    }),
    true,
  )
  const finished = await waitExit(child, timeoutMs)
  if (!finished) {
    signalChild(child, "SIGTERM")
    if (!(await waitExit(child, 5_000))) signalChild(child, "SIGKILL")
    throw new Error(`vitest (${config}) did not finish within ${timeoutMs / 1000} s`)
  }
  // Workers left behind by vitest, if any.
  try {
    process.kill(-child.pid, "SIGKILL")
  } catch {}
  return child.exitCode
}

function readReport(path) {
  if (!existsSync(path)) throw new Error(`vitest wrote no report at ${path}`)
  const report = JSON.parse(readFileSync(path, "utf8"))
  const tests = []
  for (const file of report.testResults ?? []) {
    for (const t of file.assertionResults ?? []) {
      tests.push({ name: [...(t.ancestorTitles ?? []), t.title].join(" > "), status: t.status })
    }
    // A file that fails to load has no assertion results but a message.
    if ((file.assertionResults ?? []).length === 0 && file.status === "failed") {
      tests.push({ name: `${file.name}: ${String(file.message).split("\n")[0]}`, status: "failed" })
    }
  }
  const count = (...statuses) => tests.filter((t) => statuses.includes(t.status)).length
  return {
    passed: count("passed"),
    failed: count("failed"),
    skipped: count("skipped", "pending", "todo", "disabled"),
    total: tests.length,
    failures: tests.filter((t) => t.status === "failed").map((t) => t.name),
  }
}

// --- main -----------------------------------------------------------------------------

const started = Date.now()
const lines = []
let ok = true
try {
  for (const p of [reportPath, resumeReportPath, summaryPath]) rmSync(p, { force: true })
  const baseUrl = await startServer()
  console.log(`conformance: ${backend} server ready at ${baseUrl} after ${((Date.now() - started) / 1000).toFixed(1)} s`)
  // The suite's subscription tests too (webhooks to a receiver on loopback, pull-wake).
  const env = { CONFORMANCE_BASE_URL: baseUrl, CONFORMANCE_LONG_POLL_MS: longPollMs, CONFORMANCE_SUBSCRIPTIONS: "1" }

  const suiteStart = Date.now()
  await runVitest("vitest.config.mjs", { ...env, CONFORMANCE_REPORT: reportPath }, SUITE_TIMEOUT_MS)
  const suite = readReport(reportPath)
  const suiteSecs = ((Date.now() - suiteStart) / 1000).toFixed(0)
  lines.push(`conformance ${backend}: ${suite.passed} passed, ${suite.failed} failed, ${suite.skipped} skipped of ${suite.total} (minimum ${minPassed}, ${suiteSecs} s)`)
  for (const name of suite.failures) lines.push(`  FAIL ${name}`)
  if (suite.passed < minPassed) {
    ok = false
    lines.push(`conformance ${backend}: FAILED, ${suite.passed} passed is below the minimum ${minPassed}`)
  }

  if (runResume) {
    const resumeStart = Date.now()
    await runVitest("vitest.resume.config.mjs", { ...env, CONFORMANCE_REPORT: resumeReportPath }, RESUME_TIMEOUT_MS)
    const resume = readReport(resumeReportPath)
    const resumeSecs = ((Date.now() - resumeStart) / 1000).toFixed(0)
    lines.push(`resume ${backend}: ${resume.passed} passed, ${resume.failed} failed, ${resume.skipped} skipped of ${resume.total} (${resumeSecs} s)`)
    for (const name of resume.failures) lines.push(`  FAIL ${name}`)
    if (resume.failed > 0 || resume.passed === 0) {
      ok = false
      lines.push(`resume ${backend}: FAILED`)
    }
  }
} catch (err) {
  ok = false
  lines.push(`conformance ${backend}: ERROR ${err instanceof Error ? err.message : err}`)
} finally {
  await stopServer()
}

lines.push(`conformance ${backend}: ${ok ? "OK" : "FAILED"} in ${((Date.now() - started) / 1000).toFixed(0)} s (reports in ${outDir})`)
const summary = lines.join("\n") + "\n"
writeFileSync(summaryPath, summary)
console.log("\n" + summary)
process.exit(ok ? 0 : 1)
