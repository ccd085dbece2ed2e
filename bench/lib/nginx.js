// nginx from a template of nginx/: rendered as nginx/lib.sh render_conf does
// (@USER@, @LUA_MODULES@ and the NAME=VALUE given), started in the foreground
// on a fresh port (three tries), stopped with its workers.
"use strict";
const { execFileSync, spawnSync } = require("node:child_process");
const fs = require("node:fs");
const path = require("node:path");
const { alive, waitDead } = require("./proc");
const { portOpen } = require("./ports");
const { sleep } = require("./wait");

const ROOT = path.resolve(__dirname, "..", "..");
const LIB_SH = path.join(ROOT, "nginx", "lib.sh");

/** The nginx binary nginx/lib.sh resolves from DLOCK_NGINX (a name, a path or an OpenResty folder). */
function nginxBin() {
  return execFileSync("bash", ["-c", '. "$0" && printf %s "$NGINX_BIN"', LIB_SH], { encoding: "utf8" });
}

/** nginx/lib.sh render_conf TEMPLATE PREFIX OUT NAME=VALUE... */
function renderConf(tpl, prefix, out, vars, nginx = null) {
  const env = nginx ? { ...process.env, DLOCK_NGINX: nginx } : process.env;
  const r = spawnSync("bash", ["-c", '. "$0"; render_conf "$@"', LIB_SH, tpl, prefix, out,
    ...Object.entries(vars).map(([k, v]) => `${k}=${v}`)], { encoding: "utf8", env });
  if (r.status !== 0) throw new Error("render_conf failed: " + r.stderr);
}

/**
 * An nginx from template in dir (dir/logs made), listening on HTTP_PORT: a fresh
 * port of env.ports each try, or `port`. Up once its pid file names it (every
 * listen socket is bound then) and the port answers. vars: the other NAME=VALUE.
 * Returns { port, pid }.
 */
async function nginxUp(env, { bin, dir, template, vars = {}, port: fixed = null }) {
  fs.mkdirSync(path.join(dir, "logs"), { recursive: true });
  const conf = path.join(dir, "nginx.conf");
  for (let attempt = 1; attempt <= (fixed ? 1 : 3); attempt++) {
    const port = fixed || (await env.ports.pick());
    renderConf(template, dir, conf, { HTTP_PORT: port, ...vars }, bin);
    const errFd = fs.openSync(path.join(dir, "logs", "stderr.log"), "a");
    const child = env.procs.start(bin, ["-p", dir, "-c", conf, "-g", "daemon off;"], { stdio: ["ignore", "ignore", errFd], unref: true });
    fs.closeSync(errFd);
    if (await pidFileNames(dir, child.pid, port)) return { port, pid: child.pid };
    try { process.kill(child.pid, "SIGKILL"); } catch (e) { /* gone */ }
    await waitDead(child.pid, 2000).catch(() => {});
    env.procs.drop(child.pid);
    const tail = spawnSync("tail", ["-n", "3", path.join(dir, "logs", "error.log"), path.join(dir, "logs", "stderr.log")], { encoding: "utf8" });
    env.log(`nginx ${dir} did not come up on ${port}:`, ((tail.stdout || "") + (tail.stderr || "")).trim());
  }
  throw new Error(`no nginx came up in ${dir}`);
}

/** Until dir's nginx.pid names pid and port answers (false: it died, or 10 s passed). */
async function pidFileNames(dir, pid, port, ms = 10000) {
  const end = Date.now() + ms;
  while (alive(pid) && Date.now() < end) {
    let pidFile = "";
    try { pidFile = fs.readFileSync(path.join(dir, "logs", "nginx.pid"), "latin1").trim(); } catch (e) { /* not yet */ }
    if (Number(pidFile) === pid && (await portOpen(port))) return true;
    await sleep(20);
  }
  return false;
}

module.exports = { ROOT, nginxBin, renderConf, nginxUp, pidFileNames };
