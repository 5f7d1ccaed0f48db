// The Durable Streams reference server for `make bench`: in memory, or file-backed when given a
// directory. Prints its URL, then serves until killed.
import { DurableStreamTestServer } from "@durable-streams/server";

const dataDir = process.argv[2];
const server = new DurableStreamTestServer({ port: 0, host: "127.0.0.1", ...(dataDir ? { dataDir } : {}) });
await server.start();
console.log(`reference server (${dataDir ? "file-backed" : "in memory"}) at ${server.url}`);
