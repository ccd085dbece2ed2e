// make bench: resty.dlock side by side with its baselines, in one run, on one
// machine, lines interleaved (A B A B ...), reported as ratios. Writes
// bench/results/latest.{md,json} and PNG plots. `--smoke` is a short run for
// make test (numbers printed, never asserted). The sections are in bench/perf/.
"use strict";
const { spawnSync, execFileSync } = require("node:child_process");
const fs = require("node:fs");
const os = require("node:os");
const path = require("node:path");
const { freePort, Ports, children, Procs, nginxBin: libNginxBin } = require("./lib");
const { smoke, only, wanted, cfg } = require("./perf/config");
const { topologyPorts } = require("./perf/stores");
const { uncontendedLines } = require("./perf/lines");
const { upUncontended, upContendPair } = require("./perf/servers");
const { runUncontended } = require("./perf/uncontended");
const { contentionLines, runContention } = require("./perf/contention");
const { RW_LINES, readMostlyLines } = require("./perf/readmostly");
const { measureMemory } = require("./perf/memory");
const { report } = require("./perf/report");

const prefix = fs.mkdtempSync("/tmp/dlock-bench.");
fs.chmodSync(prefix, 0o755);
fs.mkdirSync(path.join(prefix, "logs"));

// Everything started here (bench/lib Procs), stopped on exit.
const procs = new Procs({ log: console.error });
const env = { procs, ports: new Ports(), log: console.error };
function cleanup() {
  procs.stopAllSync();
  fs.rmSync(prefix, { recursive: true, force: true });
}
process.on("exit", cleanup);
for (const sig of ["SIGINT", "SIGTERM"]) process.on(sig, () => process.exit(130));

async function main() {
  const ports = { redisPort: await freePort(), httpPort: await freePort(), nodePort: await freePort(), beforePort: await freePort(), alonePort: await freePort() };
  const topo = await topologyPorts(env, prefix);

  // Section 1's processes and stores, filled in as they start (the lines' pid functions read them in the rounds).
  const up = { redis: null, nginx: null, node: null, before: null, alone: null, beforeCommit: null, standalone: null };
  const lines = uncontendedLines(ports, up, topo.clusterSkip);
  // 2. Contention (and 2b, read-mostly): on the contending pair started below.
  const contend = { redisPort: await freePort(), nginxPorts: [await freePort(), await freePort()], peerPorts: [await freePort(), await freePort()] };
  const nginxPair = () => contend.nginx.flatMap((n) => [n.pid, ...children(n.pid)]);
  const contLines = contentionLines(contend, nginxPair).filter(wanted);
  const rwLines = RW_LINES.filter(wanted);
  const run1 = lines.some(wanted);
  const run2 = contLines.length > 0 || rwLines.length > 0;
  if (!run1 && !run2) throw new Error(`--only ${only.join(", ")}: no line's id or name contains it`);
  const nginxBin = libNginxBin();
  if (run1) await upUncontended(env, prefix, ports, { topo, lines, up, nginxBin });
  if (run2) await upContendPair(env, prefix, contend, { contLines, nginxBin });

  const uncontended = run1 ? await runUncontended(prefix, ports, lines, up)
    : { setRps: NaN, throughput: [], beforeRatio: null, libCpu: null, topologies: [], multikey: [], machine: null };
  const contention = await runContention(contend, contLines);
  // 2b. Read-mostly: a read-write lock against an exclusive one on the same key.
  const readMostly = rwLines.length ? await readMostlyLines(rwLines, contend, nginxPair) : null;
  // 3. Memory (not with --only).
  const memory = only.length ? null : await measureMemory(ports.httpPort);

  const result = {
    when: new Date().toISOString(), smoke, config: cfg,
    machine: { cpus: os.cpus().length, redis: execFileSync("redis-server", ["--version"], { encoding: "utf8" }).trim(),
      nginx: spawnSync(nginxBin, ["-v"], { encoding: "utf8" }).stderr.trim(), node: process.version },
    only: only.length ? only.join(", ") : null, redis_set_rps: uncontended.setRps, throughput: uncontended.throughput, before_ratio: uncontended.beforeRatio,
    library_cpu: uncontended.libCpu, machine_during_runs: uncontended.machine, topologies: uncontended.topologies, multikey: uncontended.multikey, contention, readMostly, memory,
  };
  report(result, prefix);
}

// The servers we spawned keep the event loop alive: exit explicitly (the exit hook stops them).
main().then(() => process.exit(0), (e) => {
  console.error(e);
  process.exit(1);
});
