// The Redis topologies both harnesses lock on: TLS only, Sentinel (a master,
// replicas, sentinels), Cluster (redis-cli --cluster create), Redlock
// (independent masters). Each answers a handle:
//   nodes      the redis-servers holding data ({ port, pid })
//   lua        the `redis` option of dlock.new for it, as a Lua table literal
//   fencing    whether the lock may fence on it (Redlock refuses it)
//   flush(), resetStats(), errorStats(), describe()
// env: { procs, ports, log, started } as lib/redis redisUp takes it.
"use strict";
const { execFileSync } = require("node:child_process");
const fs = require("node:fs");
const path = require("node:path");
const { alive } = require("./proc");
const { waitPort } = require("./ports");
const { once } = require("./resp");
const { until } = require("./wait");
const { addr, lineOf, redisUp, errorStatsOf, resetStatsOf, parseClusterNodes, leastPrivilegeArgs } = require("./redis");

/** A JS value as a Lua table constructor (strings, numbers, booleans, arrays, plain objects). */
function luaValue(v) {
  if (Array.isArray(v)) return "{ " + v.map(luaValue).join(", ") + " }";
  if (v !== null && typeof v === "object") return "{ " + Object.entries(v).map(([k, x]) => `${k} = ${luaValue(x)}`).join(", ") + " }";
  if (typeof v === "string") return JSON.stringify(v);
  return String(v);
}

/** What every handle has, over its data nodes. */
function common(env, nodes) {
  return {
    resetStats: () => resetStatsOf(nodes),
    errorStats: () => errorStatsOf(nodes, env.procs.stopped),
  };
}

// A test CA and a server certificate it signed (localhost, 127.0.0.1), the same
// openssl commands as spec/runner/run: nginx trusts the CA (lua_ssl_trusted_certificate).
function makeCerts(dir) {
  fs.mkdirSync(dir, { recursive: true });
  execFileSync("bash", ["-c", `set -e; cd '${dir}'
    openssl req -x509 -newkey rsa:2048 -nodes -days 2 -subj /CN=dlock-test-ca -keyout ca.key -out ca.pem
    openssl req -newkey rsa:2048 -nodes -subj /CN=localhost -keyout server.key -out server.csr
    printf 'subjectAltName=DNS:localhost,IP:127.0.0.1\\n' > san.ext
    openssl x509 -req -in server.csr -CA ca.pem -CAkey ca.key -CAcreateserial -days 2 -extfile san.ext -out server.pem`],
  { stdio: ["ignore", "ignore", "pipe"] }); // a failure's error carries openssl's stderr
}

/** A plain redis-server (t.port: that port). */
async function standalone(env, t, dir) {
  const node = await redisUp(env, dir, () => t.args || [], { port: t.port });
  return {
    kind: "standalone", nodes: [node], port: node.port, pid: node.pid,
    lua: luaValue({ host: "127.0.0.1", port: node.port, ...t.redis }), fencing: true,
    async flush() { await once(node.port, "FLUSHALL"); },
    ...common(env, [node]),
    describe: () => `redis-server ${addr(node.port)}`,
  };
}

/** TLS only (--port 0) on t.port, certificates from makeCerts(t.certs). */
async function tls(env, t, dir) {
  const c = (f) => path.join(t.certs, f);
  const child = env.procs.start("redis-server", ["--port", "0", "--tls-port", String(t.port), "--bind", "127.0.0.1", "--save", "",
    "--appendonly", "no", "--dir", dir, "--logfile", path.join(dir, "redis.log"), "--tls-cert-file", c("server.pem"),
    "--tls-key-file", c("server.key"), "--tls-ca-cert-file", c("ca.pem"), "--tls-auth-clients", "no"], { stdio: "ignore" });
  const node = { port: t.port, pid: child.pid };
  await waitPort(t.port);
  return { kind: "tls", nodes: [node], ca: c("ca.pem"), fencing: true, ...common(env, [node]), describe: () => `TLS redis-server ${addr(t.port)}` };
}

