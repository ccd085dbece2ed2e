// The report of a run: bench/results/<latest|smoke|only>.{md,json}, printed
// too, one function per section's markdown, and (full runs) the PNG charts.
"use strict";
const { spawnSync } = require("node:child_process");
const fs = require("node:fs");
const path = require("node:path");
const { writeResults } = require("../lib");
const { outDir, fmt } = require("./config");

function headMd(r) {
  const t = [];
  t.push(`# make bench${r.smoke ? " (smoke: short, numbers indicative only)" : ""}`);
  t.push("");
  t.push(`${r.when}, ${r.machine.cpus} CPUs, ${r.machine.nginx}, ${r.machine.redis.split(" ").slice(0, 3).join(" ")}, Node ${r.machine.node}.`);
  t.push(`Medians of ${r.config.rounds} interleaved round(s). One nginx worker, one Node process, one redis-server (plus the topologies of 1b, and the two instances of section 2), wrk on loopback.`);
  if (r.only) t.push(`Only the lines whose id or name contains "${r.only}" (\`--only\`).`);
  t.push("");
  return t;
}

// Section 1: the table, now / before, against the seed and node-redlock, auto-pipelining.
function uncontendedMd(r) {
  if (!r.throughput.length) return [];
  const t = [];
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
  const m = r.machine_during_runs;
  if (m) {
    t.push(`The machine during the ${m.runs} wrk runs kept (sections 1, 1b, 1d): idle ${fmt(m.idle_median * 100)} % of the time (median), ` +
      `stolen by the hypervisor ${fmt(m.steal_median * 100, 1)} % (median) and ${fmt(m.steal_max * 100, 1)} % at most; ` +
      `${m.reruns} run(s) made again for more than ${fmt(m.steal_max_allowed * 100)} % stolen (${m.tries_allowed} tries at most).`);
    t.push("");
  }
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
  return [...t, ...libCpuMd(r), ...rateMd(r), ""];
}

// 1e, under section 1's table: the library's CPU without HTTP.
function libCpuMd(r) {
  const lc = r.library_cpu;
  if (!lc) return [];
  const t = [];
  t.push("");
  t.push(`Library CPU per operation (section 1e: 50 light threads in one request, no HTTP; µs of the nginx worker's CPU, ` +
    `medians of ${r.config.rounds} best-of rounds): acquire + release ${fmt(lc.core_us, 2)}` +
    (Number.isFinite(lc.core_before_us) ? ` against ${fmt(lc.core_before_us, 2)} at ${lc.revision} (${fmt(lc.core_us / lc.core_before_us, 2)}×)` : "") +
    `; a rate decision ${fmt(lc.rate_us, 2)} (${fmt(lc.core_us / lc.rate_us, 2)} decisions for the CPU of one acquire + release).`);
  if (Number.isFinite(lc.rate_vs_core_per_s)) {
    t.push(`Completed per second by that one worker (Redis' time included, no HTTP): ${fmt(lc.core_per_s)} acquire + release, ` +
      `${fmt(lc.rate_per_s)} rate decisions: ${fmt(lc.rate_vs_core_per_s, 2)}× (median of the rounds' ratios).`);
  }
  return t;
}

// 1c, under section 1's table: a rate decision against an acquire + release.
function rateMd(r) {
  const t = [];
  const byId = (id) => r.throughput.find((l) => l.id === id && !l.skipped);
  const rateSaid = [["rate", "core", "the rate guard"], ["rate_api", "core", "rate.new's incoming()"],
    ["rate_low", "core_low", "the rate guard at 4 connections"], ["rate_api_low", "core_low", "incoming() at 4 connections"]]
    .filter(([a, c]) => byId(a) && byId(c))
    .map(([a, c, what]) => `${what} ${fmt(byId(a).rps / byId(c).rps, 2)}× (CPU per decision, nginx + Redis, ${fmt(byId(a).cpu_ms_per_1k / byId(c).cpu_ms_per_1k, 2)}×)`);
  if (rateSaid.length) {
    t.push("");
    t.push(`Rate decisions per second against acquire + release at the same connections (one script call against two): ${rateSaid.join("; ")}.`);
  }
  return t;
}

function topologiesMd(r) {
  if (!r.topologies.length) return [];
  const t = [];
  t.push(`## 1b. Redis topologies: the same acquire+release (/core handler), interleaved with the lines above`);
  t.push("");
  t.push("Ratios are to the standalone line of this run. CPU per 1000 requests: nginx, the Redis servers holding the keys " +
    "(the standalone redis-server, the TLS one, the Sentinel master, the three Cluster masters), and apart what only keeps " +
    "the topology up (replicas, sentinels). Redis cmds/req: on the servers holding the keys.");
  t.push("");
  t.push("| topology | req/s | vs standalone | p50 ms | p99 ms | Redis cmds/req | CPU nginx | nginx vs standalone | CPU Redis (keys) | nginx + Redis vs standalone | CPU replicas + sentinels | errors |");
  t.push("| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |");
  const notes = [];
  for (const l of r.topologies) {
    if (l.skipped) {
      t.push(`| ${l.line} | skipped: ${l.skipped} | | | | | | | | | | |`);
      notes.push(`${l.topology}: skipped, ${l.skipped}.`);
      continue;
    }
    t.push(`| ${l.line} | ${fmt(l.rps)} | ${fmt(l.vs_standalone, 2)} | ${fmt(l.p50_ms, 2)} | ${fmt(l.p99_ms, 2)} | ${fmt(l.redis_cmds_per_req, 2)} | ` +
      `${fmt(l.server_cpu_ms_per_1k, 1)} | ${fmt(l.nginx_cpu_vs_standalone, 2)} | ${fmt(l.redis_cpu_ms_per_1k, 1)} | ${fmt(l.cpu_vs_standalone, 2)} | ${fmt(l.others_cpu_ms_per_1k, 1)} | ${l.errors} |`);
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
  return t;
}

function multikeyMd(r) {
  if (!(r.multikey || []).length) return [];
  const t = [];
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
  return t;
}

function contentionMd(r) {
  if (!r.contention.length) return [];
  const t = [];
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
  return t;
}

function readMostlyMd(r) {
  if (!r.readMostly) return [];
  const t = [];
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
  return t;
}

function memoryMd(r) {
  if (!r.memory) return [];
  const t = [];
  t.push("## 3. Memory");
  t.push("");
  t.push(`- shared dict: ${fmt(r.memory.dict_bytes_per_lease)} bytes per held lease (${r.memory.leases_measured} leases held at once).`);
  t.push(`- worker Lua heap after a full GC: ${fmt(r.memory.lua_kb_before)} KB before, ${fmt(r.memory.lua_kb_after)} KB after ${r.memory.requests} more acquire+release requests.`);
  return t;
}

// Prints the report and writes it, with its JSON, to bench/results/; prefix: where plot() puts its data files.
function report(r, prefix) {
  const t = [...headMd(r), ...uncontendedMd(r), ...topologiesMd(r), ...multikeyMd(r), ...contentionMd(r), ...readMostlyMd(r), ...memoryMd(r)];
  const md = t.join("\n") + "\n";
  console.log("\n" + md);
  // --only runs never overwrite a full run's results.
  const base = r.only ? "only" : r.smoke ? "smoke" : "latest";
  writeResults(outDir, base, md, r);
  if (!r.smoke && !r.only) plot(r, prefix);
}

function plot(r, prefix) {
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

module.exports = { report };
