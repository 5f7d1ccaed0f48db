// End-to-end resume test with the official client, @durable-streams/client.
//
// A writer appends {"n":1}..{"n":N} to a fresh JSON stream with plain fetch POSTs (straight
// to the server), then closes the stream. A reader follows the stream live with the client's
// stream() + subscribeJson(), through a TCP proxy on loopback that this test runs and that cuts
// the reader's connections mid-stream: all of them when the reader's progress crosses a few
// marks, and some opened later after a random number of response bytes (so in the middle of
// headers or of a body). The test asserts the reader saw exactly 1..N (nothing lost, nothing
// repeated) and that at least one cut happened while the stream was being read.
//
// How the client (0.2.x) recovers, from reading its source (src/fetch.ts, src/response.ts):
// - A request that fails before its response headers arrive (connection refused, reset or
//   closed while waiting, e.g. during a long-poll) is retried by the client itself, with
//   backoff (createFetchWithBackoff, the `backoffOptions` option), for the same offset.
// - A connection cut after the response headers, i.e. while a long-poll body or an SSE
//   stream is being read, is NOT retried: the body read throws ("terminated"), the session
//   ends and `res.closed` rejects. The client only reconnects SSE itself when the server
//   ends the event stream cleanly. So the application resumes: it starts a new stream()
//   from the offset of the last batch it processed (batch.offset), which is what this test
//   does. Each batch carries the offset right after its items, so resuming from it neither
//   loses nor repeats items.
// - `live: true` means long-poll in this version (SSE only with `live: "sse"`), so both
//   explicit modes are tested.
//
//   CONFORMANCE_BASE_URL   server origin (default http://127.0.0.1:4437)
//   RESUME_MESSAGES        N (default 200)
import net from "node:net"
import { stream } from "@durable-streams/client"
import { afterEach, describe, expect, test } from "vitest"

const baseUrl = (process.env.CONFORMANCE_BASE_URL || "http://127.0.0.1:4437").replace(/\/+$/, "")
const N = Number(process.env.RESUME_MESSAGES || 200)
const WRITE_GAP_MS = 5
const DEADLINE_MS = 60_000
const MAX_RESUBSCRIBES = 50
const BYTE_CUTS = 4 // connections cut after a random number of response bytes
const PROGRESS_MARKS = [0.15, 0.4, 0.65].map((f) => Math.round(f * N)) // cut everything here

const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms))

