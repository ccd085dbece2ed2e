// make bench: resty.dlock side by side with its baselines, in one run, on one
// machine, lines interleaved (A B A B ...), reported as ratios. Writes
// bench/results/latest.{md,json} and PNG plots. `--smoke` is a short run for
// make test (numbers printed, never asserted).
"use strict";
const { spawnSync, execFileSync } = require("node:child_process");
const fs = require("node:fs");
const http = require("node:http");
const os = require("node:os");
const path = require("node:path");
const { Monitor, handoffStats, handoffsOf } = require("./monitor");
const lib = require("./lib");
const { sleep, freePort, Ports, children, cpuSeconds, Procs, cli, redisCalls, renderConf, nginxBin: libNginxBin, topology } = lib;

const root = path.resolve(__dirname, "..");
const smoke = process.argv.includes("--smoke");
// --only S (repeatable): only the lines whose id or name contains one of them (a
// section without one is skipped with what it needs started; 1b's ratios need the
// core line: --only core --only Cluster); results in bench/results/only.{md,json}.
const only = process.argv.filter((a, i, all) => all[i - 1] === "--only");
if (process.argv[process.argv.length - 1] === "--only") throw new Error("--only needs a substring of a line's id or name");
// --before REV: the old revision line core_before runs /core on (issue 22's measure is against it).
// In --smoke too: it adds about 2.5 s (its nginx up in well under a second, a 1 s warm-up, one 1 s round).
const BEFORE_DEFAULT = "b357923"; // the last commit before issue 22's work
const beforeAt = process.argv.indexOf("--before");
if (beforeAt >= 0 && !(process.argv[beforeAt + 1] || "").trim()) throw new Error("--before needs a revision (a commit, tag or branch)");
const beforeRev = beforeAt >= 0 ? process.argv[beforeAt + 1] : BEFORE_DEFAULT;
// "=ID" names one line exactly (--only =core: the core line, not core_tls, core_cluster, ...).
const wanted = (l) => !only.length || only.some((o) => (o[0] === "=" ? l.id === o.slice(1) : l.id.includes(o) || l.name.includes(o)));
const cfg = smoke
  ? { rounds: 1, seconds: 1, conns: 32, contendClients: 40, contendSeconds: 2, memRequests: 20000, dictLeases: 2000 }
  : { rounds: 5, seconds: 5, conns: 50, contendClients: 40, contendSeconds: 6, memRequests: 1000000, dictLeases: 10000 };
// Section 2: every request acquires the one key (ttl, waiting at most wait ms), holds it hold ms, releases.
Object.assign(cfg, { contendHold: 20, contendTtl: 1000, contendWait: 3000, contendWarmup: 0.5 });
// Section 2b: the same clients on one key, rwReaders of the requests readers, each holding it rwHold ms.
Object.assign(cfg, { rwReaders: 0.9, rwHold: 5 });
const outDir = path.join(root, "bench", "results");
const prefix = fs.mkdtempSync("/tmp/dlock-bench.");
fs.chmodSync(prefix, 0o755);
fs.mkdirSync(path.join(prefix, "logs"));

function log(...a) {
  console.log(...a);
}

// Everything started here (bench/lib Procs), stopped on exit.
const procs = new Procs({ log: console.error });
const env = { procs, ports: new Ports(), log: console.error };
function cleanup() {
  procs.stopAllSync();
  fs.rmSync(prefix, { recursive: true, force: true });
}
process.on("exit", cleanup);
for (const sig of ["SIGINT", "SIGTERM"]) process.on(sig, () => process.exit(130));

function get(port, p) {
  return new Promise((resolve, reject) => {
    http.get({ host: "127.0.0.1", port, path: p, agent: false }, (res) => {
      let body = "";
      res.on("data", (c) => (body += c));
      res.on("end", () => resolve({ status: res.statusCode, body }));
    }).on("error", reject);
  });
}

async function waitFor(port) {
  for (let i = 0; i < 200; i++) {
    try { if ((await get(port, "/ping")).status === 200) return; } catch (e) { /* not yet */ }
    await sleep(50);
  }
  throw new Error("nothing answers on " + port);
}

const start = (cmd, args) => procs.start(cmd, args);

// A throwaway redis-server in its own dir under the prefix, on port.
function redisServer(name, port) {
  return lib.redisUp(env, path.join(prefix, name), () => [], { port });
}

function toMs(s) {
  const m = /^([\d.]+)(us|ms|s|m)$/.exec(s);
  if (!m) return NaN;
  return Number(m[1]) * { us: 0.001, ms: 1, s: 1000, m: 60000 }[m[2]];
}

function wrk(url, conns, seconds, extra = []) {
  const r = spawnSync("wrk", ["-t1", "-c" + conns, "-d" + seconds + "s", "--latency", "--timeout", "60s", ...extra, url], { encoding: "utf8" });
  const out = r.stdout;
  const num = (re) => { const m = re.exec(out); return m ? m[1] : undefined; };
  const non2xx = Number(num(/Non-2xx or 3xx responses: (\d+)/) || 0);
  return {
    requests: Number(num(/(\d+) requests in/)),
    rps: Number(num(/Requests\/sec:\s+([\d.]+)/)),
    p50: toMs(num(/\s50%\s+(\S+)/) || ""),
    p99: toMs(num(/\s99%\s+(\S+)/) || ""),
    errors: non2xx + Number(num(/Socket errors: connect (\d+)/) || 0),
  };
}

// Until the store's Redis servers have seen no command for 100 ms (at most 5 s).
async function quiet(store) {
  let prev = store.calls(false);
  for (let i = 0; i < 50; i++) {
    await sleep(100);
    const now = store.calls(false);
    if (now === prev) return;
    prev = now;
  }
}

// What a line's requests land on. masters: the servers holding the keys (their
// commands and CPU are the line's, as the standalone redis-server's are);
// others: what only keeps the topology up (replicas, sentinels), CPU counted apart.
function store(kind, masters, { tls, others = [], sentinelPorts = [], check } = {}) {
  return {
    kind,
    pids: masters.map((m) => m.pid),
    otherPids: others.map((o) => o.pid),
    callsEach: (background = true) => masters.map((m) => redisCalls(m.port, { tls, background })),
    calls(background = true) { return this.callsEach(background).reduce((a, b) => a + b, 0); },
    // Connections the sentinels accepted, over all of them: the lock asks one on a
    // connection of its own each time (get-master-addr-by-name, then close), the
    // sentinels' links to each other stay up, and a sentinel has no commandstats.
    // Includes this call's own connection to each sentinel.
    sentinelConnections: () => sentinelPorts.reduce((a, p) =>
      a + Number(/total_connections_received:(\d+)/.exec(cli(p, "info", "stats"))[1]), 0),
    sentinelPorts,
    check: check || (() => ""),
  };
}

const makeCerts = topology.makeCerts;

// Redlock: three independent redis-servers, the keys on all of them.
async function startRedlock(ports) {
  const ms = [];
  for (const port of ports) ms.push(await redisServer("redlock-" + port, port));
  return store("redlock", ms);
}

// TLS only (--port 0): the lock connects with ssl_verify = true, server_name = "localhost".
async function startTls(port, tls) {
  const t = await topology.up(env, { kind: "tls", port, certs: tls }, path.join(prefix, "redis-tls"));
  return store("tls", t.nodes, { tls: t.ca });
}

// Master, one replica, three sentinels (quorum 2) watching "locks" (bench/lib
// topology). down-after 5 s (not the specs' 1 s): a CPU-starved sentinel on this
// 2-core machine must not fail the master over in the middle of a line; check() says if one happened.
async function startSentinel({ master, replica, sentinels }) {
  const t = await topology.up(env, { kind: "sentinel", master: "locks", replicas: 1, sentinels: sentinels.length, quorum: 2,
    downAfterMs: 5000, failoverTimeoutMs: 10000, ports: { master, replicas: [replica], sentinels } }, path.join(prefix, "sentinel"));
  const check = () => {
    const now = cli(sentinels[0], "sentinel", "get-master-addr-by-name", "locks").split("\n")[1];
    return now === String(master) ? "" : `the sentinels failed the master over during the run (now ${now})`;
  };
  return store("sentinel", [t.master], { others: [...t.replicas, ...t.sentinels], sentinelPorts: sentinels, check });
}

