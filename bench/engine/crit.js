// A crit row: the load on /crit, one fault, what the witness saw.
"use strict";
const { sleep, waitWorkers } = require("../lib");
const { DURATION, FAULT_AT, LOCK, ms, procs, S, GUARDS, SCENARIOS } = require("./ctx");
const { FAULTS } = require("./faults");
const { newCounts, startLoad, drainedLoad } = require("./load");
const { witnessReset, collect, backendStats, logSize, logSlice, logStats } = require("./witness");

const fmtMs = (x) => (x === null ? "-" : `${Math.round(x)} ms`);

async function quiesce(row) {
  // Between rows: every nginx back to 2 workers, no lock or witness state left over.
  for (const m of S.target.masters) await waitWorkers(m);
  await sleep(LOCK.ttl + 100); // lost-reply cleanups and orphaned leases run out
  await S.target.flush();
  if (S.target.topo) await S.target.topo.resetStats();
  await witnessReset();
  if (row.load.kind === "gateway") {
    // Leases an earlier row leaked are still renewed: the flush makes their next
    // renewal (every ttl/3) fail, and what that logs must not land in this row.
    await sleep(Math.max(...Object.values(GUARDS).map((g) => g.ttl || 0)) / 3 + 150);
    await backendStats(true);
  }
}

async function runCritRow(sc) {
  // A row of its own keys (the sets of acquire_all rows): the witness reads those.
  const target = S.target;
  if (sc.load.keys) S.target = { ...target, keys: sc.load.keys };
  try {
    return await critRow(sc);
  } finally {
    S.target = target;
  }
}

async function critRow(sc) {
  const t0 = Date.now();
  const F = sc.fault ? FAULTS[sc.fault.kind] : null;
  if (F && F.prepare && (await F.prepare(sc.fault))) await drainedLoad(1000);
  await quiesce(sc);
  const dirs = S.target.dirs;
  const logFrom = dirs.map(logSize);
  const counts = newCounts();
  const start = Date.now();
  const duration = sc.load.durationMs ?? DURATION;
  // deadline: a fault that watches what follows it (a failover) stops watching when the load ends.
  const f = { at: null, detail: "", deadline: start + duration };
  const stop = startLoad(counts, sc.load);
  let faultErr = null;
  const faultDone = F
    ? sleep(sc.fault.atMs ?? FAULT_AT).then(() => F.run(f, sc.fault, S.target)).catch((e) => { faultErr = e; })
    : Promise.resolve();
  await sleep(duration);
  await faultDone;
  const loadEnd = Date.now();
  await stop();
  const drainMs = ms(loadEnd, Date.now());
  procs.contAll();
  const w = await collect();
  const redisErrors = S.target.topo ? await S.target.topo.errorStats() : null;
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
    n: sc.n, id: sc.id, group: sc.group === "rw" ? "rw" : "crit", scenario: sc.title, promised: sc.promised,
    noTimeouts: !!sc.load.noTimeouts, path: sc.load.path || "/crit", readersShare: sc.load.readers ?? null,
    rw: w.rw && {
      ...w.rw, maxReaderWaitMs: w.rw.maxReaderWaitUs < 0 ? null : w.rw.maxReaderWaitUs / 1000,
      maxWriterWaitMs: w.rw.maxWriterWaitUs < 0 ? null : w.rw.maxWriterWaitUs / 1000, byMode: counts.byMode,
    },
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
  if (r.rw) {
    const m = r.rw.byMode;
    bits.push(`${r.rw.readers} reader and ${r.rw.writers} writer entries; a reader entered beside other readers ${r.rw.readersBesideReaders} times, ` +
      `at most ${r.rw.maxReaders} readers of a key inside at once; longest wait: writer ${fmtMs(r.rw.maxWriterWaitMs)}, reader ${fmtMs(r.rw.maxReaderWaitMs)} (wait ${LOCK.wait} ms); ` +
      `wait timeouts: writers ${m.w.timeout} of ${m.w.ok + m.w.timeout}, readers ${m.r.timeout} of ${m.r.ok + m.r.timeout}`);
  }
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
  const sc = SCENARIOS.find((x) => x.id === r.id);
  if (sc && sc.noneSeen && r.overlaps === 0) bits.push(sc.noneSeen);
  if (r.releaseNotOwner && r.group !== "topology") bits.push(`${r.releaseNotOwner} release(s) answered not_owner`);
  if (r.releaseError) bits.push(`${r.releaseError} release(s) failed on Redis`);
  if (r.httpFailures) bits.push(`${r.httpFailures} HTTP/connection failure(s) (${r.topHttpFailures.map(([m, c]) => m + " ×" + c).join(", ")})`);
  if (r.errors) bits.push(`top err: ${r.topErrors.slice(0, 2).map(([m, c]) => `"${m}" ×${c}`).join("; ")}`);
  if (r.nginxErrorLog.cleanupRemoved) bits.push(`${r.nginxErrorLog.cleanupRemoved} lost-reply lock(s) removed by the cleanup timer`);
  if (r.witnessErrors) bits.push(`WITNESS ERRORS ${r.witnessErrors}: this row is not trustworthy`);
  if (r.leftInside.length) bits.push(`holders left inside at the end: ${r.leftInside.join(", ")}`);
  return bits.join("; ");
}

module.exports = { quiesce, runCritRow, noteOf };
