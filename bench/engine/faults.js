// The faults a row injects (its `fault.kind`), with what each did in f.detail.
"use strict";
const fs = require("node:fs");
const path = require("node:path");
const { spawnSync } = require("node:child_process");
const { sleep, once, waitDead, children, addr, lineOf, pidFileNames } = require("../lib");
const { opt, PREFIX, LOCK_PORT, WITNESS_PORT, HTTP_PORTS, MASTERS, ms, confArgs, procs, lockRedis, S } = require("./ctx");
const { watchSentinel, migrateSlot } = require("./failover");
const { startLock, killLock } = require("./lockredis");
const { pickHolder, forgetHolder } = require("./witness");

/**
 * Each fault: run(f, p) injects it (p: the row's fault record) and fills
 * f.at (when it hit, ms since epoch) and f.detail; prepare(p) / after(p), when
 * present, run before the row's quiesce / after its collection and return true
 * when the pools need a warm-up load.
 */
const FAULTS = {
  "redis-sigstop": {
    async run(f, p) {
      process.kill(lockRedis.pid, "SIGSTOP");
      procs.stopped.add(lockRedis.pid);
      f.at = Date.now();
      await sleep(p.ms);
      process.kill(lockRedis.pid, "SIGCONT");
      procs.stopped.delete(lockRedis.pid);
      f.detail = `redis pid ${lockRedis.pid} stopped ${ms(f.at, Date.now())} ms`;
    },
  },
  "redis-restart": {
    async prepare(p) {
      if (p.persistence !== "aof") return false;
      await killLock("SIGTERM");
      await startLock("aof");
      return true; // pools point at the old process: warm up
    },
    async run(f, p) {
      const old = lockRedis.pid;
      f.at = Date.now();
      await killLock("SIGKILL");
      if (p.persistence === "aof") {
        await startLock("aof");
        const keys = await once(LOCK_PORT, "KEYS", "torture:*");
        f.detail = `redis pid ${old} SIGKILLed, pid ${lockRedis.pid} (same AOF dir) serving again after ${ms(f.at, Date.now())} ms with ${keys.length} lock key(s) restored`;
      } else {
        const startMs = await startLock("plain");
        f.detail = `redis pid ${old} SIGKILLed, pid ${lockRedis.pid} serving again after ${ms(f.at, Date.now())} ms (start ${startMs} ms)`;
      }
    },
    async after(p) {
      if (p.persistence !== "aof") return false;
      await killLock("SIGTERM");
      await startLock("plain");
      return true;
    },
  },
  "worker-kill": {
    async run(f, p) {
      // instance null: either nginx, at random.
      const instance = p.instance ?? 1 + Math.floor(Math.random() * S.target.masters.length);
      // p.reader: a worker inside as a reader (a read lease, /crit-rw).
      const h = await pickHolder(S.target.masters[instance - 1], p.reader ? "r" : null);
      // Marked dead first: the witness drops its entries at the next entry on
      // their key (crash recovery can free the key before forgetHolder runs).
      await once(WITNESS_PORT, "SADD", "deadpids", String(h.pid));
      process.kill(h.pid, "SIGKILL");
      f.at = Date.now();
      await waitDead(h.pid);
      await sleep(50); // a witness call it sent just before dying has landed by now
      const removed = await forgetHolder(h.pid);
      f.detail = `worker ${h.pid} of instance ${instance} killed ${h.holding ? `inside its critical section on ${h.key}${h.mode === "r" ? " as a reader" : ""}` : `(no ${p.reader ? "reader" : "holder"} seen within 1 s: any worker)`}; ${removed} witness entr${removed === 1 ? "y" : "ies"} of it removed`;
      f.holding = h.holding;
    },
  },
  reload: {
    async run(f, p) {
      const before = children(MASTERS[p.instance - 1]);
      const r = spawnSync(opt.nginx, [...confArgs(p.instance), "-s", "reload"], { encoding: "utf8" });
      f.at = Date.now();
      if (r.status !== 0) throw new Error("nginx -s reload failed: " + r.stderr);
      f.detail = `instance ${p.instance} reloaded (old workers ${before.join(", ")})`;
    },
  },
  "worker-sigstop": {
    async run(f, p) {
      const h = await pickHolder(S.target.masters[p.instance - 1]);
      process.kill(h.pid, "SIGSTOP");
      procs.stopped.add(h.pid);
      f.at = Date.now();
      await sleep(p.ms);
      process.kill(h.pid, "SIGCONT");
      procs.stopped.delete(h.pid);
      f.detail = `worker ${h.pid} of instance ${p.instance} stopped ${ms(f.at, Date.now())} ms ${h.holding ? "inside its critical section on " + h.key : "(no holder seen within 1 s: any worker)"}`;
      f.holding = h.holding;
    },
  },
  // What a deploy with `systemctl restart` does: a graceful stop (the old workers
  // finish their requests), then a fresh start on the same port and config.
  "quit-restart": {
    async run(f, p) {
      const i = p.instance - 1;
      const old = MASTERS[i];
      const workers = children(old);
      const r = spawnSync(opt.nginx, [...confArgs(p.instance), "-s", "quit"], { encoding: "utf8" });
      f.at = Date.now();
      if (r.status !== 0) throw new Error("nginx -s quit failed: " + r.stderr);
      for (const w of workers) await waitDead(w, 30000);
      await waitDead(old, 5000);
      procs.drop(old);
      const downMs = ms(f.at, Date.now());
      const dir = path.join(PREFIX, "n" + p.instance);
      const errFd = fs.openSync(path.join(dir, "logs", "stderr.log"), "a");
      const child = procs.start(opt.nginx, [...confArgs(p.instance), "-g", "daemon off;"], { stdio: ["ignore", "ignore", errFd], unref: true });
      fs.closeSync(errFd);
      MASTERS[i] = child.pid;
      if (!(await pidFileNames(dir, child.pid, HTTP_PORTS[i]))) throw new Error(`restarted nginx ${p.instance} (pid ${child.pid}) did not come up`);
      f.detail = `instance ${p.instance} (master ${old}) quit gracefully: its last worker left after ${downMs} ms; master ${child.pid} serving again after ${ms(f.at, Date.now())} ms`;
    },
  },
  // ---- the topology rows' faults (tg: the row's target; tg.topo its topology, tg.keys its load keys)
  // A graceful failover: the sentinels promote a replica and reconfigure the rest.
  "sentinel-failover": {
    async run(f, p, tg) {
      const topo = tg.topo;
      const old = await topo.masterPort();
      const ok = await once(topo.sentinels[0].port, "SENTINEL", "FAILOVER", topo.name);
      f.at = Date.now();
      if (ok !== "OK") throw new Error("SENTINEL FAILOVER answered " + JSON.stringify(ok));
      const w = await watchSentinel(topo, old, f, false);
      f.failover = w;
      f.detail = `SENTINEL FAILOVER: ${w.text}`;
    },
  },
  "sentinel-master-kill": {
    async run(f, p, tg) {
      const topo = tg.topo;
      const old = await topo.masterPort();
      const node = topo.node(old);
      process.kill(node.pid, "SIGKILL");
      f.at = Date.now();
      await waitDead(node.pid);
      const w = await watchSentinel(topo, old, f, true);
      f.failover = w;
      f.detail = `master ${addr(old)} SIGKILLed: ${w.text}`;
    },
  },
  // Slots of load keys move to another master while the load runs: IMPORTING on
  // the target, MIGRATING on the source, MIGRATE of the slot's keys, SETSLOT NODE.
  "cluster-migrate": {
    async run(f, p, tg) {
      const topo = tg.topo;
      const km = await topo.keyMap();
      const masters = await topo.masters();
      // One load key per master (distinct slots), as many as p.slots.
      const picks = [];
      for (const k of tg.keys) {
        const x = km[k];
        if (picks.some((q) => q.master === x.master || q.slot === x.slot)) continue;
        picks.push({ key: k, ...x });
        if (picks.length === p.slots) break;
      }
      f.at = Date.now();
      const moves = await Promise.all(picks.map((q) => {
        const i = masters.findIndex((m) => m.port === q.master);
        return migrateSlot(masters, q.slot, masters[i], masters[(i + 1) % masters.length], p.holdMs).then((r) => ({ key: q.key, ...r }));
      }));
      f.moves = moves;
      f.detail = moves.map((m) => `slot ${m.slot} (${m.key}) ${addr(m.from)} → ${addr(m.to)}: ${m.keys} key(s) in ${m.calls} MIGRATE call(s), ${m.ms} ms from IMPORTING to the last SETSLOT NODE`).join("; ");
    },
  },
  "cluster-master-kill": {
    async run(f, p, tg) {
      const topo = tg.topo;
      const km = await topo.keyMap();
      const per = {};
      for (const k of tg.keys) per[km[k].master] = [...(per[km[k].master] || []), k];
      // The master serving the most load keys.
      const [port, keys] = Object.entries(per).sort((a, b) => b[1].length - a[1].length)[0];
      const map = await topo.map();
      const victim = map.find((x) => x.port === Number(port));
      const replica = map.find((x) => x.master === victim.id);
      const node = topo.node(victim.port);
      process.kill(node.pid, "SIGKILL");
      f.at = Date.now();
      await waitDead(node.pid);
      let failMs = null, promotedMs = null, okMs = null;
      while (Date.now() < f.deadline && okMs === null) {
        try {
          const info = await once(replica.port, "CLUSTER", "INFO");
          const state = lineOf(info, "cluster_state");
          if (state !== "ok" && failMs === null) failMs = Date.now() - f.at;
          if (promotedMs === null && lineOf(await once(replica.port, "INFO", "replication"), "role") === "master") promotedMs = Date.now() - f.at;
          if (promotedMs !== null && state === "ok") okMs = Date.now() - f.at;
        } catch (e) { /* ask again */ }
        await sleep(25);
      }
      f.detail = `master ${addr(victim.port)} (keys ${keys.join(",")}) SIGKILLed; ` +
        (failMs === null ? "" : `cluster_state fail from +${failMs} ms; `) +
        (promotedMs === null ? `its replica ${addr(replica.port)} not promoted by the end of the load` : `its replica ${addr(replica.port)} promoted at +${promotedMs} ms`) +
        (okMs === null ? "" : `, cluster_state ok again at +${okMs} ms`);
    },
  },
  "redlock-node-sigstop": {
    async run(f, p, tg) {
      const n = tg.topo.nodes[p.node - 1];
      process.kill(n.pid, "SIGSTOP");
      procs.stopped.add(n.pid);
      f.at = Date.now();
      await sleep(p.ms);
      process.kill(n.pid, "SIGCONT");
      procs.stopped.delete(n.pid);
      f.detail = `master ${p.node} of ${tg.topo.nodes.length} (${addr(n.port)}) stopped ${ms(f.at, Date.now())} ms`;
    },
  },
};

module.exports = { FAULTS };
