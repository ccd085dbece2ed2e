// What every part of the torture engine shares: the options bench/torture passes,
// the run's constants, the processes (bench/lib Procs over bench/torture's pids
// file), and where the crit load goes now (S.target).
"use strict";
const path = require("node:path");
const { Procs, Ports, once, ownPorts } = require("../lib");
const { GUARDS, VIAS, SCENARIOS, CRIT_LOAD } = require("../torture-scenarios");

const FLAGS = new Set(["short", "gateway", "topologies", "contention", "rw", "rate", "gateway-log"]);
function parseArgs(argv) {
  const o = {};
  for (let i = 0; i < argv.length; i++) {
    const a = argv[i];
    if (!a.startsWith("--")) throw new Error("unknown argument " + a);
    if (FLAGS.has(a.slice(2))) o[a.slice(2)] = true;
    else o[a.slice(2)] = argv[++i];
  }
  for (const k of ["prefix", "pids", "lock-port", "lock-pid", "witness-port", "http", "master", "nginx", "out",
    "backend-port"]) {
    if (o[k] === undefined) throw new Error("missing --" + k + " (run bench/torture, not this script)");
  }
  return o;
}
const opt = parseArgs(process.argv.slice(2));
const SHORT = !!opt.short;
const GATEWAY_LOG = !!opt["gateway-log"];
const DIST = opt.dist || null;
const PREFIX = opt.prefix;
const LOCK_PORT = Number(opt["lock-port"]);
const WITNESS_PORT = Number(opt["witness-port"]);
const BACKEND_PORT = Number(opt["backend-port"]);
const HTTP_PORTS = opt.http.split(",").map(Number);
// A row may restart an instance (quit-restart): its new master replaces the old one here.
const MASTERS = opt.master.split(",").map(Number);
const DEAD_PORT = opt["dead-port"] ? Number(opt["dead-port"]) : null;
const CLIENTS = CRIT_LOAD.clients;
const KEYS = CRIT_LOAD.keys;
// nginx/torture.conf's /crit lock: its keys in Redis are this prefix and the key.
const LOCK_PREFIX = "torture:";
const DURATION = CRIT_LOAD.durationMs[SHORT ? "short" : "full"]; // ms of load per crit row
const FAULT_AT = CRIT_LOAD.faultAtMs[SHORT ? "short" : "full"]; // ms after the load starts (crit rows)
const REQUEST_TIMEOUT = CRIT_LOAD.requestTimeoutMs;
const LOCK = CRIT_LOAD.lock;
// Gateway rows: after the load and the backend are done, the release queue gets
// RELEASE_GRACE ms; guard keys still in the lock Redis then are "left locked",
// and are watched for LEFT_WATCH ms more to tell how long they stay.
const RELEASE_GRACE = 1000;
const LEFT_WATCH = 3000;
const IDLE_CAP = 20000;
const log = (...a) => console.error("[torture]", ...a);
function bump(map, msg, raw) {
  // Group messages that differ only in numbers (ports, ms); raw keeps the first of each group whole.
  const k = msg.replace(/\d+/g, "N").slice(0, 160);
  map[k] = (map[k] || 0) + 1;
  if (raw && !(k in raw)) raw[k] = msg;
}
const ms = (a, b) => Math.round(b - a);
const confArgs = (instance) => {
  const dir = path.join(PREFIX, "n" + instance);
  return ["-p", dir, "-c", path.join(dir, "nginx.conf")];
};
const AOF_DIR = path.join(PREFIX, "aof");
const lockRedis = { pid: Number(opt["lock-pid"]), mode: "plain", starts: 1 };
/**
 * The nginx pair a crit row loads, with its keys, and how to empty its lock
 * store: the two nginx of bench/torture and the lock Redis, or (for a topology
 * row) the pair started for that row's topology.
 */
const BASE = {
  name: "lock Redis", ports: HTTP_PORTS, masters: MASTERS, dirs: ["n1", "n2", "backend"], keys: KEYS, topo: null,
  flush: () => once(LOCK_PORT, "FLUSHALL"),
};
const LOG_DIRS = ["n1", "n2", "backend"];
/** Where the crit load goes now: BASE, or a topology row's nginx pair. */
const S = { target: BASE };

// Everything started here goes into bench/torture's pids file, which it stops on exit;
// processes a fault has paused are always continued, whatever happens.
const procs = new Procs({ pidsFile: opt.pids, log });
process.on("exit", () => procs.contAll());
for (const sig of ["SIGINT", "SIGTERM"]) process.on(sig, () => { procs.contAll(); process.exit(130); });
/** Ports in use or spoken for: bench/torture's, and everything started here. */
const ports = new Ports([...HTTP_PORTS, LOCK_PORT, WITNESS_PORT, BACKEND_PORT, ...(DEAD_PORT ? [DEAD_PORT] : [])]);
const env = { procs, ports, log };
/**
 * Local ports of the harness's own open connections to the lock Redis: a
 * MONITOR (the contention rows) counts what nginx sends, not these.
 */
const harnessLockPorts = ownPorts(LOCK_PORT);

const randInt = ([lo, hi]) => lo + Math.floor(Math.random() * (hi - lo + 1));
const pick = (a) => a[Math.floor(Math.random() * a.length)];

module.exports = {
  opt, SHORT, GATEWAY_LOG, DIST, PREFIX, LOCK_PORT, WITNESS_PORT, BACKEND_PORT, HTTP_PORTS, MASTERS, DEAD_PORT,
  CLIENTS, KEYS, LOCK_PREFIX, DURATION, FAULT_AT, REQUEST_TIMEOUT, LOCK, RELEASE_GRACE, LEFT_WATCH, IDLE_CAP,
  log, randInt, pick, bump, ms, confArgs, procs, env, lockRedis, AOF_DIR, BASE, S, harnessLockPorts, LOG_DIRS,
  GUARDS, VIAS, SCENARIOS,
};
