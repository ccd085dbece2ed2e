// The report: each group's table and introduction, and the verdict.
"use strict";
const path = require("node:path");
const { esc, ROOT } = require("../lib");
const { GATEWAY_LOG, DIST, CLIENTS, KEYS, DURATION, FAULT_AT, LOCK, RELEASE_GRACE, LEFT_WATCH, GUARDS } = require("./ctx");
const { leftoversText, contentionTable, contentionIntro } = require("./contention-report");
const { RELEASED_CHANNEL } = require("./lockredis");
const { leftText } = require("./gateway");
const { rateIntro, rateTable, rateVerdict } = require("./rate");

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
    const maxIn = Object.entries(r.perGuard).map(([g, p]) => (p.promise === "rw"
      ? `${g} ${p.maxInFlight} (GETs side by side; other methods alone)` : `${g} ${p.maxInFlight}/${p.promise}`)).join(", ");
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
      for (const [g, p] of Object.entries(r.perGuard)) {
        if (p.promise === "rw" && p.reached > 0 && p.readersBesideReaders === 0) fail(r, `${g}: no GET ever entered the backend beside another GET`);
      }
      if (r.promised && r.overlaps > 0) fail(r, `${r.overlaps} time(s) more requests in flight at the backend than the guard promises (${Object.entries(r.perGuard).filter(([, p]) => p.overlaps).map(([g, p]) => `${g} ${p.overlaps}, max ${p.maxInFlight} for ${p.promise}`).join("; ")})`);
      // Nothing may stay locked after the load, whatever the row promises about overlaps.
      if (r.keysLeft.keys > 0) fail(r, `${r.keysLeft.keys} guard key(s) left locked ${r.keysLeft.checkMs} ms after the backend went idle (${leftText(r.keysLeft)})`);
      if (r.result === "ok" && !r.promised) r.result = r.overlaps > 0 ? "reported" : "ok (not promised)";
      continue;
    }
    if (r.group === "rate") {
      rateVerdict(r, fail);
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
    // A read-write lock whose readers never meet is an exclusive lock: not what shared = true promises.
    if (r.group === "rw" && (!r.rw || r.rw.readersBesideReaders === 0)) fail(r, "no reader ever entered beside another reader");
    // Sets in opposite orders (acquire_all): a deadlock would show as waits running out.
    if (r.noTimeouts && r.timeouts > 0) fail(r, `${r.timeouts} wait timeout(s) where the waits allow none (a deadlock?)`);
    if (r.result === "ok" && !r.promised) r.result = r.overlaps > 0 ? "reported" : "ok (not promised)";
  }
  return failures;
}

function rwTable(rows) {
  const out = [
    "| # | scenario | promised | readers / writers entered | overlaps | readers beside readers (most at once) | longest writer wait (ms) | longest reader wait (ms) | wait timeouts: writers / readers | errors | longest gap (ms) | result | note |",
    "| --- | --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | --- | --- |",
  ];
  const n = (x) => (x === null || x === undefined ? "-" : Math.round(x));
  for (const r of rows) {
    const w = r.rw || { readers: 0, writers: 0, readersBesideReaders: 0, maxReaders: 0, maxWriterWaitMs: null, maxReaderWaitMs: null, byMode: { r: { timeout: 0 }, w: { timeout: 0 } } };
    out.push(`| ${r.n} | ${esc(r.scenario)} | ${r.promised ? "yes" : "no"} | ${w.readers} / ${w.writers} | ${r.overlaps} | ${w.readersBesideReaders} (${w.maxReaders}) | ` +
      `${n(w.maxWriterWaitMs)} | ${n(w.maxReaderWaitMs)} | ${w.byMode.w.timeout} / ${w.byMode.r.timeout} | ${r.errors} | ${n(r.maxGapMs)} | ${r.result} | ${esc(r.note)} |`);
  }
  return out.join("\n");
}

