// Section 1's lines: the URL wrk loads (at conns connections, else cfg.conns),
// the processes whose CPU is the line's (server(); workers(): the nginx workers
// alone, for the before/after lines), and for the topology lines the Redis they
// run on (storeKind).
"use strict";
const { children } = require("../lib");
const { BEFORE_DEFAULT, beforeRev } = require("./config");

/**
 * ports: { httpPort, beforePort, alonePort, nodePort }. up: section 1's
 * processes (nginx, before, alone, node), filled in as they start: the pid
 * functions read it during the rounds. clusterSkip: why the Cluster lines do
 * not run ("" when they do).
 */
function uncontendedLines({ httpPort, beforePort, alonePort, nodePort }, up, clusterSkip) {
  const nginxPids = () => [up.nginx.pid, ...children(up.nginx.pid)];
  // 1. Uncontended throughput, distinct key per request. The topology lines run
  // the /core handler on another Redis (storeKind), interleaved with the rest.
  return [
    { id: "none", name: "no lock (ceiling)", url: `http://127.0.0.1:${httpPort}/none`, server: () => nginxPids() },
    { id: "core", name: "resty.dlock acquire+release", url: `http://127.0.0.1:${httpPort}/core`, server: () => nginxPids(), workers: () => children(up.nginx.pid) },
    // The same /core handler on the library of an old revision (--before), in a second nginx: issue 22's before/after in one run.
    { id: "core_before", name: `resty.dlock acquire+release at ${beforeRev}` + (beforeRev === BEFORE_DEFAULT ? " (before issue 22)" : ""),
      url: `http://127.0.0.1:${beforePort}/core`, server: () => [up.before.pid, ...children(up.before.pid)], workers: () => children(up.before.pid) },
    // This checkout's library in an nginx like the old revision's (nothing else configured: no guards, no other
    // factories, their timers, nor their records in the dict), so that now / before compares the library alone.
    { id: "core_alone", name: "resty.dlock acquire+release, in an nginx with only /core (as the line above)",
      url: `http://127.0.0.1:${alonePort}/core`, server: () => [up.alone.pid, ...children(up.alone.pid)], workers: () => children(up.alone.pid) },
    { id: "core_plain", name: "resty.dlock acquire+release, auto_pipeline = false (a connection per call, as before)", url: `http://127.0.0.1:${httpPort}/core-plain`, server: () => nginxPids() },
    { id: "core_plain_low", name: "resty.dlock acquire+release, auto_pipeline = false, 4 connections", conns: 4, url: `http://127.0.0.1:${httpPort}/core-plain`, server: () => nginxPids() },
    { id: "core_low", name: "resty.dlock acquire+release, 4 connections", conns: 4, url: `http://127.0.0.1:${httpPort}/core`, server: () => nginxPids() },
    { id: "core_tls", topo: true, storeKind: "tls", name: "resty.dlock acquire+release, TLS (ssl_verify on)", url: `http://127.0.0.1:${httpPort}/core-tls`, server: () => nginxPids() },
    { id: "core_sentinel", topo: true, storeKind: "sentinel", name: "resty.dlock acquire+release, Sentinel (master + 1 replica, 3 sentinels)", url: `http://127.0.0.1:${httpPort}/core-sentinel`, server: () => nginxPids() },
    { id: "core_cluster", topo: true, storeKind: "cluster", name: "resty.dlock acquire+release, Cluster (3 masters + 3 replicas)", url: `http://127.0.0.1:${httpPort}/core-cluster`, server: () => nginxPids(), skip: clusterSkip },
    { id: "core_cluster_bare", topo: true, storeKind: "cluster_bare", name: "resty.dlock acquire+release, Cluster (3 masters, no replicas)", url: `http://127.0.0.1:${httpPort}/core-cluster_bare`, server: () => nginxPids(), skip: clusterSkip },
    { id: "core_redlock", topo: true, storeKind: "redlock", name: "resty.dlock acquire+release, Redlock (3 independent masters)", url: `http://127.0.0.1:${httpPort}/core-redlock`, server: () => nginxPids() },
    { id: "dedup", name: "resty.dlock.gateway dedup", url: `http://127.0.0.1:${httpPort}/dedup`, server: () => nginxPids() },
    { id: "rate", name: "resty.dlock.gateway rate guard (one GCRA script call per request)", url: `http://127.0.0.1:${httpPort}/rate`, server: () => nginxPids() },
    { id: "rate_api", name: "resty.dlock.rate incoming(key, true), the Lua API", url: `http://127.0.0.1:${httpPort}/rate-api`, server: () => nginxPids() },
    // Where round trips decide (few requests at once, the CPUs not full): one against acquire + release's two (core_low).
    { id: "rate_low", name: "resty.dlock.gateway rate guard, 4 connections", conns: 4, url: `http://127.0.0.1:${httpPort}/rate`, server: () => nginxPids() },
    { id: "rate_api_low", name: "resty.dlock.rate incoming(key, true), 4 connections", conns: 4, url: `http://127.0.0.1:${httpPort}/rate-api`, server: () => nginxPids() },
    { id: "idem", name: "resty.dlock.gateway idempotency, first requests", url: `http://127.0.0.1:${httpPort}/idem`, server: () => nginxPids() },
    { id: "idem_replay", name: "resty.dlock.gateway idempotency, replays", url: `http://127.0.0.1:${httpPort}/idem-replay`, server: () => nginxPids() },
    // 1d. Several keys per request (distinct per request): acquire_all against the same keys one by one.
    { id: "multi2", multi: 2, name: "resty.dlock acquire_all of 2 keys + release", url: `http://127.0.0.1:${httpPort}/multi?n=2`, server: () => nginxPids() },
    { id: "each2", multi: 2, name: "resty.dlock 2 keys acquired and released one by one", url: `http://127.0.0.1:${httpPort}/each?n=2`, server: () => nginxPids() },
    { id: "multi8", multi: 8, name: "resty.dlock acquire_all of 8 keys + release", url: `http://127.0.0.1:${httpPort}/multi?n=8`, server: () => nginxPids() },
    { id: "each8", multi: 8, name: "resty.dlock 8 keys acquired and released one by one", url: `http://127.0.0.1:${httpPort}/each?n=8`, server: () => nginxPids() },
    { id: "seed", name: "seed Lua: SET NX PX + EVAL", url: `http://127.0.0.1:${httpPort}/seed`, server: () => nginxPids() },
    { id: "node", name: "Node.js node-redlock 5 + ioredis", url: `http://127.0.0.1:${nodePort}/`, server: () => [up.node.pid] },
  ];
}

module.exports = { uncontendedLines };
