// Section 1: every wanted line under wrk, interleaved (A B C A B C ...), each
// line's requests, CPU and Redis commands; their medians, now / before (1),
// the topologies as ratios to the standalone line (1b), acquire_all against
// one by one (1d), and the library's CPU without HTTP (1e).
"use strict";
const { spawnSync } = require("node:child_process");
const { children, cpuSeconds, machineTicks, machineShares, unstolen, waitWorkers } = require("../lib");
const { smoke, beforeRev, wanted, cfg, log, median, fmt } = require("./config");
const { get, wrk } = require("./http");
const { quiet } = require("./stores");

// A fresh worker for the nginx whose master is `master` (one worker): SIGHUP,
// then until the one worker is a new one. A worker keeps the traces LuaJIT
// recorded first (which loops compiled, where they exit) for its life: in
// three runs of 2026-11-29 whose rounds each agreed within a few percent,
// section 1e's ratio to b357923 read 0.73, 0.88 and 1.03. A worker per round
// makes the rounds samples of that too.
async function freshWorker(master) {
  const old = children(master);
  process.kill(master, "SIGHUP");
  return (await waitWorkers(master, 1, 15000, old))[0];
}

// Section 1e: GET /libcpu (bench/cpu/libcpu.lua) on this checkout's nginx (the
// one with only /core when it runs, else bench.conf's) and,
// when it runs, on the old revision's (core_before), interleaved, cfg.rounds
// times, each round on fresh workers; the medians of their best-of rounds, in
// µs of the worker's CPU per operation. now and before: { port, master }.
async function measureLibCpu(now, before) {
  const nowPort = now.port, beforePortOrNull = before ? before.port : null;
  const q = smoke ? "n=40&t=50&r=2" : "n=200&t=50&r=5";
  // "<µs> <per second>"; a reply without the second number (NaN) is an older libcpu.lua's.
  const ask = async (port, what) => {
    const r = await get(port, `/libcpu?what=${what}&${q}`);
    const [us, perSec] = r.status === 200 ? r.body.trim().split(/\s+/).map(Number) : [NaN, NaN];
    return { us, perSec };
  };
  const got = { core: [], rate: [], core_before: [] };
  for (let round = 0; round < cfg.rounds; round++) {
    await freshWorker(now.master);
    if (before) await freshWorker(before.master);
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

// A line's run during which the hypervisor took more than this share of the
// machine's CPU time (steal, /proc/stat) is run again, up to STEAL_TRIES times
// in all: on a shared VM, bursts of a third of the CPUs stolen for seconds
// moved one line of a round and not the others, and so the ratios.
const STEAL_MAX = 0.05;
const STEAL_TRIES = 3;

// One wrk run of line l: its requests, CPU, Redis commands, and the machine's idle and stolen shares.
async function measure(l, standalone) {
  const st = l.store || standalone;
  const srv = l.server(), wk = l.workers ? l.workers() : [];
  const c0 = st.callsEach(), s0 = st.sentinelConnections();
  const t0 = [cpuSeconds(srv), cpuSeconds(st.pids), cpuSeconds(st.otherPids), cpuSeconds(wk)];
  const m0 = machineTicks();
  const w = wrk(l.url, l.conns || cfg.conns, cfg.seconds);
  const machine = machineShares(m0, machineTicks());
  await quiet(st); // queued log-phase releases land in this line's numbers, not the next one's
  const c1 = st.callsEach(), s1 = st.sentinelConnections() - st.sentinelPorts.length;
  const t1 = [cpuSeconds(srv), cpuSeconds(st.pids), cpuSeconds(st.otherPids), cpuSeconds(wk)];
  const per1k = (i) => ((t1[i] - t0[i]) * 1e6) / w.requests;
  const each = c1.map((c, i) => c - c0[i]), total = each.reduce((a, b) => a + b, 0);
  return { ...w, cmdsPerReq: total / w.requests, cpuMsPer1k: per1k(0) + per1k(1),
    serverCpuMsPer1k: per1k(0), redisCpuMsPer1k: per1k(1), othersCpuMsPer1k: per1k(2),
    masterShares: each.map((c) => c / total), sentinelQueriesPer1k: ((s1 - s0) * 1000) / w.requests,
    sentinelQueriesPerSec: (s1 - s0) / cfg.seconds, idleShare: machine.idle, stealShare: machine.steal,
    ...(l.workers ? { workerCpuUsPerReq: per1k(3) } : {}) };
}

// cfg.rounds rounds of every active line: { id: [one round's numbers, ...] } (every line has its array).
// A run with more than STEAL_MAX stolen is run again (its record counts the runs it took, tries, and their errors).
async function rounds(lines, active, standalone) {
  const runs = Object.fromEntries(lines.map((l) => [l.id, []]));
  for (let round = 0; round < cfg.rounds; round++) {
    for (const l of active) {
      const again = (d) => log(`  round ${round + 1} ${l.name}: ${fmt(d.stealShare * 100)} % of the CPU time stolen by the hypervisor, again` +
        (d.errors ? ` (its ${d.errors} error(s) still count)` : ""));
      const r = await unstolen(() => measure(l, standalone), { max: STEAL_MAX, tries: STEAL_TRIES, again });
      runs[l.id].push(r);
      log(`  round ${round + 1} ${l.name}: ${fmt(r.rps)} req/s p50 ${fmt(r.p50, 2)} ms p99 ${fmt(r.p99, 2)} ms, errors ${r.errors}` +
        (r.stealShare > 0.005 ? `, ${fmt(r.stealShare * 100, 1)} % stolen` : ""));
    }
  }
  return runs;
}

// now / before: the current /core line against the same handler on the old revision, round by round (interleaved).
// Against the line in an nginx like the old revision's when it ran (core_alone), else against /core.
// Notes the revision on the before line; null when that line did not run.
function beforeRatioOf(throughput, runs, beforeCommit) {
  const aloneL = throughput.find((l) => l.id === "core_alone" && !l.skipped);
  const nowL = aloneL || throughput.find((l) => l.id === "core"), beforeL = throughput.find((l) => l.id === "core_before");
  if (beforeL) beforeL.revision = { asked: beforeRev, commit: beforeCommit };
  if (!nowL || !beforeL || beforeL.skipped) return null;
  const perRound = runs[nowL.id].map((r, i) => r.workerCpuUsPerReq / runs.core_before[i].workerCpuUsPerReq);
  return {
    now_line: nowL.id, revision: beforeRev, commit: beforeCommit, rps_ratio: nowL.rps / beforeL.rps,
    nginx_cpu_per_req_ratio: nowL.nginx_worker_cpu_us_per_req / beforeL.nginx_worker_cpu_us_per_req,
    nginx_cpu_per_req_ratio_rounds: perRound, nginx_cpu_us_per_req: { now: nowL.nginx_worker_cpu_us_per_req, before: beforeL.nginx_worker_cpu_us_per_req },
  };
}

// 1b. The same acquire+release on other topologies, as ratios to the standalone line.
function topologiesOf(lines, runs, summary, core) {
  const topologies = [];
  if (core) topologies.push({ ...core, topology: "standalone", vs_standalone: 1, nginx_cpu_vs_standalone: 1, cpu_vs_standalone: 1, others_cpu_ms_per_1k: 0 });
  for (const l of lines.filter((x) => x.topo && core && wanted(x))) {
    if (l.skip) {
      topologies.push({ line: l.name, id: l.id, topology: l.id.replace("core_", ""), skipped: l.skip });
      continue;
    }
    const rs = runs[l.id], s = summary(l);
    const shares = rs[0].masterShares.map((_, i) => median(rs.map((r) => r.masterShares[i])));
    const note = l.store.check();
    // nginx CPU per request against standalone: issue 22's bound for a Cluster (at most 1.25 at 0.85 of the requests).
    topologies.push({ ...s, topology: l.store.kind, vs_standalone: s.rps / core.rps,
      nginx_cpu_vs_standalone: s.server_cpu_ms_per_1k / core.server_cpu_ms_per_1k, cpu_vs_standalone: s.cpu_ms_per_1k / core.cpu_ms_per_1k,
      others_cpu_ms_per_1k: median(rs.map((r) => r.othersCpuMsPer1k)),
      ...(shares.length > 1 ? { master_cmd_shares: shares } : {}),
      ...(l.store.kind === "sentinel" ? { sentinel_queries_per_1k: median(rs.map((r) => r.sentinelQueriesPer1k)),
        sentinel_queries_per_sec: median(rs.map((r) => r.sentinelQueriesPerSec)) } : {}),
      ...(note ? { note } : {}) });
  }
  return topologies;
}

/**
 * Section 1, on what servers.upUncontended started (up). ports: { redisPort,
 * httpPort, beforePort }; prefix: the run's dir, whose error logs a failure
 * names. { setRps, throughput, beforeRatio, libCpu, topologies, multikey }.
 */
async function runUncontended(prefix, { redisPort, httpPort, beforePort }, lines, up) {
  const { before, alone } = up;
  // Run again when the hypervisor stole more than STEAL_MAX meanwhile, as the lines are (one run of 17:00 read 20,201 against 79,093 before).
  const benchSet = async () => {
    const m0 = machineTicks();
    const r = spawnSync("redis-benchmark", ["-p", String(redisPort), "-t", "set", "-n", smoke ? "50000" : "300000", "-c", String(cfg.conns), "-q"], { encoding: "utf8" });
    const m = /SET: ([\d.]+) requests per second/.exec(r.stdout);
    return { rps: m ? Number(m[1]) : NaN, stealShare: machineShares(m0, machineTicks()).steal, errors: 0 };
  };
  const again = (d) => log(`redis-benchmark SET: ${fmt(d.stealShare * 100)} % of the CPU time stolen by the hypervisor, again`);
  const set = await unstolen(benchSet, { max: STEAL_MAX, tries: STEAL_TRIES, again });
  const setRps = set.rps;
  log(`redis-benchmark SET (${cfg.conns} clients): ${fmt(setRps)} req/s` + (set.stealShare > 0.005 ? `, ${fmt(set.stealShare * 100, 1)} % stolen` : ""));

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
  // Then each nginx's traces are dropped and recorded again from warm workers, whatever ran first.
  for (const port of [httpPort, alone && alone.port, before && before.port].filter(Boolean)) {
    const r = await get(port, "/jit-flush");
    if (r.status !== 200) throw new Error(`GET /jit-flush on ${port}: ${r.status} ${r.body.trim()}`);
  }
  const runs = await rounds(lines, active, up.standalone);
  // 1e. The library's own CPU per operation, without HTTP (bench/cpu/libcpu.lua), now and at the old revision, interleaved.
  let libCpu = null;
  if (wanted(lines.find((l) => l.id === "core"))) {
    const now = alone ? { port: alone.port, master: alone.pid } : { port: httpPort, master: up.nginx.pid };
    const old = before && !lines.find((l) => l.id === "core_before").skip ? { port: before.port, master: before.pid } : null;
    libCpu = await measureLibCpu(now, old);
  }
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
      // The machine around the runs kept: idle and stolen shares (medians), and the runs the steal made again.
      idle_share: median(rs.map((r) => r.idleShare)), steal_share: median(rs.map((r) => r.stealShare)),
      reruns: rs.reduce((a, r) => a + r.tries - 1, 0),
      // The nginx worker's own /proc CPU (not the master's), in µs per request: what issue 22's before/after compares.
      ...(l.workers ? { nginx_worker_cpu_us_per_req: median(rs.map((r) => r.workerCpuUsPerReq)) } : {}),
    };
  };
  const throughput = lines.filter((l) => !l.topo && !l.multi && wanted(l)).map((l) => (l.skip ? { line: l.name, id: l.id, skipped: l.skip } : summary(l)));
  const beforeRatio = beforeRatioOf(throughput, runs, up.beforeCommit);
  // 1d. acquire_all of n keys against n acquires one by one: round trips (a script call each, in sequence) and the ratio of req/s.
  const multikey = [2, 8].filter((n) => lines.some((l) => l.id === "multi" + n && wanted(l)) && lines.some((l) => l.id === "each" + n && wanted(l)))
    .map((n) => {
      const all = summary(lines.find((l) => l.id === "multi" + n)), each = summary(lines.find((l) => l.id === "each" + n));
      return { keys: n, acquire_all: all, one_by_one: each, rps_ratio: all.rps / each.rps, round_trips: { acquire_all: 2, one_by_one: 2 * n } };
    });
  const topologies = topologiesOf(lines, runs, summary, throughput.find((l) => l.id === "core"));
  // Every run kept, of every line: the machine around them, and the runs made again.
  const all = Object.values(runs).flat();
  const machine = all.length ? { runs: all.length, reruns: all.reduce((a, r) => a + r.tries - 1, 0),
    idle_median: median(all.map((r) => r.idleShare)), steal_median: median(all.map((r) => r.stealShare)),
    steal_max: Math.max(...all.map((r) => r.stealShare)), steal_max_allowed: STEAL_MAX, tries_allowed: STEAL_TRIES } : null;
  return { setRps, throughput, beforeRatio, libCpu, topologies, multikey, machine };
}

module.exports = { runUncontended };