// Six nodes, three masters with one replica each (bench/lib topology: redis-cli
// --cluster create, until every node says cluster_state:ok with all slots served
// and every replica is linked). cluster-node-timeout 5 s (not the specs' 1 s),
// for the same reason as down-after above.
// With replicasEach = 0 (core_cluster_bare): the three masters alone, like for
// like with the standalone line, which has no replica to feed either.
async function startCluster(ports, replicasEach = 1, name = "cluster") {
  const t = await topology.up(env, { kind: "cluster", masters: 3, replicasEach, nodeTimeoutMs: 5000, seeds: 2, ports, readyMs: 30000 },
    path.join(prefix, name));
  const roles = async () => (await t.masters()).map((m) => m.port).sort((a, b) => a - b);
  const masters = await roles();
  const byPort = Object.fromEntries(t.nodes.map((n) => [n.port, n]));
  const check = () => {
    const now = lib.parseClusterNodes(cli(ports[0], "cluster", "nodes")).filter((x) => x.flags.includes("master")).map((x) => x.port).sort((a, b) => a - b);
    return now.join() === masters.join() ? "" : `a cluster failover happened during the run (masters ${masters} -> ${now})`;
  };
  return store(name, masters.map((p) => byPort[p]), { others: t.nodes.filter((n) => !masters.includes(n.port)), check });
}

// Section 1e: GET /libcpu (bench/cpu/libcpu.lua) on this checkout's nginx (the
// one with only /core when it runs, else bench.conf's) and,
// when it runs, on the old revision's (core_before), interleaved, cfg.rounds
// times; the medians of their best-of rounds, in µs of the worker's CPU per operation.
async function measureLibCpu(nowPort, beforePortOrNull) {
  const q = smoke ? "n=40&t=50&r=2" : "n=200&t=50&r=5";
  // "<µs> <per second>"; a reply without the second number (NaN) is an older libcpu.lua's.
  const ask = async (port, what) => {
    const r = await get(port, `/libcpu?what=${what}&${q}`);
    const [us, perSec] = r.status === 200 ? r.body.trim().split(/\s+/).map(Number) : [NaN, NaN];
    return { us, perSec };
  };
  const got = { core: [], rate: [], core_before: [] };
  for (let round = 0; round < cfg.rounds; round++) {
    got.core.push(await ask(nowPort, "core"));
    if (beforePortOrNull) got.core_before.push(await ask(beforePortOrNull, "core"));
    got.rate.push(await ask(nowPort, "rate"));
  }
  const us = (xs) => median(xs.map((x) => x.us)), perSec = (xs) => median(xs.map((x) => x.perSec));
  const out = { core_us: us(got.core), rate_us: us(got.rate), core_per_s: perSec(got.core), rate_per_s: perSec(got.rate), rounds: got };
  // Round by round: the two ran back to back, so the machine's mood is shared.
  out.rate_vs_core_per_s = median(got.rate.map((x, i) => x.perSec / got.core[i].perSec));
  if (beforePortOrNull) Object.assign(out, { core_before_us: us(got.core_before), revision: beforeRev });
  log(`library CPU per operation: acquire+release ${fmt(out.core_us, 2)} µs` + (beforePortOrNull ? ` (at ${beforeRev}: ${fmt(out.core_before_us, 2)} µs)` : "") +
    `, rate decision ${fmt(out.rate_us, 2)} µs; per second in one worker: ${fmt(out.core_per_s)} acquire+release, ${fmt(out.rate_per_s)} rate decisions (${fmt(out.rate_vs_core_per_s, 2)}×)`);
  return out;
}

const median = (xs) => {
  const s = xs.filter((x) => Number.isFinite(x)).sort((a, b) => a - b);
  return s.length ? s[Math.floor((s.length - 1) / 2)] : NaN;
};
const fmt = (x, d = 0) => (Number.isFinite(x) ? x.toFixed(d) : "-");

// ---- section 2: contention across two instances
const nowUs = () => Number(process.hrtime.bigint() / 1000n); // CLOCK_MONOTONIC, as nginx's and the peers' sections

// One GET on a keep-alive agent; { status, body } or { error }. Never rejects.
function getKept(port, p, agent) {
  return new Promise((resolve) => {
    const req = http.get({ host: "127.0.0.1", port, path: p, agent }, (res) => {
      let body = "";
      res.setEncoding("utf8");
      res.on("data", (c) => (body += c));
      res.on("end", () => resolve({ status: res.statusCode, body }));
      res.on("error", (e) => resolve({ error: e.code || e.message }));
    });
    req.setTimeout(30000, () => req.destroy(new Error("client timeout")));
    req.on("error", (e) => resolve({ error: e.code || e.message }));
  });
}

// clients HTTP clients, alternating between the line's two instances, each looping
// on path until the returned stop() (which resolves once every answer is in).
function contendLoad(ports, p, clients, counts) {
  const agents = ports.map(() => new http.Agent({ keepAlive: true, maxSockets: Infinity }));
  let stopping = false;
  const one = async (i) => {
    const k = i % ports.length;
    while (!stopping) {
      const r = await getKept(ports[k], p, agents[k]);
      const body = r.error ? "" : r.body.trim();
      if (body === "ok") counts.ok++;
      else if (body === "timeout") counts.timeouts++;
      else {
        counts.errors++;
        const msg = r.error || `${r.status} ${body.slice(0, 80)}`;
        counts.errMsgs[msg] = (counts.errMsgs[msg] || 0) + 1;
        await sleep(10);
      }
    }
  };
  const all = Promise.all(Array.from({ length: clients }, (_, i) => one(i)));
  return async () => {
    stopping = true;
    await all;
    for (const a of agents) a.destroy();
  };
}

// The critical sections each instance kept since the last call, merged:
// [{ enterUs, leaveUs, pid, instance (1, 2) }].
async function sectionsOf(ports, p) {
  const out = [];
  for (const [i, port] of ports.entries()) {
    const { body } = await get(port, p);
    for (const line of body.split("\n").filter(Boolean)) {
      const [enterUs, leaveUs, pid] = line.split(" ").map(Number);
      out.push({ enterUs, leaveUs, pid, instance: i + 1 });
    }
  }
  return out;
}

/**
 * Section 2b: cfg.contendClients clients over the contending pair, on one key:
 * each request a reader (cfg.rwReaders of them) or a writer, holding the key
 * cfg.rwHold ms. Line rw_shared takes the readers with shared = true, line
 * rw_exclusive exclusively; lines interleaved per round.
 */
async function readMostlyLines(rwLines, contend, pids) {
  const agents = contend.nginxPorts.map(() => new http.Agent({ keepAlive: true, maxSockets: Infinity }));
  const phase = async (l, seconds) => {
    const c = { r: { ok: 0, ms: [] }, w: { ok: 0, ms: [] }, timeouts: 0, errors: 0, errMsgs: {} };
    let stopping = false;
    const q = `&h=${cfg.rwHold}&wait=${cfg.contendWait}&ttl=${cfg.contendTtl}&shared=${l.shared}`;
    const one = async (i) => {
      const k = i % contend.nginxPorts.length;
      while (!stopping) {
        const mode = Math.random() < cfg.rwReaders ? "r" : "w";
        const t = process.hrtime.bigint();
        const r = await getKept(contend.nginxPorts[k], `/contend/rw?mode=${mode}${q}`, agents[k]);
        const body = r.error ? "" : r.body.trim();
        if (body === "ok " + mode) { c[mode].ok++; c[mode].ms.push(Number(process.hrtime.bigint() - t) / 1e6); }
        else if (body === "timeout") c.timeouts++;
        else { c.errors++; const m = r.error || `${r.status} ${body.slice(0, 80)}`; c.errMsgs[m] = (c.errMsgs[m] || 0) + 1; await sleep(10); }
      }
    };
    const mon = await Monitor.start(contend.redisPort);
    const cpu = () => cpuSeconds(pids()) + cpuSeconds([contend.redis.pid]);
    const cpu0 = cpu(), t0 = Date.now();
    const all = Promise.all(Array.from({ length: cfg.contendClients }, (_, i) => one(i)));
    await sleep(seconds * 1000);
    stopping = true;
    await all;
    const secs = (Date.now() - t0) / 1000;
    await sleep(300);
    mon.stop();
    return { c, secs, cmds: mon.total, cpuS: cpu() - cpu0 };
  };
  for (const l of rwLines) await phase(l, cfg.contendWarmup);
  const runs = Object.fromEntries(rwLines.map((l) => [l.id, []]));
  const pct = (xs, p) => { const a = [...xs].sort((x, y) => x - y); return a.length ? a[Math.min(a.length - 1, Math.floor(p * a.length))] : NaN; };
  for (let round = 0; round < cfg.rounds; round++) {
    for (const l of rwLines) {
      const { c, secs, cmds, cpuS } = await phase(l, cfg.contendSeconds);
      const n = c.r.ok + c.w.ok;
      const r = {
        readsPerSec: c.r.ok / secs, writesPerSec: c.w.ok / secs, readP50: pct(c.r.ms, 0.5), readP99: pct(c.r.ms, 0.99),
        writeP50: pct(c.w.ms, 0.5), writeP99: pct(c.w.ms, 0.99), writeMax: pct(c.w.ms, 1), timeouts: c.timeouts, errors: c.errors,
        errMsgs: c.errMsgs, cmdsPerReq: cmds / n, cpuMsPerReq: (cpuS * 1000) / n,
      };
      runs[l.id].push(r);
      log(`  round ${round + 1} ${l.name}: ${fmt(r.readsPerSec)} reads/s, ${fmt(r.writesPerSec)} writes/s, read p99 ${fmt(r.readP99, 1)} ms, ` +
        `write p99 ${fmt(r.writeP99, 1)} ms, ${c.timeouts} wait timeouts, ${c.errors} errors`);
    }
  }
  for (const a of agents) a.destroy();
  const lines = rwLines.map((l) => {
    const rs = runs[l.id];
    const m = (f) => median(rs.map(f));
    return {
      line: l.name, id: l.id, clients: cfg.contendClients, readers_share: cfg.rwReaders, hold_ms: cfg.rwHold,
      reads_per_sec: m((r) => r.readsPerSec), writes_per_sec: m((r) => r.writesPerSec),
      read_p50_ms: m((r) => r.readP50), read_p99_ms: m((r) => r.readP99), write_p50_ms: m((r) => r.writeP50), write_p99_ms: m((r) => r.writeP99),
      write_max_ms: Math.max(...rs.map((r) => r.writeMax)), redis_cmds_per_req: m((r) => r.cmdsPerReq), cpu_ms_per_req: m((r) => r.cpuMsPerReq),
      wait_timeouts: rs.reduce((a, r) => a + r.timeouts, 0), errors: rs.reduce((a, r) => a + r.errors, 0),
      error_messages: rs.reduce((a, r) => { for (const [k, n] of Object.entries(r.errMsgs)) a[k] = (a[k] || 0) + n; return a; }, {}),
      rounds: rs.map(({ errMsgs, ...r }) => r),
    };
  });
  const sh = lines.find((l) => l.id === "rw_shared"), ex = lines.find((l) => l.id === "rw_exclusive");
  return { lines, reads_ratio: sh && ex ? sh.reads_per_sec / ex.reads_per_sec : null, writes_ratio: sh && ex ? sh.writes_per_sec / ex.writes_per_sec : null };
}

