// make torture: the load and the faults of the resty.dlock safety harness.
// bench/torture starts the processes (lock Redis, witness Redis, two nginx from
// nginx/torture.conf) and runs this script with their ports and pids. 200 HTTP
// clients loop on /crit?key=kN (5 keys) over both nginx while one fault per
// scenario is injected; each critical section reports to the witness Redis,
// which counts acquisitions, overlaps (two holders inside at once) and the
// longest gap between one holder leaving and the next entering.
// Writes bench/results/torture.{md,json}; exits 1 when a scenario where the
// design promises mutual exclusion saw an overlap (or the harness broke).
"use strict";
const { spawn, spawnSync } = require("node:child_process");
const fs = require("node:fs");
const http = require("node:http");
const net = require("node:net");
const os = require("node:os");
const path = require("node:path");

// ---------------------------------------------------------------- arguments
function parseArgs(argv) {
  const o = { short: false };
  for (let i = 0; i < argv.length; i++) {
    const a = argv[i];
    if (a === "--short") o.short = true;
    else if (a.startsWith("--")) o[a.slice(2)] = argv[++i];
    else throw new Error("unknown argument " + a);
  }
  for (const k of ["prefix", "pids", "lock-port", "lock-pid", "witness-port", "http", "master", "nginx", "out"]) {
    if (o[k] === undefined) throw new Error("missing --" + k + " (run bench/torture, not this script)");
  }
  return o;
}
const opt = parseArgs(process.argv.slice(2));
const SHORT = opt.short;
const PREFIX = opt.prefix;
const LOCK_PORT = Number(opt["lock-port"]);
const WITNESS_PORT = Number(opt["witness-port"]);
const HTTP_PORTS = opt.http.split(",").map(Number);
const MASTERS = opt.master.split(",").map(Number);
const CLIENTS = 200;
const KEYS = ["k1", "k2", "k3", "k4", "k5"];
const DURATION = SHORT ? 3000 : 8000; // ms of load per scenario
const FAULT_AT = SHORT ? 1000 : 2000; // ms after the load starts
const REQUEST_TIMEOUT = 15000;
const LOCK = { ttl: 1000, wait: 3000, hold: 20, connect_timeout: 200, read_timeout: 300 };

const sleep = (ms) => new Promise((r) => setTimeout(r, ms));
const log = (...a) => console.error("[torture]", ...a);

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