/**
 * A master, t.replicas replicas (diskless sync at once), t.sentinels sentinels
 * monitoring it as t.master (quorum, downAfterMs, failoverTimeoutMs), until
 * every sentinel sees every replica and the other sentinels. t.ports: { master,
 * replicas: [], sentinels: [] } fixed ports (else fresh ones).
 */
async function sentinel(env, t, dir) {
  const fixed = t.ports || { replicas: [], sentinels: [] };
  // t.user ({ name, password, prefixes }): the locks' ACL user with only what they need; the harness stays the default user.
  const user = t.user ? leastPrivilegeArgs(t.user.name, t.user.password, t.user.prefixes) : [];
  const repl = ["--repl-diskless-sync-delay", "0", ...user];
  const master = await redisUp(env, dir, () => repl, { port: fixed.master });
  const replicas = [];
  for (let i = 0; i < t.replicas; i++) {
    replicas.push(await redisUp(env, dir, () => ["--replicaof", "127.0.0.1", String(master.port), ...repl], { port: fixed.replicas[i] }));
  }
  await until(async () => (((await once(master.port, "INFO", "replication")).match(/state=online/g)) || []).length === t.replicas,
    10000 + 2000 * t.replicas, `${t.replicas} replica(s) online on the master`);
  const sentinels = [];
  for (let i = 0; i < t.sentinels; i++) {
    sentinels.push(await redisUp(env, dir, () => [`sentinel monitor ${t.master} 127.0.0.1 ${master.port} ${t.quorum}`,
      `sentinel down-after-milliseconds ${t.master} ${t.downAfterMs}`, `sentinel failover-timeout ${t.master} ${t.failoverTimeoutMs}`],
    { sentinel: true, port: fixed.sentinels[i] }));
  }
  // Each sentinel knows the replicas and the other sentinels after a few hellos (every 2 s), and
  // a replica from the master's INFO (every 10 s): seconds as a rule, longer on a starved VM.
  // Failing, it says what each sentinel saw last.
  const want = `slaves=${t.replicas},sentinels=${t.sentinels}`;
  let seen = [];
  await until(async () => {
    seen = [];
    for (const s of sentinels) seen.push(((await once(s.port, "INFO", "sentinel")).match(/slaves=\d+,sentinels=\d+/) || ["?"])[0]);
    return seen.every((v) => v === want);
  }, 30000, `every sentinel sees ${t.replicas} replica(s) and ${t.sentinels} sentinels`, 100).catch((e) => {
    throw new Error(`${e.message}; they saw ${seen.join(" ")}`);
  });
  const nodes = [master, ...replicas];
  const topo = {
    kind: "sentinel", name: t.master, master, replicas, nodes, sentinels,
    lua: luaValue({ sentinel: { master: t.master, nodes: sentinels.map((s) => addr(s.port)) }, ...t.redis,
      ...(t.user ? { username: t.user.name, password: t.user.password } : {}) }),
    fencing: t.fencing !== false,
    /** The master the sentinels name now (asked of the first one that answers). */
    async masterPort() {
      for (const s of sentinels) {
        try { return Number((await once(s.port, "SENTINEL", "get-master-addr-by-name", t.master))[1]); } catch (e) { /* next */ }
      }
      throw new Error("no sentinel answered");
    },
    node(port) { return nodes.find((n) => n.port === port); },
    async flush() { await once(await topo.masterPort(), "FLUSHALL"); },
    ...common(env, nodes),
    describe: () => `master ${addr(master.port)}, replicas ${replicas.map((r) => addr(r.port)).join(", ")}, sentinels ${sentinels.map((s) => addr(s.port)).join(", ")} (quorum ${t.quorum}, down-after ${t.downAfterMs} ms, failover-timeout ${t.failoverTimeoutMs} ms)`,
  };
  return topo;
}

/**
 * redis-cli --cluster create: t.masters masters with t.replicasEach replicas
 * each, cluster-node-timeout t.nodeTimeoutMs, until every node says ok with
 * every slot served and every replica is linked. t.ports: fixed ports (each
 * with its bus port + 10000 free). lua: the first t.seeds nodes as seeds.
 */