/**
 * Line core_before: the old revision's dist/ and bench/lines.lua, from git (its
 * dist/ is committed: no build), into dir. { commit } or { skip: why not }: a
 * clone without that history (shallow) or without git skips the line, never the bench.
 */
function extractBefore(rev, dir) {
  const git = (args, opts = {}) => spawnSync("git", ["-C", root, ...args], { maxBuffer: 256 * 1024 * 1024, ...opts });
  const found = git(["cat-file", "-e", rev + "^{commit}"]);
  if (found.error) return { skip: `git is not available (${found.error.code || found.error.message}), so revision ${rev} cannot be read` };
  if (found.status !== 0) {
    const shallow = git(["rev-parse", "--is-shallow-repository"], { encoding: "utf8" }).stdout;
    return { skip: `revision ${rev} is not in this clone's history` + (String(shallow).trim() === "true" ? " (a shallow clone: git fetch --unshallow)" : "") };
  }
  const commit = git(["rev-parse", rev + "^{commit}"], { encoding: "utf8" }).stdout.trim();
  const tar = git(["archive", "--format=tar", commit, "dist", "bench/lines.lua"]);
  if (tar.status !== 0) return { skip: `git archive ${rev} dist bench/lines.lua failed: ${String(tar.stderr).trim().split("\n")[0]}` };
  fs.mkdirSync(dir, { recursive: true });
  const x = spawnSync("tar", ["-x", "-C", dir], { input: tar.stdout });
  if (x.status !== 0) return { skip: `tar could not extract revision ${rev}: ${String(x.stderr).trim()}` };
  if (!fs.existsSync(path.join(dir, "dist", "resty", "dlock.lua"))) return { skip: `revision ${rev} has no dist/resty/dlock.lua` };
  return { commit };
}

