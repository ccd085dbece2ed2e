// make torture: the load and the faults of the resty.dlock safety harness.
// bench/torture starts the processes (lock Redis, witness Redis, two nginx from
// nginx/torture.conf, a backend nginx from nginx/torture-backend.conf) and runs
// this script with their ports and pids. The rows are data
// (bench/torture-scenarios.js); this is the engine: loads, faults, witness.
//   crit rows:    200 HTTP clients loop on /crit?key=kN (5 keys) over both nginx
//                 while one fault is injected; each critical section reports to
//                 the witness Redis, which counts acquisitions, overlaps (two
//                 holders inside at once) and the longest gap between one holder
//                 leaving and the next entering.
//   gateway rows: clients loop on gateway-guarded locations; the backend reports
//                 every request entering and leaving it per key; the witness
//                 counts overlaps (more in flight than the guard promises); after
//                 the load the lock Redis is scanned for guard keys left locked.
//   topology rows: crit rows whose lock is not the lock Redis but a Sentinel set,
//                 a Redis Cluster or Redlock masters (TOPOLOGIES): started here for
//                 the row, with a pair of nginx of their own (nginx/torture.conf
//                 rendered with that `redis` option) that the load goes to; both
//                 are stopped after the row.
//   contention rows: many waiters per key (each client keeps to its key), measured:
//                 acquisitions/s against the ideal, every hand-off gap (the
//                 witness logs them), wait timeouts, and the commands nginx sent
//                 the lock Redis per acquisition (MONITOR), for resty.dlock and a
//                 plain polling lock (/crit-poll) in the same run; and waiters
//                 that give up (client aborts, short waits, a worker killed),
//                 after which nothing may be left in the lock Redis (no lock key,
//                 no wake-up subscription).
// Writes bench/results/torture*.{md,json}; exits 1 when a row where the design
// promises exclusion failed its promise (or the harness broke).
"use strict";
const { spawn, spawnSync } = require("node:child_process");
const crypto = require("node:crypto");
const fs = require("node:fs");
const http = require("node:http");
const net = require("node:net");
const os = require("node:os");
const path = require("node:path");
const { GUARDS, VIAS, SCENARIOS } = require("./torture-scenarios");
const { Monitor, handoffStats, round2 } = require("./monitor");

// ---------------------------------------------------------------- arguments
const FLAGS = new Set(["short", "gateway", "topologies", "contention", "gateway-log"]);
function parseArgs(argv) {
  const o = {};
  for (let i = 0; i < argv.length; i++) {
    const a = argv[i];
    if (!a.startsWith("--")) throw new Error("unknown argument " + a);
    if (FLAGS.has(a.slice(2))) o[a.slice(2)] = true;
    else o[a.slice(2)] = argv[++i];
  }
  for (const k of ["prefix", "pids", "lock-port", "lock-pid", "witness-port", "http", "master", "nginx", "out",
    "backend-port"]) {
    if (o[k] === undefined) throw new Error("missing --" + k + " (run bench/torture, not this script)");
  }
  return o;
}
const opt = parseArgs(process.argv.slice(2));
const SHORT = !!opt.short;
const GATEWAY_LOG = !!opt["gateway-log"];
const DIST = opt.dist || null;
const PREFIX = opt.prefix;
const LOCK_PORT = Number(opt["lock-port"]);
const WITNESS_PORT = Number(opt["witness-port"]);
const BACKEND_PORT = Number(opt["backend-port"]);
const HTTP_PORTS = opt.http.split(",").map(Number);
// A row may restart an instance (quit-restart): its new master replaces the old one here.
const MASTERS = opt.master.split(",").map(Number);
const DEAD_PORT = opt["dead-port"] ? Number(opt["dead-port"]) : null;
const CLIENTS = 200;
const KEYS = ["k1", "k2", "k3", "k4", "k5"];
// nginx/torture.conf's /crit lock: its keys in Redis are this prefix and the key.
const LOCK_PREFIX = "torture:";
const DURATION = SHORT ? 3000 : 8000; // ms of load per crit row
const FAULT_AT = SHORT ? 1000 : 2000; // ms after the load starts (crit rows)
const REQUEST_TIMEOUT = 15000;
const LOCK = { ttl: 1000, wait: 3000, hold: 20, connect_timeout: 200, read_timeout: 300 };
// Gateway rows: after the load and the backend are done, the release queue gets
// RELEASE_GRACE ms; guard keys still in the lock Redis then are "left locked",
// and are watched for LEFT_WATCH ms more to tell how long they stay.
const RELEASE_GRACE = 1000;
const LEFT_WATCH = 3000;
const IDLE_CAP = 20000;

const sleep = (ms) => new Promise((r) => setTimeout(r, ms));
const log = (...a) => console.error("[torture]", ...a);
const randInt = ([lo, hi]) => lo + Math.floor(Math.random() * (hi - lo + 1));
const pick = (a) => a[Math.floor(Math.random() * a.length)];

// ---------------------------------------------------------------- a tiny RESP client
function encode(args) {
  let s = "*" + args.length + "\r\n";
  for (const a of args) {
    const b = Buffer.from(String(a));
    s += "$" + b.length + "\r\n" + b.toString("latin1") + "\r\n";
  }
  return Buffer.from(s, "latin1");
}

// Parse one reply at pos; returns [value, next] or undefined when incomplete.
function parseReply(buf, pos) {
  const eol = buf.indexOf("\r\n", pos, "latin1");
  if (eol < 0) return undefined;
  const t = String.fromCharCode(buf[pos]);
  const line = buf.toString("latin1", pos + 1, eol);
  const next = eol + 2;
  if (t === "+") return [line, next];
  if (t === "-") return [new RedisError(line), next];
  if (t === ":") return [Number(line), next];
  if (t === "$") {
    const n = Number(line);
    if (n < 0) return [null, next];
    if (buf.length < next + n + 2) return undefined;
    return [buf.toString("utf8", next, next + n), next + n + 2];
  }
  if (t === "*") {
    const n = Number(line);
    if (n < 0) return [null, next];
    const out = [];
    let p = next;
    for (let i = 0; i < n; i++) {
      const r = parseReply(buf, p);
      if (r === undefined) return undefined;
      out.push(r[0]);
      p = r[1];
    }
    return [out, p];
  }
  throw new Error("bad RESP type " + t);
}

class RedisError extends Error {}

/**
 * Local ports of the harness's own open connections to the lock Redis: a
 * MONITOR (the contention rows) counts what nginx sends, not these.
 */
const harnessLockPorts = new Set();

class Resp {
  static connect(port, timeoutMs = 2000) {
    return new Promise((resolve, reject) => {
      const sock = net.createConnection({ host: "127.0.0.1", port });
      const timer = setTimeout(() => { sock.destroy(); reject(new Error("connect timeout to " + port)); }, timeoutMs);
      sock.once("error", (e) => { clearTimeout(timer); reject(e); });
      sock.once("connect", () => {
        clearTimeout(timer);
        if (port === LOCK_PORT) {
          const lp = sock.localPort;
          harnessLockPorts.add(lp);
          sock.once("close", () => harnessLockPorts.delete(lp));
        }
        resolve(new Resp(sock));
      });
    });
  }
  constructor(sock) {
    this.sock = sock;
    this.buf = Buffer.alloc(0);
    this.waiting = [];
    sock.setNoDelay(true);
    sock.on("data", (d) => {
      this.buf = this.buf.length ? Buffer.concat([this.buf, d]) : d;
      let r;
      while (this.waiting.length && (r = parseReply(this.buf, 0)) !== undefined) {
        this.buf = this.buf.subarray(r[1]);
        const w = this.waiting.shift();
        if (r[0] instanceof RedisError) w.reject(r[0]); else w.resolve(r[0]);
      }
    });
    const fail = (e) => { for (const w of this.waiting.splice(0)) w.reject(e || new Error("redis connection closed")); };
    sock.on("error", fail);
    sock.on("close", () => fail());
  }
  cmd(...args) {
    return new Promise((resolve, reject) => {
      this.waiting.push({ resolve, reject });
      this.sock.write(encode(args));
    });
  }
  close() { this.sock.destroy(); }
}

async function once(port, ...args) {
  const r = await Resp.connect(port);
  try { return await r.cmd(...args); } finally { r.close(); }
}

// ---------------------------------------------------------------- processes
/** Alive and not a zombie. */
function alive(pid) {
  try {
    const stat = fs.readFileSync(`/proc/${pid}/stat`, "latin1");
    const state = stat.slice(stat.lastIndexOf(")") + 2, stat.lastIndexOf(")") + 3);
    return state !== "Z" && state !== "X";
  } catch (e) {
    return false;
  }
}

async function waitDead(pid, ms = 5000) {
  const end = Date.now() + ms;
  while (alive(pid)) {
    if (Date.now() > end) throw new Error(`pid ${pid} still alive after ${ms} ms`);
    await sleep(5);
  }
}

function portOpen(port) {
  return new Promise((resolve) => {
    const s = net.createConnection({ host: "127.0.0.1", port });
    s.once("connect", () => { s.destroy(); resolve(true); });
    s.once("error", () => resolve(false));
  });
}

async function waitPort(port, ms = 10000) {
  const end = Date.now() + ms;
  while (!(await portOpen(port))) {
    if (Date.now() > end) throw new Error(`nothing listens on 127.0.0.1:${port} after ${ms} ms`);
    await sleep(10);
  }
}

/** The pids file is what bench/torture stops on exit: add what we start, drop what is dead for sure. */
function addPid(pid) { fs.appendFileSync(opt.pids, pid + "\n"); }
function dropPid(pid) {
  const kept = fs.readFileSync(opt.pids, "latin1").split("\n").filter((l) => l !== "" && Number(l) !== pid);
  fs.writeFileSync(opt.pids, kept.map((l) => l + "\n").join(""));
}

function workersOf(master) {
  const r = spawnSync("pgrep", ["-P", String(master)], { encoding: "latin1" });
  return r.stdout.split("\n").filter(Boolean).map(Number).filter(alive);
}

async function waitWorkers(master, n = 2, ms = 15000) {
  const end = Date.now() + ms;
  for (;;) {
    const w = workersOf(master);
    if (w.length === n) return w;
    if (Date.now() > end) throw new Error(`nginx master ${master} has ${w.length} workers, expected ${n}`);
    await sleep(20);
  }
}

// Processes a fault has stopped: always continued, whatever happens.
const stopped = new Set();
function contAll() {
  for (const pid of stopped) { try { process.kill(pid, "SIGCONT"); } catch (e) { /* gone */ } }
  stopped.clear();
}
process.on("exit", contAll);
for (const sig of ["SIGINT", "SIGTERM"]) process.on(sig, () => { contAll(); process.exit(130); });

// ---------------------------------------------------------------- the lock Redis
const AOF_DIR = path.join(PREFIX, "aof");
const lockRedis = { pid: Number(opt["lock-pid"]), mode: "plain", starts: 1 };

function lockArgs(mode) {
  const a = ["--port", String(LOCK_PORT), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
    "--dir", PREFIX, "--logfile", path.join(PREFIX, "logs", `redis-${LOCK_PORT}.log`)];
  if (mode === "aof") a.push("--appendonly", "yes", "--appendfsync", "always", "--dir", AOF_DIR);
  return a;
}

async function startLock(mode) {
  fs.mkdirSync(AOF_DIR, { recursive: true });
  const child = spawn("redis-server", lockArgs(mode), { stdio: "ignore" });
  addPid(child.pid);
  child.on("error", (e) => log("redis-server:", e.message));
  lockRedis.pid = child.pid;
  lockRedis.mode = mode;
  lockRedis.starts++;
  const t = Date.now();
  await waitPort(LOCK_PORT);
  // AOF loading answers -LOADING until done: wait for a real reply.
  for (;;) {
    try { await once(LOCK_PORT, "PING"); break; } catch (e) { if (Date.now() - t > 10000) throw e; await sleep(10); }
  }
  return Date.now() - t;
}

async function killLock(sig) {
  const pid = lockRedis.pid;
  process.kill(pid, sig);
  await waitDead(pid);
  dropPid(pid);
}

// ---------------------------------------------------------------- where the crit load goes
/**
 * The nginx pair a crit row loads, with its keys, and how to empty its lock
 * store: the two nginx of bench/torture and the lock Redis, or (for a topology
 * row) the pair started for that row's topology.
 */
const BASE = {
  name: "lock Redis", ports: HTTP_PORTS, masters: MASTERS, dirs: ["n1", "n2", "backend"], keys: KEYS, topo: null,
  flush: () => once(LOCK_PORT, "FLUSHALL"),
};
let target = BASE;

// ---------------------------------------------------------------- crit load
const agent = new http.Agent({ keepAlive: true, maxSockets: 200 });

function crit(port, key) {
  return new Promise((resolve, reject) => {
    const req = http.get({ host: "127.0.0.1", port, path: "/crit?key=" + key, agent }, (res) => {
      let body = "";
      res.setEncoding("utf8");
      res.on("data", (c) => (body += c));
      res.on("end", () => resolve({ status: res.statusCode, body: body.trim() }));
      res.on("error", reject);
    });
    req.setTimeout(REQUEST_TIMEOUT, () => req.destroy(new Error("client timeout")));
    req.on("error", reject);
  });
}

function newCounts() {
  return { ok: 0, busy: 0, timeout: 0, err: 0, werr: 0, http: 0, other: 0, errMsgs: {}, errRaw: {}, httpMsgs: {}, werrMsgs: {}, okMs: [], okAt: [] };
}

function bump(map, msg, raw) {
  // Group messages that differ only in numbers (ports, ms); raw keeps the first of each group whole.
  const k = msg.replace(/\d+/g, "N").slice(0, 160);
  map[k] = (map[k] || 0) + 1;
  if (raw && !(k in raw)) raw[k] = msg;
}

/** 200 clients, split over both nginx of the target, until stop() says so. */
function startLoad(counts) {
  let stopping = false;
  const { ports, keys } = target;
  const one = async (i) => {
    const port = ports[i % ports.length];
    while (!stopping) {
      const key = keys[Math.floor(Math.random() * keys.length)];
      try {
        const t = process.hrtime.bigint();
        const { status, body } = await crit(port, key);
        if (status !== 200) { counts.http++; bump(counts.httpMsgs, "HTTP " + status); }
        else if (body === "ok") { counts.ok++; counts.okMs.push(Number(process.hrtime.bigint() - t) / 1e6); counts.okAt.push(Date.now()); }
        else if (body === "busy") counts.busy++;
        else if (body === "timeout") counts.timeout++;
        else if (body.startsWith("err ")) { counts.err++; bump(counts.errMsgs, body.slice(4), counts.errRaw); }
        else if (body.startsWith("werr ")) { counts.werr++; bump(counts.werrMsgs, body.slice(5)); }
        else { counts.other++; bump(counts.httpMsgs, "body " + body.slice(0, 60)); }
      } catch (e) {
        counts.http++;
        bump(counts.httpMsgs, e.code || e.message);
        await sleep(10);
      }
    }
  };
  const all = Promise.all(Array.from({ length: CLIENTS }, (_, i) => one(i)));
  return () => { stopping = true; return all; };
}

// ---------------------------------------------------------------- gateway load
/** The raw keys (the guards' $arg_key) a gateway row uses for guard g. */
function gwKeys(row, g) {
  return Array.from({ length: row.load.keys }, (_, i) => `${row.id}-${g}-k${i + 1}`);
}

/**
 * One request; resolves { status, body } or { aborted } (the client destroyed
 * the socket at abortAt ms) or { error }. Never rejects.
 */
