// The Redis servers section 1's lines run on (a "store": the standalone
// redis-server, or one of the topologies of 1b), started in dirs under the
// run's prefix through bench/lib (env: its procs, ports and log).
"use strict";
const fs = require("node:fs");
const path = require("node:path");
const lib = require("../lib");
const { sleep, freePort, cli, redisCalls, topology } = lib;
const { root, smoke, log } = require("./config");

// A throwaway redis-server in its own dir under the prefix, on port.
function redisServer(env, prefix, name, port) {
  return lib.redisUp(env, path.join(prefix, name), () => [], { port });
}

// Until the store's Redis servers have seen no command for 100 ms (at most 5 s).
async function quiet(store) {
  let prev = store.calls(false);
  for (let i = 0; i < 50; i++) {
    await sleep(100);
    const now = store.calls(false);
    if (now === prev) return;
    prev = now;
  }
}

// What a line's requests land on. masters: the servers holding the keys (their
// commands and CPU are the line's, as the standalone redis-server's are);
// others: what only keeps the topology up (replicas, sentinels), CPU counted apart.
function store(kind, masters, { tls, others = [], sentinelPorts = [], check } = {}) {
  return {
    kind,
    pids: masters.map((m) => m.pid),
    otherPids: others.map((o) => o.pid),
    callsEach: (background = true) => masters.map((m) => redisCalls(m.port, { tls, background })),
    calls(background = true) { return this.callsEach(background).reduce((a, b) => a + b, 0); },
    // Connections the sentinels accepted, over all of them: the lock asks one on a
    // connection of its own each time (get-master-addr-by-name, then close), the
    // sentinels' links to each other stay up, and a sentinel has no commandstats.
    // Includes this call's own connection to each sentinel.
    sentinelConnections: () => sentinelPorts.reduce((a, p) =>
      a + Number(/total_connections_received:(\d+)/.exec(cli(p, "info", "stats"))[1]), 0),
    sentinelPorts,
    check: check || (() => ""),
  };
}

// Redlock: three independent redis-servers, the keys on all of them.
async function startRedlock(env, prefix, ports) {
  const ms = [];
  for (const port of ports) ms.push(await redisServer(env, prefix, "redlock-" + port, port));
  return store("redlock", ms);
}

// TLS only (--port 0): the lock connects with ssl_verify = true, server_name = "localhost".
async function startTls(env, prefix, port, tls) {
  const t = await topology.up(env, { kind: "tls", port, certs: tls }, path.join(prefix, "redis-tls"));
  return store("tls", t.nodes, { tls: t.ca });
}

// Master, one replica, three sentinels (quorum 2) watching "locks" (bench/lib
// topology). down-after 5 s (not the specs' 1 s): a CPU-starved sentinel on this
// 2-core machine must not fail the master over in the middle of a line; check() says if one happened.
async function startSentinel(env, prefix, { master, replica, sentinels }) {
  const t = await topology.up(env, { kind: "sentinel", master: "locks", replicas: 1, sentinels: sentinels.length, quorum: 2,
    downAfterMs: 5000, failoverTimeoutMs: 10000, ports: { master, replicas: [replica], sentinels } }, path.join(prefix, "sentinel"));
  const check = () => {
    const now = cli(sentinels[0], "sentinel", "get-master-addr-by-name", "locks").split("\n")[1];
    return now === String(master) ? "" : `the sentinels failed the master over during the run (now ${now})`;
  };
  return store("sentinel", [t.master], { others: [...t.replicas, ...t.sentinels], sentinelPorts: sentinels, check });
}

// Six nodes, three masters with one replica each (bench/lib topology: redis-cli
// --cluster create, until every node says cluster_state:ok with all slots served
// and every replica is linked). cluster-node-timeout 5 s (not the specs' 1 s),
// for the same reason as down-after above.
// With replicasEach = 0 (core_cluster_bare): the three masters alone, like for
// like with the standalone line, which has no replica to feed either.
async function startCluster(env, prefix, ports, replicasEach = 1, name = "cluster") {
  const t = await topology.up(env, { kind: "cluster", masters: 3, replicasEach, nodeTimeoutMs: 5000, seeds: 2, ports, readyMs: 30000 },
    path.join(prefix, name));
  const roles = async () => (await t.masters()).map((m) => m.port).sort((a, b) => a - b);
  const masters = await roles();
  const byPort = Object.fromEntries(t.nodes.map((n) => [n.port, n]));
  const check = () => {
    const now = lib.parseClusterNodes(cli(ports[0], "cluster", "nodes")).filter((x) => x.flags.includes("master")).map((x) => x.port).sort((a, b) => a - b);
    return now.join() === masters.join() ? "" : `a cluster failover happened during the run (masters ${masters} -> ${now})`;
  };
  return store(name, masters.map((p) => byPort[p]), { others: t.nodes.filter((n) => !masters.includes(n.port)), check });
}

// The Redis topologies beside the standalone redis-server (section 1b). Ports
// now: nginx.conf names them. Certificates now: nginx reads the CA at start.
// { tlsDir, topoPorts, clusterSkip (why the Cluster lines do not run, or "") }.
async function topologyPorts(env, prefix) {
  const tlsDir = path.join(prefix, "tls");
  topology.makeCerts(tlsDir);
  const topoPorts = {
    tls: await freePort(),
    sentinel: { master: await freePort(), replica: await freePort(), sentinels: [await freePort(), await freePort(), await freePort()] },
    cluster: [],
    cluster_bare: [],
    redlock: [await freePort(), await freePort(), await freePort()],
  };
  const clusterModule = fs.existsSync(path.join(root, "dist", "resty", "dlock", "redis", "cluster.lua"));
  // Cluster: full run only (creating it takes ~5 s, over the smoke run's budget).
  const clusterSkip = !clusterModule ? "not available: dist/resty/dlock/redis/cluster.lua is not built yet"
    : smoke ? "full run only (creating a cluster takes several seconds)" : "";
  if (!clusterSkip) {
    for (let i = 0; i < 6; i++) topoPorts.cluster.push(await env.ports.pick({ bus: true }));
    for (let i = 0; i < 3; i++) topoPorts.cluster_bare.push(await env.ports.pick({ bus: true }));
  }
  return { tlsDir, topoPorts, clusterSkip };
}

// The topologies some wanted line needs (needs(storeKind)), side by side: { storeKind: store, or null }.
async function startTopologies(env, prefix, { tlsDir, topoPorts }, needs) {
  const t0Topo = Date.now();
  const [tls, sentinel, cluster, clusterBare, redlock] = await Promise.all([
    needs("tls") ? startTls(env, prefix, topoPorts.tls, tlsDir) : null, needs("sentinel") ? startSentinel(env, prefix, topoPorts.sentinel) : null,
    needs("cluster") ? startCluster(env, prefix, topoPorts.cluster) : null,
    needs("cluster_bare") ? startCluster(env, prefix, topoPorts.cluster_bare, 0, "cluster_bare") : null,
    needs("redlock") ? startRedlock(env, prefix, topoPorts.redlock) : null]);
  log(`topologies up in ${((Date.now() - t0Topo) / 1000).toFixed(1)} s`);
  return { tls, sentinel, cluster, cluster_bare: clusterBare, redlock };
}

module.exports = { redisServer, quiet, store, topologyPorts, startTopologies };