async function main() {
  const redisPort = await freePort();
  const httpPort = await freePort();
  const nodePort = await freePort();
  const beforePort = await freePort();
  const alonePort = await freePort();

  // The Redis topologies beside the standalone redis-server (section 1b). Ports
  // now: nginx.conf names them. Certificates now: nginx reads the CA at start.
  const tlsDir = path.join(prefix, "tls");
  makeCerts(tlsDir);
  const topoPorts = {
    tls: await freePort(),
    sentinel: { master: await freePort(), replica: await freePort(), sentinels: [await freePort(), await freePort(), await freePort()] },
    cluster: [],
    cluster_bare: [],
    redlock: [await freePort(), await freePort(), await freePort()],
  };
  const clusterModule = fs.existsSync(path.join(root, "dist", "resty", "dlock", "redis", "cluster.lua"));
  // Cluster: full run only (creating it takes ~5 s, over the smoke run's budget).
  const clusterSkip = !clusterModule ? "not available: dist/resty/dlock/redis/cluster.lua is not built yet"
    : smoke ? "full run only (creating a cluster takes several seconds)" : "";
  if (!clusterSkip) {
    for (let i = 0; i < 6; i++) topoPorts.cluster.push(await env.ports.pick({ bus: true }));
    for (let i = 0; i < 3; i++) topoPorts.cluster_bare.push(await env.ports.pick({ bus: true }));
  }

  // 1. Uncontended throughput, distinct key per request. The topology lines run
  // the /core handler on another Redis (storeKind), interleaved with the rest.
  const lines = [
    { id: "none", name: "no lock (ceiling)", url: `http://127.0.0.1:${httpPort}/none`, server: () => nginxPids() },
    { id: "core", name: "resty.dlock acquire+release", url: `http://127.0.0.1:${httpPort}/core`, server: () => nginxPids(), workers: () => children(nginx.pid) },
    // The same /core handler on the library of an old revision (--before), in a second nginx: issue 22's before/after in one run.
    { id: "core_before", name: `resty.dlock acquire+release at ${beforeRev}` + (beforeRev === BEFORE_DEFAULT ? " (before issue 22)" : ""),
      url: `http://127.0.0.1:${beforePort}/core`, server: () => [before.pid, ...children(before.pid)], workers: () => children(before.pid) },
    // This checkout's library in an nginx like the old revision's (nothing else configured: no guards, no other
    // factories, their timers, nor their records in the dict), so that now / before compares the library alone.
    { id: "core_alone", name: "resty.dlock acquire+release, in an nginx with only /core (as the line above)",
      url: `http://127.0.0.1:${alonePort}/core`, server: () => [alone.pid, ...children(alone.pid)], workers: () => children(alone.pid) },
    { id: "core_plain", name: "resty.dlock acquire+release, auto_pipeline = false (a connection per call, as before)", url: `http://127.0.0.1:${httpPort}/core-plain`, server: () => nginxPids() },
    { id: "core_plain_low", name: "resty.dlock acquire+release, auto_pipeline = false, 4 connections", conns: 4, url: `http://127.0.0.1:${httpPort}/core-plain`, server: () => nginxPids() },
    { id: "core_low", name: "resty.dlock acquire+release, 4 connections", conns: 4, url: `http://127.0.0.1:${httpPort}/core`, server: () => nginxPids() },
    { id: "core_tls", topo: true, storeKind: "tls", name: "resty.dlock acquire+release, TLS (ssl_verify on)", url: `http://127.0.0.1:${httpPort}/core-tls`, server: () => nginxPids() },
    { id: "core_sentinel", topo: true, storeKind: "sentinel", name: "resty.dlock acquire+release, Sentinel (master + 1 replica, 3 sentinels)", url: `http://127.0.0.1:${httpPort}/core-sentinel`, server: () => nginxPids() },
    { id: "core_cluster", topo: true, storeKind: "cluster", name: "resty.dlock acquire+release, Cluster (3 masters + 3 replicas)", url: `http://127.0.0.1:${httpPort}/core-cluster`, server: () => nginxPids(), skip: clusterSkip },
    { id: "core_cluster_bare", topo: true, storeKind: "cluster_bare", name: "resty.dlock acquire+release, Cluster (3 masters, no replicas)", url: `http://127.0.0.1:${httpPort}/core-cluster_bare`, server: () => nginxPids(), skip: clusterSkip },
    { id: "core_redlock", topo: true, storeKind: "redlock", name: "resty.dlock acquire+release, Redlock (3 independent masters)", url: `http://127.0.0.1:${httpPort}/core-redlock`, server: () => nginxPids() },
    { id: "dedup", name: "resty.dlock.gateway dedup", url: `http://127.0.0.1:${httpPort}/dedup`, server: () => nginxPids() },
    { id: "rate", name: "resty.dlock.gateway rate guard (one GCRA script call per request)", url: `http://127.0.0.1:${httpPort}/rate`, server: () => nginxPids() },
    { id: "rate_api", name: "resty.dlock.rate incoming(key, true), the Lua API", url: `http://127.0.0.1:${httpPort}/rate-api`, server: () => nginxPids() },
    // Where round trips decide (few requests at once, the CPUs not full): one against acquire + release's two (core_low).
    { id: "rate_low", name: "resty.dlock.gateway rate guard, 4 connections", conns: 4, url: `http://127.0.0.1:${httpPort}/rate`, server: () => nginxPids() },
    { id: "rate_api_low", name: "resty.dlock.rate incoming(key, true), 4 connections", conns: 4, url: `http://127.0.0.1:${httpPort}/rate-api`, server: () => nginxPids() },
    { id: "idem", name: "resty.dlock.gateway idempotency, first requests", url: `http://127.0.0.1:${httpPort}/idem`, server: () => nginxPids() },
    { id: "idem_replay", name: "resty.dlock.gateway idempotency, replays", url: `http://127.0.0.1:${httpPort}/idem-replay`, server: () => nginxPids() },
    // 1d. Several keys per request (distinct per request): acquire_all against the same keys one by one.
    { id: "multi2", multi: 2, name: "resty.dlock acquire_all of 2 keys + release", url: `http://127.0.0.1:${httpPort}/multi?n=2`, server: () => nginxPids() },
    { id: "each2", multi: 2, name: "resty.dlock 2 keys acquired and released one by one", url: `http://127.0.0.1:${httpPort}/each?n=2`, server: () => nginxPids() },
    { id: "multi8", multi: 8, name: "resty.dlock acquire_all of 8 keys + release", url: `http://127.0.0.1:${httpPort}/multi?n=8`, server: () => nginxPids() },
    { id: "each8", multi: 8, name: "resty.dlock 8 keys acquired and released one by one", url: `http://127.0.0.1:${httpPort}/each?n=8`, server: () => nginxPids() },
    { id: "seed", name: "seed Lua: SET NX PX + EVAL", url: `http://127.0.0.1:${httpPort}/seed`, server: () => nginxPids() },
    { id: "node", name: "Node.js node-redlock 5 + ioredis", url: `http://127.0.0.1:${nodePort}/`, server: () => [node.pid] },
  ];
  // 2. Contention (and 2b, read-mostly): on the contending pair started below.
  const contend = { redisPort: await freePort(), nginxPorts: [await freePort(), await freePort()], peerPorts: [await freePort(), await freePort()] };
  const nginxPair = () => contend.nginx.flatMap((n) => [n.pid, ...children(n.pid)]);
  const contLines = [
    { id: "dlock", name: "resty.dlock acquire with wait (pub/sub wake-ups)", instances: "2 nginx × 2 workers", ports: contend.nginxPorts, path: "/contend/dlock", sections: "/sections", pids: nginxPair },
    { id: "poll", name: "polling lock in Lua (SET NX PX, 2→64 ms jittered backoff, EVAL release)", instances: "2 nginx × 2 workers", ports: contend.nginxPorts, path: "/contend/poll", sections: "/sections", pids: nginxPair },
    { id: "redlock", name: "node-redlock 5 retry loop (retryDelay 20 ms, retryJitter 10 ms, retryCount wait / 20)", instances: "2 Node.js processes", ports: contend.peerPorts, path: "/contend", sections: "/sections", pids: () => contend.peers.map((p) => p.pid) },
  ].filter(wanted);
  const rwLines = [
    { id: "rw_shared", name: "read-mostly: readers with shared = true, writers exclusive", shared: 1 },
    { id: "rw_exclusive", name: "read-mostly: every request exclusive (the same readers and writers)", shared: 0 },
  ].filter(wanted);
  const run1 = lines.some(wanted);
  const run2 = contLines.length > 0 || rwLines.length > 0;
  if (!run1 && !run2) throw new Error(`--only ${only.join(", ")}: no line's id or name contains it`);
  let before, alone, beforeCommit = null;
  let redis, nginx, node, tlsStore, sentinelStore, clusterStore, clusterBareStore, redlockStore, standalone, setRps = NaN;
  const nginxPids = () => [nginx.pid, ...children(nginx.pid)];
  const nginxBin = libNginxBin();
  const peer = (port, rport) => start(process.execPath, [path.join(root, "bench", "peer", "gateway.js"), String(port), String(rport)]);
  if (run1) {
    redis = await redisServer("redis", redisPort);
    renderConf(path.join(root, "nginx", "bench.conf"), prefix, path.join(prefix, "nginx.conf"), { HTTP_PORT: httpPort, REDIS_PORT: redisPort,
      TLS_PORT: topoPorts.tls, SENTINEL_NODES: topoPorts.sentinel.sentinels.map((p) => "127.0.0.1:" + p).join(","),
      CLUSTER_NODES: topoPorts.cluster.slice(0, 2).map((p) => "127.0.0.1:" + p).join(","),
      CLUSTER_BARE_NODES: topoPorts.cluster_bare.slice(0, 2).map((p) => "127.0.0.1:" + p).join(","),
      REDLOCK_NODES: topoPorts.redlock.map((p) => "127.0.0.1:" + p).join(",") });
    // The binary nginx/lib.sh resolved from DLOCK_NGINX (a name, a path or an OpenResty folder), as render_conf used.
    nginx = start(nginxBin, ["-p", prefix, "-c", path.join(prefix, "nginx.conf"), "-g", "daemon off;"]);
    const nodeLine = lines.some((l) => l.id === "node" && wanted(l));
    const beforeLine = lines.find((l) => l.id === "core_before");
    if (wanted(beforeLine)) {
      const t0Before = Date.now();
      const dir = path.join(prefix, "before");
      const x = extractBefore(beforeRev, path.join(dir, "code"));
      if (x.skip) beforeLine.skip = x.skip;
      else {
        beforeCommit = x.commit;
        before = await lib.nginxUp(env, { bin: nginxBin, dir, template: path.join(root, "nginx", "bench-before.conf"), port: beforePort,
          vars: { BEFORE: path.join(dir, "code"), REDIS_PORT: redisPort } });
        log(`nginx at ${beforeRev} (${beforeCommit.slice(0, 12)}) up in ${((Date.now() - t0Before) / 1000).toFixed(1)} s`);
      }
      if (beforeLine.skip) log(`${beforeLine.name}: skipped, ${beforeLine.skip}`);
    }
    if (wanted(lines.find((l) => l.id === "core_alone"))) {
      alone = await lib.nginxUp(env, { bin: nginxBin, dir: path.join(prefix, "alone"), template: path.join(root, "nginx", "bench-before.conf"),
        port: alonePort, vars: { BEFORE: root, REDIS_PORT: redisPort } });
    }
    if (nodeLine) node = peer(nodePort, redisPort);
    const needs = (kind) => lines.some((l) => l.storeKind === kind && !l.skip && wanted(l));
    const t0Topo = Date.now();
    [tlsStore, sentinelStore, clusterStore, clusterBareStore, redlockStore] = await Promise.all([
      needs("tls") ? startTls(topoPorts.tls, tlsDir) : null, needs("sentinel") ? startSentinel(topoPorts.sentinel) : null,
      needs("cluster") ? startCluster(topoPorts.cluster) : null,
      needs("cluster_bare") ? startCluster(topoPorts.cluster_bare, 0, "cluster_bare") : null,
      needs("redlock") ? startRedlock(topoPorts.redlock) : null]);
    log(`topologies up in ${((Date.now() - t0Topo) / 1000).toFixed(1)} s`);
    await waitFor(httpPort);
    if (nodeLine) await waitFor(nodePort);
    standalone = store("standalone", [{ port: redisPort, pid: redis.pid }]);
    for (const l of lines) if (l.storeKind) l.store = { tls: tlsStore, sentinel: sentinelStore, cluster: clusterStore, cluster_bare: clusterBareStore, redlock: redlockStore }[l.storeKind];
  }
  if (run2) {
    // Section 2: a redis-server of its own (only the contending instances talk to
    // it, so MONITOR sees nothing else), two nginx (nginx/bench-contend.conf, two
    // workers each) and two Node.js peers (node-redlock's two instances).
    contend.redis = await redisServer("redis-contend", contend.redisPort);
    contend.nginx = contend.nginxPorts.map((port, i) => {
      const dir = path.join(prefix, "contend-" + (i + 1));
      renderConf(path.join(root, "nginx", "bench-contend.conf"), dir, path.join(dir, "nginx.conf"), { HTTP_PORT: port, REDIS_PORT: contend.redisPort });
      return start(nginxBin, ["-p", dir, "-c", path.join(dir, "nginx.conf"), "-g", "daemon off;"]);
    });
    // node-redlock's two instances: only for its line.
    const peers = contLines.some((l) => l.id === "redlock");
    contend.peers = peers ? contend.peerPorts.map((port) => peer(port, contend.redisPort)) : [];
    for (const p of [...contend.nginxPorts, ...(peers ? contend.peerPorts : [])]) await waitFor(p);
  }

  let throughput = [], topologies = [], multikey = [], beforeRatio = null, libCpu = null;
  if (run1) {
    setRps = (() => {
      const r = spawnSync("redis-benchmark", ["-p", String(redisPort), "-t", "set", "-n", smoke ? "50000" : "300000", "-c", String(cfg.conns), "-q"], { encoding: "utf8" });
      const m = /SET: ([\d.]+) requests per second/.exec(r.stdout);
      return m ? Number(m[1]) : NaN;
    })();
    log(`redis-benchmark SET (${cfg.conns} clients): ${fmt(setRps)} req/s`);

    if (before) {
      // The old code must answer as the current one does, or its line says why it is missing.
      const r = await get(beforePort, "/core");
      if (r.status !== 200 || r.body.trim() !== "ok") {
        const l = lines.find((x) => x.id === "core_before");
        l.skip = `the old revision's /core answered ${r.status} ${r.body.trim().slice(0, 120)} (see ${prefix}/before/logs/error.log)`;
        log(`${l.name}: skipped, ${l.skip}`);
      }
    }
    const active = lines.filter((l) => !l.skip && wanted(l));
    for (const l of active.filter((x) => x.topo)) {
      const r = await get(httpPort, l.url.replace(/^http:\/\/[^/]+/, ""));
      if (r.status !== 200) throw new Error(`${l.name}: ${r.status} ${r.body.trim()} (see ${prefix}/logs/error.log)`);
    }
    for (const l of active) wrk(l.url, l.conns || cfg.conns, 1); // warm-up: JIT, pools, scripts cached
    const runs = Object.fromEntries(lines.map((l) => [l.id, []]));
    for (let round = 0; round < cfg.rounds; round++) {
      for (const l of active) {
        const st = l.store || standalone;
        const srv = l.server(), wk = l.workers ? l.workers() : [];
        const c0 = st.callsEach(), s0 = st.sentinelConnections();
        const t0 = [cpuSeconds(srv), cpuSeconds(st.pids), cpuSeconds(st.otherPids), cpuSeconds(wk)];
        const w = wrk(l.url, l.conns || cfg.conns, cfg.seconds);
        await quiet(st); // queued log-phase releases land in this line's numbers, not the next one's
        const c1 = st.callsEach(), s1 = st.sentinelConnections() - st.sentinelPorts.length;
        const t1 = [cpuSeconds(srv), cpuSeconds(st.pids), cpuSeconds(st.otherPids), cpuSeconds(wk)];
        const per1k = (i) => ((t1[i] - t0[i]) * 1e6) / w.requests;
        const each = c1.map((c, i) => c - c0[i]), total = each.reduce((a, b) => a + b, 0);
        runs[l.id].push({ ...w, cmdsPerReq: total / w.requests, cpuMsPer1k: per1k(0) + per1k(1),
          serverCpuMsPer1k: per1k(0), redisCpuMsPer1k: per1k(1), othersCpuMsPer1k: per1k(2),
          masterShares: each.map((c) => c / total), sentinelQueriesPer1k: ((s1 - s0) * 1000) / w.requests,
          sentinelQueriesPerSec: (s1 - s0) / cfg.seconds, ...(l.workers ? { workerCpuUsPerReq: per1k(3) } : {}) });
        log(`  round ${round + 1} ${l.name}: ${fmt(w.rps)} req/s p50 ${fmt(w.p50, 2)} ms p99 ${fmt(w.p99, 2)} ms, errors ${w.errors}`);
      }
    }
    // 1e. The library's own CPU per operation, without HTTP (bench/cpu/libcpu.lua), now and at the old revision, interleaved.
    if (wanted(lines.find((l) => l.id === "core"))) libCpu = await measureLibCpu(alone ? alone.port : httpPort, before && !lines.find((l) => l.id === "core_before").skip ? before.port : null);
    const ceiling = median(runs.none.map((r) => r.rps));
    const summary = (l) => {
      const rs = runs[l.id];
      const rps = median(rs.map((r) => r.rps));
      return {
        line: l.name, id: l.id, rps, vs_ceiling: rps / ceiling, vs_redis_set: rps / setRps,
        p50_ms: median(rs.map((r) => r.p50)), p99_ms: median(rs.map((r) => r.p99)),
        redis_cmds_per_req: median(rs.map((r) => r.cmdsPerReq)), cpu_ms_per_1k: median(rs.map((r) => r.cpuMsPer1k)),
        server_cpu_ms_per_1k: median(rs.map((r) => r.serverCpuMsPer1k)), redis_cpu_ms_per_1k: median(rs.map((r) => r.redisCpuMsPer1k)),
        errors: rs.reduce((a, r) => a + r.errors, 0),
        // The nginx worker's own /proc CPU (not the master's), in µs per request: what issue 22's before/after compares.
        ...(l.workers ? { nginx_worker_cpu_us_per_req: median(rs.map((r) => r.workerCpuUsPerReq)) } : {}),
      };
    };
    throughput = lines.filter((l) => !l.topo && !l.multi && wanted(l)).map((l) => (l.skip ? { line: l.name, id: l.id, skipped: l.skip } : summary(l)));
    // now / before: the current /core line against the same handler on the old revision, round by round (interleaved).
    // Against the line in an nginx like the old revision's when it ran (core_alone), else against /core.
    const aloneL = throughput.find((l) => l.id === "core_alone" && !l.skipped);
    const nowL = aloneL || throughput.find((l) => l.id === "core"), beforeL = throughput.find((l) => l.id === "core_before");
    if (beforeL) beforeL.revision = { asked: beforeRev, commit: beforeCommit };
    if (nowL && beforeL && !beforeL.skipped) {
      const perRound = runs[nowL.id].map((r, i) => r.workerCpuUsPerReq / runs.core_before[i].workerCpuUsPerReq);
      beforeRatio = {
        now_line: nowL.id, revision: beforeRev, commit: beforeCommit, rps_ratio: nowL.rps / beforeL.rps,
        nginx_cpu_per_req_ratio: nowL.nginx_worker_cpu_us_per_req / beforeL.nginx_worker_cpu_us_per_req,
        nginx_cpu_per_req_ratio_rounds: perRound, nginx_cpu_us_per_req: { now: nowL.nginx_worker_cpu_us_per_req, before: beforeL.nginx_worker_cpu_us_per_req },
      };
    }
    // 1d. acquire_all of n keys against n acquires one by one: round trips (a script call each, in sequence) and the ratio of req/s.
    multikey = [2, 8].filter((n) => lines.some((l) => l.id === "multi" + n && wanted(l)) && lines.some((l) => l.id === "each" + n && wanted(l)))
      .map((n) => {
        const all = summary(lines.find((l) => l.id === "multi" + n)), each = summary(lines.find((l) => l.id === "each" + n));
        return { keys: n, acquire_all: all, one_by_one: each, rps_ratio: all.rps / each.rps, round_trips: { acquire_all: 2, one_by_one: 2 * n } };
      });
    // 1b. The same acquire+release on other topologies, as ratios to the standalone line.
    const core = throughput.find((l) => l.id === "core");
    if (core) topologies = [{ ...core, topology: "standalone", vs_standalone: 1, cpu_vs_standalone: 1, others_cpu_ms_per_1k: 0 }];
    for (const l of lines.filter((x) => x.topo && core && wanted(x))) {
      if (l.skip) {
        topologies.push({ line: l.name, id: l.id, topology: l.id.replace("core_", ""), skipped: l.skip });
        continue;
      }
      const rs = runs[l.id], s = summary(l);
      const shares = rs[0].masterShares.map((_, i) => median(rs.map((r) => r.masterShares[i])));
      const note = l.store.check();
      topologies.push({ ...s, topology: l.store.kind, vs_standalone: s.rps / core.rps, cpu_vs_standalone: s.cpu_ms_per_1k / core.cpu_ms_per_1k,
        others_cpu_ms_per_1k: median(rs.map((r) => r.othersCpuMsPer1k)),
        ...(shares.length > 1 ? { master_cmd_shares: shares } : {}),
        ...(l.store.kind === "sentinel" ? { sentinel_queries_per_1k: median(rs.map((r) => r.sentinelQueriesPer1k)),
          sentinel_queries_per_sec: median(rs.map((r) => r.sentinelQueriesPerSec)) } : {}),
        ...(note ? { note } : {}) });
    }
  }

  // 2. Contention across two instances: C clients on one key (half on each
  // instance), each request acquiring it (waiting at most contendWait ms),
  // holding it contendHold ms, releasing. Lines interleaved per round.
  const q = `?h=${cfg.contendHold}&wait=${cfg.contendWait}&ttl=${cfg.contendTtl}`;
  const ideal = 1000 / cfg.contendHold;
  async function contendPhase(l, seconds) {
    await sectionsOf(l.ports, l.sections); // nothing left over from before
    const counts = { ok: 0, timeouts: 0, errors: 0, errMsgs: {} };
    const cpu = () => cpuSeconds(l.pids()) + cpuSeconds([contend.redis.pid]);
    const mon = await Monitor.start(contend.redisPort);
    const cpu0 = cpu();
    const t0 = nowUs();
    const stop = contendLoad(l.ports, l.path + q, cfg.contendClients, counts);
    await sleep(seconds * 1000);
    const t1 = nowUs();
    await stop(); // the requests in flight run to their end (a wait at most)
    await sleep(300); // unsubscribes follow the last waiter: counted too
    mon.stop();
    const cpu1 = cpu();
    const secs = await sectionsOf(l.ports, l.sections);
    return { counts, mon, secs, t0, t1, cpuSeconds: cpu1 - cpu0 };
  }
  for (const l of contLines) await contendPhase(l, cfg.contendWarmup); // warm-up: connections, scripts cached, subscribers up
  const cruns = Object.fromEntries(contLines.map((l) => [l.id, []]));
  for (let round = 0; round < cfg.rounds; round++) {
    for (const l of contLines) {
      const { counts, mon, secs, t0, t1, cpuSeconds: cpuS } = await contendPhase(l, cfg.contendSeconds);
      const inLoad = (s) => s.enterUs >= t0 && s.enterUs <= t1;
      const { handoffs, overlaps } = handoffsOf(secs);
      const pidMap = new Map(secs.map((s) => [s.pid, s.instance]));
      const h = handoffStats(handoffs.filter((x) => x.atUs >= t0 && x.atUs <= t1), pidMap);
      const acqPerSec = secs.filter(inLoad).length / ((t1 - t0) / 1e6);
      const c = mon.perAcquisition(secs.length);
      cruns[l.id].push({
        acqPerSec, ofIdeal: acqPerSec / ideal, acquisitions: secs.length, ok: counts.ok, timeouts: counts.timeouts,
        errors: counts.errors, errMsgs: counts.errMsgs, overlaps, handoffs: h, cmdsPerAcq: c.perAcquisition,
        attemptsPerAcq: c.acquireAttemptsPerAcquisition, commands: c, cpuMsPerAcq: secs.length ? (cpuS * 1000) / secs.length : NaN,
      });
      log(`  round ${round + 1} ${l.name}: ${fmt(acqPerSec)} acq/s, hand-off p50 ${fmt(h.all.p50, 2)} / p99 ${fmt(h.all.p99, 2)} ms ` +
        `(other instance p50 ${fmt(h.otherInstance.p50, 2)} / p99 ${fmt(h.otherInstance.p99, 2)} ms), ${fmt(c.perAcquisition, 2)} Redis cmds/acq, ` +
        `${counts.timeouts} wait timeouts, ${counts.errors} errors`);
    }
  }
  const contention = contLines.map((l) => {
    const rs = cruns[l.id];
    const sumBy = (f) => rs.reduce((a, r) => { for (const [k, n] of Object.entries(f(r))) a[k] = (a[k] || 0) + n; return a; }, {});
    const acquisitions = rs.reduce((a, r) => a + r.acquisitions, 0);
    return {
      line: l.name, id: l.id, instances: l.instances, clients: cfg.contendClients, hold_ms: cfg.contendHold,
      ttl_ms: cfg.contendTtl, wait_ms: cfg.contendWait, ideal_acq_per_sec: ideal,
      acq_per_sec: median(rs.map((r) => r.acqPerSec)), of_ideal: median(rs.map((r) => r.ofIdeal)),
      handoff_p50_ms: median(rs.map((r) => r.handoffs.all.p50)), handoff_p99_ms: median(rs.map((r) => r.handoffs.all.p99)),
      handoff_other_p50_ms: median(rs.map((r) => r.handoffs.otherInstance.p50)), handoff_other_p99_ms: median(rs.map((r) => r.handoffs.otherInstance.p99)),
      handoffs_other_share: median(rs.map((r) => r.handoffs.otherInstance.n / r.handoffs.all.n)),
      redis_cmds_per_acq: median(rs.map((r) => r.cmdsPerAcq)), acquire_attempts_per_acq: median(rs.map((r) => r.attemptsPerAcq)),
      cpu_ms_per_acq: median(rs.map((r) => r.cpuMsPerAcq)),
      wait_timeouts: rs.reduce((a, r) => a + r.timeouts, 0), requests: rs.reduce((a, r) => a + r.ok + r.timeouts + r.errors, 0),
      errors: rs.reduce((a, r) => a + r.errors, 0), overlaps: rs.reduce((a, r) => a + r.overlaps, 0),
      // Over all rounds: commands by name per acquisition, acquire attempts by the time since the key's last release.
      commands_per_acq_by: Object.fromEntries(Object.entries(sumBy((r) => r.commands.byCommand)).sort((a, b) => b[1] - a[1])
        .map(([k, n]) => [k, Math.round((n / acquisitions) * 100) / 100])),
      acquire_attempts_after_release: sumBy((r) => r.commands.acquireAttemptsAfterRelease),
      error_messages: sumBy((r) => r.errMsgs),
      rounds: rs.map(({ commands, errMsgs, ...r }) => r),
    };
  });

  // 2b. Read-mostly: a read-write lock against an exclusive one on the same key.
  const readMostly = rwLines.length ? await readMostlyLines(rwLines, contend, nginxPair) : null;

  // 3. Memory (not with --only).
  let memory = null;
  if (!only.length) {
    const dictBytes = Number((await get(httpPort, `/dictmem?n=${cfg.dictLeases}`)).body);
    const memBefore = Number((await get(httpPort, "/mem")).body);
    let served = 0;
    while (served < cfg.memRequests) served += wrk(`http://127.0.0.1:${httpPort}/core`, cfg.conns, smoke ? 2 : 20).requests;
    const memAfter = Number((await get(httpPort, "/mem")).body);
    memory = { dict_bytes_per_lease: dictBytes, leases_measured: cfg.dictLeases, requests: served, lua_kb_before: memBefore, lua_kb_after: memAfter };
  }

  const result = {
    when: new Date().toISOString(), smoke, config: cfg,
    machine: { cpus: os.cpus().length, redis: execFileSync("redis-server", ["--version"], { encoding: "utf8" }).trim(),
      nginx: spawnSync(nginxBin, ["-v"], { encoding: "utf8" }).stderr.trim(), node: process.version },
    only: only.length ? only.join(", ") : null, redis_set_rps: setRps, throughput, before_ratio: beforeRatio, library_cpu: libCpu, topologies, multikey, contention, readMostly, memory,
  };
  report(result);
}


