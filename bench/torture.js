// make torture: the runner of the resty.dlock safety harness. bench/torture starts
// the processes (lock Redis, witness Redis, two nginx from nginx/torture.conf, a
// backend nginx from nginx/torture-backend.conf) and runs this script with their
// ports and pids. The rows are data (bench/torture-scenarios.js: topology, load,
// fault, what is promised); bench/engine/ runs them, one module per kind of row:
//   crit rows:       200 HTTP clients loop on /crit?key=kN over both nginx while one
//                    fault is injected; the witness Redis counts acquisitions,
//                    overlaps (two holders inside at once) and the longest gap.
//   gateway rows:    clients on gateway-guarded locations; the backend reports each
//                    request entering and leaving it; after the load the lock Redis
//                    is scanned for guard keys left locked.
//   topology rows:   crit rows whose lock is a Sentinel set, a Redis Cluster or
//                    Redlock masters (bench/lib topology), started for the row.
//   contention rows: many waiters per key, measured (hand-offs, Redis commands per
//                    acquisition, against a polling lock), and waiters that give up
//                    (nothing may be left in the lock Redis afterwards).
// Writes bench/results/torture*.{md,json} (bench/lib writeResults); exits 1 when a
// row where the design promises exclusion failed its promise (2: the harness broke).
"use strict";
const { waitWorkers, machine, writeResults } = require("./lib");
const { opt, SHORT, GATEWAY_LOG, HTTP_PORTS, MASTERS, BACKEND_PORT, SCENARIOS, log, procs } = require("./engine/ctx");
const { drainedLoad, agent } = require("./engine/load");
const { runCritRow } = require("./engine/crit");
const { checkGuards, runGatewayRow } = require("./engine/gateway");
const { runTopologyRow } = require("./engine/topologies");
const { runContentionRow } = require("./engine/contention");
const { runRateRow } = require("./engine/rate");
const { verdictOf, reportOf } = require("./engine/report");

/** The rows to run: --short, --gateway, --topologies, --contention, --rw, --rows 9,gw-reload (numbers or ids), or all. */
function selectRows() {
  const all = SCENARIOS.map((s, i) => ({ ...s, n: i + 1 }));
  if (SHORT) return ["short", all.filter((s) => s.short)];
  if (opt.gateway) return ["gateway", all.filter((s) => s.group === "gateway")];
  if (opt.topologies) return ["topologies", all.filter((s) => s.group === "topology")];
  if (opt.contention) return ["contention", all.filter((s) => s.group === "contention")];
  if (opt.rw) return ["rw", all.filter((s) => s.set === "rw")];
  if (opt.rate) return ["rate", all.filter((s) => s.group === "rate")];
  if (opt.rows) {
    const want = opt.rows.split(",").filter(Boolean);
    for (const w of want) {
      if (!all.some((s) => String(s.n) === w || s.id === w)) throw new Error(`no row ${w} (rows: ${all.map((s) => s.n + " " + s.id).join(", ")})`);
    }
    return ["rows", all.filter((s) => want.includes(String(s.n)) || want.includes(s.id))];
  }
  return ["full", all];
}

/** Each kind of row: its runner and its progress line. */
const rwSay = (r) => (r.rw ? `; readers beside readers ${r.rw.readersBesideReaders} (at most ${r.rw.maxReaders}), longest writer wait ${Math.round(r.rw.maxWriterWaitMs)} ms, writer timeouts ${r.rw.byMode.w.timeout}` : "");
const KINDS = [
  { is: (sc) => sc.group === "contention", run: runContentionRow, say: (r) => `${r.wallMs} ms` },
  {
    is: (sc) => sc.group === "rate", run: runRateRow,
    say: (r) => Object.values(r.schemes).map((s) => `${s.scheme}: ${s.offered} offered, ${s.ok} admitted, ${s.refused} refused, ${s.errors} errors, over-admission ${s.overAdmitted} (raw ${s.overRaw}), most in a period ${s.maxPerPeriod}`).join("; ") +
      (r.fallback ? `; fallback ${JSON.stringify(r.fallback)}` : "") + `, ${r.wallMs} ms`,
  },
  {
    is: (sc) => !!sc.topology, run: runTopologyRow,
    say: (r) => `${r.acquisitions} acquisitions, ${r.overlaps} overlaps, ${r.errors} err, ${r.timeouts} timeout, ${r.httpFailures} http, gap ${r.maxGapMs} ms, stall ${r.maxStallMs} ms, ${r.wallMs} ms${rwSay(r)}`,
  },
  {
    is: (sc) => sc.load.kind === "gateway", run: runGatewayRow,
    say: (r) => `${r.requests.requests} requests, ${r.reached} reached the backend, ${r.overlaps} overlaps, ${r.requests.refused} refused, ${r.requests.aborted} aborted, ${r.keysLeft.keys} key(s) left locked (${r.keysLeft.stillHeld} still held), witness errors ${r.witnessErrors}, ${r.wallMs} ms`,
  },
  {
    is: () => true, run: runCritRow,
    say: (r) => `${r.acquisitions} acquisitions, ${r.overlaps} overlaps, ${r.errors} err, ${r.timeouts} timeout, ${r.httpFailures} http, gap ${r.maxGapMs} ms, ${r.wallMs} ms${rwSay(r)}`,
  },
];

async function main() {
  const startedAt = new Date();
  const [form, list] = selectRows();
  const gws = list.filter((s) => s.load.kind === "gateway");
  log(`${form} run: ${list.length} rows (${list.map((s) => s.n).join(",")}), ports ${HTTP_PORTS.join(" and ")}, backend ${BACKEND_PORT}${GATEWAY_LOG ? ", with the module-level gateway log" : ""}`);
  for (const m of MASTERS) await waitWorkers(m);
  if (gws.length) await checkGuards();
  // Warm both nginx (lock pools, witness pools) before the first row.
  await drainedLoad(500);
  const rows = [];
  for (const sc of list) {
    log(`${sc.n}. ${sc.title} ...`);
    const kind = KINDS.find((k) => k.is(sc));
    const row = await kind.run(sc);
    log(`   ${kind.say(row)}`);
    rows.push(row);
  }
  const failures = verdictOf(rows);
  const runtimeS = Math.round((Date.now() - startedAt.getTime()) / 100) / 10;
  const { md, json } = reportOf({ form, startedAt, runtimeS, mach: machine(opt.nginx), list, rows, failures });
  // The short form (run by make test) must not overwrite the full run's results; neither must the others.
  const base = { full: "torture", short: "torture-short", gateway: "torture-gateway", topologies: "torture-topologies", contention: "torture-contention", rw: "torture-rw", rate: "torture-rate", rows: "torture-rows" }[form] + (GATEWAY_LOG ? "-gwlog" : "");
  writeResults(opt.out, base, md, json);
  console.log(md);
  console.log(`wrote bench/results/${base}.md and ${base}.json`);
  agent.destroy();
  return failures.length === 0 ? 0 : 1;
}

main().then((rc) => { procs.contAll(); process.exit(rc); }, (e) => { procs.contAll(); console.error("torture:", e.stack || e); process.exit(2); });
