// redis-servers and sentinels: start one (a fresh port, three tries), ask one
// (redis-cli, synchronous), and what they counted (INFO commandstats, errorstats).
"use strict";
const { execFileSync } = require("node:child_process");
const fs = require("node:fs");
const path = require("node:path");
const { alive, waitDead } = require("./proc");
const { once } = require("./resp");
const { sleep } = require("./wait");

const addr = (port) => "127.0.0.1:" + port;
/** The value of `name:` in an INFO (or CLUSTER INFO) answer. */
const lineOf = (info, name) => { const m = new RegExp("^" + name + ":(.*)$", "m").exec(info); return m ? m[1].trim() : null; };

/** Until the server on port answers PING (false when its process died first, or after ms). */
async function answers(port, pid, ms = 5000) {
  const end = Date.now() + ms;
  while (Date.now() < end) {
    if (!alive(pid)) return false;
    try { await once(port, "PING"); return true; } catch (e) { await sleep(20); }
  }
  return false;
}

/**
 * A redis-server (or, sentinel: true, a sentinel) in dir, answering PING.
 * env: { procs (lib/proc Procs), ports (lib/ports Ports), log, started (optional:
 * an array each server started is pushed on, to stop them together) }. extra(port):
 * its arguments (a sentinel: its config lines) beyond the common ones. port:
 * that one (one try), else a fresh one (bus: a cluster node's) with three tries.
 * Returns { port, pid }.
 */
async function redisUp(env, dir, extra = () => [], { bus = false, sentinel = false, port: fixed = null } = {}) {
  fs.mkdirSync(dir, { recursive: true });
  const what = sentinel ? "sentinel" : "redis-server";
  for (let attempt = 1; attempt <= (fixed ? 1 : 3); attempt++) {
    const port = fixed || (await env.ports.pick({ bus }));
    let args;
    if (sentinel) {
      // A sentinel rewrites its config file: one file per sentinel.
      const conf = path.join(dir, `sentinel-${port}.conf`);
      fs.writeFileSync(conf, [`port ${port}`, "bind 127.0.0.1", `dir ${dir}`, `logfile ${path.join(dir, `sentinel-${port}.log`)}`, ...extra(port)].join("\n") + "\n");
      args = [conf, "--sentinel"];
    } else {
      // A config file (empty: the flags say it all), as in production, so the
      // CONFIG REWRITE a sentinel sends with a reconfiguration succeeds.
      const conf = path.join(dir, `redis-${port}.conf`);
      fs.writeFileSync(conf, "");
      args = [conf, "--port", String(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
        "--dir", dir, "--logfile", path.join(dir, `redis-${port}.log`), ...extra(port)];
    }
    const child = env.procs.start("redis-server", args, { stdio: "ignore", unref: true });
    if (await answers(port, child.pid)) {
      if (env.started) env.started.push({ port, pid: child.pid });
      return { port, pid: child.pid };
    }
    try { process.kill(child.pid, "SIGKILL"); } catch (e) { /* gone */ }
    await waitDead(child.pid, 2000).catch(() => {});
    env.procs.drop(child.pid);
    env.log(`${what} did not come up on ${port}${fixed ? "" : ", trying another port"}`);
  }
  throw new Error(`no ${what} came up in ${dir}`);
}

/** redis-cli, synchronous: its output. tls: the CA file of a TLS-only server. */
function cli(port, ...args) {
  return execFileSync("redis-cli", ["-p", String(port), ...args], { encoding: "utf8", stdio: ["ignore", "pipe", "ignore"] });
}

// Commands a redis-server (or sentinel) has run, from INFO commandstats (subcommands
// such as cluster|slots included; INFO itself, which a harness sends, left out).
// background false: also leave out what replicas and sentinels send on their own
// (PING, REPLCONF ACK, hello PUBLISH): they never stop.
const BACKGROUND = new Set(["info", "ping", "replconf", "publish"]);
function redisCalls(port, { tls, background = true } = {}) {
  const args = tls ? ["--tls", "--cacert", tls, "-h", "127.0.0.1"] : [];
  const out = execFileSync("redis-cli", [...args, "-p", String(port), "info", "commandstats"], { encoding: "utf8" });
  let calls = 0;
  for (const m of out.matchAll(/cmdstat_([\w|-]+):calls=(\d+)/g)) {
    if (m[1] !== "info" && (background || !BACKGROUND.has(m[1]))) calls += Number(m[2]);
  }
  return calls;
}

/**
 * Redis error replies by kind (INFO errorstats: MOVED, ASK, TRYAGAIN, READONLY...)
 * summed over the live, running nodes since resetStatsOf(), and the commands that
 * got them (INFO commandstats: rejected_calls + failed_calls). paused: pids not to ask.
 */
async function errorStatsOf(nodes, paused = new Set()) {
  const kinds = {}, commands = {};
  for (const n of nodes) {
    if (!alive(n.pid) || paused.has(n.pid)) continue;
    let info;
    try { info = await once(n.port, "INFO", "errorstats") + await once(n.port, "INFO", "commandstats"); } catch (e) { continue; }
    for (const m of info.matchAll(/^errorstat_([A-Z]+):count=(\d+)/gm)) kinds[m[1]] = (kinds[m[1]] || 0) + Number(m[2]);
    for (const m of info.matchAll(/^cmdstat_([^:]+):.*rejected_calls=(\d+),failed_calls=(\d+)/gm)) {
      const c = Number(m[2]) + Number(m[3]);
      if (c) commands[m[1]] = (commands[m[1]] || 0) + c;
    }
  }
  return { kinds, commands };
}

async function resetStatsOf(nodes) {
  for (const n of nodes) if (alive(n.pid)) await once(n.port, "CONFIG", "RESETSTAT").catch(() => {});
}

/** Parse CLUSTER NODES: [{ id, port, flags, master (id or "-"), slots: [[lo, hi]] }]. */
function parseClusterNodes(text) {
  return text.trim().split("\n").map((line) => {
    const f = line.split(" ");
    const slots = [];
    for (const r of f.slice(8)) {
      if (r.startsWith("[")) continue; // a slot being migrated or imported
      const [lo, hi] = r.split("-").map(Number);
      slots.push([lo, hi ?? lo]);
    }
    return { id: f[0], port: Number(f[1].split("@")[0].split(":")[1]), flags: f[2].split(","), master: f[3], slots };
  });
}

/**
 * redis-server arguments for an ACL user with the README's smallest rule for a
 * lock user ("An ACL user with only what the locks need"; spec/harness/servers.lua
 * reads the same line), with the key patterns of each of prefixes (and their
 * Cluster hash tags) beside its own: ["--user", name, "on", ">password", ...].
 */
function leastPrivilegeArgs(name, password, prefixes = []) {
  const readme = fs.readFileSync(path.join(__dirname, "..", "..", "README.md"), "utf8");
  const m = /\n\s*ACL SETUSER locker on >secret ([^\n]+)/.exec(readme);
  if (!m) throw new Error("the README shows no least-privilege rule");
  const keys = prefixes.flatMap((p) => [`~${p}*`, `~{${p}*`]);
  const words = m[1].trim().split(/\s+/);
  const at = words.indexOf("resetkeys") + 1;
  return ["--user", name, "on", ">" + password, ...words.slice(0, at), ...keys, ...words.slice(at)];
}

module.exports = { addr, lineOf, answers, redisUp, cli, redisCalls, errorStatsOf, resetStatsOf, parseClusterNodes, leastPrivilegeArgs };
