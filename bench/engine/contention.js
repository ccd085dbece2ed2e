// A contention row: many waiters per key, phase after phase, measured (hand-offs,
// commands per acquisition) and checked (nothing left in the lock Redis).
"use strict";
const { sleep, once, children } = require("../lib");
const { LOCK_PORT, WITNESS_PORT, LOCK, log, ms, procs, BASE, S, harnessLockPorts } = require("./ctx");
const { Monitor, handoffStats, round2 } = require("../monitor");
const { contentionNoteOf } = require("./contention-report");
const { quiesce } = require("./crit");
const { FAULTS } = require("./faults");
const { newCounts, httpText, startContentionLoad } = require("./load");
const { watchLeftovers } = require("./lockredis");
const { collect, collectHandoffs, logSize, logSlice, logStats } = require("./witness");

/** Worker pid → nginx instance (1, 2) of the target's masters now. */
function workerMap(into = new Map()) {
  S.target.masters.forEach((m, i) => { for (const pid of children(m)) into.set(pid, i + 1); });
  return into;
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
      const { body } = await httpText(S.target.ports[i % S.target.ports.length], `/crit?key=${k}`, 5000);
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
  const want = S.target.masters.reduce((a, m) => a + children(m).length, 0);
  for (let i = 0; i < 60 && Object.keys(seen).length < want; i++) {
    try {
      const { body } = await httpText(S.target.ports[i % S.target.ports.length], `/crit-waiters?keys=${keys.join(",")}`, 1000);
      const [pid, ...kv] = body.trim().split(" ");
      seen[pid] = Object.fromEntries(kv.map((x) => x.split("=")).map(([k, n]) => [k, n === "-" ? null : Number(n)]));
    } catch (e) { /* next */ }
  }
  return seen;
}

async function critStats(reset) {
  const out = { abortedWaiting: 0, abortedInside: 0 };
  for (const port of S.target.ports) {
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
  const logFrom = S.target.dirs.map(logSize);
  const pids = workerMap();
  const counts = { ...newCounts(), aborted: 0, byKind: { full: 0, short: 0, aborted: 0 }, timeoutBy: { full: 0, short: 0, aborted: 0 }, timeoutAt: [] };
  const mon = await Monitor.start(LOCK_PORT, { exclude: harnessLockPorts });
  const duration = ph.durationMs;
  const start = Date.now();
  const f = { at: null, detail: "", deadline: start + duration };
  const stop = startContentionLoad(L, ph.path, counts);
  let faultErr = null;
  const faultDone = F ? sleep(sc.fault.atMs).then(() => F.run(f, sc.fault, S.target)).catch((e) => { faultErr = e; }) : Promise.resolve();
  await sleep(duration);
  await faultDone;
  const loadEnd = Date.now();
  await stop();
  const drainMs = ms(loadEnd, Date.now());
  // Unsubscribing follows the last waiter within a subscriber tick (10 ms): counted too.
  await sleep(300);
  mon.stop();
  procs.contAll();
  const left = ph.leftovers ? await watchLeftovers(L.keys, loadEnd + drainMs, ph.leftovers) : null;
  const w = await collect();
  const handoffs = await collectHandoffs(L.keys);
  const waitersAfter = ph.leftovers ? await waitersNow(L.keys) : null;
  const probed = ph.probe ? await probe(L.keys, ph.probe) : null;
  workerMap(pids); // a worker started during the phase (the fault) too
  const aborts = await critStats(false);
  const logs = logStats(S.target.dirs.map((d, i) => logSlice(d, logFrom[i])).join(""));
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

/** The goals for waiting under contention, checked on a resty.dlock phase. */
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
  S.target = { ...BASE, keys: L.keys };
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
    S.target = BASE;
  }
}

module.exports = { workerMap, probe, waitersNow, critStats, runPhase, goalsOf, runContentionRow };