function request(port, p, abortAt) {
  return new Promise((resolve) => {
    let done = false;
    let timer = null;
    const finish = (r) => {
      if (done) return;
      done = true;
      if (timer) clearTimeout(timer);
      resolve(r);
    };
    const req = http.get({ host: "127.0.0.1", port, path: p, agent }, (res) => {
      let body = "";
      res.setEncoding("utf8");
      res.on("data", (c) => (body += c));
      res.on("end", () => finish({ status: res.statusCode, body: body.trim() }));
      res.on("error", (e) => finish({ error: e.code || e.message }));
    });
    req.setTimeout(REQUEST_TIMEOUT, () => req.destroy(new Error("client timeout")));
    req.on("error", (e) => finish({ error: e.code || e.message }));
    if (abortAt !== null) {
      timer = setTimeout(() => { finish({ aborted: true }); req.destroy(); }, abortAt);
    }
  });
}

function newGwCounts(row) {
  const c = {};
  for (const g of row.load.guards) c[g] = { requests: 0, status: {}, aborted: 0, failover: 0, failed: 0, failures: {} };
  return c;
}

/** row.load.clients clients over both nginx, on the row's guards and keys, until stop(). */
function startGatewayLoad(row, counts) {
  const L = row.load;
  const keys = {};
  for (const g of L.guards) keys[g] = gwKeys(row, g);
  let stopping = false;
  const one = async (i) => {
    const home = i % HTTP_PORTS.length;
    while (!stopping) {
      const g = pick(L.guards);
      const c = counts[g];
      const fail = L.fail > 0 && Math.random() < L.fail;
      const abortAt = L.abort && Math.random() < L.abort.p ? randInt(L.abort.atMs) : null;
      const p = `/gw/${g}/${L.via}?g=${g}&key=${pick(keys[g])}&ms=${randInt(L.backendMs)}${fail ? "&fail=1" : ""}`;
      c.requests++;
      let r = await request(HTTP_PORTS[home], p, abortAt);
      if (r.error === "ECONNREFUSED") {
        // The instance is down (quit-restart): the other one, as a load balancer would.
        c.failover++;
        r = await request(HTTP_PORTS[(home + 1) % HTTP_PORTS.length], p, abortAt);
      }
      if (r.aborted) c.aborted++;
      else if (r.status !== undefined) {
        c.status[r.status] = (c.status[r.status] || 0) + 1;
        if (r.status === 409 || r.status === 429 || r.status === 503) await sleep(randInt(L.refusalPauseMs));
      } else {
        c.failed++;
        bump(c.failures, r.error);
        await sleep(50);
      }
    }
  };
  const all = Promise.all(Array.from({ length: L.clients }, (_, i) => one(i)));
  return () => { stopping = true; return all; };
}

function httpText(port, p, ms = 2000) {
  return new Promise((resolve, reject) => {
    const req = http.get({ host: "127.0.0.1", port, path: p, agent: false }, (res) => {
      let body = "";
      res.setEncoding("utf8");
      res.on("data", (d) => (body += d));
      res.on("end", () => resolve({ status: res.statusCode, body }));
      res.on("error", reject);
    });
    req.setTimeout(ms, () => req.destroy(new Error("timeout")));
    req.on("error", reject);
  });
}

/** The running nginx must have the guards bench/torture-scenarios.js declares. */
async function checkGuards() {
  for (const port of HTTP_PORTS) {
    const { body } = await httpText(port, "/gw/guards");
    const seen = {};
    for (const line of body.trim().split("\n")) {
      const [id, name, mode, permits, ttl] = line.split(" ");
      seen[id] = { name, mode, permits: Number(permits), ttl: Number(ttl) };
    }
    for (const [id, g] of Object.entries(GUARDS)) {
      if (g.name === null) continue;
      const s = seen[id];
      if (!s || s.name !== g.name || s.mode !== g.mode || s.permits !== g.permits || s.ttl !== g.ttl) {
        throw new Error(`guard ${id} on port ${port} is ${JSON.stringify(s)}, bench/torture-scenarios.js declares ${JSON.stringify(g)}`);
      }
    }
  }
}

// ---------------------------------------------------------------- witness
async function witnessReset() {
  await once(WITNESS_PORT, "FLUSHALL");
}

async function collect() {
  const w = await Resp.connect(WITNESS_PORT);
  try {
    const out = { acquisitions: 0, overlaps: 0, staleRefused: 0, maxGapUs: -1, maxGapKey: null, maxGapFromUs: null, perKey: {}, leftInside: [] };
    for (const k of target.keys) {
      const acq = Number(await w.cmd("GET", "acq:" + k)) || 0;
      const ov = Number(await w.cmd("GET", "overlaps:" + k)) || 0;
      const g = await w.cmd("GET", "maxgap:" + k);
      const at = await w.cmd("GET", "maxgapat:" + k);
      const inside = await w.cmd("SMEMBERS", "inside:" + k);
      out.perKey[k] = { acquisitions: acq, overlaps: ov, maxGapMs: g === null ? null : Number(g) / 1000 };
      out.acquisitions += acq;
      out.overlaps += ov;
      out.staleRefused += Number(await w.cmd("GET", "stale:" + k)) || 0;
      if (g !== null && Number(g) > out.maxGapUs) { out.maxGapUs = Number(g); out.maxGapKey = k; out.maxGapFromUs = Number(at); }
      for (const m of inside) out.leftInside.push(k + " " + m);
    }
    out.overlapLog = await w.cmd("LRANGE", "overlaplog", 0, 19);
    out.releaseNotOwner = Number(await w.cmd("GET", "release:not_owner")) || 0;
    out.releaseError = Number(await w.cmd("GET", "release:error")) || 0;
    // The longest time with no acquisition of any key (nginx/torture.conf's ENTER).
    const st = await w.cmd("GET", "maxstall");
    out.maxStallUs = st === null ? -1 : Number(st);
    out.maxStallFromUs = st === null ? null : Number(await w.cmd("GET", "maxstallat"));
    return out;
  } finally {
    w.close();
  }
}

const hash = (flat) => {
  const o = {};
  for (let i = 0; i + 1 < flat.length; i += 2) o[flat[i]] = Number(flat[i + 1]);
  return o;
};

/** What the backend told the witness during a gateway row (nginx/torture-backend.conf). */
async function collectGateway(row) {
  const w = await Resp.connect(WITNESS_PORT);
  try {
    const reached = hash(await w.cmd("HGETALL", "gw:reached"));
    const overlaps = hash(await w.cmd("HGETALL", "gw:overlaps"));
    const maxIn = hash(await w.cmd("HGETALL", "gw:maxin"));
    const perGuard = {};
    for (const g of row.load.guards) {
      const byEndpoint = {};
      let n = 0;
      for (const [k, v] of Object.entries(reached)) {
        const [gg, ep] = k.split("|");
        if (gg === g) { byEndpoint[ep] = v; n += v; }
      }
      perGuard[g] = { promise: GUARDS[g].promise, reached: n, byEndpoint, overlaps: overlaps[g] || 0, maxInFlight: maxIn[g] || 0 };
    }
    const leftInside = [];
    for (const k of await w.cmd("KEYS", "gw:inside:*")) {
      for (const m of await w.cmd("SMEMBERS", k)) leftInside.push(k.slice("gw:inside:".length) + " " + m);
    }
    return {
      perGuard,
      reached: Object.values(perGuard).reduce((a, p) => a + p.reached, 0),
      overlaps: Object.values(perGuard).reduce((a, p) => a + p.overlaps, 0),
      overlapLog: await w.cmd("LRANGE", "gw:overlaplog", 0, 19),
      inflight: Number(await w.cmd("GET", "gw:inflight")) || 0,
      leftInside,
    };
  } finally {
    w.close();
  }
}

async function backendStats(reset) {
  const { body } = await httpText(BACKEND_PORT, "/wstats" + (reset ? "?reset=1" : ""));
  const m = /werr (\d+) enter (\d+)/.exec(body);
  if (!m) throw new Error("backend /wstats answered " + JSON.stringify(body));
  return { witnessErrors: Number(m[1]), entered: Number(m[2]) };
}

/** A worker of nginx `master` that is inside a critical section right now (the witness says so). */
async function pickHolder(master) {
  const workers = workersOf(master);
  const w = await Resp.connect(WITNESS_PORT);
  try {
    const end = Date.now() + 1000;
    while (Date.now() < end) {
      for (const k of target.keys) {
        for (const m of await w.cmd("SMEMBERS", "inside:" + k)) {
          const pid = Number(m.split(":")[0]);
          if (workers.includes(pid)) return { pid, key: k, holding: true };
        }
      }
      await sleep(1);
    }
  } finally {
    w.close();
  }
  return { pid: workers[0], key: null, holding: false };
}

/** After SIGKILL of a worker: its critical sections ended with it; take it out of the witness. */
async function forgetHolder(pid) {
  const w = await Resp.connect(WITNESS_PORT);
  let n = 0;
  try {
    for (const k of target.keys) {
      for (const m of await w.cmd("SMEMBERS", "inside:" + k)) {
        if (m.startsWith(pid + ":")) n += await w.cmd("SREM", "inside:" + k, m);
      }
    }
  } finally {
    w.close();
  }
  return n;
}

// ---------------------------------------------------------------- guard keys in the lock Redis
/** Lock Redis key of a guard's raw key (resty.dlock.gateway: prefix dlock:gw:<name>:, SHA1 hex of the key). */
const lockKeyOf = (g, raw) => `dlock:gw:${GUARDS[g].name}:` + crypto.createHash("sha1").update(raw).digest("hex");

/**
 * Every gateway guard key in the lock Redis that still holds something: a lock
 * (string) or live permits (zset members whose expiry is still ahead).
 * [{ rkey, guard, key, type, permits, pttl }]
 */
async function guardKeysNow(names) {
  const r = await Resp.connect(LOCK_PORT);
  try {
    const [sec, usec] = await r.cmd("TIME");
    const nowMs = Number(sec) * 1000 + Math.floor(Number(usec) / 1000);
    const out = [];
    for (const rkey of await r.cmd("KEYS", "dlock:gw:*")) {
      const type = await r.cmd("TYPE", rkey);
      const pttl = await r.cmd("PTTL", rkey);
      let permits = 1;
      if (type === "zset") permits = await r.cmd("ZCOUNT", rkey, String(nowMs), "+inf");
      else if (type === "none") continue; // expired between KEYS and TYPE
      if (permits === 0) continue; // only expired permits left: the key is about to go
      const known = names[rkey] || { guard: rkey.split(":")[2], key: "?" };
      out.push({ rkey, guard: known.guard, key: known.key, type, permits, pttl });
    }
    return out;
  } finally {
    r.close();
  }
}

/** As an operator's leaked lease would look: a lock of guard g, or one permit, that expires in ms. */
async function plantLock(g, raw, ms) {
  const rkey = lockKeyOf(g, raw);
  if (GUARDS[g].mode === "concurrency") {
    const [sec] = await once(LOCK_PORT, "TIME");
    const until = Number(sec) * 1000 + ms + 1000;
    await once(LOCK_PORT, "ZADD", rkey, String(until), "planted");
    await once(LOCK_PORT, "PEXPIREAT", rkey, String(until));
  } else {
    await once(LOCK_PORT, "SET", rkey, "planted", "PX", String(ms));
  }
  return rkey;
}

/**
 * RELEASE_GRACE ms after idleAt: what is left; then watch it for LEFT_WATCH ms.
 * Each left key gets heldMs = how long after idleAt it was last seen (null:
 * still there when the watch ended).
 */
async function keysLeft(row, idleAt) {
  const names = {};
  for (const g of row.load.guards) {
    if (GUARDS[g].name === null) continue;
    for (const k of gwKeys(row, g)) names[lockKeyOf(g, k)] = { guard: g, key: k };
  }
  for (const g of (row.control && row.control.plantLocks) || []) names[lockKeyOf(g, `${row.id}-planted`)] = { guard: g, key: `${row.id}-planted` };
  const wait = idleAt + RELEASE_GRACE - Date.now();
  if (wait > 0) await sleep(wait);
  const first = await guardKeysNow(names);
  const checkMs = Date.now() - idleAt;
  const seen = new Map(first.map((k) => [k.rkey, { ...k, heldMs: null }]));
  const watchEnd = Date.now() + LEFT_WATCH;
  let live = first;
  while (live.length && Date.now() < watchEnd) {
    await sleep(100);
    const now = await guardKeysNow(names);
    const still = new Set(now.map((k) => k.rkey));
    for (const k of live) if (!still.has(k.rkey)) seen.get(k.rkey).heldMs = Date.now() - idleAt;
    live = now.filter((k) => seen.has(k.rkey));
  }
  const left = [...seen.values()];
  return {
    checkMs,
    watchMs: LEFT_WATCH,
    keys: left.length,
    permits: left.reduce((a, k) => a + k.permits, 0),
    stillHeld: left.filter((k) => k.heldMs === null).length,
    longestMs: left.length ? Math.max(...left.map((k) => (k.heldMs === null ? checkMs + LEFT_WATCH : k.heldMs))) : 0,
    list: left,
  };
}

// ---------------------------------------------------------------- idle
/**
 * stub_status "Writing" of an nginx: requests in progress, the status request
 * included; null when it does not answer. The counters live in shared memory and
 * a SIGKILLed worker never takes its requests off them (row 5), so only the
 * difference to a baseline taken while nothing runs means anything.
 */
async function frontWriting(port) {
  try {
    const { body } = await httpText(port, "/gw/status", 1000);
    const m = /Writing: (\d+)/.exec(body);
    return m ? Number(m[1]) : null;
  } catch (e) {
    return null;
  }
}

/**
 * After a gateway row's load: until the backend has nothing in flight (the
 * witness), neither nginx is working on more requests than at the baseline
 * (stub_status, taken before the load), and the guards' longest wait has passed
 * since the load ended (a request whose client went away may still be waiting
 * for its key in access()). Returns { idleAt, idle }.
 */
async function waitIdle(row, loadEnd, baseline) {
  const floor = loadEnd + Math.max(...row.load.guards.map((g) => GUARDS[g].wait));
  const end = Date.now() + IDLE_CAP;
  for (;;) {
    const inflight = Number(await once(WITNESS_PORT, "GET", "gw:inflight")) || 0;
    let busy = 0;
    for (let i = 0; i < HTTP_PORTS.length; i++) {
      const w = await frontWriting(HTTP_PORTS[i]);
      busy += w === null ? 1 : Math.max(0, w - baseline[i]);
    }
    if (inflight <= 0 && busy <= 0 && Date.now() >= floor) return { idleAt: Date.now(), idle: true, afterLoadMs: Date.now() - loadEnd };
    if (Date.now() > end) return { idleAt: Date.now(), idle: false, inflight, busy };
    await sleep(50);
  }
}

