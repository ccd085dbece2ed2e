// Processes a harness starts: tracked (in memory, or in a pids file a shell
// wrapper stops on exit), paused and continued, stopped by pid; CPU seconds.
"use strict";
const { spawn, spawnSync } = require("node:child_process");
const fs = require("node:fs");
const { sleep } = require("./wait");

/** Alive and not a zombie. */
function alive(pid) {
  try {
    const stat = fs.readFileSync(`/proc/${pid}/stat`, "latin1");
    const state = stat.slice(stat.lastIndexOf(")") + 2, stat.lastIndexOf(")") + 3);
    return state !== "Z" && state !== "X";
  } catch (e) {
    return false;
  }
}

async function waitDead(pid, ms = 5000) {
  const end = Date.now() + ms;
  while (alive(pid)) {
    if (Date.now() > end) throw new Error(`pid ${pid} still alive after ${ms} ms`);
    await sleep(5);
  }
}

/** The live children of pid (an nginx master's workers). */
function children(pid) {
  const r = spawnSync("pgrep", ["-P", String(pid)], { encoding: "latin1" });
  return r.stdout.split("\n").filter(Boolean).map(Number).filter(alive);
}

/** Until nginx master has n workers, none of them in `old` (the workers before a reload); their pids. */
async function waitWorkers(master, n = 2, ms = 15000, old = []) {
  const end = Date.now() + ms;
  for (;;) {
    const w = children(master);
    if (w.length === n && !w.some((p) => old.includes(p))) return w;
    if (Date.now() > end) throw new Error(`nginx master ${master} has ${w.length} workers, expected ${n}`);
    await sleep(20);
  }
}

/** /proc/<pid>/stat utime + stime of the pids, in seconds (exited ones count 0). */
function cpuSeconds(pids) {
  const tick = 100;
  let sum = 0;
  for (const pid of pids) {
    try {
      const f = fs.readFileSync(`/proc/${pid}/stat`, "utf8").split(") ")[1].split(" ");
      sum += (Number(f[11]) + Number(f[12])) / tick;
    } catch (e) { /* exited */ }
  }
  return sum;
}

/**
 * The whole machine's CPU ticks so far (/proc/stat): { total, idle, steal }.
 * Steal is the time the hypervisor gave this VM's CPUs to someone else: a
 * run that lost much of it measured the neighbours as much as the code.
 */
function machineTicks() {
  const f = fs.readFileSync("/proc/stat", "utf8").split("\n")[0].trim().split(/\s+/).slice(1, 9).map(Number);
  return { total: f.reduce((a, b) => a + b, 0), idle: f[3] + f[4], steal: f[7] };
}

/** The shares of the machine's CPU time idle and stolen between two machineTicks(). */
function machineShares(a, b) {
  const total = b.total - a.total;
  return total > 0 ? { idle: (b.idle - a.idle) / total, steal: (b.steal - a.steal) / total } : { idle: 0, steal: 0 };
}

/**
 * Run `once` (an async measurement whose result has stealShare and errors)
 * until a run lost at most `max` of the machine's CPU time to the hypervisor,
 * `tries` runs at most; `again(r)` hears of each run dropped. The run kept,
 * with the runs it took (tries) and the errors of every run: steal excuses a
 * run's speed, never its errors.
 */
async function unstolen(once, { max, tries, again = () => {} }) {
  let r = await once(), n = 1, dropped = 0;
  while (r.stealShare > max && n < tries) {
    again(r);
    dropped += r.errors;
    r = await once();
    n++;
  }
  return { ...r, errors: r.errors + dropped, tries: n };
}

const signal = (pid, sig) => { try { process.kill(pid, sig); return true; } catch (e) { return false; } };

/**
 * The processes one harness started. pidsFile: also written there, one pid a
 * line, for a wrapper that stops them whatever happens to this process.
 * Paused ones (pause()) are continued by contAll(), on exit too.
 */
class Procs {
  constructor({ pidsFile = null, log = console.error } = {}) {
    this.pidsFile = pidsFile;
    this.log = log;
    this.pids = [];
    this.stopped = new Set();
  }
  add(pid) {
    this.pids.push(pid);
    if (this.pidsFile) fs.appendFileSync(this.pidsFile, pid + "\n");
  }
  drop(pid) {
    this.pids = this.pids.filter((p) => p !== pid);
    this.stopped.delete(pid);
    if (!this.pidsFile) return;
    const kept = fs.readFileSync(this.pidsFile, "latin1").split("\n").filter((l) => l !== "" && Number(l) !== pid);
    fs.writeFileSync(this.pidsFile, kept.map((l) => l + "\n").join(""));
  }
  /** spawn(), tracked. unref: the child does not keep this process's event loop alive. */
  start(cmd, args, { unref = false, ...opts } = {}) {
    const child = spawn(cmd, args, { stdio: ["ignore", "ignore", "inherit"], ...opts });
    child.on("error", (e) => this.log(`${cmd}:`, e.message));
    if (unref) child.unref();
    this.add(child.pid);
    return child;
  }
  /** A command run to its end (tracked while it runs, KILLed after seconds): { code, out }. */
  run(cmd, args, seconds) {
    return new Promise((resolve) => {
      const p = spawn(cmd, args, { stdio: ["ignore", "pipe", "pipe"] });
      this.add(p.pid);
      let out = "";
      p.stdout.on("data", (c) => (out += c));
      p.stderr.on("data", (c) => (out += c));
      const timer = setTimeout(() => p.kill("SIGKILL"), seconds * 1000);
      p.on("close", (code) => {
        clearTimeout(timer);
        this.drop(p.pid);
        resolve({ code, out });
      });
    });
  }
  pause(pid) { process.kill(pid, "SIGSTOP"); this.stopped.add(pid); }
  resume(pid) { process.kill(pid, "SIGCONT"); this.stopped.delete(pid); }
  contAll() {
    for (const pid of this.stopped) signal(pid, "SIGCONT");
    this.stopped.clear();
  }
  /** Continue it, TERM, KILL after 5 s; forget it. */
  async stop(pid) {
    if (alive(pid)) {
      signal(pid, "SIGCONT");
      signal(pid, "SIGTERM");
      try { await waitDead(pid, 5000); } catch (e) { signal(pid, "SIGKILL"); await waitDead(pid, 2000).catch(() => {}); }
    }
    this.drop(pid);
  }
  /** An nginx master and the workers it had (a worker a fault stopped included). */
  async stopNginx(master) {
    const workers = children(master);
    await this.stop(master);
    for (const w of workers) await waitDead(w, 5000).catch(() => signal(w, "SIGKILL"));
  }
  /** Synchronous, for an exit hook: TERM everything (newest first), KILL what is left 0.5 s later. */
  stopAllSync() {
    this.contAll();
    const all = this.pids.slice().reverse();
    for (const pid of all) signal(pid, "SIGTERM");
    spawnSync("sleep", ["0.5"]);
    for (const pid of all) signal(pid, "SIGKILL");
    this.pids = [];
  }
}

module.exports = { alive, waitDead, children, waitWorkers, cpuSeconds, machineTicks, machineShares, unstolen, Procs };