async function cluster(env, t, dir) {
  const n = t.masters * (1 + t.replicasEach);
  const nodes = [];
  for (let i = 0; i < n; i++) {
    nodes.push(await redisUp(env, dir, (port) => ["--cluster-enabled", "yes", "--cluster-config-file", `nodes-${port}.conf`,
      "--cluster-node-timeout", String(t.nodeTimeoutMs), "--repl-diskless-sync-delay", "0"], { bus: true, port: t.ports && t.ports[i] }));
  }
  const created = await env.procs.run("redis-cli", ["--cluster", "create", ...nodes.map((x) => addr(x.port)),
    "--cluster-replicas", String(t.replicasEach), "--cluster-yes"], 60);
  if (created.code !== 0) throw new Error("redis-cli --cluster create failed: " + created.out.trim().split("\n").slice(-5).join(" | "));
  const topo = {
    kind: "cluster", nodes,
    lua: luaValue({ cluster: { nodes: nodes.slice(0, t.seeds).map((x) => addr(x.port)) }, ...t.redis }),
    fencing: t.fencing !== false,
    /** The cluster as a live node sees it now. */
    async map() {
      for (const x of nodes) {
        if (!alive(x.pid) || env.procs.stopped.has(x.pid)) continue;
        try { return parseClusterNodes(await once(x.port, "CLUSTER", "NODES")); } catch (e) { /* next */ }
      }
      throw new Error("no cluster node answered");
    },
    async masters() { return (await topo.map()).filter((x) => x.flags.includes("master") && !x.flags.some((fl) => fl.startsWith("fail"))); },
    node(port) { return nodes.find((x) => x.port === port); },
    /** Redis key → { slot, master (port), masterId } now. */
    async keyMap(keys) {
      const masters = await topo.masters();
      const out = {};
      for (const k of keys) {
        const slot = await once(nodes[0].port, "CLUSTER", "KEYSLOT", k);
        const m = masters.find((x) => x.slots.some(([lo, hi]) => slot >= lo && slot <= hi));
        out[k] = { slot, master: m ? m.port : null, masterId: m ? m.id : null };
      }
      return out;
    },
    async flush() { for (const m of await topo.masters()) await once(m.port, "FLUSHALL"); },
    ...common(env, nodes),
    describe: () => `${t.masters} masters with ${t.replicasEach} replica(s) each, cluster-node-timeout ${t.nodeTimeoutMs} ms`,
  };
  await until(async () => {
    for (const x of nodes) {
      const info = await once(x.port, "CLUSTER", "INFO");
      if (lineOf(info, "cluster_state") !== "ok" || lineOf(info, "cluster_known_nodes") !== String(n) || lineOf(info, "cluster_slots_ok") !== "16384") return false;
    }
    const map = await topo.map();
    for (const r of map.filter((x) => x.flags.includes("slave"))) {
      if (lineOf(await once(r.port, "INFO", "replication"), "master_link_status") !== "up") return false;
    }
    return map.filter((x) => x.flags.includes("master")).length === t.masters;
  }, t.readyMs || 15000, `cluster of ${n} nodes ok, every replica linked`, 100);
  return topo;
}

/** t.masters independent masters, nothing shared: a lock is a majority of them. */
async function redlock(env, t, dir) {
  const nodes = [];
  for (let i = 0; i < t.masters; i++) nodes.push(await redisUp(env, dir, () => []));
  return {
    kind: "redlock", nodes,
    lua: luaValue({ redlock: nodes.map((x) => addr(x.port)), ...t.redis }),
    fencing: t.fencing !== false,
    async flush() { for (const x of nodes) await once(x.port, "FLUSHALL"); },
    ...common(env, nodes),
    describe: () => `${t.masters} independent masters ${nodes.map((x) => addr(x.port)).join(", ")}`,
  };
}

const TOPOLOGIES = { standalone, tls, sentinel, cluster, redlock };

/** Bring up topology t ({ kind, ... }) in dir. */
function up(env, t, dir) {
  const f = TOPOLOGIES[t.kind];
  if (!f) throw new Error(`no topology ${t.kind} (${Object.keys(TOPOLOGIES).join(", ")})`);
  fs.mkdirSync(dir, { recursive: true });
  return f(env, t, dir);
}

module.exports = { up, luaValue, makeCerts, TOPOLOGIES };
