// The topology rows: crit rows whose lock is a Redis topology (bench/lib topology:
// Sentinel, Cluster, Redlock) started for the row (in PREFIX/<row id>-redis, every
// pid in the pids file, so bench/torture stops them whatever happens), with a
// pair of nginx from nginx/torture.conf rendered with that `redis` option
// (PREFIX/<row id>-n1 and -n2) that the load goes to; both are stopped after it.
"use strict";
const fs = require("node:fs");
const path = require("node:path");
const { waitWorkers, addr, topology, nginxUp, ROOT } = require("../lib");
const { opt, PREFIX, KEYS, LOCK_PORT, LOCK_PREFIX, WITNESS_PORT, BACKEND_PORT, DEAD_PORT, DIST, BASE, S, procs, env } = require("./ctx");
const { runCritRow, noteOf } = require("./crit");
const { drainedLoad } = require("./load");

const TORTURE_CONF = path.join(ROOT, "nginx", "torture.conf");

/**
 * The row's topology up (started: the servers, stopped after the row even when
 * this fails). A cluster also answers keyMap() by load key, and its layout: the
 * load keys must land on at least 2 masters.
 */
async function topoUp(t, dir, keys, started) {
  const topo = await topology.up({ ...env, started }, t, dir);
  if (topo.kind !== "cluster") return topo;
  const byRedisKey = topo.keyMap;
  topo.keyMap = async () => {
    const m = await byRedisKey(keys.map((k) => LOCK_PREFIX + k));
    return Object.fromEntries(keys.map((k) => [k, m[LOCK_PREFIX + k]]));
  };
  const km = await topo.keyMap();
  const spread = new Set(Object.values(km).map((x) => x.master));
  const layout = (await topo.map()).filter((x) => x.flags.includes("master")).map((m) =>
    `${addr(m.port)} (slots ${m.slots.map(([lo, hi]) => lo + "-" + hi).join(",")}; keys ${keys.filter((k) => km[k].master === m.port).join(",") || "none"})`);
  const text = `${t.masters} masters with ${t.replicasEach} replica(s) each, cluster-node-timeout ${t.nodeTimeoutMs} ms: ${layout.join(", ")}`;
  topo.describe = () => text;
  if (spread.size < 2) throw new Error(`the load keys all land on one master (${text}): use more keys`);
  return topo;
}

/** An nginx from nginx/torture.conf in dir whose /crit locks on topo. */
function frontUp(dir, topo) {
  return nginxUp(env, {
    bin: opt.nginx, dir, template: TORTURE_CONF,
    vars: {
      REDIS_PORT: LOCK_PORT, WITNESS_PORT, BACKEND_PORT, DEAD_PORT: DEAD_PORT ?? 1,
      GATEWAY_LOG: "# (the topology rows use /crit only)", DIST: DIST || path.join(ROOT, "dist"),
      LOCK_REDIS: topo.lua, FENCING: topo.fencing ? "true" : "false",
    },
  });
}

/** A topology row: its topology and nginx pair up, the crit row on them, both down again. */
async function runTopologyRow(sc) {
  const t0 = Date.now();
  const keys = sc.load.keys || KEYS;
  const rdir = path.join(PREFIX, `${sc.id}-redis`);
  fs.mkdirSync(rdir, { recursive: true });
  const fronts = [];
  const started = [];
  try {
    const topo = await topoUp(sc.topology, rdir, keys, started);
    const upMs = Date.now() - t0;
    const dirs = ["n1", "n2"].map((n) => `${sc.id}-${n}`);
    for (const d of dirs) fronts.push(await frontUp(path.join(PREFIX, d), topo));
    S.target = { name: sc.topology.kind, ports: fronts.map((x) => x.port), masters: fronts.map((x) => x.pid), dirs, keys, topo, flush: () => topo.flush() };
    for (const m of S.target.masters) await waitWorkers(m);
    // Warm the pools (and the slot maps, the master found through the sentinels).
    await drainedLoad(1000);
    const row = await runCritRow(sc);
    // A read-write row on a topology stays with the read-write rows in the report.
    row.group = sc.group === "rw" ? "rw" : "topology";
    row.topology = { ...sc.topology, started: topo.describe(), upMs, lua: topo.lua };
    row.wallMs = Date.now() - t0;
    row.note = noteOf(row);
    return row;
  } finally {
    S.target = BASE;
    for (const x of fronts) await procs.stopNginx(x.pid);
    // Sentinels first (the last started), so none fails over what is being stopped.
    for (const x of started.splice(0).reverse()) await procs.stop(x.pid);
  }
}

module.exports = { runTopologyRow };
