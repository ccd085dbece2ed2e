// A gateway row: clients on the guarded locations, the backend's witness, guard keys left locked.
"use strict";
const { sleep, once } = require("../lib");
const { WITNESS_PORT, HTTP_PORTS, RELEASE_GRACE, IDLE_CAP, ms, LOG_DIRS, GUARDS, VIAS } = require("./ctx");
const { quiesce } = require("./crit");
const { FAULTS } = require("./faults");
const { newGwCounts, startGatewayLoad, httpText } = require("./load");
const { plantLock, keysLeft } = require("./lockredis");
const { collectGateway, backendStats, logSize, logSlice, logStats } = require("./witness");

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
      ...w.perGuard[g], requests: c.requests, byMethod: c.byMethod, ok, refused, other, status: c.status, aborted: c.aborted,
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
    `${g}: ${p.reached} reached${Object.keys(p.byEndpoint).length > 1 ? ` (${Object.entries(p.byEndpoint).map(([e, n]) => e + " " + n).join(", ")})` : ""}, ` +
    (p.promise === "rw"
      ? `requests sent ${Object.entries(p.byMethod).map(([m, n]) => `${m} ${n}`).join(", ")}, a GET entered beside other GETs ${p.readersBesideReaders} times, max ${p.maxInFlight} in flight`
      : `max ${p.maxInFlight} in flight (promised ${p.promise})`) +
    `, ${p.overlaps} overlap(s), ${p.refused} refused, ${p.keysLeft} key(s) left`).join("; "));
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

module.exports = { checkGuards, frontWriting, waitIdle, runGatewayRow, leftText, gwNoteOf };
