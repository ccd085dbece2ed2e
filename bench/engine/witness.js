// What the harness observes: the witness Redis (holders entering and leaving, per key;
// the backend's requests), and the nginx error logs of a row.
"use strict";
const fs = require("node:fs");
const path = require("node:path");
const { sleep, once, Resp, hash, children } = require("../lib");
const { PREFIX, WITNESS_PORT, BACKEND_PORT, bump, S, GUARDS } = require("./ctx");
const { httpText } = require("./load");

async function witnessReset() {
  await once(WITNESS_PORT, "FLUSHALL");
}

async function collect() {
  const w = await Resp.connect(WITNESS_PORT);
  try {
    const out = { acquisitions: 0, overlaps: 0, staleRefused: 0, maxGapUs: -1, maxGapKey: null, maxGapFromUs: null, perKey: {}, leftInside: [] };
    for (const k of S.target.keys) {
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
    // Read-write rows (nginx/torture.conf's ENTER with a mode): readers and
    // writers that entered, readers entering beside readers, the most readers
    // inside a key at once, the longest wait of a reader and of a writer (us).
    const rw = { readers: 0, writers: 0, readersBesideReaders: 0, maxReaders: 0, maxReaderWaitUs: -1, maxWriterWaitUs: -1, maxWriterWaitKey: null };
    for (const k of S.target.keys) {
      rw.readers += Number(await w.cmd("GET", "racq:" + k)) || 0;
      rw.writers += Number(await w.cmd("GET", "wacq:" + k)) || 0;
      rw.readersBesideReaders += Number(await w.cmd("GET", "rshared:" + k)) || 0;
      rw.maxReaders = Math.max(rw.maxReaders, Number(await w.cmd("GET", "maxreaders:" + k)) || 0);
      const rwait = await w.cmd("GET", "maxrwait:" + k);
      if (rwait !== null) rw.maxReaderWaitUs = Math.max(rw.maxReaderWaitUs, Number(rwait));
      const wwait = await w.cmd("GET", "maxwwait:" + k);
      if (wwait !== null && Number(wwait) > rw.maxWriterWaitUs) { rw.maxWriterWaitUs = Number(wwait); rw.maxWriterWaitKey = k; }
    }
    out.rw = rw.readers + rw.writers > 0 ? rw : null;
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

/** What the backend told the witness during a gateway row (nginx/torture-backend.conf). */
async function collectGateway(row) {
  const w = await Resp.connect(WITNESS_PORT);
  try {
    const reached = hash(await w.cmd("HGETALL", "gw:reached"));
    const overlaps = hash(await w.cmd("HGETALL", "gw:overlaps"));
    const maxIn = hash(await w.cmd("HGETALL", "gw:maxin"));
    const shared = hash(await w.cmd("HGETALL", "gw:shared"));
    const perGuard = {};
    for (const g of row.load.guards) {
      const byEndpoint = {};
      let n = 0;
      for (const [k, v] of Object.entries(reached)) {
        const [gg, ep] = k.split("|");
        if (gg === g) { byEndpoint[ep] = v; n += v; }
      }
      perGuard[g] = { promise: GUARDS[g].promise, reached: n, byEndpoint, overlaps: overlaps[g] || 0, maxInFlight: maxIn[g] || 0, readersBesideReaders: shared[g] || 0 };
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

/**
 * A worker of nginx `master` that is inside a critical section right now (the
 * witness says so); mode "r": one inside as a reader (/crit-rw's members end in ":r").
 */
async function pickHolder(master, mode) {
  const workers = children(master);
  const w = await Resp.connect(WITNESS_PORT);
  try {
    const end = Date.now() + 1000;
    while (Date.now() < end) {
      for (const k of S.target.keys) {
        for (const m of await w.cmd("SMEMBERS", "inside:" + k)) {
          const pid = Number(m.split(":")[0]);
          if (mode && !m.endsWith(":" + mode)) continue;
          if (workers.includes(pid)) return { pid, key: k, holding: true, mode: mode || null };
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
    for (const k of S.target.keys) {
      for (const m of await w.cmd("SMEMBERS", "inside:" + k)) {
        if (m.startsWith(pid + ":")) n += await w.cmd("SREM", "inside:" + k, m);
      }
    }
  } finally {
    w.close();
  }
  return n;
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
    // One line per cleanup sweep, counting the keys it removed.
    cleanupRemoved: lines.reduce((n, l) => n + Number((/removed (\d+) key\(s\) acquired by requests whose replies were lost/.exec(l) || [0, 0])[1]), 0),
    leaseLost: lines.filter((l) => l.includes("lost while its request is in flight")).length,
    samples: Object.entries(samples).sort((a, b) => b[1] - a[1]).slice(0, 5),
  };
}

module.exports = { witnessReset, collect, collectGateway, backendStats, pickHolder, forgetHolder, collectHandoffs, logSize, logSlice, EXPECTED, logStats };