// A TCP proxy to `target` that can cut the connections passing through it.
function startCuttingProxy(target, { byteCuts, progress }) {
  const { hostname, port } = new URL(target)
  const conns = new Set()
  const cuts = []
  let byteCutsLeft = byteCuts
  let kindToggle = 0
  let armed = 0

  // phase: "waiting" (request sent, no response byte yet), "headers", "body".
  function cut(conn, reason) {
    if (conn.cut) return
    conn.cut = true
    const kind = kindToggle++ % 2 === 0 ? "rst" : "fin"
    cuts.push({ reason, kind, phase: conn.phase, bodyBytes: conn.bodyBytes, received: progress() })
    conn.upstream.destroy()
    if (kind === "rst") conn.client.resetAndDestroy()
    else conn.client.destroy()
  }

  function forward(conn, data) {
    conn.client.write(data)
    if (conn.phase === "waiting" && data.length > 0) conn.phase = "headers"
    if (conn.phase === "headers") {
      const text = conn.tail + data.toString("latin1")
      const end = text.indexOf("\r\n\r\n")
      if (end >= 0) {
        conn.phase = "body"
        conn.bodyBytes = text.length - end - 4
      } else {
        conn.tail = text.slice(-3)
      }
    } else if (conn.phase === "body") {
      conn.bodyBytes += data.length
    }
  }

  // How many bytes of `data` to forward so that the cut falls 2 bytes into a response body,
  // or -1 if `data` does not reach that far.
  function bodyCutPoint(conn, data) {
    if (conn.phase === "body") return conn.bodyBytes === 0 && data.length > 2 ? 2 : -1
    if (conn.phase !== "waiting" && conn.phase !== "headers") return -1
    const end = (conn.tail + data.toString("latin1")).indexOf("\r\n\r\n")
    if (end < 0) return -1
    const bodyStart = end + 4 - conn.tail.length
    return data.length - bodyStart > 2 ? bodyStart + 2 : -1
  }

  const server = net.createServer((client) => {
    const upstream = net.connect(Number(port), hostname)
    const conn = { client, upstream, phase: "idle", tail: "", bodyBytes: 0, down: 0, cut: false, cutAt: Infinity, cutInBody: false }
    // Byte cuts only on connections opened while the stream is being read (not before the
    // first item, so they do not all land on the first request).
    const done = progress()
    // Half of them cut after a random number of bytes, the other half right inside the next
    // response body (long-poll bodies are short, so random cuts mostly hit headers).
    if (byteCutsLeft > 0 && done > 0 && done < N * 0.9) {
      if (armed++ % 2 === 0) conn.cutAt = 100 + Math.floor(Math.random() * 1500)
      else conn.cutInBody = true
    }
    conns.add(conn)
    client.on("data", (data) => {
      if (conn.cut) return
      conn.phase = "waiting" // HTTP/1.1: a new request follows a complete response
      conn.tail = ""
      conn.bodyBytes = 0
      upstream.write(data)
    })
    upstream.on("data", (data) => {
      if (conn.cut) return
      if (byteCutsLeft > 0) {
        const at = conn.cutInBody ? bodyCutPoint(conn, data) : conn.cutAt - conn.down
        if (at >= 0 && at <= data.length) {
          byteCutsLeft--
          const part = data.subarray(0, at)
          conn.down += part.length
          forward(conn, part)
          cut(conn, conn.cutInBody ? "in-body" : "bytes")
          return
        }
      }
      conn.down += data.length
      forward(conn, data)
    })
    const close = () => {
      conns.delete(conn)
      client.destroy()
      upstream.destroy()
    }
    client.on("close", close)
    upstream.on("close", close)
    client.on("error", () => {})
    upstream.on("error", () => {})
  })

  return new Promise((resolve, reject) => {
    server.on("error", reject)
    server.listen(0, "127.0.0.1", () => {
      resolve({
        url: `http://127.0.0.1:${server.address().port}`,
        cuts,
        cutAll(reason) {
          for (const conn of conns) cut(conn, reason)
        },
        close() {
          for (const conn of conns) {
            conn.client.destroy()
            conn.upstream.destroy()
          }
          return new Promise((r) => server.close(() => r()))
        },
      })
    })
  })
}

async function createStream(path) {
  const res = await fetch(`${baseUrl}${path}`, { method: "PUT", headers: { "Content-Type": "application/json" } })
  if (res.status !== 201 && res.status !== 200) throw new Error(`PUT ${path}: ${res.status} ${await res.text()}`)
}

// Appends {"n":1}..{"n":N} one POST each, then closes the stream (EOF).
async function write(path, signal) {
  for (let n = 1; n <= N; n++) {
    const res = await fetch(`${baseUrl}${path}`, {
      method: "POST",
      headers: { "Content-Type": "application/json" },
      body: JSON.stringify({ n }),
      signal,
    })
    if (!res.ok) throw new Error(`append ${n}: ${res.status} ${await res.text()}`)
    await res.arrayBuffer()
    await sleep(WRITE_GAP_MS)
  }
  const res = await fetch(`${baseUrl}${path}`, { method: "POST", headers: { "Stream-Closed": "true" }, signal })
  if (!res.ok) throw new Error(`close: ${res.status} ${await res.text()}`)
  await res.arrayBuffer()
}

