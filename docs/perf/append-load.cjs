// usage: node docs/perf/append-load.cjs <origin> <stream-name> <total> <writers>
const http = require('http');
const [origin, name, totalS, writersS] = process.argv.slice(2);
const total = +totalS, writers = +writersS;
const u = new URL(origin);
const agent = new http.Agent({ keepAlive: true, maxSockets: writers });
const path = `/v1/stream/bench/${name}`;
function req(method, body) {
  return new Promise((res, rej) => {
    const r = http.request({ host: u.hostname, port: u.port, path, method, agent,
      headers: { 'content-type': 'application/json', 'content-length': Buffer.byteLength(body) } }, (resp) => {
      resp.resume();
      resp.on('end', () => resp.statusCode < 300 ? res(resp.statusCode) : rej(new Error(method + ' ' + resp.statusCode)));
    });
    r.on('error', rej);
    r.end(body);
  });
}
function msg(fields) {
  const head = `{${fields},"pad":"`;
  return `[${head}${'x'.repeat(Math.max(0, 100 - head.length - 2))}"}]`;
}
(async () => {
  await req('PUT', '');
  const per = Math.floor(total / writers);
  const t0 = process.hrtime.bigint();
  await Promise.all([...Array(writers).keys()].map(async (w) => {
    for (let k = 0; k < per; k++) await req('POST', msg(`"w":${w},"k":${k}`));
  }));
  const s = Number(process.hrtime.bigint() - t0) / 1e9;
  console.log(JSON.stringify({ name, writers, appends: per * writers, seconds: s.toFixed(3), per_s: (per * writers / s).toFixed(0) }));
  agent.destroy();
})().catch((e) => { console.error(e); process.exit(1); });