function report(r) {
  const t = [];
  t.push(`# make bench${r.smoke ? " (smoke: short, numbers indicative only)" : ""}`);
  t.push("");
  t.push(`${r.when}, ${r.machine.cpus} CPUs, ${r.machine.nginx}, ${r.machine.redis.split(" ").slice(0, 3).join(" ")}, Node ${r.machine.node}.`);
  t.push(`Medians of ${r.config.rounds} interleaved round(s). One nginx worker, one Node process, one redis-server (plus the topologies of 1b, and the two instances of section 2), wrk on loopback.`);
  if (r.only) t.push(`Only the lines whose id or name contains "${r.only}" (\`--only\`).`);
  t.push("");
  if (r.throughput.length) {
    t.push(`## 1. Uncontended: acquire + release around a trivial handler, distinct key per request (${r.config.conns} connections)`);
    t.push("");
    t.push(`Physical ceiling: redis-benchmark SET = ${fmt(r.redis_set_rps)} req/s (a lock needs two round trips: acquire and release).`);
    t.push("");
    t.push("| line | req/s | vs no lock | vs Redis SET | p50 ms | p99 ms | Redis cmds/req | CPU ms / 1000 req (server + redis) | errors |");
    t.push("| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |");
    for (const l of r.throughput) {
      if (l.skipped) { t.push(`| ${l.line} | skipped: ${l.skipped} | | | | | | | |`); continue; }
      t.push(`| ${l.line} | ${fmt(l.rps)} | ${fmt(l.vs_ceiling, 2)} | ${fmt(l.vs_redis_set, 2)} | ${fmt(l.p50_ms, 2)} | ${fmt(l.p99_ms, 2)} | ${fmt(l.redis_cmds_per_req, 2)} | ${fmt(l.cpu_ms_per_1k, 1)} | ${l.errors} |`);
    }
    const core = r.throughput.find((l) => l.id === "core"), seed = r.throughput.find((l) => l.id === "seed"), nodeL = r.throughput.find((l) => l.id === "node");
    t.push("");
    const plain = r.throughput.find((l) => l.id === "core_plain"), low = r.throughput.find((l) => l.id === "core_low"),
      plainLow = r.throughput.find((l) => l.id === "core_plain_low");
    const b = r.before_ratio;
    if (b) {
      const rr = b.nginx_cpu_per_req_ratio_rounds.filter(Number.isFinite);
      t.push(`now / before (${b.now_line === "core_alone" ? "both in an nginx with only /core" : "the /core line"}): ` +
        `req/s ${fmt(b.rps_ratio, 2)}×, nginx CPU per request ${fmt(b.nginx_cpu_per_req_ratio, 2)}× ` +
        `(${fmt(b.nginx_cpu_us_per_req.now, 1)} against ${fmt(b.nginx_cpu_us_per_req.before, 1)} µs of the nginx worker per request at ${b.revision}; ` +
        `per round ${fmt(Math.min(...rr), 2)}–${fmt(Math.max(...rr), 2)}×).`);
    }
    if (core && seed && nodeL) {
      if (b) t.push("");
      t.push(`resty.dlock / seed Lua = ${fmt(core.rps / seed.rps, 2)}; resty.dlock / node-redlock = ${fmt(core.rps / nodeL.rps, 2)}.`);
    }
    if (plain && core) {
      t.push("");
      t.push(`Auto-pipelining (the calls of concurrent requests of the worker share round trips) against auto_pipeline = false ` +
        `(a pooled connection per call, as before): req/s ${fmt(core.rps / plain.rps, 2)}×, CPU ms / 1000 req (nginx + Redis) ` +
        `${fmt(core.cpu_ms_per_1k / plain.cpu_ms_per_1k, 2)}×` +
        (low && plainLow ? `; at 4 connections req/s ${fmt(low.rps / plainLow.rps, 2)}×, p50 ${fmt(low.p50_ms, 2)} against ${fmt(plainLow.p50_ms, 2)} ms, ` +
          `p99 ${fmt(low.p99_ms, 2)} against ${fmt(plainLow.p99_ms, 2)} ms.` : "."));
    }
    const byId = (id) => r.throughput.find((l) => l.id === id && !l.skipped);
    const rateSaid = [["rate", "core", "the rate guard"], ["rate_api", "core", "rate.new's incoming()"],
      ["rate_low", "core_low", "the rate guard at 4 connections"], ["rate_api_low", "core_low", "incoming() at 4 connections"]]
      .filter(([a, c]) => byId(a) && byId(c))
      .map(([a, c, what]) => `${what} ${fmt(byId(a).rps / byId(c).rps, 2)}× (CPU per decision, nginx + Redis, ${fmt(byId(a).cpu_ms_per_1k / byId(c).cpu_ms_per_1k, 2)}×)`);
    const lc = r.library_cpu;
    if (lc) {
      t.push("");
      t.push(`Library CPU per operation (section 1e: 50 light threads in one request, no HTTP; µs of the nginx worker's CPU, ` +
        `medians of ${r.config.rounds} best-of rounds): acquire + release ${fmt(lc.core_us, 2)}` +
        (Number.isFinite(lc.core_before_us) ? ` against ${fmt(lc.core_before_us, 2)} at ${lc.revision} (${fmt(lc.core_us / lc.core_before_us, 2)}×)` : "") +
        `; a rate decision ${fmt(lc.rate_us, 2)} (${fmt(lc.core_us / lc.rate_us, 2)} decisions for the CPU of one acquire + release).`);
      if (Number.isFinite(lc.rate_vs_core_per_s)) {
        t.push(`Completed per second by that one worker (Redis' time included, no HTTP): ${fmt(lc.core_per_s)} acquire + release, ` +
          `${fmt(lc.rate_per_s)} rate decisions: ${fmt(lc.rate_vs_core_per_s, 2)}× (median of the rounds' ratios).`);
      }
    }
    if (rateSaid.length) {
      t.push("");
      t.push(`Rate decisions per second against acquire + release at the same connections (one script call against two): ${rateSaid.join("; ")}.`);
    }
    t.push("");
  }
  if (r.topologies.length) {
    t.push(`## 1b. Redis topologies: the same acquire+release (/core handler), interleaved with the lines above`);
    t.push("");
    t.push("Ratios are to the standalone line of this run. CPU per 1000 requests: nginx, the Redis servers holding the keys " +
      "(the standalone redis-server, the TLS one, the Sentinel master, the three Cluster masters), and apart what only keeps " +
      "the topology up (replicas, sentinels). Redis cmds/req: on the servers holding the keys.");
    t.push("");
    t.push("| topology | req/s | vs standalone | p50 ms | p99 ms | Redis cmds/req | CPU nginx | CPU Redis (keys) | nginx + Redis vs standalone | CPU replicas + sentinels | errors |");
    t.push("| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |");
    const notes = [];
    for (const l of r.topologies) {
      if (l.skipped) {
        t.push(`| ${l.line} | skipped: ${l.skipped} | | | | | | | | | |`);
        notes.push(`${l.topology}: skipped, ${l.skipped}.`);
        continue;
      }
      t.push(`| ${l.line} | ${fmt(l.rps)} | ${fmt(l.vs_standalone, 2)} | ${fmt(l.p50_ms, 2)} | ${fmt(l.p99_ms, 2)} | ${fmt(l.redis_cmds_per_req, 2)} | ` +
        `${fmt(l.server_cpu_ms_per_1k, 1)} | ${fmt(l.redis_cpu_ms_per_1k, 1)} | ${fmt(l.cpu_vs_standalone, 2)} | ${fmt(l.others_cpu_ms_per_1k, 1)} | ${l.errors} |`);
      if (l.master_cmd_shares) notes.push(`${l.topology}: commands per master ${l.master_cmd_shares.map((x) => fmt(x * 100) + " %").join(" / ")}.`);
      if (l.sentinel_queries_per_1k !== undefined) notes.push(`${l.topology}: the sentinels were asked for the master ${fmt(l.sentinel_queries_per_sec, 1)} times a second ` +
        `(${fmt(l.sentinel_queries_per_1k, 3)} per 1000 requests; connections the sentinels accepted during the line).`);
      if (l.note) notes.push(`${l.topology}: ${l.note}.`);
    }
    if (notes.length) {
      t.push("");
      for (const n of notes) t.push(`- ${n}`);
    }
    t.push("");
  }
  if ((r.multikey || []).length) {
    t.push("## 1d. Several keys per request: acquire_all against acquiring them one by one (uncontended, distinct keys per request)");
    t.push("");
    t.push("acquire_all takes the keys in one script call and releases them in another; one by one, each acquire and each release is a " +
      "call of its own, in sequence. Round trips per request by construction; Redis cmds/req measured (a script call counts once).");
    t.push("");
    t.push("| keys | acquire_all req/s | one by one req/s | ratio | round trips (all / one by one) | Redis cmds/req (all / one by one) | p50 ms (all / one by one) | CPU ms / 1000 req (all / one by one) | errors |");
    t.push("| ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |");
    for (const m of r.multikey || []) {
      const a = m.acquire_all, o = m.one_by_one;
      t.push(`| ${m.keys} | ${fmt(a.rps)} | ${fmt(o.rps)} | ${fmt(m.rps_ratio, 2)} | ${m.round_trips.acquire_all} / ${m.round_trips.one_by_one} | ` +
        `${fmt(a.redis_cmds_per_req, 2)} / ${fmt(o.redis_cmds_per_req, 2)} | ${fmt(a.p50_ms, 2)} / ${fmt(o.p50_ms, 2)} | ` +
        `${fmt(a.cpu_ms_per_1k, 1)} / ${fmt(o.cpu_ms_per_1k, 1)} | ${a.errors + o.errors} |`);
    }
    t.push("");
  }
  if (r.contention.length) {
    const c0 = r.contention[0];
    t.push(`## 2. Contention across two instances: ${c0.clients} clients on one key, each holding it ${c0.hold_ms} ms`);
    t.push("");
    t.push(`Two nginx (\`nginx/bench-contend.conf\`, 2 workers each, on a redis-server of their own), ${c0.clients / 2} clients on each; ` +
      `every request acquires the one key (ttl ${c0.ttl_ms} ms, waiting at most ${c0.wait_ms} ms), holds it ${c0.hold_ms} ms and releases it. ` +
      "node-redlock runs in a single Node.js process, which has no workers: its two instances are two peer processes (`bench/peer/gateway.js`, " +
      "each on one ioredis connection), its wait its own retry loop (retryCount = wait / retryDelay, so it waits about as long as the others). " +
      `${fmt(c0.ideal_acq_per_sec)} acquisitions/s is the ideal (1000 / hold ms). **Hand-off** = from one holder leaving the key (before its release) to the next entering it ` +
      "(after its acquire returned), every hand-off of the load, from the critical sections each process logs on CLOCK_MONOTONIC; **to the other instance** = only " +
      "those where the next holder runs in the other nginx (or Node process). **Redis cmds/acquisition** = every command the instances sent the lock Redis " +
      "from the start of the load until the requests in flight had ended (MONITOR; a script call counts once, releases and subscriptions included, " +
      "the commands scripts run inside not), over the acquisitions in that time; **acquire attempts** = SET, or a script call other than a release " +
      "(one with exactly one argument after its keys). **Wait timeouts** = requests that waited their whole wait in vain, summed over the rounds. " +
      "CPU: the instances' and the Redis server's, per acquisition. The single-nginx scenario of earlier runs (50 clients, one worker, hold 5 ms) is gone: " +
      "with one worker every waiter sat in the holder's process, and only this one measures hand-offs between instances.");
    t.push("");
    t.push("| line | instances | acquisitions/s | of ideal | hand-off p50 ms | hand-off p99 ms | to the other instance p50 ms | to the other instance p99 ms | Redis cmds/acquisition | acquire attempts/acquisition | wait timeouts | CPU ms/acquisition |");
    t.push("| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |");
    for (const l of r.contention) {
      t.push(`| ${l.line} | ${l.instances} | ${fmt(l.acq_per_sec, 1)} | ${fmt(l.of_ideal, 2)} | ${fmt(l.handoff_p50_ms, 2)} | ${fmt(l.handoff_p99_ms, 2)} | ` +
        `${fmt(l.handoff_other_p50_ms, 2)} | ${fmt(l.handoff_other_p99_ms, 2)} | ${fmt(l.redis_cmds_per_acq, 2)} | ${fmt(l.acquire_attempts_per_acq, 2)} | ` +
        `${l.wait_timeouts} of ${l.requests} | ${fmt(l.cpu_ms_per_acq, 2)} |`);
    }
    const cl = Object.fromEntries(r.contention.map((l) => [l.id, l]));
    const ratio = (a, b) => fmt(a / b, 2);
    t.push("");
    for (const [id, name] of [["poll", "the polling lock"], ["redlock", "node-redlock"]]) {
      const d = cl.dlock, o = cl[id];
      // --only may have run one of the pair.
      if (!d || !o) continue;
      t.push(`- resty.dlock / ${name}: acquisitions/s ${ratio(d.acq_per_sec, o.acq_per_sec)}, hand-off p50 ${ratio(d.handoff_p50_ms, o.handoff_p50_ms)} ` +
        `and p99 ${ratio(d.handoff_p99_ms, o.handoff_p99_ms)} (to the other instance ${ratio(d.handoff_other_p50_ms, o.handoff_other_p50_ms)} and ` +
        `${ratio(d.handoff_other_p99_ms, o.handoff_other_p99_ms)}), Redis cmds/acquisition ${ratio(d.redis_cmds_per_acq, o.redis_cmds_per_acq)}, ` +
        `CPU/acquisition ${ratio(d.cpu_ms_per_acq, o.cpu_ms_per_acq)}.`);
    }
    for (const l of r.contention) {
      t.push(`- ${l.id}: per acquisition ${Object.entries(l.commands_per_acq_by).map(([k, n]) => `${k} ${n}`).join(", ")}; ` +
        `acquire attempts by the time since the key's last release: ${Object.entries(l.acquire_attempts_after_release).filter(([, n]) => n).map(([b, n]) => `${b} ${n}`).join(", ")}; ` +
        `${fmt(l.handoffs_other_share * 100)} % of the hand-offs went to the other instance` +
        (l.overlaps ? `; ${l.overlaps} OVERLAP(S): a holder entered before the previous one left` : "") +
        (l.errors ? `; ${l.errors} error(s): ${Object.entries(l.error_messages).slice(0, 3).map(([m, n]) => `"${m}" ×${n}`).join(", ")}` : "") + ".");
    }
    t.push("");
  }
  if (r.readMostly) {
    const rm = r.readMostly, l0 = rm.lines[0];
    t.push(`## 2b. Read-mostly: ${l0.clients} clients on one key, ${fmt(l0.readers_share * 100)} % of the requests readers, each holding it ${l0.hold_ms} ms`);
    t.push("");
    t.push(`The contending pair of section 2 (two nginx × 2 workers, one redis-server), ${l0.clients / 2} clients on each; every request is a reader ` +
      `with probability ${l0.readers_share}, else a writer, and acquires the one key (ttl ${r.config.contendTtl} ms, waiting at most ${r.config.contendWait} ms), ` +
      `holds it ${l0.hold_ms} ms and releases it. **rw_shared**: readers take it with \`shared = true\` (side by side), writers exclusively; ` +
      "**rw_exclusive**: the same requests, every one exclusive (what a plain lock gives). Reads/s and writes/s = answered requests per second; " +
      "latency = the client's, waiting included; Redis cmds/request = every command the instances sent (MONITOR), over the answered requests.");
    t.push("");
    t.push("| line | reads/s | writes/s | read p50 / p99 ms | write p50 / p99 / max ms | Redis cmds/request | CPU ms/request | wait timeouts | errors |");
    t.push("| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |");
    for (const l of rm.lines) {
      t.push(`| ${l.line} | ${fmt(l.reads_per_sec)} | ${fmt(l.writes_per_sec)} | ${fmt(l.read_p50_ms, 1)} / ${fmt(l.read_p99_ms, 1)} | ` +
        `${fmt(l.write_p50_ms, 1)} / ${fmt(l.write_p99_ms, 1)} / ${fmt(l.write_max_ms, 0)} | ${fmt(l.redis_cmds_per_req, 2)} | ${fmt(l.cpu_ms_per_req, 2)} | ${l.wait_timeouts} | ${l.errors} |`);
    }
    if (rm.reads_ratio !== null) {
      t.push("");
      t.push(`rw_shared / rw_exclusive: reads/s ${fmt(rm.reads_ratio, 2)}×, writes/s ${fmt(rm.writes_ratio, 2)}×.`);
    }
    t.push("");
  }
  if (r.memory) {
    t.push("## 3. Memory");
    t.push("");
    t.push(`- shared dict: ${fmt(r.memory.dict_bytes_per_lease)} bytes per held lease (${r.memory.leases_measured} leases held at once).`);
    t.push(`- worker Lua heap after a full GC: ${fmt(r.memory.lua_kb_before)} KB before, ${fmt(r.memory.lua_kb_after)} KB after ${r.memory.requests} more acquire+release requests.`);
  }
  const md = t.join("\n") + "\n";
  console.log("\n" + md);
  fs.mkdirSync(outDir, { recursive: true });
  // --only runs never overwrite a full run's results.
  const base = r.only ? "only" : r.smoke ? "smoke" : "latest";
  fs.writeFileSync(path.join(outDir, base + ".md"), md);
  fs.writeFileSync(path.join(outDir, base + ".json"), JSON.stringify(r, null, 2) + "\n");
  if (!r.smoke && !r.only) plot(r);
}

