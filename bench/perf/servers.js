// The nginx and Node.js processes the sections run on: section 1's nginx
// (nginx/bench.conf), the old revision's and the /core-only one, the Node.js
// peer, with the Redis stores behind them; section 2's contending pair.
"use strict";
const { spawnSync } = require("node:child_process");
const fs = require("node:fs");
const path = require("node:path");
const lib = require("../lib");
const { renderConf } = lib;
const { root, beforeRev, wanted, log } = require("./config");
const { waitFor } = require("./http");
const { redisServer, store, startTopologies } = require("./stores");

/**
 * Line core_before: the old revision's dist/ and bench/lines.lua, from git (its
 * dist/ is committed: no build), into dir. { commit } or { skip: why not }: a
 * clone without that history (shallow) or without git skips the line, never the bench.
 */
function extractBefore(rev, dir) {
  const git = (args, opts = {}) => spawnSync("git", ["-C", root, ...args], { maxBuffer: 256 * 1024 * 1024, ...opts });
  const found = git(["cat-file", "-e", rev + "^{commit}"]);
  if (found.error) return { skip: `git is not available (${found.error.code || found.error.message}), so revision ${rev} cannot be read` };
  if (found.status !== 0) {
    const shallow = git(["rev-parse", "--is-shallow-repository"], { encoding: "utf8" }).stdout;
    return { skip: `revision ${rev} is not in this clone's history` + (String(shallow).trim() === "true" ? " (a shallow clone: git fetch --unshallow)" : "") };
  }
  const commit = git(["rev-parse", rev + "^{commit}"], { encoding: "utf8" }).stdout.trim();
  const tar = git(["archive", "--format=tar", commit, "dist", "bench/lines.lua"]);
  if (tar.status !== 0) return { skip: `git archive ${rev} dist bench/lines.lua failed: ${String(tar.stderr).trim().split("\n")[0]}` };
  fs.mkdirSync(dir, { recursive: true });
  const x = spawnSync("tar", ["-x", "-C", dir], { input: tar.stdout });
  if (x.status !== 0) return { skip: `tar could not extract revision ${rev}: ${String(x.stderr).trim()}` };
  if (!fs.existsSync(path.join(dir, "dist", "resty", "dlock.lua"))) return { skip: `revision ${rev} has no dist/resty/dlock.lua` };
  return { commit };
}

const peer = (env, port, rport) => env.procs.start(process.execPath, [path.join(root, "bench", "peer", "gateway.js"), String(port), String(rport)]);

/**
 * Section 1's servers, for the wanted lines: into up (redis, nginx, before,
 * beforeCommit, alone, node, standalone), each line's store into l.store; a
 * line that cannot run (core_before) gets l.skip. topo: stores.topologyPorts'.
 */
async function upUncontended(env, prefix, { redisPort, httpPort, nodePort, beforePort, alonePort }, { topo, lines, up, nginxBin }) {
  const { topoPorts } = topo;
  up.redis = await redisServer(env, prefix, "redis", redisPort);
  renderConf(path.join(root, "nginx", "bench.conf"), prefix, path.join(prefix, "nginx.conf"), { HTTP_PORT: httpPort, REDIS_PORT: redisPort,
    TLS_PORT: topoPorts.tls, SENTINEL_NODES: topoPorts.sentinel.sentinels.map((p) => "127.0.0.1:" + p).join(","),
    CLUSTER_NODES: topoPorts.cluster.slice(0, 2).map((p) => "127.0.0.1:" + p).join(","),
    CLUSTER_BARE_NODES: topoPorts.cluster_bare.slice(0, 2).map((p) => "127.0.0.1:" + p).join(","),
    REDLOCK_NODES: topoPorts.redlock.map((p) => "127.0.0.1:" + p).join(",") });
  // The binary nginx/lib.sh resolved from DLOCK_NGINX (a name, a path or an OpenResty folder), as render_conf used.
  up.nginx = env.procs.start(nginxBin, ["-p", prefix, "-c", path.join(prefix, "nginx.conf"), "-g", "daemon off;"]);
  const nodeLine = lines.some((l) => l.id === "node" && wanted(l));
  const beforeLine = lines.find((l) => l.id === "core_before");
  if (wanted(beforeLine)) {
    const t0Before = Date.now();
    const dir = path.join(prefix, "before");
    const x = extractBefore(beforeRev, path.join(dir, "code"));
    if (x.skip) beforeLine.skip = x.skip;
    else {
      up.beforeCommit = x.commit;
      up.before = await lib.nginxUp(env, { bin: nginxBin, dir, template: path.join(root, "nginx", "bench-before.conf"), port: beforePort,
        vars: { BEFORE: path.join(dir, "code"), REDIS_PORT: redisPort } });
      log(`nginx at ${beforeRev} (${up.beforeCommit.slice(0, 12)}) up in ${((Date.now() - t0Before) / 1000).toFixed(1)} s`);
    }
    if (beforeLine.skip) log(`${beforeLine.name}: skipped, ${beforeLine.skip}`);
  }
  if (wanted(lines.find((l) => l.id === "core_alone"))) {
    up.alone = await lib.nginxUp(env, { bin: nginxBin, dir: path.join(prefix, "alone"), template: path.join(root, "nginx", "bench-before.conf"),
      port: alonePort, vars: { BEFORE: root, REDIS_PORT: redisPort } });
  }
  if (nodeLine) up.node = peer(env, nodePort, redisPort);
  const needs = (kind) => lines.some((l) => l.storeKind === kind && !l.skip && wanted(l));
  const stores = await startTopologies(env, prefix, topo, needs);
  await waitFor(httpPort);
  if (nodeLine) await waitFor(nodePort);
  up.standalone = store("standalone", [{ port: redisPort, pid: up.redis.pid }]);
  for (const l of lines) if (l.storeKind) l.store = stores[l.storeKind];
}

/** Section 2's (and 2b's) servers, into contend (redis, nginx, peers); contLines: the wanted lines of section 2. */
async function upContendPair(env, prefix, contend, { contLines, nginxBin }) {
  // Section 2: a redis-server of its own (only the contending instances talk to
  // it, so MONITOR sees nothing else), two nginx (nginx/bench-contend.conf, two
  // workers each) and two Node.js peers (node-redlock's two instances).
  contend.redis = await redisServer(env, prefix, "redis-contend", contend.redisPort);
  contend.nginx = contend.nginxPorts.map((port, i) => {
    const dir = path.join(prefix, "contend-" + (i + 1));
    renderConf(path.join(root, "nginx", "bench-contend.conf"), dir, path.join(dir, "nginx.conf"), { HTTP_PORT: port, REDIS_PORT: contend.redisPort });
    return env.procs.start(nginxBin, ["-p", dir, "-c", path.join(dir, "nginx.conf"), "-g", "daemon off;"]);
  });
  // node-redlock's two instances: only for its line.
  const peers = contLines.some((l) => l.id === "redlock");
  contend.peers = peers ? contend.peerPorts.map((port) => peer(env, port, contend.redisPort)) : [];
  for (const p of [...contend.nginxPorts, ...(peers ? contend.peerPorts : [])]) await waitFor(p);
}

module.exports = { upUncontended, upContendPair };