// ---------------------------------------------------------------- error logs
const LOG_DIRS = ["n1", "n2", "backend"];
function logSize(dir) {
  try { return fs.statSync(path.join(PREFIX, dir, "logs", "error.log")).size; } catch (e) { return 0; }
}
function logSlice(dir, from) {
  try {
    const buf = fs.readFileSync(path.join(PREFIX, dir, "logs", "error.log"));
    return buf.subarray(from).toString("utf8");
  } catch (e) { return ""; }
}
// The dead_upstream row's primary refuses every connection: nginx logs that, as it should.
const EXPECTED = /connect\(\) failed \(111: Connection refused\) while connecting to upstream|no live upstreams while connecting to upstream/;
function logStats(text) {
  const lines = text.split("\n");
  const bad = lines.filter((l) => /\[(error|crit|alert|emerg)\]/.test(l) && !EXPECTED.test(l));
  const samples = {};
  for (const l of bad) bump(samples, l.replace(/^.*?\[(error|crit|alert|emerg)\] \d+#\d+: (\*\d+ )?/, "[$1] ").replace(/, client: .*$/, ""));
  const warn = {};
  for (const l of lines.filter((x) => /\[warn\]/.test(x))) bump(warn, l.replace(/^.*?\[warn\] \d+#\d+: (\*\d+ )?/, "").replace(/, client: .*$/, ""));
  return {
    errors: bad.length,
    deadUpstream: lines.filter((l) => EXPECTED.test(l)).length,
    warnings: Object.entries(warn).sort((a, b) => b[1] - a[1]).slice(0, 5),
    cleanupRemoved: lines.filter((l) => l.includes("acquired by a request whose reply was lost")).length,
    cleanupGaveUp: lines.filter((l) => l.includes("giving up cleanup")).length,
    leaseLost: lines.filter((l) => l.includes("lost while its request is in flight")).length,
    samples: Object.entries(samples).sort((a, b) => b[1] - a[1]).slice(0, 5),
  };
}

// ---------------------------------------------------------------- Redis topologies
// What the topology rows lock on, started for the row (in PREFIX/<row id>-redis,
// every pid in the pids file, so bench/torture stops them whatever happens) and
// stopped after it; plus the pair of nginx from nginx/torture.conf pointed at it
// (PREFIX/<row id>-n1 and -n2). Each topology's up() answers a handle:
//   lua        the `redis` option of /crit's dlock.new, as a Lua table literal
//   fencing    /crit's `fencing` (Redlock refuses it)
//   nodes      the redis-servers holding data ({ port, pid }), for error counts and teardown
//   flush()    empty the lock store between warm-up and load
// Every process up() starts is in rowProcs, stopped after the row even when up() fails.

/** The redis-servers and sentinels started for the current topology row (stopped after it). */
const rowProcs = [];

/** Ports in use or spoken for (bench/torture's, and everything started here). */
const usedPorts = new Set([...HTTP_PORTS, LOCK_PORT, WITNESS_PORT, BACKEND_PORT, ...(DEAD_PORT ? [DEAD_PORT] : [])]);

/**
 * A free loopback port below the ephemeral range (as nginx/lib.sh free_port).
 * bus: a cluster node, whose bus listens on port + 10000: that one must be free
 * too, and stay below 32768 as well.
 */
async function pickPort(bus = false) {
  for (;;) {
    const p = 10000 + Math.floor(Math.random() * (bus ? 12000 : 22000));
    if (usedPorts.has(p) || (bus && usedPorts.has(p + 10000))) continue;
    if (await portOpen(p)) continue;
    if (bus && (await portOpen(p + 10000))) continue;
    usedPorts.add(p);
    if (bus) usedPorts.add(p + 10000);
    return p;
  }
}

/** Until the server on port answers PING (false when its process died first, or after ms). */
async function answers(port, pid, ms = 5000) {
  const end = Date.now() + ms;
  while (Date.now() < end) {
    if (!alive(pid)) return false;
    try { await once(port, "PING"); return true; } catch (e) { await sleep(20); }
  }
  return false;
}

/** Stop one process we started (continue it first, TERM, KILL after 5 s) and forget it. */
async function stopProc(pid) {
  if (alive(pid)) {
    try { process.kill(pid, "SIGCONT"); process.kill(pid, "SIGTERM"); } catch (e) { /* gone */ }
    try { await waitDead(pid, 5000); } catch (e) { try { process.kill(pid, "SIGKILL"); } catch (e2) { /* gone */ } await waitDead(pid, 2000).catch(() => {}); }
  }
  stopped.delete(pid);
  dropPid(pid);
}

/**
 * A redis-server in dir (extra(port): its arguments beyond the common ones), on
 * a fresh port; three tries on fresh ports. Returns { port, pid }.
 */
async function redisUp(dir, extra, { bus = false, sentinel = false } = {}) {
  for (let attempt = 1; attempt <= 3; attempt++) {
    const port = await pickPort(bus);
    let args;
    if (sentinel) {
      // A sentinel rewrites its config file: one file per sentinel.
      const conf = path.join(dir, `sentinel-${port}.conf`);
      fs.writeFileSync(conf, [`port ${port}`, "bind 127.0.0.1", `dir ${dir}`, `logfile ${path.join(dir, `sentinel-${port}.log`)}`, ...extra(port)].join("\n") + "\n");
      args = [conf, "--sentinel"];
    } else {
      // A config file (empty: the flags say it all), as in production, so the
      // CONFIG REWRITE a sentinel sends with a reconfiguration succeeds.
      const conf = path.join(dir, `redis-${port}.conf`);
      fs.writeFileSync(conf, "");
      args = [conf, "--port", String(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
        "--dir", dir, "--logfile", path.join(dir, `redis-${port}.log`), ...extra(port)];
    }
    const child = spawn("redis-server", args, { stdio: "ignore" });
    child.on("error", (e) => log("redis-server:", e.message));
    child.unref();
    addPid(child.pid);
    if (await answers(port, child.pid)) {
      rowProcs.push({ port, pid: child.pid });
      return { port, pid: child.pid };
    }
    try { process.kill(child.pid, "SIGKILL"); } catch (e) { /* gone */ }
    await waitDead(child.pid, 2000).catch(() => {});
    dropPid(child.pid);
    log(`${sentinel ? "sentinel" : "redis-server"} did not come up on ${port}, trying another port`);
  }
  throw new Error(`no ${sentinel ? "sentinel" : "redis-server"} came up in ${dir}`);
}

/** Poll check() until it answers truthy; throw what after ms. */
async function until(check, ms, what, every = 50) {
  const end = Date.now() + ms;
  let last;
  for (;;) {
    try { last = await check(); if (last) return last; } catch (e) { last = e.message; }
    if (Date.now() > end) throw new Error(`${what}: not after ${ms} ms (last: ${JSON.stringify(last)})`);
    await sleep(every);
  }
}

/** A JS value as a Lua table constructor (strings, numbers, booleans, arrays, plain objects). */
function luaValue(v) {
  if (Array.isArray(v)) return "{ " + v.map(luaValue).join(", ") + " }";
  if (v !== null && typeof v === "object") return "{ " + Object.entries(v).map(([k, x]) => `${k} = ${luaValue(x)}`).join(", ") + " }";
  if (typeof v === "string") return JSON.stringify(v);
  return String(v);
}

const addr = (port) => "127.0.0.1:" + port;
const lineOf = (info, name) => { const m = new RegExp("^" + name + ":(.*)$", "m").exec(info); return m ? m[1].trim() : null; };

/**
 * Redis error replies by kind (INFO errorstats: MOVED, ASK, TRYAGAIN, READONLY...)
 * summed over the live data nodes since resetStats(), and the commands that got
 * them (INFO commandstats: rejected_calls + failed_calls), as "KIND ×n".
 */
async function errorStatsOf(nodes) {
  const kinds = {}, commands = {};
  for (const n of nodes) {
    if (!alive(n.pid) || stopped.has(n.pid)) continue;
    let info;
    try { info = await once(n.port, "INFO", "errorstats") + await once(n.port, "INFO", "commandstats"); } catch (e) { continue; }
    for (const m of info.matchAll(/^errorstat_([A-Z]+):count=(\d+)/gm)) kinds[m[1]] = (kinds[m[1]] || 0) + Number(m[2]);
    for (const m of info.matchAll(/^cmdstat_([^:]+):.*rejected_calls=(\d+),failed_calls=(\d+)/gm)) {
      const c = Number(m[2]) + Number(m[3]);
      if (c) commands[m[1]] = (commands[m[1]] || 0) + c;
    }
  }
  return { kinds, commands };
}

async function resetStatsOf(nodes) {
  for (const n of nodes) if (alive(n.pid)) await once(n.port, "CONFIG", "RESETSTAT").catch(() => {});
}

/** Parse CLUSTER NODES: [{ id, port, flags, master (id or "-"), slots: [[lo, hi]] }]. */
function parseClusterNodes(text) {
  return text.trim().split("\n").map((line) => {
    const f = line.split(" ");
    const slots = [];
    for (const r of f.slice(8)) {
      if (r.startsWith("[")) continue; // a slot being migrated or imported
      const [lo, hi] = r.split("-").map(Number);
      slots.push([lo, hi ?? lo]);
    }
    return { id: f[0], port: Number(f[1].split("@")[0].split(":")[1]), flags: f[2].split(","), master: f[3], slots };
  });
}

const TOPOLOGIES = {
  // A master, its replicas (diskless sync at once), and sentinels that fail over
  // after down-after-milliseconds; /crit finds the master through the sentinels.
  async sentinel(t, dir) {
    const repl = ["--repl-diskless-sync-delay", "0"];
    const master = await redisUp(dir, () => repl);
    const replicas = [];
    for (let i = 0; i < t.replicas; i++) replicas.push(await redisUp(dir, () => ["--replicaof", "127.0.0.1", String(master.port), ...repl]));
    await until(async () => (((await once(master.port, "INFO", "replication")).match(/state=online/g)) || []).length === t.replicas,
      10000, `${t.replicas} replica(s) online on the master`);
    const sentinels = [];
    for (let i = 0; i < t.sentinels; i++) {
      sentinels.push(await redisUp(dir, () => [`sentinel monitor ${t.master} 127.0.0.1 ${master.port} ${t.quorum}`,
        `sentinel down-after-milliseconds ${t.master} ${t.downAfterMs}`, `sentinel failover-timeout ${t.master} ${t.failoverTimeoutMs}`], { sentinel: true }));
    }
    // Each sentinel knows the replicas and the other sentinels after a few hellos.
    await until(async () => {
      for (const s of sentinels) {
        if (!(await once(s.port, "INFO", "sentinel")).includes(`slaves=${t.replicas},sentinels=${t.sentinels}`)) return false;
      }
      return true;
    }, 15000, `every sentinel sees ${t.replicas} replica(s) and ${t.sentinels} sentinels`, 100);
    const nodes = [master, ...replicas];
    const topo = {
      kind: "sentinel", name: t.master, nodes, sentinels,
      lua: luaValue({ sentinel: { master: t.master, nodes: sentinels.map((s) => addr(s.port)) }, ...t.redis }),
      fencing: t.fencing !== false,
      /** The master the sentinels name now (asked of the first one that answers). */
      async masterPort() {
        for (const s of sentinels) {
          try { return Number((await once(s.port, "SENTINEL", "get-master-addr-by-name", t.master))[1]); } catch (e) { /* next */ }
        }
        throw new Error("no sentinel answered");
      },
      node(port) { return nodes.find((n) => n.port === port); },
      async flush() { await once(await topo.masterPort(), "FLUSHALL"); },
      resetStats: () => resetStatsOf(nodes),
      errorStats: () => errorStatsOf(nodes),
      describe: () => `master ${addr(master.port)}, replicas ${replicas.map((r) => addr(r.port)).join(", ")}, sentinels ${sentinels.map((s) => addr(s.port)).join(", ")} (quorum ${t.quorum}, down-after ${t.downAfterMs} ms, failover-timeout ${t.failoverTimeoutMs} ms)`,
    };
    return topo;
  },

  // redis-cli --cluster create: masters and their replicas; cluster-node-timeout
  // decides when a dead master's replica takes over. /crit gets `seeds` of the
  // nodes as its seed list; the load keys must land on at least 2 masters.
  async cluster(t, dir, keys) {
    const n = t.masters * (1 + t.replicasEach);
    const nodes = [];
    for (let i = 0; i < n; i++) {
      nodes.push(await redisUp(dir, (port) => ["--cluster-enabled", "yes", "--cluster-config-file", `nodes-${port}.conf`,
        "--cluster-node-timeout", String(t.nodeTimeoutMs), "--repl-diskless-sync-delay", "0"], { bus: true }));
    }
    const created = spawnSync("redis-cli", ["--cluster", "create", ...nodes.map((x) => addr(x.port)),
      "--cluster-replicas", String(t.replicasEach), "--cluster-yes"], { encoding: "utf8", timeout: 30000 });
    if (created.status !== 0) throw new Error("redis-cli --cluster create failed: " + (created.stdout + created.stderr).trim().split("\n").slice(-5).join(" | "));
    await until(async () => {
      for (const x of nodes) {
        const info = await once(x.port, "CLUSTER", "INFO");
        if (lineOf(info, "cluster_state") !== "ok" || lineOf(info, "cluster_known_nodes") !== String(n) || lineOf(info, "cluster_slots_ok") !== "16384") return false;
      }
      const map = parseClusterNodes(await once(nodes[0].port, "CLUSTER", "NODES"));
      for (const r of map.filter((x) => x.flags.includes("slave"))) {
        if (lineOf(await once(r.port, "INFO", "replication"), "master_link_status") !== "up") return false;
      }
      return map.filter((x) => x.flags.includes("master")).length === t.masters;
    }, 15000, `cluster of ${n} nodes ok, every replica linked`, 100);
    const topo = {
      kind: "cluster", nodes,
      lua: luaValue({ cluster: { nodes: nodes.slice(0, t.seeds).map((x) => addr(x.port)) }, ...t.redis }),
      fencing: t.fencing !== false,
      /** The cluster as a live node sees it now. */
      async map() {
        for (const x of nodes) {
          if (!alive(x.pid) || stopped.has(x.pid)) continue;
          try { return parseClusterNodes(await once(x.port, "CLUSTER", "NODES")); } catch (e) { /* next */ }
        }
        throw new Error("no cluster node answered");
      },
      async masters() { return (await topo.map()).filter((x) => x.flags.includes("master") && !x.flags.some((fl) => fl.startsWith("fail"))); },
      node(port) { return nodes.find((x) => x.port === port); },
      /** Load key → { slot, master (port) }. */
      async keyMap() {
        const masters = await topo.masters();
        const out = {};
        for (const k of keys) {
          const slot = await once(nodes[0].port, "CLUSTER", "KEYSLOT", LOCK_PREFIX + k);
          const m = masters.find((x) => x.slots.some(([lo, hi]) => slot >= lo && slot <= hi));
          out[k] = { slot, master: m ? m.port : null, masterId: m ? m.id : null };
        }
        return out;
      },
      async flush() { for (const m of await topo.masters()) await once(m.port, "FLUSHALL"); },
      resetStats: () => resetStatsOf(nodes),
      errorStats: () => errorStatsOf(nodes),
      describe: () => topo.layout,
    };
    const km = await topo.keyMap();
    const spread = new Set(Object.values(km).map((x) => x.master));
    const layout = (await topo.map()).filter((x) => x.flags.includes("master")).map((m) =>
      `${addr(m.port)} (slots ${m.slots.map(([lo, hi]) => lo + "-" + hi).join(",")}; keys ${keys.filter((k) => km[k].master === m.port).join(",") || "none"})`);
    topo.layout = `${t.masters} masters with ${t.replicasEach} replica(s) each, cluster-node-timeout ${t.nodeTimeoutMs} ms: ${layout.join(", ")}`;
    if (spread.size < 2) throw new Error(`the load keys all land on one master (${topo.layout}): use more keys`);
    return topo;
  },

  // Independent masters, nothing shared: a lock is a majority of them.
  async redlock(t, dir) {
    const nodes = [];
    for (let i = 0; i < t.masters; i++) nodes.push(await redisUp(dir, () => []));
    const topo = {
      kind: "redlock", nodes,
      lua: luaValue({ redlock: nodes.map((x) => addr(x.port)), ...t.redis }),
      fencing: t.fencing !== false,
      async flush() { for (const x of nodes) await once(x.port, "FLUSHALL"); },
      resetStats: () => resetStatsOf(nodes),
      errorStats: () => errorStatsOf(nodes),
      describe: () => `${t.masters} independent masters ${nodes.map((x) => addr(x.port)).join(", ")}`,
    };
    return topo;
  },
};

const TORTURE_CONF = path.join(__dirname, "..", "nginx", "torture.conf");
const LIB_SH = path.join(__dirname, "..", "nginx", "lib.sh");

/** nginx/lib.sh render_conf, so @USER@ and @LUA_MODULES@ come out as bench/torture renders them. */
function renderConf(tpl, prefix, out, vars) {
  const r = spawnSync("bash", ["-c", '. "$0"; render_conf "$@"', LIB_SH, tpl, prefix, out,
    ...Object.entries(vars).map(([k, v]) => `${k}=${v}`)], { encoding: "utf8", env: { ...process.env, DLOCK_NGINX: opt.nginx } });
  if (r.status !== 0) throw new Error("render_conf failed: " + r.stderr);
}

/** An nginx from nginx/torture.conf in dir whose /crit locks on topo; three tries on fresh ports. */
async function frontUp(dir, topo) {
  for (let attempt = 1; attempt <= 3; attempt++) {
    const port = await pickPort();
    const conf = path.join(dir, "nginx.conf");
    renderConf(TORTURE_CONF, dir, conf, {
      HTTP_PORT: port, REDIS_PORT: LOCK_PORT, WITNESS_PORT, BACKEND_PORT, DEAD_PORT: DEAD_PORT ?? 1,
      GATEWAY_LOG: "# (the topology rows use /crit only)", DIST: DIST || path.resolve(__dirname, "..", "dist"),
      LOCK_REDIS: topo.lua, FENCING: topo.fencing ? "true" : "false",
    });
    const errFd = fs.openSync(path.join(dir, "logs", "stderr.log"), "a");
    const child = spawn(opt.nginx, ["-p", dir, "-c", conf, "-g", "daemon off;"], { stdio: ["ignore", "ignore", errFd] });
    fs.closeSync(errFd);
    child.on("error", (e) => log("nginx:", e.message));
    child.unref();
    addPid(child.pid);
    const end = Date.now() + 10000;
    while (alive(child.pid) && Date.now() < end) {
      let pidFile = "";
      try { pidFile = fs.readFileSync(path.join(dir, "logs", "nginx.pid"), "latin1").trim(); } catch (e) { /* not yet */ }
      if (Number(pidFile) === child.pid && (await portOpen(port))) return { port, pid: child.pid };
      await sleep(20);
    }
    try { process.kill(child.pid, "SIGKILL"); } catch (e) { /* gone */ }
    await waitDead(child.pid, 2000).catch(() => {});
    dropPid(child.pid);
    log(`nginx ${dir} did not come up on ${port}:`, sh("tail", ["-n", "3", path.join(dir, "logs", "error.log"), path.join(dir, "logs", "stderr.log")]));
  }
  throw new Error(`no nginx came up in ${dir}`);
}

async function frontDown(pid) {
  const workers = workersOf(pid);
  await stopProc(pid);
  for (const w of workers) await waitDead(w, 5000).catch(() => { try { process.kill(w, "SIGKILL"); } catch (e) { /* gone */ } });
}

/**
 * After a failover began (f.at): when the sentinels named another master, and,
 * for a graceful one, what became of the old master (its replicas, its role)
 * until the load ends (f.deadline).
 */
async function watchSentinel(topo, old, f, killed) {
  const w = { from: old, to: null, announcedMs: null, oldReplicasAtAnnounce: null, oldAloneMs: null, demotedMs: null, newReplicaMs: null,
    perSentinelMs: topo.sentinels.map(() => null) };
  while (Date.now() < f.deadline) {
    const now = () => Date.now() - f.at;
    // Each sentinel on its own: the others learn the new configuration from the
    // one that did the failover (hello messages), and until then name the old master.
    for (let i = 0; i < topo.sentinels.length; i++) {
      if (w.perSentinelMs[i] !== null) continue;
      const a = await once(topo.sentinels[i].port, "SENTINEL", "get-master-addr-by-name", topo.name).catch(() => null);
      if (a && Number(a[1]) !== old) {
        w.perSentinelMs[i] = now();
        if (w.to === null) { w.to = Number(a[1]); w.announcedMs = now(); }
      }
    }
    if (w.to !== null) {
      if (w.newReplicaMs === null) {
        const ni = await once(w.to, "INFO", "replication").catch(() => "");
        if (Number(lineOf(ni, "connected_slaves")) > 0) w.newReplicaMs = now();
      }
      if (!killed && w.demotedMs === null) {
        const oi = await once(old, "INFO", "replication").catch(() => "");
        const n = Number(lineOf(oi, "connected_slaves"));
        if (w.oldReplicasAtAnnounce === null) w.oldReplicasAtAnnounce = n;
        if (lineOf(oi, "role") === "slave") w.demotedMs = now();
        else if (n === 0 && w.oldAloneMs === null) w.oldAloneMs = now();
      }
      if (w.newReplicaMs !== null && (killed || w.demotedMs !== null) && !w.perSentinelMs.includes(null)) break;
    }
    await sleep(w.to === null ? 20 : 50);
  }
  const bits = [w.to === null ? "the sentinels named no new master before the load ended"
    : `the sentinels named ${addr(w.to)} at +${w.announcedMs} ms`];
  if (w.to !== null) {
    bits.push("each sentinel named it at " + w.perSentinelMs.map((x) => (x === null ? "(not by the end of the load)" : `+${x}`)).join(", ") + " ms");
    bits.push(w.newReplicaMs === null ? "it had no replica by the end of the load" : `it had a replica at +${w.newReplicaMs} ms`);
  }
  if (!killed && w.to !== null) {
    bits.push(`the old master had ${w.oldReplicasAtAnnounce} replica(s) then` + (w.oldAloneMs === null ? "" : `, none from +${w.oldAloneMs} ms`));
    bits.push(w.demotedMs === null ? "it was still a writable master when the load ended" : `it became a replica at +${w.demotedMs} ms`);
  }
  w.text = bits.join("; ");
  return w;
}

/** Move slot from src to dst ({ id, port } masters) under load; holdMs in migration at least. */
async function migrateSlot(masters, slot, src, dst, holdMs) {
  const t0 = Date.now();
  await once(dst.port, "CLUSTER", "SETSLOT", slot, "IMPORTING", src.id);
  await once(src.port, "CLUSTER", "SETSLOT", slot, "MIGRATING", dst.id);
  let keys = 0, calls = 0;
  const moveAll = async () => {
    for (;;) {
      const batch = await once(src.port, "CLUSTER", "GETKEYSINSLOT", slot, 100);
      if (!batch.length) return;
      // MIGRATE copies each key with its value and its remaining ttl, then deletes it here, atomically.
      await once(src.port, "MIGRATE", "127.0.0.1", dst.port, "", 0, 5000, "KEYS", ...batch);
      keys += batch.length;
      calls++;
    }
  };
  // The keys still here: scripts that find one of their keys but not the other
  // get TRYAGAIN, commands on missing keys ASK for the target.
  await sleep(holdMs / 2);
  await moveAll();
  // Every key on the target: everything is ASKed there until the slot is handed over.
  await sleep(holdMs / 2);
  await moveAll();
  await once(dst.port, "CLUSTER", "SETSLOT", slot, "NODE", dst.id);
  await once(src.port, "CLUSTER", "SETSLOT", slot, "NODE", dst.id);
  for (const m of masters) {
    if (m.port !== src.port && m.port !== dst.port) await once(m.port, "CLUSTER", "SETSLOT", slot, "NODE", dst.id).catch(() => {});
  }
  return { slot, from: src.port, to: dst.port, keys, calls, ms: Date.now() - t0 };
}

/** A topology row: its topology and nginx pair up, the crit row on them, both down again. */
async function runTopologyRow(sc) {
  const t0 = Date.now();
  const keys = sc.load.keys || KEYS;
  const rdir = path.join(PREFIX, `${sc.id}-redis`);
  fs.mkdirSync(rdir, { recursive: true });
  const fronts = [];
  let topo = null;
  try {
    topo = await TOPOLOGIES[sc.topology.kind](sc.topology, rdir, keys);
    const upMs = Date.now() - t0;
    const dirs = ["n1", "n2"].map((n) => `${sc.id}-${n}`);
    for (const d of dirs) {
      fs.mkdirSync(path.join(PREFIX, d, "logs"), { recursive: true });
      fronts.push(await frontUp(path.join(PREFIX, d), topo));
    }
    target = { name: sc.topology.kind, ports: fronts.map((x) => x.port), masters: fronts.map((x) => x.pid), dirs, keys, topo, flush: () => topo.flush() };
    for (const m of target.masters) await waitWorkers(m);
    // Warm the pools (and the slot maps, the master found through the sentinels).
    await drainedLoad(1000);
    const row = await runCritRow(sc);
    row.group = "topology";
    row.topology = { ...sc.topology, started: topo.describe(), upMs, lua: topo.lua };
    row.wallMs = Date.now() - t0;
    row.note = noteOf(row);
    return row;
  } finally {
    target = BASE;
    for (const x of fronts) await frontDown(x.pid);
    // Sentinels first (the last started), so none fails over what is being stopped.
    for (const x of rowProcs.splice(0).reverse()) await stopProc(x.pid);
  }
}

// ---------------------------------------------------------------- faults
const ms = (a, b) => Math.round(b - a);
const confArgs = (instance) => {
  const dir = path.join(PREFIX, "n" + instance);
  return ["-p", dir, "-c", path.join(dir, "nginx.conf")];
};

/**
 * Each fault: run(f, p) injects it (p: the row's fault record) and fills
 * f.at (when it hit, ms since epoch) and f.detail; prepare(p) / after(p), when
 * present, run before the row's quiesce / after its collection and return true
 * when the pools need a warm-up load.
 */
const FAULTS = {
  "redis-sigstop": {
    async run(f, p) {
      process.kill(lockRedis.pid, "SIGSTOP");
      stopped.add(lockRedis.pid);
      f.at = Date.now();
      await sleep(p.ms);
      process.kill(lockRedis.pid, "SIGCONT");
      stopped.delete(lockRedis.pid);
      f.detail = `redis pid ${lockRedis.pid} stopped ${ms(f.at, Date.now())} ms`;
    },
  },
  "redis-restart": {
    async prepare(p) {
      if (p.persistence !== "aof") return false;
      await killLock("SIGTERM");
      await startLock("aof");
      return true; // pools point at the old process: warm up
    },
    async run(f, p) {
      const old = lockRedis.pid;
      f.at = Date.now();
      await killLock("SIGKILL");
      if (p.persistence === "aof") {
        const startMs = await startLock("aof");
        const keys = await once(LOCK_PORT, "KEYS", "torture:*");
        f.detail = `redis pid ${old} SIGKILLed, pid ${lockRedis.pid} (same AOF dir) serving again after ${ms(f.at, Date.now())} ms with ${keys.length} lock key(s) restored`;
      } else {
        const startMs = await startLock("plain");
        f.detail = `redis pid ${old} SIGKILLed, pid ${lockRedis.pid} serving again after ${ms(f.at, Date.now())} ms (start ${startMs} ms)`;
      }
    },
    async after(p) {
      if (p.persistence !== "aof") return false;
      await killLock("SIGTERM");
      await startLock("plain");
      return true;
    },
  },
  "worker-kill": {
    async run(f, p) {
      // instance null: either nginx, at random.
      const instance = p.instance ?? 1 + Math.floor(Math.random() * target.masters.length);
      const h = await pickHolder(target.masters[instance - 1]);
      // Marked dead first: the witness drops its entries at the next entry on
      // their key (crash recovery can free the key before forgetHolder runs).
      await once(WITNESS_PORT, "SADD", "deadpids", String(h.pid));
      process.kill(h.pid, "SIGKILL");
      f.at = Date.now();
      await waitDead(h.pid);
      await sleep(50); // a witness call it sent just before dying has landed by now
      const removed = await forgetHolder(h.pid);
      f.detail = `worker ${h.pid} of instance ${instance} killed ${h.holding ? "inside its critical section on " + h.key : "(no holder seen within 1 s: any worker)"}; ${removed} witness entr${removed === 1 ? "y" : "ies"} of it removed`;
      f.holding = h.holding;
    },
  },
  reload: {
    async run(f, p) {
      const before = workersOf(MASTERS[p.instance - 1]);
      const r = spawnSync(opt.nginx, [...confArgs(p.instance), "-s", "reload"], { encoding: "utf8" });
      f.at = Date.now();
      if (r.status !== 0) throw new Error("nginx -s reload failed: " + r.stderr);
      f.detail = `instance ${p.instance} reloaded (old workers ${before.join(", ")})`;
    },
  },
  "worker-sigstop": {
    async run(f, p) {
      const h = await pickHolder(target.masters[p.instance - 1]);
      process.kill(h.pid, "SIGSTOP");
      stopped.add(h.pid);
      f.at = Date.now();
      await sleep(p.ms);
      process.kill(h.pid, "SIGCONT");
      stopped.delete(h.pid);
      f.detail = `worker ${h.pid} of instance ${p.instance} stopped ${ms(f.at, Date.now())} ms ${h.holding ? "inside its critical section on " + h.key : "(no holder seen within 1 s: any worker)"}`;
      f.holding = h.holding;
    },
  },
  // What a deploy with `systemctl restart` does: a graceful stop (the old workers
  // finish their requests), then a fresh start on the same port and config.
  "quit-restart": {
    async run(f, p) {
      const i = p.instance - 1;
      const old = MASTERS[i];
      const workers = workersOf(old);
      const r = spawnSync(opt.nginx, [...confArgs(p.instance), "-s", "quit"], { encoding: "utf8" });
      f.at = Date.now();
      if (r.status !== 0) throw new Error("nginx -s quit failed: " + r.stderr);
      for (const w of workers) await waitDead(w, 30000);
      await waitDead(old, 5000);
      dropPid(old);
      const downMs = ms(f.at, Date.now());
      const dir = path.join(PREFIX, "n" + p.instance);
      const errFd = fs.openSync(path.join(dir, "logs", "stderr.log"), "a");
      const child = spawn(opt.nginx, [...confArgs(p.instance), "-g", "daemon off;"], { stdio: ["ignore", "ignore", errFd] });
      fs.closeSync(errFd);
      child.on("error", (e) => log("nginx:", e.message));
      child.unref();
      addPid(child.pid);
      MASTERS[i] = child.pid;
      const end = Date.now() + 10000;
      for (;;) {
        let pidFile = "";
        try { pidFile = fs.readFileSync(path.join(dir, "logs", "nginx.pid"), "latin1").trim(); } catch (e) { /* not yet */ }
        if (Number(pidFile) === child.pid && (await portOpen(HTTP_PORTS[i]))) break;
        if (!alive(child.pid) || Date.now() > end) throw new Error(`restarted nginx ${p.instance} (pid ${child.pid}) did not come up`);
        await sleep(20);
      }
      f.detail = `instance ${p.instance} (master ${old}) quit gracefully: its last worker left after ${downMs} ms; master ${child.pid} serving again after ${ms(f.at, Date.now())} ms`;
    },
  },
  // ---- the topology rows' faults (tg: the row's target; tg.topo its topology, tg.keys its load keys)
  // A graceful failover: the sentinels promote a replica and reconfigure the rest.
  "sentinel-failover": {
    async run(f, p, tg) {
      const topo = tg.topo;
      const old = await topo.masterPort();
      const ok = await once(topo.sentinels[0].port, "SENTINEL", "FAILOVER", topo.name);
      f.at = Date.now();
      if (ok !== "OK") throw new Error("SENTINEL FAILOVER answered " + JSON.stringify(ok));
      const w = await watchSentinel(topo, old, f, false);
      f.failover = w;
      f.detail = `SENTINEL FAILOVER: ${w.text}`;
    },
  },
  "sentinel-master-kill": {
    async run(f, p, tg) {
      const topo = tg.topo;
      const old = await topo.masterPort();
      const node = topo.node(old);
      process.kill(node.pid, "SIGKILL");
      f.at = Date.now();
      await waitDead(node.pid);
      const w = await watchSentinel(topo, old, f, true);
      f.failover = w;
      f.detail = `master ${addr(old)} SIGKILLed: ${w.text}`;
    },
  },
  // Slots of load keys move to another master while the load runs: IMPORTING on
  // the target, MIGRATING on the source, MIGRATE of the slot's keys, SETSLOT NODE.
  "cluster-migrate": {
    async run(f, p, tg) {
      const topo = tg.topo;
      const km = await topo.keyMap();
      const masters = await topo.masters();
      // One load key per master (distinct slots), as many as p.slots.
      const picks = [];
      for (const k of tg.keys) {
        const x = km[k];
        if (picks.some((q) => q.master === x.master || q.slot === x.slot)) continue;
        picks.push({ key: k, ...x });
        if (picks.length === p.slots) break;
      }
      f.at = Date.now();
      const moves = await Promise.all(picks.map((q) => {
        const i = masters.findIndex((m) => m.port === q.master);
        return migrateSlot(masters, q.slot, masters[i], masters[(i + 1) % masters.length], p.holdMs).then((r) => ({ key: q.key, ...r }));
      }));
      f.moves = moves;
      f.detail = moves.map((m) => `slot ${m.slot} (${m.key}) ${addr(m.from)} → ${addr(m.to)}: ${m.keys} key(s) in ${m.calls} MIGRATE call(s), ${m.ms} ms from IMPORTING to the last SETSLOT NODE`).join("; ");
    },
  },
  "cluster-master-kill": {
    async run(f, p, tg) {
      const topo = tg.topo;
      const km = await topo.keyMap();
      const per = {};
      for (const k of tg.keys) per[km[k].master] = [...(per[km[k].master] || []), k];
      // The master serving the most load keys.
      const [port, keys] = Object.entries(per).sort((a, b) => b[1].length - a[1].length)[0];
      const map = await topo.map();
      const victim = map.find((x) => x.port === Number(port));
      const replica = map.find((x) => x.master === victim.id);
      const node = topo.node(victim.port);
      process.kill(node.pid, "SIGKILL");
      f.at = Date.now();
      await waitDead(node.pid);
      let failMs = null, promotedMs = null, okMs = null;
      while (Date.now() < f.deadline && okMs === null) {
        try {
          const info = await once(replica.port, "CLUSTER", "INFO");
          const state = lineOf(info, "cluster_state");
          if (state !== "ok" && failMs === null) failMs = Date.now() - f.at;
          if (promotedMs === null && lineOf(await once(replica.port, "INFO", "replication"), "role") === "master") promotedMs = Date.now() - f.at;
          if (promotedMs !== null && state === "ok") okMs = Date.now() - f.at;
        } catch (e) { /* ask again */ }
        await sleep(25);
      }
      f.detail = `master ${addr(victim.port)} (keys ${keys.join(",")}) SIGKILLed; ` +
        (failMs === null ? "" : `cluster_state fail from +${failMs} ms; `) +
        (promotedMs === null ? `its replica ${addr(replica.port)} not promoted by the end of the load` : `its replica ${addr(replica.port)} promoted at +${promotedMs} ms`) +
        (okMs === null ? "" : `, cluster_state ok again at +${okMs} ms`);
    },
  },
  "redlock-node-sigstop": {
    async run(f, p, tg) {
      const n = tg.topo.nodes[p.node - 1];
      process.kill(n.pid, "SIGSTOP");
      stopped.add(n.pid);
      f.at = Date.now();
      await sleep(p.ms);
      process.kill(n.pid, "SIGCONT");
      stopped.delete(n.pid);
      f.detail = `master ${p.node} of ${tg.topo.nodes.length} (${addr(n.port)}) stopped ${ms(f.at, Date.now())} ms`;
    },
  },
};

// ---------------------------------------------------------------- rows
async function drainedLoad(msLoad) {
  const stop = startLoad(newCounts());
  await sleep(msLoad);
  await stop();
}

async function quiesce(row) {
  // Between rows: every nginx back to 2 workers, no lock or witness state left over.
  for (const m of target.masters) await waitWorkers(m);
  await sleep(LOCK.ttl + 100); // lost-reply cleanups and orphaned leases run out
  await target.flush();
  if (target.topo) await target.topo.resetStats();
  await witnessReset();
  if (row.load.kind === "gateway") {
    // Leases an earlier row leaked are still renewed: the flush makes their next
    // renewal (every ttl/3) fail, and what that logs must not land in this row.
    await sleep(Math.max(...Object.values(GUARDS).map((g) => g.ttl || 0)) / 3 + 150);
    await backendStats(true);
  }
}

async function runCritRow(sc) {
  const t0 = Date.now();
  const F = sc.fault ? FAULTS[sc.fault.kind] : null;
  if (F && F.prepare && (await F.prepare(sc.fault))) await drainedLoad(1000);
  await quiesce(sc);
  const dirs = target.dirs;
  const logFrom = dirs.map(logSize);
  const counts = newCounts();
  const start = Date.now();
  const duration = sc.load.durationMs ?? DURATION;
  // deadline: a fault that watches what follows it (a failover) stops watching when the load ends.
  const f = { at: null, detail: "", deadline: start + duration };
  const stop = startLoad(counts);
  let faultErr = null;
  const faultDone = F
    ? sleep(sc.fault.atMs ?? FAULT_AT).then(() => F.run(f, sc.fault, target)).catch((e) => { faultErr = e; })
    : Promise.resolve();
  await sleep(duration);
  await faultDone;
  const loadEnd = Date.now();
  await stop();
  const drainMs = ms(loadEnd, Date.now());
  contAll();
  const w = await collect();
  const redisErrors = target.topo ? await target.topo.errorStats() : null;
  const logs = logStats(dirs.map((d, i) => logSlice(d, logFrom[i])).join(""));
  if (F && F.after && (await F.after(sc.fault))) await drainedLoad(1000);
  if (faultErr) throw new Error(`${sc.title}: fault injection failed: ${faultErr.stack || faultErr}`);

  const gapMs = w.maxGapUs < 0 ? null : w.maxGapUs / 1000;
  const gapFromFault = f.at !== null && w.maxGapFromUs !== null ? Math.round(w.maxGapFromUs / 1000 - f.at) : null;
  const stallMs = w.maxStallUs < 0 ? null : w.maxStallUs / 1000;
  const stallFromFault = f.at !== null && w.maxStallFromUs !== null ? Math.round(w.maxStallFromUs / 1000 - f.at) : null;
  // Acquisitions the fault cost: the rate before it, carried on to the end of the
  // load, against the "ok" answers after it (client side: answers, not entries).
  let throughput = null;
  if (f.at !== null && f.at > start && loadEnd > f.at) {
    const before = counts.okAt.filter((t) => t < f.at).length;
    const after = counts.okAt.filter((t) => t >= f.at && t <= loadEnd).length;
    const rate = before / (f.at - start);
    throughput = {
      beforePerS: Math.round(rate * 1000), afterPerS: Math.round(after / (loadEnd - f.at) * 1000),
      lostEstimate: Math.max(0, Math.round(rate * (loadEnd - f.at) - after)),
    };
  }
  const top = (m) => Object.entries(m).sort((a, b) => b[1] - a[1]).slice(0, 3);
  const lat = counts.okMs.sort((a, b) => a - b);
  const pct = (q) => (lat.length ? Math.round(lat[Math.min(lat.length - 1, Math.floor(q * lat.length))]) : null);
  const row = {
    n: sc.n, id: sc.id, group: "crit", scenario: sc.title, promised: sc.promised,
    acquisitions: w.acquisitions, overlaps: w.overlaps, staleRefused: w.staleRefused,
    ok: counts.ok, errors: counts.err, timeouts: counts.timeout, busy: counts.busy,
    witnessErrors: counts.werr, httpFailures: counts.http + counts.other,
    // Client-side time of /crit requests answered "ok": waiting + 20 ms inside + release.
    okLatencyMs: { p50: pct(0.5), p90: pct(0.9), p99: pct(0.99), max: lat.length ? Math.round(lat[lat.length - 1]) : null },
    maxGapMs: gapMs, maxGapKey: w.maxGapKey, maxGapStartVsFaultMs: gapFromFault,
    maxStallMs: stallMs, maxStallStartVsFaultMs: stallFromFault, throughput,
    releaseNotOwner: w.releaseNotOwner, releaseError: w.releaseError,
    perKey: w.perKey, overlapLog: w.overlapLog, leftInside: w.leftInside,
    fault: sc.fault ? { ...sc.fault, atMs: f.at === null ? null : f.at - start, detail: f.detail } : null,
    topErrors: top(counts.errMsgs), errorSamples: top(counts.errMsgs).map(([k]) => counts.errRaw[k]), topHttpFailures: top(counts.httpMsgs), topWitnessErrors: top(counts.werrMsgs),
    nginxErrorLog: logs, redisErrorReplies: redisErrors,
    loadMs: loadEnd - start, drainMs, wallMs: Date.now() - t0,
    about: sc.about,
  };
  row.note = noteOf(row);
  return row;
}

function noteOf(r) {
  const bits = [r.about];
  if (r.topology) bits.push(`${r.topology.kind}: ${r.topology.started}, ready in ${r.topology.upMs} ms`);
  if (r.fault && r.fault.detail) bits.push(r.fault.detail);
  if (r.group === "topology") {
    if (r.maxStallMs !== null) {
      const d = r.maxStallStartVsFaultMs;
      bits.push(`longest time with no acquisition of any key ${Math.round(r.maxStallMs)} ms` + (d === null ? "" : ` (from ${Math.abs(d)} ms ${d < 0 ? "before" : "after"} the fault)`));
    }
    if (r.throughput) bits.push(`acquisitions lost to the fault ≈ ${r.throughput.lostEstimate} (${r.throughput.beforePerS}/s before it, ${r.throughput.afterPerS}/s after)`);
    bits.push(`${r.releaseNotOwner} lock(s) gone before their holder released (release answered not_owner)`);
    if (r.promised && r.releaseNotOwner > 0) {
      bits.push(`NEAR MISS: ${r.releaseNotOwner} lock(s) handed out were no longer where their holder released them: a newcomer could have been let in beside the holder (the witness saw ${r.overlaps} overlap(s))`);
    }
    const list = (o) => Object.entries(o).sort((a, b) => b[1] - a[1]).map(([k, n]) => `${k} ×${n}`).join(", ");
    const re = r.redisErrorReplies || { kinds: {}, commands: {} };
    if (Object.keys(re.kinds).length) bits.push(`Redis error replies: ${list(re.kinds)} (to ${list(re.commands)})`);
  }
  if (!r.fault) bits.push(`"ok" requests took p50 ${r.okLatencyMs.p50} / p99 ${r.okLatencyMs.p99} / max ${r.okLatencyMs.max} ms; ${r.timeouts} of ${r.ok + r.timeouts} waited 3 s in vain`);
  if (r.maxGapStartVsFaultMs !== null && r.maxGapMs !== null && r.maxGapMs > 150) {
    const d = r.maxGapStartVsFaultMs;
    bits.push(`longest gap began ${Math.abs(d)} ms ${d < 0 ? "before" : "after"} the fault`);
  }
  if (r.id === "redis-restart" && r.overlaps === 0) bits.push(`none seen here: the restart outlasted the ${LOCK.hold} ms critical section, so every holder had left before the fresh Redis granted anything`);
  if (r.id === "worker-sigstop" && r.overlaps === 0) bits.push("none seen this time: the stopped worker's key was not taken over before it woke");
  if (r.releaseNotOwner && r.group !== "topology") bits.push(`${r.releaseNotOwner} release(s) answered not_owner`);
  if (r.releaseError) bits.push(`${r.releaseError} release(s) failed on Redis`);
  if (r.httpFailures) bits.push(`${r.httpFailures} HTTP/connection failure(s) (${r.topHttpFailures.map(([m, c]) => m + " ×" + c).join(", ")})`);
  if (r.errors) bits.push(`top err: ${r.topErrors.slice(0, 2).map(([m, c]) => `"${m}" ×${c}`).join("; ")}`);
  if (r.nginxErrorLog.cleanupRemoved) bits.push(`${r.nginxErrorLog.cleanupRemoved} lost-reply lock(s) removed by the cleanup timer`);
  if (r.witnessErrors) bits.push(`WITNESS ERRORS ${r.witnessErrors}: this row is not trustworthy`);
  if (r.leftInside.length) bits.push(`holders left inside at the end: ${r.leftInside.join(", ")}`);
  return bits.join("; ");
}

async function runGatewayRow(sc) {
  const t0 = Date.now();
  const F = sc.fault ? FAULTS[sc.fault.kind] : null;
  await quiesce(sc);
  for (const g of sc.load.guards) await once(WITNESS_PORT, "SET", "gw:promise:" + g, String(GUARDS[g].promise));
  const baseline = [];
  for (const port of HTTP_PORTS) baseline.push((await frontWriting(port)) ?? 1);
  const logFrom = LOG_DIRS.map(logSize);
  const counts = newGwCounts(sc);
  const f = { at: null, detail: "" };
  const start = Date.now();
  const stop = startGatewayLoad(sc, counts);
  let faultErr = null;
  const faultDone = F
    ? sleep(sc.fault.atMs).then(() => F.run(f, sc.fault)).catch((e) => { faultErr = e; })
    : Promise.resolve();
  await sleep(sc.load.durationMs);
  await faultDone;
  const loadEnd = Date.now();
  await stop();
  const drainMs = ms(loadEnd, Date.now());
  const idle = await waitIdle(sc, loadEnd, baseline);
  if (sc.control && sc.control.plantLocks) {
    for (const g of sc.control.plantLocks) await plantLock(g, `${sc.id}-planted`, RELEASE_GRACE + 1500);
  }
  const left = await keysLeft(sc, idle.idleAt);
  const w = await collectGateway(sc);
  const backend = await backendStats(false);
  const logs = logStats(LOG_DIRS.map((d, i) => logSlice(d, logFrom[i])).join(""));
  if (faultErr) throw new Error(`${sc.title}: fault injection failed: ${faultErr.stack || faultErr}`);

  const perGuard = {};
  const total = { requests: 0, ok: 0, refused: 0, other: 0, aborted: 0, failed: 0, failover: 0, status: {} };
  for (const g of sc.load.guards) {
    const c = counts[g];
    const refused = [409, 429, 503].reduce((a, s) => a + (c.status[s] || 0), 0);
    const ok = Object.entries(c.status).filter(([s]) => s >= 200 && s < 300).reduce((a, [, n]) => a + n, 0);
    const other = Object.values(c.status).reduce((a, n) => a + n, 0) - refused - ok;
    const gl = left.list.filter((k) => k.guard === g);
    perGuard[g] = {
      ...w.perGuard[g], requests: c.requests, ok, refused, other, status: c.status, aborted: c.aborted,
      failed: c.failed, failures: c.failures, failover: c.failover,
      keysLeft: gl.length, permitsLeft: gl.reduce((a, k) => a + k.permits, 0),
    };
    for (const k of ["requests", "ok", "refused", "other", "aborted", "failed", "failover"]) total[k] += perGuard[g][k];
    for (const [s, n] of Object.entries(c.status)) total.status[s] = (total.status[s] || 0) + n;
  }
  const row = {
    n: sc.n, id: sc.id, group: "gateway", scenario: sc.title, promised: sc.promised, control: sc.control || null,
    via: sc.load.via, viaMeans: VIAS[sc.load.via], load: sc.load,
    requests: total, reached: w.reached, overlaps: w.overlaps, perGuard,
    keysLeft: left, overlapLog: w.overlapLog,
    backendIdle: idle, witnessErrors: backend.witnessErrors, backendEntered: backend.entered,
    leftInside: w.leftInside,
    fault: sc.fault ? { ...sc.fault, atMs: f.at === null ? null : f.at - start, detail: f.detail } : null,
    nginxErrorLog: logs,
    loadMs: loadEnd - start, drainMs, wallMs: Date.now() - t0,
    about: sc.about,
  };
  row.note = gwNoteOf(row);
  return row;
}

function leftText(L) {
  if (!L.keys) return "0";
  const held = L.stillHeld ? `${L.stillHeld} still held ${Math.round((L.checkMs + L.watchMs) / 100) / 10} s after the backend went idle` : `gone after ≤ ${Math.round(L.longestMs / 100) / 10} s`;
  return `${L.keys} (${L.permits} lock(s)/permit(s)); ${held}`;
}

function gwNoteOf(r) {
  const bits = [r.about];
  if (r.fault && r.fault.detail) bits.push(r.fault.detail);
  bits.push(Object.entries(r.perGuard).map(([g, p]) =>
    `${g}: ${p.reached} reached${Object.keys(p.byEndpoint).length > 1 ? ` (${Object.entries(p.byEndpoint).map(([e, n]) => e + " " + n).join(", ")})` : ""}, max ${p.maxInFlight} in flight (promised ${p.promise}), ${p.overlaps} overlap(s), ${p.refused} refused, ${p.keysLeft} key(s) left`).join("; "));
  if (r.keysLeft.keys) {
    bits.push("left locked: " + r.keysLeft.list.slice(0, 6).map((k) =>
      `${k.guard} ${k.key} (${k.type}${k.type === "zset" ? ", " + k.permits + " permit(s)" : ""}, ${k.heldMs === null ? "still held" : "gone at +" + k.heldMs + " ms"})`).join(", ") + (r.keysLeft.list.length > 6 ? ", ..." : ""));
  }
  if (r.overlapLog.length) bits.push(`first overlaps: ${r.overlapLog.slice(0, 3).join(" | ")}`);
  if (r.requests.aborted) bits.push(`${r.requests.aborted} request(s) aborted by their client`);
  if (r.requests.failover) bits.push(`${r.requests.failover} request(s) sent to instance 2 while instance 1 was down`);
  if (r.requests.failed) bits.push(`${r.requests.failed} HTTP/connection failure(s)`);
  const others = Object.entries(r.requests.status).filter(([s]) => !(s >= 200 && s < 300) && ![409, 429, 503].includes(Number(s)));
  if (others.length) bits.push("other statuses: " + others.map(([s, n]) => s + " ×" + n).join(", "));
  if (r.nginxErrorLog.leaseLost) bits.push(`${r.nginxErrorLog.leaseLost} "lease lost while its request is in flight" line(s)`);
  if (r.nginxErrorLog.errors) bits.push(`${r.nginxErrorLog.errors} error line(s) in the nginx logs: ${r.nginxErrorLog.samples.slice(0, 2).map(([m, c]) => `"${m.slice(0, 140)}" ×${c}`).join("; ")}`);
  if (!r.backendIdle.idle) bits.push(`BACKEND NOT IDLE after ${IDLE_CAP / 1000} s (in flight ${r.backendIdle.inflight}, nginx busy ${r.backendIdle.busy})`);
  if (r.witnessErrors) bits.push(`WITNESS ERRORS ${r.witnessErrors}: this row is not trustworthy`);
  if (r.leftInside.length) bits.push(`requests the witness still sees inside the backend: ${r.leftInside.slice(0, 5).join(", ")}`);
  return bits.join("; ");
}

// ---------------------------------------------------------------- contention rows
// Many waiters per key over both nginx, each client keeping to its key, and
// measured rather than only checked: acquisitions/s against the ideal (one
// holder after another, 20 ms each), every hand-off (one holder leaving, the
// next entering: the witness's handoffs:K log), wait timeouts, and what nginx
// sent to the lock Redis per acquisition (MONITOR over the phase). A row runs
// its phases one after the other on the same clients and keys: the contention
// row loads /crit (resty.dlock: wake-ups) and then /crit-poll (a plain polling
// lock), so both compare within one run. waiters-give-up has clients that
// abort or time out while waiting (and a worker killed), and then checks that
// nothing is left in the lock Redis: no lock key, no wake-up subscription.

/** resty.dlock's release channel (src/resty/dlock/redis/scripts.ts CHANNEL): CHANNEL .. <lock key>. */
const RELEASED_CHANNEL = "dlock:released:";

/**
 * L.clientsPerKey clients per key of L.keys, alternating between both nginx,
 * each keeping to its key, looping on path?key=K until stop(). L.shortWait: that
 * share of the requests asks with a short random `wait` (ms); L.abort: that
 * share is abandoned by its client at a random moment (after atMs).
 */
function startContentionLoad(L, p, counts) {
  let stopping = false;
  const { ports } = target;
  const one = async (i) => {
    const port = ports[i % ports.length];
    const key = L.keys[Math.floor(i / ports.length) % L.keys.length];
    while (!stopping) {
      let q = "", abortAt = null, kind = "full";
      const r = Math.random();
      const shortP = L.shortWait ? L.shortWait.p : 0;
      if (r < shortP) { q = "&wait=" + randInt(L.shortWait.ms); kind = "short"; }
      else if (L.abort && r < shortP + L.abort.p) { abortAt = randInt(L.abort.atMs); kind = "aborted"; }
      counts.byKind[kind]++;
      const t = process.hrtime.bigint();
      const res = await request(port, `${p}?key=${key}${q}`, abortAt);
      if (res.aborted) { counts.aborted++; continue; }
      if (res.error) { counts.http++; bump(counts.httpMsgs, res.error); await sleep(10); continue; }
      const { status, body } = res;
      if (status !== 200) { counts.http++; bump(counts.httpMsgs, "HTTP " + status); }
      else if (body === "ok") { counts.ok++; counts.okMs.push(Number(process.hrtime.bigint() - t) / 1e6); counts.okAt.push(Date.now()); }
      else if (body === "timeout") { counts.timeout++; counts.timeoutBy[kind]++; if (kind === "full") counts.timeoutAt.push(Date.now()); }
      else if (body === "busy") counts.busy++;
      else if (body.startsWith("err ")) { counts.err++; bump(counts.errMsgs, body.slice(4), counts.errRaw); }
      else if (body.startsWith("werr ")) { counts.werr++; bump(counts.werrMsgs, body.slice(5)); }
      else { counts.other++; bump(counts.httpMsgs, "body " + body.slice(0, 60)); }
    }
  };
  const all = Promise.all(Array.from({ length: L.clientsPerKey * L.keys.length }, (_, i) => one(i)));
  return () => { stopping = true; return all; };
}

/** Worker pid → nginx instance (1, 2) of the target's masters now. */
function workerMap(into = new Map()) {
  target.masters.forEach((m, i) => { for (const pid of workersOf(m)) into.set(pid, i + 1); });
  return into;
}

/** The witness's hand-off log of keys: [{ key, gapUs, prevPid, pid, atUs (the entry) }]. */
async function collectHandoffs(keys) {
  const w = await Resp.connect(WITNESS_PORT);
  try {
    const out = [];
    for (const k of keys) {
      for (const e of await w.cmd("LRANGE", "handoffs:" + k, 0, -1)) {
        const [gap, prev, me, at] = e.split(" ");
        out.push({ key: k, gapUs: Number(gap), prevPid: Number(prev.split(":")[0]) || null, pid: Number(me.split(":")[0]), atUs: Number(at) });
      }
    }
    return out;
  } finally {
    w.close();
  }
}

/**
 * What is left in the lock Redis: keys other than fence counters (a lock, or
 * anything else), release channels anyone still subscribes to (PUBSUB CHANNELS),
 * subscribers of the load keys' channels (PUBSUB NUMSUB), and subscriber
 * connections (kept open IDLE s on purpose; shown, not a leftover).
 */
async function leftBehind(keys) {
  const r = await Resp.connect(LOCK_PORT);
  try {
    const lockKeys = [];
    for (const k of await r.cmd("KEYS", "*")) {
      if (k.endsWith(":fence")) continue;
      lockKeys.push(`${k} (pttl ${await r.cmd("PTTL", k)})`);
    }
    const channels = await r.cmd("PUBSUB", "CHANNELS", RELEASED_CHANNEL + "*");
    const numsub = hash(await r.cmd("PUBSUB", "NUMSUB", ...keys.map((k) => RELEASED_CHANNEL + LOCK_PREFIX + k)));
    const subscribed = Object.values(numsub).reduce((a, b) => a + b, 0);
    const conns = String(await r.cmd("CLIENT", "LIST", "TYPE", "pubsub")).split("\n").filter(Boolean);
    const subConns = conns.map((l) => Number((/ sub=(\d+)/.exec(l) || [0, 0])[1]));
    return {
      lockKeys, channels, numsub, subscribed,
      subscriberConnections: subConns.length, subscriberConnectionsWithSubscriptions: subConns.filter((n) => n > 0).length,
      clean: lockKeys.length === 0 && channels.length === 0 && subscribed === 0,
    };
  } finally {
    r.close();
  }
}

/**
 * From the end of the load (from, ms since epoch) to from + settleMs: the lock
 * Redis every 100 ms; the verdict is its state then. Left-overs are watched
 * watchMs longer, to tell whether they go by themselves.
 */
async function watchLeftovers(keys, from, { settleMs, watchMs = 0 }) {
  let firstClean = null, last = null;
  while (Date.now() < from + settleMs) {
    last = await leftBehind(keys);
    if (last.clean && firstClean === null) firstClean = Date.now() - from;
    if (!last.clean) firstClean = null;
    await sleep(100);
  }
  const atCheck = await leftBehind(keys);
  const out = { settleMs, atCheck, cleanAtCheck: atCheck.clean, cleanSinceMs: atCheck.clean ? firstClean ?? Date.now() - from : null, goneAtMs: null, watchMs };
  if (!atCheck.clean) {
    const end = Date.now() + watchMs;
    while (Date.now() < end) {
      await sleep(250);
      last = await leftBehind(keys);
      if (last.clean) { out.goneAtMs = Date.now() - from; break; }
    }
    out.atEnd = last || atCheck;
  }
  return out;
}

/**
 * After the load: requests one at a time (nobody else waits), each on a new
 * connection (any worker), n per key; their times. A worker that believes
 * others still wait for a key makes a newcomer queue behind them first.
 */
async function probe(keys, n) {
  const times = [];
  for (const k of keys) {
    for (let i = 0; i < n; i++) {
      const t = Date.now();
      const { body } = await httpText(target.ports[i % target.ports.length], `/crit?key=${k}`, 5000);
      times.push({ key: k, ms: Date.now() - t, body: body.trim() });
    }
  }
  const sorted = times.map((x) => x.ms).sort((a, b) => a - b);
  return {
    requests: times.length, ok: times.filter((x) => x.body === "ok").length,
    p50: sorted[Math.floor(sorted.length / 2)], max: sorted[sorted.length - 1],
    over100ms: times.filter((x) => x.ms > 100).length,
  };
}

/**
 * How many waiters each worker's resty.dlock believes wait for each key
 * (/crit-waiters), asked on new connections until every worker answered (or 60
 * tries): { pid: { key: n } }.
 */
async function waitersNow(keys) {
  const seen = {};
  const want = target.masters.reduce((a, m) => a + workersOf(m).length, 0);
  for (let i = 0; i < 60 && Object.keys(seen).length < want; i++) {
    try {
      const { body } = await httpText(target.ports[i % target.ports.length], `/crit-waiters?keys=${keys.join(",")}`, 1000);
      const [pid, ...kv] = body.trim().split(" ");
      seen[pid] = Object.fromEntries(kv.map((x) => x.split("=")).map(([k, n]) => [k, n === "-" ? null : Number(n)]));
    } catch (e) { /* next */ }
  }
  return seen;
}

async function critStats(reset) {
  const out = { abortedWaiting: 0, abortedInside: 0 };
  for (const port of target.ports) {
    const { body } = await httpText(port, "/crit-stats" + (reset ? "?reset=1" : ""));
    const m = /aborted_waiting (\d+) aborted_inside (\d+)/.exec(body);
    if (!m) throw new Error("/crit-stats answered " + JSON.stringify(body));
    out.abortedWaiting += Number(m[1]);
    out.abortedInside += Number(m[2]);
  }
  return out;
}

/** One phase of a contention row: the load on ph.path, the row's fault (first phase only), what it cost. */
async function runPhase(sc, ph, withFault) {
  const L = sc.load;
  const F = withFault && sc.fault ? FAULTS[sc.fault.kind] : null;
  await quiesce(sc);
  await once(WITNESS_PORT, "SET", "handoffs:on", "1");
  await critStats(true);
  const logFrom = target.dirs.map(logSize);
  const pids = workerMap();
  const counts = { ...newCounts(), aborted: 0, byKind: { full: 0, short: 0, aborted: 0 }, timeoutBy: { full: 0, short: 0, aborted: 0 }, timeoutAt: [] };
  const mon = await Monitor.start(LOCK_PORT, { exclude: harnessLockPorts });
  const duration = ph.durationMs;
  const start = Date.now();
  const f = { at: null, detail: "", deadline: start + duration };
  const stop = startContentionLoad(L, ph.path, counts);
  let faultErr = null;
  const faultDone = F ? sleep(sc.fault.atMs).then(() => F.run(f, sc.fault, target)).catch((e) => { faultErr = e; }) : Promise.resolve();
  await sleep(duration);
  await faultDone;
  const loadEnd = Date.now();
  await stop();
  const drainMs = ms(loadEnd, Date.now());
  // Unsubscribing follows the last waiter within a subscriber tick (10 ms): counted too.
  await sleep(300);
  mon.stop();
  contAll();
  const left = ph.leftovers ? await watchLeftovers(L.keys, loadEnd + drainMs, ph.leftovers) : null;
  const w = await collect();
  const handoffs = await collectHandoffs(L.keys);
  const waitersAfter = ph.leftovers ? await waitersNow(L.keys) : null;
  const probed = ph.probe ? await probe(L.keys, ph.probe) : null;
  workerMap(pids); // a worker started during the phase (the fault) too
  const aborts = await critStats(false);
  const logs = logStats(target.dirs.map((d, i) => logSlice(d, logFrom[i])).join(""));
  if (faultErr) throw new Error(`${sc.title}: fault injection failed: ${faultErr.stack || faultErr}`);

  const okInLoad = counts.okAt.filter((t) => t <= loadEnd).length;
  const lat = counts.okMs.sort((a, b) => a - b);
  const pct = (q) => (lat.length ? Math.round(lat[Math.min(lat.length - 1, Math.floor(q * lat.length))]) : null);
  const ideal = L.keys.length * 1000 / LOCK.hold;
  const rate = okInLoad / (duration / 1000);
  return {
    name: ph.name, path: ph.path, baseline: !!ph.baseline, durationMs: duration,
    acquisitions: w.acquisitions, overlaps: w.overlaps, staleRefused: w.staleRefused,
    ok: counts.ok, timeouts: counts.timeout, timeoutsBy: counts.timeoutBy, requestsBy: counts.byKind,
    // Full-wait timeouts answered within the first wait + 1 s of the load (every client arrived at once) and later.
    fullWaitTimeoutsEarly: counts.timeoutAt.filter((t) => t < start + LOCK.wait + 1000).length,
    errors: counts.err, busy: counts.busy, witnessErrors: counts.werr, httpFailures: counts.http + counts.other,
    aborted: counts.aborted, abortHandler: aborts,
    ratePerS: Math.round(rate * 10) / 10, idealPerS: ideal, ofIdeal: Math.round(rate / ideal * 1000) / 10,
    handoffs: handoffStats(handoffs, pids),
    longestHandoff: handoffs.length ? (({ key, gapUs, atUs }) => ({ key, ms: round2(gapUs / 1000), fromLoadStartMs: Math.round((atUs - gapUs) / 1000 - start) }))(handoffs.reduce((a, h) => (h.gapUs > a.gapUs ? h : a))) : null,
    commands: mon.perAcquisition(w.acquisitions),
    okLatencyMs: { p50: pct(0.5), p99: pct(0.99), max: lat.length ? Math.round(lat[lat.length - 1]) : null },
    releaseNotOwner: w.releaseNotOwner, releaseError: w.releaseError, leftInside: w.leftInside, overlapLog: w.overlapLog,
    leftovers: left, waitersAfter, probe: probed,
    fault: F ? { ...sc.fault, atMs: f.at === null ? null : f.at - start, detail: f.detail } : null,
    topErrors: Object.entries(counts.errMsgs).sort((a, b) => b[1] - a[1]).slice(0, 3),
    topHttpFailures: Object.entries(counts.httpMsgs).sort((a, b) => b[1] - a[1]).slice(0, 3),
    nginxErrorLog: logs, loadMs: loadEnd - start, drainMs,
  };
}

/** The issue's goals for waiting under contention, checked on a resty.dlock phase. */
function goalsOf(g, p) {
  if (!g || p.baseline) return null;
  const cross = p.handoffs.otherInstance;
  return [
    { goal: `hand-off p99 across instances < ${g.handoffP99Ms} ms`, value: cross.p99, met: cross.p99 !== null && cross.p99 < g.handoffP99Ms },
    { goal: `≤ ${g.commandsPerAcquisition} Redis commands per acquisition (release included)`, value: p.commands.perAcquisition, met: p.commands.perAcquisition !== null && p.commands.perAcquisition <= g.commandsPerAcquisition },
    { goal: "no wait timeouts (the queue drains within the wait)", value: p.timeouts, met: p.timeouts === 0 },
  ];
}

async function runContentionRow(sc) {
  const t0 = Date.now();
  const L = sc.load;
  target = { ...BASE, keys: L.keys };
  try {
    const phases = [];
    for (const [i, ph] of L.phases.entries()) {
      const p = await runPhase(sc, ph, i === 0);
      p.goals = goalsOf(sc.goals, p);
      phases.push(p);
      log(`   ${p.name}: ${p.acquisitions} acquisitions (${p.ratePerS}/s, ideal ${p.idealPerS}/s), ${p.overlaps} overlaps, hand-off p50 ${p.handoffs.all.p50} / p99 ${p.handoffs.all.p99} ms (across instances p99 ${p.handoffs.otherInstance.p99}), ${p.timeouts} timeout, ${p.commands.perAcquisition} commands/acquisition` +
        (p.leftovers ? `, left behind: ${p.leftovers.cleanAtCheck ? "nothing" : JSON.stringify(p.leftovers.atCheck)}` : ""));
    }
    const sum = (k) => phases.reduce((a, p) => a + p[k], 0);
    const row = {
      n: sc.n, id: sc.id, group: "contention", scenario: sc.title, promised: sc.promised, load: L, goals: sc.goals || null,
      acquisitions: sum("acquisitions"), overlaps: sum("overlaps"), witnessErrors: sum("witnessErrors"),
      errors: sum("errors"), timeouts: sum("timeouts"), phases,
      leftInside: phases.flatMap((p) => p.leftInside),
      wallMs: Date.now() - t0, about: sc.about,
    };
    row.note = contentionNoteOf(row);
    return row;
  } finally {
    target = BASE;
  }
}

const fmt = (x) => (x === null || x === undefined ? "-" : String(x));

function leftoversText(L) {
  if (!L) return "-";
  if (L.cleanAtCheck) return `nothing (+${(L.settleMs / 1000).toFixed(0)} s)`;
  const a = L.atCheck;
  const bits = [];
  if (a.lockKeys.length) bits.push(`${a.lockKeys.length} key(s): ${a.lockKeys.slice(0, 3).join(", ")}`);
  if (a.channels.length) bits.push(`${a.channels.length} channel(s) subscribed: ${a.channels.slice(0, 3).join(", ")}`);
  if (a.subscribed) bits.push(`NUMSUB ${Object.entries(a.numsub).filter(([, n]) => n).map(([c, n]) => c + " " + n).join(", ")}`);
  return `at +${(L.settleMs / 1000).toFixed(0)} s: ${bits.join("; ")}; ` + (L.goneAtMs !== null ? `gone at +${(L.goneAtMs / 1000).toFixed(1)} s` : `still there at +${((L.settleMs + L.watchMs) / 1000).toFixed(0)} s`);
}

function phaseNote(p) {
  const bits = [];
  const c = p.commands;
  bits.push(`${p.path}: ${c.total} commands from ${c.clientConnections} nginx connection(s), per acquisition ` +
    Object.entries(c.perAcquisitionBy).map(([k, n]) => `${k} ${n}`).join(", ") +
    (Object.keys(c.inScripts).length ? ` (inside scripts: ${Object.entries(c.inScripts).map(([k, n]) => `${k} ×${n}`).join(", ")})` : ""));
  bits.push(`${c.acquireAttempts} acquire attempts (${c.acquireAttemptsPerAcquisition} per acquisition: SET, or a script call with other than one argument after its keys) and ${c.releases} releases (a script call with one); the attempts by the time since the key's last release: ` + Object.entries(c.acquireAttemptsAfterRelease).filter(([, n]) => n).map(([b, n]) => `${b} ${n}`).join(", "));
  const h = p.handoffs;
  const hs = (x) => (x.n ? `${x.n} p50 ${x.p50} / p99 ${x.p99} / max ${x.max} ms` : "none");
  bits.push(`hand-offs to the same worker ${hs(h.sameWorker)}; to another worker of the same nginx ${hs(h.sameInstance)}; to the other nginx ${hs(h.otherInstance)}` + (h.unknown.n ? `; involving a killed or new worker ${hs(h.unknown)}` : ""));
  if (p.longestHandoff && p.longestHandoff.ms > 20) {
    const lh = p.longestHandoff, fa = p.fault && p.fault.atMs !== null ? lh.fromLoadStartMs - p.fault.atMs : null;
    bits.push(`longest hand-off ${lh.ms} ms on ${lh.key}, from ${(lh.fromLoadStartMs / 1000).toFixed(2)} s into the load` + (fa === null ? "" : ` (${Math.abs(fa)} ms ${fa < 0 ? "before" : "after"} the fault)`));
  }
  bits.push(`"ok" requests took p50 ${p.okLatencyMs.p50} / p99 ${p.okLatencyMs.p99} / max ${p.okLatencyMs.max} ms`);
  const rq = p.requestsBy;
  if (rq.short || rq.aborted) {
    bits.push(`requests: ${rq.full} with wait 3000 ms (${p.timeoutsBy.full} timed out), ${rq.short} with a short wait (${p.timeoutsBy.short} timed out), ${rq.aborted} to be aborted (${p.aborted} were, before their answer; the abort handler ended ${p.abortHandler.abortedWaiting} waiting request(s), ${p.abortHandler.abortedInside} aborted inside ran to their release)`);
  } else {
    bits.push(`${p.timeouts} of ${p.ok + p.timeouts} waited ${LOCK.wait} ms in vain (${p.fullWaitTimeoutsEarly} of them answered in the first ${(LOCK.wait + 1000) / 1000} s of the load, when all clients had arrived at once)`);
  }
  if (p.fault && p.fault.detail) bits.push(p.fault.detail);
  if (p.goals) bits.push("goals: " + p.goals.map((g) => `${g.goal}: ${fmt(g.value)} ${g.met ? "met" : "MISSED"}`).join("; "));
  if (p.leftovers && !p.leftovers.cleanAtCheck) bits.push("LEFT BEHIND " + leftoversText(p.leftovers));
  if (p.leftovers && p.leftovers.cleanAtCheck) bits.push(`lock Redis clean (no lock key, no release channel subscribed) from +${(p.leftovers.cleanSinceMs / 1000).toFixed(1)} s after the load; ${p.leftovers.atCheck.subscriberConnections} subscriber connection(s) open then`);
  if (p.waitersAfter) {
    const phantom = Object.entries(p.waitersAfter).filter(([, ks]) => Object.values(ks).some((n) => n));
    const asked = Object.keys(p.waitersAfter).length;
    bits.push(phantom.length
      ? `WAITERS STILL COUNTED after the load (nobody waits): ${phantom.map(([pid, ks]) => `worker ${pid} ${Object.entries(ks).filter(([, n]) => n).map(([k, n]) => k + " " + n).join(", ")}`).join("; ")} (of ${asked} worker(s) asked)`
      : `no waiter counted by any of the ${asked} worker(s) asked after the load`);
  }
  if (p.probe) bits.push(`afterwards, ${p.probe.requests} uncontended /crit requests one at a time (new connections): p50 ${p.probe.p50} / max ${p.probe.max} ms, ${p.probe.over100ms} over 100 ms, ${p.probe.ok} ok`);
  if (p.releaseNotOwner) bits.push(`${p.releaseNotOwner} release(s) answered not_owner`);
  if (p.errors) bits.push(`${p.errors} err: ${p.topErrors.slice(0, 2).map(([m, n]) => `"${m}" ×${n}`).join("; ")}`);
  if (p.httpFailures) bits.push(`${p.httpFailures} HTTP/connection failure(s) (${p.topHttpFailures.map(([m, n]) => m + " ×" + n).join(", ")})`);
  if (p.nginxErrorLog.errors) bits.push(`${p.nginxErrorLog.errors} error line(s) in the nginx logs: ${p.nginxErrorLog.samples.slice(0, 2).map(([m, n]) => `"${m.slice(0, 140)}" ×${n}`).join("; ")}`);
  if (p.nginxErrorLog.warnings.length) bits.push(`warnings: ${p.nginxErrorLog.warnings.slice(0, 2).map(([m, n]) => `"${m.slice(0, 140)}" ×${n}`).join("; ")}`);
  if (p.witnessErrors) bits.push(`WITNESS ERRORS ${p.witnessErrors}: not trustworthy`);
  if (p.leftInside.length) bits.push(`holders left inside at the end: ${p.leftInside.join(", ")}`);
  return bits.join("; ");
}

function contentionNoteOf(r) {
  return r.about;
}

function contentionTable(rows) {
  const out = [
    "| # | scenario | lock | promised | acquisitions | overlaps | acquisitions/s (ideal) | hand-off p50 / p99 / max (ms) | hand-off to the other nginx p50 / p99 (ms) | wait timeouts | Redis commands per acquisition | left behind | result | note |",
    "| --- | --- | --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | --- | --- | --- |",
  ];
  for (const r of rows) {
    for (const [i, p] of r.phases.entries()) {
      const h = p.handoffs;
      out.push(`| ${r.n} | ${i === 0 ? esc(r.scenario) : "〃"} | ${esc(p.name)} | ${r.promised ? "yes" : "no"} | ${p.acquisitions} | ${p.overlaps} | ${p.ratePerS} (${p.idealPerS}, ${p.ofIdeal} %) | ${fmt(h.all.p50)} / ${fmt(h.all.p99)} / ${fmt(h.all.max)} | ${fmt(h.otherInstance.p50)} / ${fmt(h.otherInstance.p99)} | ${p.timeouts} of ${p.ok + p.timeouts} | ${fmt(p.commands.perAcquisition)} | ${esc(leftoversText(p.leftovers))} | ${p.baseline ? "baseline" : r.result} | ${esc((i === 0 ? r.note + "; " : "") + phaseNote(p))} |`);
    }
  }
  return out.join("\n");
}

function contentionIntro(rows) {
  return [
    "Many waiters per key, each client keeping to its key (half of them on each nginx, 2 workers each), looping on",
    "acquire (ttl 1000 ms), 20 ms inside, release; the same witness as above. Measured, not only checked:",
    "**acquisitions/s** = \"ok\" answers during the load per second, against the ideal of one holder after another",
    `(1000 / ${LOCK.hold} ms per key); **hand-off** = each time between one holder leaving a key (before its release) and the next`,
    "entering it (the witness's clock, per hand-off: p50 / p99 / max), also for the next holder on the other nginx only;",
    "**Redis commands per acquisition** = every command line nginx sent to the lock Redis during the load (MONITOR; EVALSHA,",
    "EVAL, SET, SUBSCRIBE, UNSUBSCRIBE...; not the harness's own connections; PUBLISH runs inside the release script and is",
    "not a command sent) divided by the acquisitions. The contention row runs the same load on resty.dlock (`/crit`) and",
    "then on a plain polling lock (`/crit-poll`: SET NX PX, sleep 2→64 ms jittered exponential backoff while busy, the",
    "schedule resty.dlock falls back to without a live subscription; compare-and-delete EVAL), so the two compare within one run.",
    "**left behind** = keys other than fence counters still in the lock Redis, release channels still subscribed",
    "(`PUBSUB CHANNELS dlock:released:*`, `PUBSUB NUMSUB` of the load keys' channels), that long after the load.",
    "Overlaps fail a row, and so does anything left behind; the goals are reported, not failed.",
  ];
}

// ---------------------------------------------------------------- report
function sh(cmd, args) {
  const r = spawnSync(cmd, args, { encoding: "utf8" });
  return ((r.stdout || "") + (r.stderr || "")).trim();
}

function machine() {
  return {
    nproc: Number(sh("nproc", [])) || os.cpus().length,
    cpu: (os.cpus()[0] || {}).model || "?",
    memGiB: Math.round(os.totalmem() / 2 ** 30 * 10) / 10,
    kernel: os.release(),
    redis: sh("redis-server", ["--version"]),
    nginx: sh(opt.nginx, ["-v"]),
    node: process.version,
  };
}

function esc(s) { return String(s).replace(/\|/g, "\\|"); }

function table(rows) {
  const out = [
    "| # | scenario | promised | acquisitions | overlaps | stale writes refused by fence | errors (err / timeout) | longest gap (ms) | result | note |",
    "| --- | --- | --- | ---: | ---: | ---: | ---: | ---: | --- | --- |",
  ];
  for (const r of rows) {
    out.push(`| ${r.n} | ${esc(r.scenario)} | ${r.promised ? "yes" : "no"} | ${r.acquisitions} | ${r.overlaps} | ${r.staleRefused} | ${r.errors} / ${r.timeouts} | ${r.maxGapMs === null ? "-" : r.maxGapMs.toFixed(0)} | ${r.result} | ${esc(r.note)} |`);
  }
  return out.join("\n");
}

function gwTable(rows) {
  const out = [
    "| # | scenario | exclusion promised | requests: 2xx / refused (409, 429, 503) / aborted | reached backend | overlaps at backend | max in flight per key vs promised | keys left locked (+1 s) | result | note |",
    "| --- | --- | --- | ---: | ---: | ---: | --- | --- | --- | --- |",
  ];
  for (const r of rows) {
    const q = r.requests;
    const maxIn = Object.entries(r.perGuard).map(([g, p]) => `${g} ${p.maxInFlight}/${p.promise}`).join(", ");
    out.push(`| ${r.n} | ${esc(r.scenario)} | ${r.control ? "no (control)" : r.promised ? "yes" : "no"} | ${q.ok} / ${q.refused} / ${q.aborted} | ${r.reached} | ${r.overlaps} | ${maxIn} | ${esc(leftText(r.keysLeft))} | ${r.result} | ${esc(r.note)} |`);
  }
  return out.join("\n");
}

function topoTable(rows) {
  const out = [
    "| # | scenario | promised | acquisitions | overlaps | locks gone under their holder | acquisitions lost to the fault (≈) | errors (err / timeout) | longest gap per key (ms) | longest time with no acquisition at all (ms) | result | note |",
    "| --- | --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | --- | --- |",
  ];
  const n = (x) => (x === null || x === undefined ? "-" : Math.round(x));
  for (const r of rows) {
    out.push(`| ${r.n} | ${esc(r.scenario)} | ${r.promised ? "yes" : "no"} | ${r.acquisitions} | ${r.overlaps} | ${r.releaseNotOwner} | ${r.throughput ? r.throughput.lostEstimate : "-"} | ${r.errors} / ${r.timeouts} | ${n(r.maxGapMs)} | ${n(r.maxStallMs)} | ${r.result} | ${esc(r.note)} |`);
  }
  return out.join("\n");
}

function topoIntro(rows) {
  return [
    "The same load and witness as the lock rows, but /crit locks on a Redis topology started for the row (and stopped",
    "after it), through a pair of nginx of its own (nginx/torture.conf rendered with that `redis` option, 2 workers each):",
    "a Sentinel set, a Redis Cluster or independent Redlock masters. Fencing is on except over Redlock, which refuses it.",
    `Each row: ${DURATION / 1000} s of load, fault at ${FAULT_AT / 1000} s (unless the row says otherwise).`,
    "**locks gone under their holder** = releases answered `not_owner` (the lock was no longer there, or someone else's,",
    "when its holder let go: the topology lost it); **acquisitions lost to the fault** = the rate of \"ok\" answers before",
    "the fault carried on to the end of the load, minus the \"ok\" answers after it; **longest time with no acquisition at",
    "all** = the longest stretch in which no key was acquired by anyone (the witness), i.e. when nothing could be locked.",
  ];
}

function verdictOf(rows) {
  const failures = [];
  const fail = (r, why) => { r.result = "FAIL"; failures.push(`row ${r.n} (${r.scenario}): ${why}`); };
  for (const r of rows) {
    r.result = "ok";
    if (r.group === "gateway") {
      if (r.witnessErrors > 0) fail(r, `${r.witnessErrors} witness error(s) at the backend, the count cannot be trusted`);
      if (!r.backendIdle.idle || r.leftInside.length) fail(r, "the backend never went idle after the load, the count cannot be trusted");
      if (r.reached === 0) fail(r, "no request reached the backend");
      if (r.control) {
        if (r.overlaps === 0) fail(r, "the control saw no overlap: the witness cannot see one");
        const planted = r.control.plantLocks.length;
        const found = r.keysLeft.list.filter((k) => k.key === `${r.id}-planted`).length;
        if (found !== planted) fail(r, `the scan found ${found} of the ${planted} lock(s) planted in the lock Redis`);
        if (r.result === "ok") r.result = "ok (control)";
        continue;
      }
      if (r.promised && r.overlaps > 0) fail(r, `${r.overlaps} time(s) more requests in flight at the backend than the guard promises (${Object.entries(r.perGuard).filter(([, p]) => p.overlaps).map(([g, p]) => `${g} ${p.overlaps}, max ${p.maxInFlight} for ${p.promise}`).join("; ")})`);
      // Nothing may stay locked after the load, whatever the row promises about overlaps.
      if (r.keysLeft.keys > 0) fail(r, `${r.keysLeft.keys} guard key(s) left locked ${r.keysLeft.checkMs} ms after the backend went idle (${leftText(r.keysLeft)})`);
      if (r.result === "ok" && !r.promised) r.result = r.overlaps > 0 ? "reported" : "ok (not promised)";
      continue;
    }
    if (r.group === "contention") {
      if (r.promised && r.overlaps > 0) fail(r, `${r.overlaps} overlap(s) where mutual exclusion is promised`);
      if (r.witnessErrors > 0) fail(r, `${r.witnessErrors} witness error(s), the count cannot be trusted`);
      for (const p of r.phases) {
        if (p.acquisitions === 0) fail(r, `${p.name}: no acquisitions at all`);
        if (p.leftovers && !p.leftovers.cleanAtCheck) fail(r, `${p.name}: left behind in the lock Redis ${leftoversText(p.leftovers)}`);
      }
      continue;
    }
    if (r.promised && r.overlaps > 0) fail(r, `${r.overlaps} overlap(s) where mutual exclusion is promised`);
    if (r.witnessErrors > 0) fail(r, `${r.witnessErrors} witness error(s), the count cannot be trusted`);
    if (r.acquisitions === 0) fail(r, "no acquisitions at all");
    if (r.result === "ok" && !r.promised) r.result = r.overlaps > 0 ? "reported" : "ok (not promised)";
  }
  return failures;
}

/** The rows to run: --short, --gateway, --topologies, --contention, --rows 9,gw-reload (numbers or ids), or all. */
function selectRows() {
  const all = SCENARIOS.map((s, i) => ({ ...s, n: i + 1 }));
  if (SHORT) return ["short", all.filter((s) => s.short)];
  if (opt.gateway) return ["gateway", all.filter((s) => s.group === "gateway")];
  if (opt.topologies) return ["topologies", all.filter((s) => s.group === "topology")];
  if (opt.contention) return ["contention", all.filter((s) => s.group === "contention")];
  if (opt.rows) {
    const want = opt.rows.split(",").filter(Boolean);
    for (const w of want) {
      if (!all.some((s) => String(s.n) === w || s.id === w)) throw new Error(`no row ${w} (rows: ${all.map((s) => s.n + " " + s.id).join(", ")})`);
    }
    return ["rows", all.filter((s) => want.includes(String(s.n)) || want.includes(s.id))];
  }
  return ["full", all];
}

function critIntro() {
  return [
    `Two nginx (2 workers each) share one lock Redis; ${CLIENTS} keep-alive clients spread over both loop on`,
    `\`/crit?key=K\` (${KEYS.length} keys): acquire with ttl ${LOCK.ttl} ms and wait ${LOCK.wait} ms (read_timeout ${LOCK.read_timeout} ms),`,
    `${LOCK.hold} ms inside, release. A separate witness Redis, untouched by faults, sees every holder enter and leave:`,
    "**overlaps** = entries while another live holder of the key was inside; **longest gap** = longest time between",
    "one holder leaving a key and the next entering it (a key locked with no live holder, or Redis unavailable);",
    "**stale writes refused** = writes at the end of a critical section that the witness turned away because their",
    "lease's fence (\`fencing = true\`) was smaller than one it had already accepted for the key.",
    `Each scenario: ${DURATION / 1000} s of load, fault at ${FAULT_AT / 1000} s. errors = \`err\` answers (Redis failures), timeout = waited ${LOCK.wait} ms in vain.`,
  ];
}

function gwIntro(rows) {
  const control = rows.filter((r) => r.control).map((r) => r.n);
  const g = (id) => GUARDS[id];
  return [
    "Gateway guards (nginx/torture.conf) in front of a separate backend nginx (nginx/torture-backend.conf) that tells the",
    "witness Redis when each request enters and leaves it, per key. Guards: " +
      `\`${g("mutex").name}\` (mutex, wait ${g("mutex").wait} ms, 503), \`${g("conc").name}\` (concurrency, permits ${g("conc").permits}, wait ${g("conc").wait} ms, 429), ` +
      `\`${g("dedup").name}\` (dedup, 409); all ttl ${g("mutex").ttl} ms (renewed every ttl/3), key \`$arg_key\`; 3 keys per guard (6 in the reload rows).`,
    "Each guarded location has the guard's `access()` and `log()`; where the request ends in another location",
    "(`error_page`, `try_files`, `X-Accel-Redirect`) that location has no `log()`. " +
      (GATEWAY_LOG ? "**This run has the http-level `log_by_lua_block { require(\"resty.dlock.gateway\").log() }`.**" : "No http-level module `log()` in this run (`--gateway-log` adds it)."),
    "**overlaps at backend** = requests entering the backend while as many as the guard promises for the key (1 for",
    "mutex and dedup, 2 for concurrency) were already in flight there; **keys left locked** = guard keys still in the lock",
    `Redis (a lock, or live permits) ${RELEASE_GRACE / 1000} s after the load ended and the backend went idle, then watched ${LEFT_WATCH / 1000} s more;`,
    "a key still held after that (ttl 1 s) is being renewed for a request that is gone. Refusals pause the client 20-80 ms.",
    "A key left locked fails any gateway row; overlaps fail the rows where exclusion is promised." +
      (control.length ? ` Row ${control.join(", ")} checks the harness itself: with no guard the witness must see overlaps, and the scan must find the locks planted in the lock Redis.` : ""),
  ];
}

async function main() {
  const startedAt = new Date();
  const [form, list] = selectRows();
  const gws = list.filter((s) => s.load.kind === "gateway");
  log(`${form} run: ${list.length} rows (${list.map((s) => s.n).join(",")}), ports ${HTTP_PORTS.join(" and ")}, backend ${BACKEND_PORT}${GATEWAY_LOG ? ", with the module-level gateway log" : ""}`);
  for (const m of MASTERS) await waitWorkers(m);
  if (gws.length) await checkGuards();
  // Warm both nginx (lock pools, witness pools) before the first row.
  await drainedLoad(500);
  const rows = [];
  for (const sc of list) {
    log(`${sc.n}. ${sc.title} ...`);
    if (sc.group === "contention") {
      const row = await runContentionRow(sc);
      log(`   ${row.wallMs} ms`);
      rows.push(row);
    } else if (sc.topology) {
      const row = await runTopologyRow(sc);
      log(`   ${row.acquisitions} acquisitions, ${row.overlaps} overlaps, ${row.errors} err, ${row.timeouts} timeout, ${row.httpFailures} http, gap ${row.maxGapMs} ms, stall ${row.maxStallMs} ms, ${row.wallMs} ms`);
      rows.push(row);
    } else if (sc.load.kind === "gateway") {
      const row = await runGatewayRow(sc);
      log(`   ${row.requests.requests} requests, ${row.reached} reached the backend, ${row.overlaps} overlaps, ${row.requests.refused} refused, ${row.requests.aborted} aborted, ${row.keysLeft.keys} key(s) left locked (${row.keysLeft.stillHeld} still held), witness errors ${row.witnessErrors}, ${row.wallMs} ms`);
      rows.push(row);
    } else {
      const row = await runCritRow(sc);
      log(`   ${row.acquisitions} acquisitions, ${row.overlaps} overlaps, ${row.errors} err, ${row.timeouts} timeout, ${row.httpFailures} http, gap ${row.maxGapMs} ms, ${row.wallMs} ms`);
      rows.push(row);
    }
  }
  const failures = verdictOf(rows);
  const promisedRows = rows.filter((r) => r.promised).map((r) => r.n);
  const runtimeS = Math.round((Date.now() - startedAt.getTime()) / 100) / 10;
  const mach = machine();
  const critRows = rows.filter((r) => r.group === "crit");
  const gwRows = rows.filter((r) => r.group === "gateway");
  const topoRows = rows.filter((r) => r.group === "topology");
  const contRows = rows.filter((r) => r.group === "contention");

  const md = [
    `# resty.dlock torture run (${form} form${GATEWAY_LOG ? ", with the module-level gateway log" : ""})`,
    "",
    `${startedAt.toISOString()}; ${mach.nproc} CPUs (${mach.cpu}), ${mach.redis.split(" ").slice(0, 3).join(" ")}, ${mach.nginx}, node ${mach.node}; ${runtimeS} s.`,
    ...(DIST && path.resolve(DIST) !== path.resolve(__dirname, "..", "dist") ? ["", `Lua modules from \`${DIST}\`, not this checkout's dist/.`] : []),
    "",
    ...(critRows.length ? [...critIntro(), "", table(critRows), ""] : []),
    ...(gwRows.length ? ["## Gateway guards", "", ...gwIntro(gwRows), "", gwTable(gwRows), ""] : []),
    ...(topoRows.length ? ["## Redis topologies", "", ...topoIntro(topoRows), "", topoTable(topoRows), ""] : []),
    ...(contRows.length ? ["## Contention", "", ...contentionIntro(contRows), "", contentionTable(contRows), ""] : []),
    `Exclusion is promised in rows ${promisedRows.join(", ") || "(none here)"}: an overlap there fails the run${gwRows.length ? ", and so does a gateway key left locked" : ""}${contRows.length ? `${gwRows.length ? "," : ""} and so does a lock key or a wake-up subscription left behind by a contention row` : ""}.`,
    ...(form === "full" ? ["Rows 3 (Redis loses its data) and 7 (a holder paused past its ttl) are outside what a Redis lease can promise: reported, not failed."] : []),
    ...(topoRows.some((r) => !r.promised) ? [`Rows ${topoRows.filter((r) => !r.promised).map((r) => r.n).join(" and ")} (a master SIGKILLed) can lose locks that only the dead master had, with replication asynchronous: reported, not failed.`] : []),
    "",
    failures.length ? "**FAIL**\n\n" + failures.map((f) => "- " + f).join("\n") : "**PASS**: no overlap where exclusion is promised" + (gwRows.length ? ", no gateway key left locked" : "") + (contRows.length ? ", nothing left in the lock Redis after the contention rows" : "") + ".",
    "",
  ].join("\n");

  const json = {
    timestamp: startedAt.toISOString(), form, gatewayLog: GATEWAY_LOG, dist: DIST, runtimeSeconds: runtimeS,
    config: {
      clients: CLIENTS, keys: KEYS, nginxInstances: 2, workersEach: 2, durationMs: DURATION, faultAtMs: FAULT_AT, lock: LOCK,
      ...(gwRows.length ? { gateway: { guards: GUARDS, releaseGraceMs: RELEASE_GRACE, leftWatchMs: LEFT_WATCH } } : {}),
      ...(contRows.length ? { contention: { releasedChannel: RELEASED_CHANNEL } } : {}),
    },
    machine: mach, promisedRows, pass: failures.length === 0, failures, scenarios: rows,
  };
  // The short form (run by make test) must not overwrite the full run's results; neither must the others.
  const base = { full: "torture", short: "torture-short", gateway: "torture-gateway", topologies: "torture-topologies", contention: "torture-contention", rows: "torture-rows" }[form] + (GATEWAY_LOG ? "-gwlog" : "");
  fs.mkdirSync(opt.out, { recursive: true });
  fs.writeFileSync(path.join(opt.out, base + ".md"), md);
  fs.writeFileSync(path.join(opt.out, base + ".json"), JSON.stringify(json, null, 2) + "\n");
  console.log(md);
  console.log(`wrote bench/results/${base}.md and ${base}.json`);
  agent.destroy();
  return failures.length === 0 ? 0 : 1;
}

main().then((rc) => { contAll(); process.exit(rc); }, (e) => { contAll(); console.error("torture:", e.stack || e); process.exit(2); });
