// Runs the official Durable Streams server conformance suite against an
// already-running server. The package's own CLI cannot find its test file
// when installed under node_modules, so we call the exported function here.
//
//   CONFORMANCE_BASE_URL          server origin (default http://127.0.0.1:4437);
//                                 tests hit ${CONFORMANCE_BASE_URL}/v1/stream/...
//   CONFORMANCE_LONG_POLL_MS      long-poll timeout the suite assumes (default 20000)
//   CONFORMANCE_SUBSCRIPTIONS=1   also run the "Reserved subscription APIs" block
import { runConformanceTests } from "@durable-streams/server-conformance-tests"

const baseUrl = (process.env.CONFORMANCE_BASE_URL || "http://127.0.0.1:4437").replace(/\/+$/, "")
const longPollTimeoutMs = Number(process.env.CONFORMANCE_LONG_POLL_MS || 20000)
const subscriptions = /^(1|true|yes)$/i.test(process.env.CONFORMANCE_SUBSCRIPTIONS || "")

runConformanceTests({ baseUrl, longPollTimeoutMs, subscriptions })
