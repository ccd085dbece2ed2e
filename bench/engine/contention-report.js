// How the contention rows read in the report.
"use strict";
const { esc } = require("../lib");
const { LOCK } = require("./ctx");

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

module.exports = { fmt, leftoversText, phaseNote, contentionNoteOf, contentionTable, contentionIntro };