// Reads the whole stream live through `url`, resuming from the last batch's offset whenever
// the client's session ends with an error, until a batch says the stream is closed.
async function readAll(url, live, { signal, onItems }) {
  const received = []
  const errors = []
  let offset // undefined: from the start
  let internalRetries = 0
  let resubscribes = 0
  for (;;) {
    if (signal.aborted) throw new Error(`reader gave up: ${signal.reason}`)
    if (resubscribes > MAX_RESUBSCRIBES) throw new Error(`more than ${MAX_RESUBSCRIBES} resubscriptions; errors: ${errors.slice(-5).join(" | ")}`)
    let res
    try {
      res = await stream({
        url,
        offset,
        live,
        signal,
        backoffOptions: {
          initialDelay: 20,
          maxDelay: 500,
          multiplier: 1.5,
          maxRetries: 30,
          onFailedAttempt: () => internalRetries++,
        },
        sseResilience: { logWarnings: false },
      })
    } catch (err) {
      errors.push(`stream(): ${err?.message ?? err}`)
      resubscribes++
      await sleep(50)
      continue
    }
    let eof
    let alive = true
    const closedSeen = new Promise((resolve) => (eof = resolve))
    res.subscribeJson(async (batch) => {
      if (!alive) return // a late batch of an abandoned session: the next one re-reads it
      for (const item of batch.items) received.push(item.n)
      offset = batch.offset
      if (batch.items.length > 0) onItems(received.length)
      if (batch.streamClosed) eof()
    })
    let outcome = await Promise.race([
      closedSeen.then(() => "eof"),
      res.closed.then(
        () => "ended",
        (err) => `error: ${err?.cause?.code ?? err?.message ?? err}`,
      ),
    ])
    if (outcome !== "eof") {
      // `res.closed` settles when the client's internal response stream ends, which can be
      // before the subscriber got the responses already fetched (it reads one ahead): at
      // EOF, closed resolves before the last batch (streamClosed) reaches the subscriber.
      // So give the subscriber a moment before abandoning the session.
      const grace = outcome === "ended" && res.streamClosed ? 5_000 : 200
      outcome = await Promise.race([closedSeen.then(() => "eof"), sleep(grace).then(() => outcome)])
    }
    alive = false
    res.cancel()
    if (outcome === "eof") return { received, errors, internalRetries, resubscribes }
    // The session ended without reaching EOF: resume from the last offset we processed.
    errors.push(outcome)
    resubscribes++
  }
}

describe("client resume through a cutting proxy", () => {
  const cleanups = []
  afterEach(async () => {
    while (cleanups.length) await cleanups.pop()()
  })

  for (const live of ["sse", "long-poll"]) {
    test(`${live}: reads 1..${N} exactly once across connection cuts`, async () => {
      const path = `/v1/stream/resume-${live}-${Date.now()}-${Math.random().toString(36).slice(2, 8)}`
      await createStream(path)

      let progress = 0
      const proxy = await startCuttingProxy(baseUrl, { byteCuts: BYTE_CUTS, progress: () => progress })
      cleanups.push(() => proxy.close())
      const abort = new AbortController()
      const deadline = setTimeout(() => abort.abort(`deadline of ${DEADLINE_MS} ms passed`), DEADLINE_MS)
      cleanups.push(() => {
        clearTimeout(deadline)
        abort.abort("test over")
      })

      const marks = [...PROGRESS_MARKS]
      const started = Date.now()
      const writer = write(path, abort.signal)
      writer.catch(() => {}) // awaited below; avoid an unhandled rejection meanwhile
      const reader = readAll(`${proxy.url}${path}`, live, {
        signal: abort.signal,
        onItems(count) {
          progress = count
          while (marks.length && count >= marks[0]) {
            marks.shift()
            proxy.cutAll("progress")
          }
        },
      })
      const [, result] = await Promise.all([writer, reader])

      const midStream = proxy.cuts.filter((c) => c.received > 0 && c.received < N)
      console.log(
        `resume ${live}: ${result.received.length} items in ${Date.now() - started} ms; ` +
          `${proxy.cuts.length} cuts (${midStream.length} mid-stream; cut/kind/phase@items: ${proxy.cuts.map((c) => `${c.reason}/${c.kind}/${c.phase}${c.phase === "body" ? `+${c.bodyBytes}B` : ""}@${c.received}`).join(", ")}); ` +
          `client-internal retries ${result.internalRetries}, resubscriptions ${result.resubscribes}` +
          (result.errors.length ? `; session errors: ${[...new Set(result.errors)].join(" | ")}` : ""),
      )

      const expected = Array.from({ length: N }, (_, i) => i + 1)
      const dupes = result.received.filter((n, i) => result.received.indexOf(n) !== i)
      const missing = expected.filter((n) => !result.received.includes(n))
      expect({ dupes, missing }).toEqual({ dupes: [], missing: [] })
      expect(result.received).toEqual(expected)
      expect(midStream.length).toBeGreaterThanOrEqual(1)
      // The cuts were noticed and recovered from, by the client or by resubscribing.
      expect(result.internalRetries + result.resubscribes).toBeGreaterThanOrEqual(1)
      // At least one cut fell inside a response body, after some of it had been delivered.
      expect(midStream.some((c) => c.phase === "body" && c.bodyBytes > 0)).toBe(true)
    })
  }
})