function rwIntro() {
  return [
    `The crit load on \`/crit-rw?key=K&mode=r|w\` (${KEYS.length} keys, ${CLIENTS} clients over two nginx × 2 workers): each request is a reader`,
    "(`locks:acquire(K, { shared = true })`) with the row's probability, else a writer (the same factory, `fencing = true`),",
    `ttl ${LOCK.ttl} ms, wait ${LOCK.wait} ms, ${LOCK.hold} ms inside. The witness knows who is inside each key and as what:`,
    "**overlaps** = a writer entering beside anyone, or a reader beside a writer; **readers beside readers** = reader",
    "entries while other readers were inside (the sharing the lock exists for; a row where it never happens fails), with",
    "the most readers inside one key at once; **longest writer wait** = the longest a writer's acquire waited before it",
    "held the key (no writer starves when this stays well within the wait and no writer times out). A writer's",
    "critical section makes the fenced write; readers write nothing.",
  ];
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
      `\`${g("dedup").name}\` (dedup, 409), \`${g("rw").name}\` (mutex with \`shared = { "GET", "HEAD" }\`, wait ${g("rw").wait} ms, 503); all ttl ${g("mutex").ttl} ms (renewed every ttl/3), key \`$arg_key\`; 3 keys per guard (6 in the reload rows).`,
    "Each guarded location has the guard's `access()` and `log()`; where the request ends in another location",
    "(`error_page`, `try_files`, `X-Accel-Redirect`) that location has no `log()`. " +
      (GATEWAY_LOG ? "**This run has the http-level `log_by_lua_block { require(\"resty.dlock.gateway\").log() }`.**" : "No http-level module `log()` in this run (`--gateway-log` adds it)."),
    "**overlaps at backend** = requests entering the backend while as many as the guard promises for the key (1 for",
    "mutex and dedup, 2 for concurrency) were already in flight there (for `t_rw`: a GET beside another method, or any other method beside anyone); **keys left locked** = guard keys still in the lock",
    `Redis (a lock, or live permits) ${RELEASE_GRACE / 1000} s after the load ended and the backend went idle, then watched ${LEFT_WATCH / 1000} s more;`,
    "a key still held after that (ttl 1 s) is being renewed for a request that is gone. Refusals pause the client 20-80 ms.",
    "A key left locked fails any gateway row; overlaps fail the rows where exclusion is promised." +
      (control.length ? ` Row ${control.join(", ")} checks the harness itself: with no guard the witness must see overlaps, and the scan must find the locks planted in the lock Redis.` : ""),
  ];
}

/** The report of a run: { md, json }. list: the scenarios run (with their row numbers n). */
function reportOf({ form, startedAt, runtimeS, mach, list, rows, failures }) {
  const promisedRows = rows.filter((r) => r.promised && r.group !== "rate").map((r) => r.n);
  const critRows = rows.filter((r) => r.group === "crit");
  const gwRows = rows.filter((r) => r.group === "gateway");
  const topoRows = rows.filter((r) => r.group === "topology");
  const contRows = rows.filter((r) => r.group === "contention");
  const rwRows = rows.filter((r) => r.group === "rw");
  const rateRows = rows.filter((r) => r.group === "rate");
  const outside = list.filter((s) => s.outside).map((s) => `${s.n} (${s.outside})`);
  const md = [
    `# resty.dlock torture run (${form} form${GATEWAY_LOG ? ", with the module-level gateway log" : ""})`,
    "",
    `${startedAt.toISOString()}; ${mach.nproc} CPUs (${mach.cpu}), ${mach.redis.split(" ").slice(0, 3).join(" ")}, ${mach.nginx}, node ${mach.node}; ${runtimeS} s.`,
    ...(DIST && path.resolve(DIST) !== path.join(ROOT, "dist") ? ["", `Lua modules from \`${DIST}\`, not this checkout's dist/.`] : []),
    "",
    ...(critRows.length ? [...critIntro(), "", table(critRows), ""] : []),
    ...(gwRows.length ? ["## Gateway guards", "", ...gwIntro(gwRows), "", gwTable(gwRows), ""] : []),
    ...(topoRows.length ? ["## Redis topologies", "", ...topoIntro(topoRows), "", topoTable(topoRows), ""] : []),
    ...(contRows.length ? ["## Contention", "", ...contentionIntro(contRows), "", contentionTable(contRows), ""] : []),
    ...(rwRows.length ? ["## Shared and exclusive locks", "", ...rwIntro(), "", rwTable(rwRows), ""] : []),
    ...(rateRows.length ? ["## Rate limits", "", ...rateIntro(rateRows), "", rateTable(rateRows), ""] : []),
    ...(rateRows.length ? [`Rows ${rateRows.map((r) => r.n).join(", ")} promise rate limits, not exclusion: over-admission by mode rate, or more admitted locally over an outage than the fleet's shares allow, fails the run; the baselines are reported.`] : []),
    `Exclusion is promised in rows ${promisedRows.join(", ") || "(none here)"}: an overlap there fails the run${gwRows.length ? ", and so does a gateway key left locked" : ""}${contRows.length ? `${gwRows.length ? "," : ""} and so does a lock key or a wake-up subscription left behind by a contention row` : ""}.`,
    ...(form === "full" && outside.length ? [`Rows ${outside.join(" and ")} are outside what a Redis lease can promise: reported, not failed.`] : []),
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
  return { md, json };
}

module.exports = { verdictOf, reportOf };