class Resp {
  static connect(port, timeoutMs = 2000) {
    return new Promise((resolve, reject) => {
      const sock = net.createConnection({ host: "127.0.0.1", port });
      const timer = setTimeout(() => { sock.destroy(); reject(new Error("connect timeout to " + port)); }, timeoutMs);
      sock.once("error", (e) => { clearTimeout(timer); reject(e); });
      sock.once("connect", () => { clearTimeout(timer); resolve(new Resp(sock)); });
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

// ---------------------------------------------------------------- load
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
  return { ok: 0, busy: 0, timeout: 0, err: 0, werr: 0, http: 0, other: 0, errMsgs: {}, httpMsgs: {}, werrMsgs: {}, okMs: [] };
}

function bump(map, msg) {
  // Group messages that differ only in numbers (ports, ms).
  const k = msg.replace(/\d+/g, "N").slice(0, 160);
  map[k] = (map[k] || 0) + 1;
}

/** 200 clients, split over both nginx, until stop() says so. */
function startLoad(counts) {
  let stopping = false;
  const one = async (i) => {
    const port = HTTP_PORTS[i % HTTP_PORTS.length];
    while (!stopping) {
      const key = KEYS[Math.floor(Math.random() * KEYS.length)];
      try {
        const t = process.hrtime.bigint();
        const { status, body } = await crit(port, key);
        if (status !== 200) { counts.http++; bump(counts.httpMsgs, "HTTP " + status); }
        else if (body === "ok") { counts.ok++; counts.okMs.push(Number(process.hrtime.bigint() - t) / 1e6); }
        else if (body === "busy") counts.busy++;
        else if (body === "timeout") counts.timeout++;
        else if (body.startsWith("err ")) { counts.err++; bump(counts.errMsgs, body.slice(4)); }
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

// ---------------------------------------------------------------- witness
async function witnessReset() {
  await once(WITNESS_PORT, "FLUSHALL");
}

async function collect() {
  const w = await Resp.connect(WITNESS_PORT);
  try {
    const out = { acquisitions: 0, overlaps: 0, staleRefused: 0, maxGapUs: -1, maxGapKey: null, maxGapFromUs: null, perKey: {}, leftInside: [] };
    for (const k of KEYS) {
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
    return out;
  } finally {
    w.close();
  }
}

/** A worker of nginx `master` that is inside a critical section right now (the witness says so). */
async function pickHolder(master) {
  const workers = workersOf(master);
  const w = await Resp.connect(WITNESS_PORT);
  try {
    const end = Date.now() + 1000;
    while (Date.now() < end) {
      for (const k of KEYS) {
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
    for (const k of KEYS) {
      for (const m of await w.cmd("SMEMBERS", "inside:" + k)) {
        if (m.startsWith(pid + ":")) n += await w.cmd("SREM", "inside:" + k, m);
      }
    }
  } finally {
    w.close();
  }
  return n;
}

// ---------------------------------------------------------------- error logs
function logSize(n) {
  try { return fs.statSync(path.join(PREFIX, `n${n}`, "logs", "error.log")).size; } catch (e) { return 0; }
}
function logSlice(n, from) {
  try {
    const buf = fs.readFileSync(path.join(PREFIX, `n${n}`, "logs", "error.log"));
    return buf.subarray(from).toString("utf8");
  } catch (e) { return ""; }
}
function logStats(text) {
  const lines = text.split("\n");
  const bad = lines.filter((l) => /\[(error|crit|alert|emerg)\]/.test(l));
  const samples = {};
  for (const l of bad) bump(samples, l.replace(/^.*?\[(error|crit|alert|emerg)\] \d+#\d+: (\*\d+ )?/, "[$1] ").replace(/, client: .*$/, ""));
  const warn = {};
  for (const l of lines.filter((x) => /\[warn\]/.test(x))) bump(warn, l.replace(/^.*?\[warn\] \d+#\d+: (\*\d+ )?/, "").replace(/, client: .*$/, ""));
  return {
    errors: bad.length,
    warnings: Object.entries(warn).sort((a, b) => b[1] - a[1]).slice(0, 5),
    cleanupRemoved: lines.filter((l) => l.includes("acquired by a request whose reply was lost")).length,
    cleanupGaveUp: lines.filter((l) => l.includes("giving up cleanup")).length,
    samples: Object.entries(samples).sort((a, b) => b[1] - a[1]).slice(0, 5),
  };
}

// ---------------------------------------------------------------- scenarios
const ms = (a, b) => Math.round(b - a);

const SCENARIOS = [
  {
    id: "no-fault", title: "no fault", promised: true, short: true,
    about: "baseline; the gap is release + the waiters' backoff (2-64 ms)",
  },
  {
    id: "redis-sigstop", title: "lock Redis SIGSTOP 1.5 s", promised: true,
    about: "calls in flight hit read_timeout (300 ms) and fail as err; leases run out while Redis is paused",
    async fault(f) {
      process.kill(lockRedis.pid, "SIGSTOP");
      stopped.add(lockRedis.pid);
      f.at = Date.now();
      await sleep(1500);
      process.kill(lockRedis.pid, "SIGCONT");
      stopped.delete(lockRedis.pid);
      f.detail = `redis pid ${lockRedis.pid} stopped ${ms(f.at, Date.now())} ms`;
    },
  },
  {
    id: "redis-restart", title: "lock Redis restart, no persistence", promised: false,
    about: "every lock vanishes with the restart: a holder still inside can be joined by a newcomer (not promised)",
    async fault(f) {
      const old = lockRedis.pid;
      f.at = Date.now();
      await killLock("SIGKILL");
      const startMs = await startLock("plain");
      f.detail = `redis pid ${old} SIGKILLed, pid ${lockRedis.pid} serving again after ${ms(f.at, Date.now())} ms (start ${startMs} ms)`;
    },
  },
  {
    id: "redis-restart-aof", title: "lock Redis restart, appendfsync always", promised: true,
    about: "acknowledged locks are fsynced (SET ... PXAT in the AOF) and come back with the restart",
    async prepare() {
      await killLock("SIGTERM");
      await startLock("aof");
      return true; // pools point at the old process: warm up
    },
    async fault(f) {
      const old = lockRedis.pid;
      f.at = Date.now();
      await killLock("SIGKILL");
      const startMs = await startLock("aof");
      const keys = await once(LOCK_PORT, "KEYS", "torture:*");
      f.detail = `redis pid ${old} SIGKILLed, pid ${lockRedis.pid} (same AOF dir) serving again after ${ms(f.at, Date.now())} ms with ${keys.length} lock key(s) restored`;
    },
    async after() {
      await killLock("SIGTERM");
      await startLock("plain");
      return true;
    },
  },
  {
    id: "worker-kill", title: "nginx worker holding a lock SIGKILLed", promised: true, short: true,
    about: "the dead worker's lease blocks its key until the ttl (1 s) runs out; the master respawns the worker",
    async fault(f) {
      const h = await pickHolder(MASTERS[0]);
      process.kill(h.pid, "SIGKILL");
      f.at = Date.now();
      await waitDead(h.pid);
      await sleep(50); // a witness call it sent just before dying has landed by now
      const removed = await forgetHolder(h.pid);
      f.detail = `worker ${h.pid} of instance 1 killed ${h.holding ? "inside its critical section on " + h.key : "(no holder seen within 1 s: any worker)"}; ${removed} witness entr${removed === 1 ? "y" : "ies"} of it removed`;
      f.holding = h.holding;
    },
  },
  {
    id: "reload", title: "nginx -s reload under load", promised: true, short: true,
    about: "old workers finish their critical sections and release before they exit",
    async fault(f) {
      const before = workersOf(MASTERS[0]);
      const r = spawnSync(opt.nginx, ["-p", path.join(PREFIX, "n1"), "-c", path.join(PREFIX, "n1", "nginx.conf"), "-s", "reload"], { encoding: "utf8" });
      f.at = Date.now();
      if (r.status !== 0) throw new Error("nginx -s reload failed: " + r.stderr);
      f.detail = `instance 1 reloaded (old workers ${before.join(", ")})`;
    },
  },
  {
    id: "worker-sigstop", title: "nginx worker holding a lock SIGSTOP 2.5 s (> ttl)", promised: false,
    about: "overlaps EXPECTED: the stopped holder's lease expired and the key went to someone else while it still believed it held the lock. A lease alone cannot protect against this; fencing can: the stalled holder's write carries an old fence and the witness refuses it (stale writes column)",
    async fault(f) {
      const h = await pickHolder(MASTERS[0]);
      process.kill(h.pid, "SIGSTOP");
      stopped.add(h.pid);
      f.at = Date.now();
      await sleep(2500);
      process.kill(h.pid, "SIGCONT");
      stopped.delete(h.pid);
      f.detail = `worker ${h.pid} of instance 1 stopped ${ms(f.at, Date.now())} ms ${h.holding ? "inside its critical section on " + h.key : "(no holder seen within 1 s: any worker)"}`;
      f.holding = h.holding;
    },
  },
];

async function drainedLoad(msLoad) {
  const stop = startLoad(newCounts());
  await sleep(msLoad);
  await stop();
}

async function quiesce() {
  // Between scenarios: both nginx back to 2 workers, no lock or witness state left over.
  for (const m of MASTERS) await waitWorkers(m);
  await sleep(LOCK.ttl + 100); // lost-reply cleanups and orphaned leases run out
  await once(LOCK_PORT, "FLUSHALL");
  await witnessReset();
}

async function runScenario(sc, n) {
  const t0 = Date.now();
  if (sc.prepare && (await sc.prepare())) await drainedLoad(1000);
  await quiesce();
  const logFrom = [logSize(1), logSize(2)];
  const counts = newCounts();
  const f = { at: null, detail: "" };
  const start = Date.now();
  const stop = startLoad(counts);
  let faultErr = null;
  const faultDone = sc.fault
    ? sleep(FAULT_AT).then(() => sc.fault(f)).catch((e) => { faultErr = e; })
    : Promise.resolve();
  await sleep(DURATION);
  await faultDone;
  const loadEnd = Date.now();
  await stop();
  const drainMs = ms(loadEnd, Date.now());
  contAll();
  const w = await collect();
  const logs = logStats(logSlice(1, logFrom[0]) + logSlice(2, logFrom[1]));
  if (sc.after && (await sc.after())) await drainedLoad(1000);
  if (faultErr) throw new Error(`${sc.title}: fault injection failed: ${faultErr.stack || faultErr}`);

  const gapMs = w.maxGapUs < 0 ? null : w.maxGapUs / 1000;
  const gapFromFault = f.at !== null && w.maxGapFromUs !== null ? Math.round(w.maxGapFromUs / 1000 - f.at) : null;
  const top = (m) => Object.entries(m).sort((a, b) => b[1] - a[1]).slice(0, 3);
  const lat = counts.okMs.sort((a, b) => a - b);
  const pct = (q) => (lat.length ? Math.round(lat[Math.min(lat.length - 1, Math.floor(q * lat.length))]) : null);
  const row = {
    n, id: sc.id, scenario: sc.title, promised: sc.promised,
    acquisitions: w.acquisitions, overlaps: w.overlaps, staleRefused: w.staleRefused,
    ok: counts.ok, errors: counts.err, timeouts: counts.timeout, busy: counts.busy,
    witnessErrors: counts.werr, httpFailures: counts.http + counts.other,
    // Client-side time of /crit requests answered "ok": waiting + 20 ms inside + release.
    okLatencyMs: { p50: pct(0.5), p90: pct(0.9), p99: pct(0.99), max: lat.length ? Math.round(lat[lat.length - 1]) : null },
    maxGapMs: gapMs, maxGapKey: w.maxGapKey, maxGapStartVsFaultMs: gapFromFault,
    releaseNotOwner: w.releaseNotOwner, releaseError: w.releaseError,
    perKey: w.perKey, overlapLog: w.overlapLog, leftInside: w.leftInside,
    fault: sc.fault ? { atMs: f.at === null ? null : f.at - start, detail: f.detail } : null,
    topErrors: top(counts.errMsgs), topHttpFailures: top(counts.httpMsgs), topWitnessErrors: top(counts.werrMsgs),
    nginxErrorLog: logs,
    loadMs: loadEnd - start, drainMs, wallMs: Date.now() - t0,
    about: sc.about,
  };
  row.note = noteOf(row);
  return row;
}

function noteOf(r) {
  const bits = [r.about];
  if (r.fault && r.fault.detail) bits.push(r.fault.detail);
  if (!r.fault) bits.push(`"ok" requests took p50 ${r.okLatencyMs.p50} / p99 ${r.okLatencyMs.p99} / max ${r.okLatencyMs.max} ms; ${r.timeouts} of ${r.ok + r.timeouts} waited 3 s in vain`);
  if (r.maxGapStartVsFaultMs !== null && r.maxGapMs !== null && r.maxGapMs > 150) {
    const d = r.maxGapStartVsFaultMs;
    bits.push(`longest gap began ${Math.abs(d)} ms ${d < 0 ? "before" : "after"} the fault`);
  }
  if (r.id === "redis-restart" && r.overlaps === 0) bits.push(`none seen here: the restart outlasted the ${LOCK.hold} ms critical section, so every holder had left before the fresh Redis granted anything`);
  if (r.id === "worker-sigstop" && r.overlaps === 0) bits.push("none seen this time: the stopped worker's key was not taken over before it woke");
  if (r.releaseNotOwner) bits.push(`${r.releaseNotOwner} release(s) answered not_owner`);
  if (r.releaseError) bits.push(`${r.releaseError} release(s) failed on Redis`);
  if (r.httpFailures) bits.push(`${r.httpFailures} HTTP/connection failure(s) (${r.topHttpFailures.map(([m, c]) => m + " ×" + c).join(", ")})`);
  if (r.errors) bits.push(`top err: ${r.topErrors.slice(0, 2).map(([m, c]) => `"${m}" ×${c}`).join("; ")}`);
  if (r.nginxErrorLog.cleanupRemoved) bits.push(`${r.nginxErrorLog.cleanupRemoved} lost-reply lock(s) removed by the cleanup timer`);
  if (r.witnessErrors) bits.push(`WITNESS ERRORS ${r.witnessErrors}: this row is not trustworthy`);
  if (r.leftInside.length) bits.push(`holders left inside at the end: ${r.leftInside.join(", ")}`);
  return bits.join("; ");
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

function verdictOf(rows) {
  const failures = [];
  for (const r of rows) {
    r.result = "ok";
    if (r.promised && r.overlaps > 0) { r.result = "FAIL"; failures.push(`row ${r.n} (${r.scenario}): ${r.overlaps} overlap(s) where mutual exclusion is promised`); }
    if (r.witnessErrors > 0) { r.result = "FAIL"; failures.push(`row ${r.n} (${r.scenario}): ${r.witnessErrors} witness error(s), the count cannot be trusted`); }
    if (r.acquisitions === 0) { r.result = "FAIL"; failures.push(`row ${r.n} (${r.scenario}): no acquisitions at all`); }
    if (r.result === "ok" && !r.promised) r.result = r.overlaps > 0 ? "reported" : "ok (not promised)";
  }
  return failures;
}

async function main() {
  const startedAt = new Date();
  const list = SCENARIOS.map((s, i) => ({ ...s, n: i + 1 })).filter((s) => !SHORT || s.short);
  log(`${SHORT ? "short" : "full"} run: ${list.length} scenarios, ${CLIENTS} clients on ports ${HTTP_PORTS.join(" and ")}, keys ${KEYS.join(",")}, ${DURATION} ms each, fault at ${FAULT_AT} ms`);
  for (const m of MASTERS) await waitWorkers(m);
  // Warm both nginx (lock pools, witness pools) before the first row.
  await drainedLoad(500);
  const rows = [];
  for (const sc of list) {
    log(`${sc.n}. ${sc.title} ...`);
    const row = await runScenario(sc, sc.n);
    log(`   ${row.acquisitions} acquisitions, ${row.overlaps} overlaps, ${row.errors} err, ${row.timeouts} timeout, ${row.httpFailures} http, gap ${row.maxGapMs} ms, ${row.wallMs} ms`);
    rows.push(row);
  }
  const failures = verdictOf(rows);
  const promisedRows = rows.filter((r) => r.promised).map((r) => r.n);
  const runtimeS = Math.round((Date.now() - startedAt.getTime()) / 100) / 10;
  const mach = machine();

  const md = [
    `# resty.dlock torture run (${SHORT ? "short" : "full"} form)`,
    "",
    `${startedAt.toISOString()}; ${mach.nproc} CPUs (${mach.cpu}), ${mach.redis.split(" ").slice(0, 3).join(" ")}, ${mach.nginx}, node ${mach.node}; ${runtimeS} s.`,
    "",
    `Two nginx (2 workers each) share one lock Redis; ${CLIENTS} keep-alive clients spread over both loop on`,
    `\`/crit?key=K\` (${KEYS.length} keys): acquire with ttl ${LOCK.ttl} ms and wait ${LOCK.wait} ms (read_timeout ${LOCK.read_timeout} ms),`,
    `${LOCK.hold} ms inside, release. A separate witness Redis, untouched by faults, sees every holder enter and leave:`,
    "**overlaps** = entries while another live holder of the key was inside; **longest gap** = longest time between",
    "one holder leaving a key and the next entering it (a key locked with no live holder, or Redis unavailable);",
    "**stale writes refused** = writes at the end of a critical section that the witness turned away because their",
    "lease's fence (\`fencing = true\`) was smaller than one it had already accepted for the key.",
    `Each scenario: ${DURATION / 1000} s of load, fault at ${FAULT_AT / 1000} s. errors = \`err\` answers (Redis failures), timeout = waited ${LOCK.wait} ms in vain.`,
    "",
    table(rows),
    "",
    `Mutual exclusion is promised in rows ${promisedRows.join(", ")}: an overlap there fails the run.`,
    ...(SHORT ? [] : ["Rows 3 (Redis loses its data) and 7 (a holder paused past its ttl) are outside what a Redis lease can promise: reported, not failed."]),
    "",
    failures.length ? "**FAIL**\n\n" + failures.map((f) => "- " + f).join("\n") : "**PASS**: no overlap where mutual exclusion is promised.",
    "",
  ].join("\n");

  const json = {
    timestamp: startedAt.toISOString(), form: SHORT ? "short" : "full", runtimeSeconds: runtimeS,
    config: { clients: CLIENTS, keys: KEYS, nginxInstances: 2, workersEach: 2, durationMs: DURATION, faultAtMs: FAULT_AT, lock: LOCK },
    machine: mach, promisedRows, pass: failures.length === 0, failures, scenarios: rows,
  };
  // The short form (run by make test) must not overwrite the full run's results.
  const base = SHORT ? "torture-short" : "torture";
  fs.mkdirSync(opt.out, { recursive: true });
  fs.writeFileSync(path.join(opt.out, base + ".md"), md);
  fs.writeFileSync(path.join(opt.out, base + ".json"), JSON.stringify(json, null, 2) + "\n");
  console.log(md);
  console.log(`wrote bench/results/${base}.md and ${base}.json`);
  agent.destroy();
  return failures.length === 0 ? 0 : 1;
}

main().then((rc) => { contAll(); process.exit(rc); }, (e) => { contAll(); console.error("torture:", e.stack || e); process.exit(2); });