function plot(r) {
  const dat = path.join(prefix, "plot.dat");
  const plotted = [...r.throughput.filter((l) => !l.skipped), ...r.topologies.filter((l) => l.topology !== "standalone" && !l.skipped)
    .map((l) => ({ ...l, line: "resty.dlock, " + l.topology }))];
  fs.writeFileSync(dat, plotted.map((l) => `"${l.line}" ${l.rps} ${l.p99_ms}`).join("\n") + "\n");
  const cdat = path.join(prefix, "contend.dat");
  fs.writeFileSync(cdat, r.contention.map((l) => `"${l.id}" ${l.handoff_p50_ms} ${l.handoff_p99_ms} ${l.handoff_other_p50_ms} ${l.handoff_other_p99_ms}`).join("\n") + "\n");
  const gp = `
set terminal pngcairo size 900,450 font ",10"
set output "${path.join(outDir, "throughput.png")}"
set title "Uncontended lock + trivial handler (req/s, higher is better)"
set style data histograms
set style fill solid 0.8
set boxwidth 0.7
set xtics rotate by -20
set yrange [0:*]
set grid ytics
plot "${dat}" using 2:xtic(1) notitle linecolor rgb "#3b75af"
set output "${path.join(outDir, "handoff.png")}"
set title "Contention, two instances: hand-off gap, one holder leaving to the next entering (ms, lower is better)"
set xtics norotate
plot "${cdat}" using 2:xtic(1) title "p50" linecolor rgb "#3b75af", "" using 3 title "p99" linecolor rgb "#e1812c", "" using 4 title "p50, to the other instance" linecolor rgb "#7fa8d1", "" using 5 title "p99, to the other instance" linecolor rgb "#f0b27a"
`;
  const g = spawnSync("gnuplot", [], { input: gp, encoding: "utf8" });
  if (g.status !== 0) console.error("gnuplot failed:", g.stderr);
}

// The servers we spawned keep the event loop alive: exit explicitly (the exit hook stops them).
main().then(() => process.exit(0), (e) => {
  console.error(e);
  process.exit(1);
});
